//! Which language server serves which files: built-in defaults, a TOML file
//! (`[lsp.servers.<language>]`, the seed's shape) and `--server` flags, in rising
//! precedence.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct LanguageConfig {
    pub name: String,
    pub command: Vec<String>,
    /// File extensions (without the dot) this server handles.
    pub extensions: Vec<String>,
    /// How to install the default server, for `lsp_server_not_found`.
    pub install: String,
    pub initialization_options: Option<Value>,
    /// Answers to the server's `workspace/configuration` requests.
    pub settings: Value,
}

impl LanguageConfig {
    /// The LSP `languageId` for a file extension.
    pub fn language_id(&self, ext: &str) -> String {
        let id = match ext {
            "ts" | "mts" | "cts" => "typescript",
            "tsx" => "typescriptreact",
            "js" | "mjs" | "cjs" => "javascript",
            "jsx" => "javascriptreact",
            "py" | "pyi" => "python",
            "rs" => "rust",
            "go" => "go",
            "c" | "h" => "c",
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "ipp" => "cpp",
            _ => return self.name.clone(),
        };
        id.to_string()
    }
}

fn lang(name: &str, command: &[&str], extensions: &[&str], install: &str) -> LanguageConfig {
    LanguageConfig {
        name: name.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        extensions: extensions.iter().map(|s| s.to_string()).collect(),
        install: install.into(),
        initialization_options: None,
        settings: Value::Object(Default::default()),
    }
}

/// The built-in registry (seed 004's defaults plus clangd).
pub fn builtin() -> Vec<LanguageConfig> {
    vec![
        lang(
            "rust",
            &["rust-analyzer"],
            &["rs"],
            "rustup component add rust-analyzer",
        ),
        lang(
            "python",
            &["pyright-langserver", "--stdio"],
            &["py", "pyi"],
            "npm install -g pyright",
        ),
        LanguageConfig {
            // Every request to the semantic tsserver: while it loads the project, the syntax
            // server would answer rename, references and workspace symbols from the open
            // files alone — a partial answer that looks whole (crate::ready).
            initialization_options: Some(
                serde_json::json!({"tsserver": {"useSyntaxServer": "never"}}),
            ),
            ..lang(
                "typescript",
                &["typescript-language-server", "--stdio"],
                &["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"],
                "npm install -g typescript-language-server typescript",
            )
        },
        lang(
            "go",
            &["gopls"],
            &["go"],
            "go install golang.org/x/tools/gopls@latest",
        ),
        lang(
            "c",
            &["clangd"],
            &[
                "c", "h", "cc", "cpp", "cxx", "c++", "hpp", "hh", "hxx", "h++", "ipp",
            ],
            "apt-get install clangd",
        ),
    ]
}

/// `over` laid over `base`: objects merged key by key (recursively), anything else replaced.
fn merge_over(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge_over(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// Why a config file or a `--server` flag was refused; the message names the table or flag.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, or a field kitbag-lsp does not know (the parser's message names it).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("lsp.servers.{0}: a new language needs `extensions` (e.g. [\"{0}\"])")]
    NeedsExtensions(String),
    #[error("lsp.servers.{0}.command: must not be empty")]
    EmptyCommand(String),
    #[error("lsp.servers.{0}: `command` is required")]
    NoCommand(String),
    #[error("--server {0}: expected LANGUAGE=COMMAND [ARGS...]")]
    ServerFlag(String),
}

/// A duration flag that is not one (`--idle-timeout`, `--request-timeout`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a duration (e.g. 600, 90s, 1500ms, 10m)")]
    NotANumber(String),
    #[error("`{0}` must be a non-negative duration")]
    Negative(String),
    #[error("`{0}`: unit must be ms, s, m or h")]
    Unit(String),
}

/// Runtime settings of the pool.
#[derive(Debug, Clone)]
pub struct Config {
    pub languages: Vec<LanguageConfig>,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
    pub max_restarts: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            languages: builtin(),
            idle_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(30),
            max_restarts: 3,
        }
    }
}

impl Config {
    /// The language whose extensions include the file's.
    pub fn for_path(&self, path: &Path) -> Option<&LanguageConfig> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        self.languages.iter().find(|l| l.extensions.contains(&ext))
    }

    pub fn by_name(&self, name: &str) -> Option<&LanguageConfig> {
        self.languages.iter().find(|l| l.name == name)
    }

    pub fn names(&self) -> Vec<String> {
        self.languages.iter().map(|l| l.name.clone()).collect()
    }

    /// Merge a TOML config file's `[lsp.servers.*]` tables over the current entries.
    pub fn apply_toml(&mut self, text: &str) -> Result<(), ConfigError> {
        let file: FileConfig = toml::from_str(text)?;
        let Some(lsp) = file.lsp else { return Ok(()) };
        if let Some(secs) = lsp.idle_timeout_secs {
            self.idle_timeout = Duration::from_secs_f64(secs.max(0.0));
        }
        if let Some(secs) = lsp.request_timeout_secs {
            self.request_timeout = Duration::from_secs_f64(secs.max(0.1));
        }
        for (name, entry) in lsp.servers {
            let existing = self.languages.iter().position(|l| l.name == name);
            let mut cfg = match existing {
                Some(i) => self.languages[i].clone(),
                None => {
                    if entry.extensions.is_none() {
                        return Err(ConfigError::NeedsExtensions(name));
                    }
                    lang(&name, &[], &[], "see the language server's documentation")
                }
            };
            if let Some(cmd) = entry.command {
                if cmd.is_empty() {
                    return Err(ConfigError::EmptyCommand(name));
                }
                cfg.command = cmd;
            }
            if let Some(ext) = entry.extensions {
                cfg.extensions = ext
                    .into_iter()
                    .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
                    .collect();
            }
            if let Some(opts) = entry.initialization_options {
                // Over the built-in ones, key by key: a user's option does not drop kitbag's
                // (typescript's `useSyntaxServer`) unless it names it.
                let mut merged = cfg.initialization_options.take().unwrap_or(Value::Null);
                merge_over(&mut merged, toml_to_json(opts));
                cfg.initialization_options = Some(merged);
            }
            if let Some(s) = entry.settings {
                cfg.settings = toml_to_json(s);
            }
            if cfg.command.is_empty() {
                return Err(ConfigError::NoCommand(name));
            }
            match existing {
                Some(i) => self.languages[i] = cfg,
                None => self.languages.push(cfg),
            }
        }
        Ok(())
    }

    /// The built-ins, then `file` (kitbag-lsp's TOML, `[lsp.servers.<language>]`), then each
    /// `LANG=COMMAND` of `servers`, in rising precedence — what kitbag-lsp's `--config` and
    /// `--server` flags describe, and kitbag-files' `--lsp-config` and `--lsp-server`.
    pub fn load(file: Option<&Path>, servers: &[String]) -> anyhow::Result<Config> {
        let mut cfg = Config::default();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            cfg.apply_toml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        for s in servers {
            cfg.apply_flag(s)?;
        }
        Ok(cfg)
    }

    /// Apply one `--server LANG=COMMAND ARGS...` flag.
    pub fn apply_flag(&mut self, flag: &str) -> Result<(), ConfigError> {
        let (name, cmd) = flag
            .split_once('=')
            .ok_or_else(|| ConfigError::ServerFlag(flag.to_string()))?;
        let name = name.trim();
        let command: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        if name.is_empty() || command.is_empty() {
            return Err(ConfigError::ServerFlag(flag.to_string()));
        }
        match self.languages.iter_mut().find(|l| l.name == name) {
            Some(l) => l.command = command,
            None => {
                let mut l = lang(
                    name,
                    &[],
                    &[name],
                    "see the language server's documentation",
                );
                l.command = command;
                self.languages.push(l);
            }
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    lsp: Option<LspSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LspSection {
    #[serde(default)]
    servers: BTreeMap<String, ServerEntry>,
    #[serde(default)]
    idle_timeout_secs: Option<f64>,
    #[serde(default)]
    request_timeout_secs: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerEntry {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    extensions: Option<Vec<String>>,
    #[serde(default)]
    initialization_options: Option<toml::Value>,
    #[serde(default)]
    settings: Option<toml::Value>,
}

fn toml_to_json(v: toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Parse a duration flag: `600`, `90s`, `1500ms`, `10m`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| DurationError::NotANumber(s.to_string()))?;
    if !n.is_finite() || n < 0.0 {
        return Err(DurationError::Negative(s.to_string()));
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(DurationError::Unit(s.to_string())),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Find a program on PATH (or as given, when it contains a slash).
pub fn find_program(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        return is_executable(p).then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builtin_languages_by_extension() {
        let c = Config::default();
        assert_eq!(c.for_path(Path::new("a/b.py")).unwrap().name, "python");
        assert_eq!(c.for_path(Path::new("x.TSX")).unwrap().name, "typescript");
        assert_eq!(c.for_path(Path::new("m.cpp")).unwrap().name, "c");
        assert!(c.for_path(Path::new("README.md")).is_none());
        assert!(c.for_path(Path::new("Makefile")).is_none());
        let ts = c.by_name("typescript").unwrap();
        assert_eq!(ts.language_id("tsx"), "typescriptreact");
        assert_eq!(c.by_name("c").unwrap().language_id("hpp"), "cpp");
    }

    #[test]
    fn initialization_options_are_laid_over_the_built_in_ones() {
        let mut base = serde_json::json!({"tsserver": {"useSyntaxServer": "never"}, "a": 1});
        merge_over(
            &mut base,
            serde_json::json!({"tsserver": {"logVerbosity": "off"}, "a": [2]}),
        );
        assert_eq!(
            base,
            serde_json::json!({"tsserver": {"useSyntaxServer": "never", "logVerbosity": "off"}, "a": [2]})
        );
    }

    #[test]
    fn toml_overrides_and_adds_languages() {
        let mut c = Config::default();
        c.apply_toml(
            r#"
            [lsp]
            idle_timeout_secs = 2
            [lsp.servers.python]
            command = ["basedpyright-langserver", "--stdio"]
            settings = { python = { analysis = { typeCheckingMode = "strict" } } }
            [lsp.servers.zig]
            command = ["zls"]
            extensions = [".zig"]
            "#,
        )
        .unwrap();
        assert_eq!(c.idle_timeout, Duration::from_secs(2));
        let py = c.by_name("python").unwrap();
        assert_eq!(py.command[0], "basedpyright-langserver");
        assert_eq!(py.extensions, vec!["py", "pyi"]);
        assert_eq!(
            py.settings["python"]["analysis"]["typeCheckingMode"],
            "strict"
        );
        assert_eq!(c.for_path(Path::new("a.zig")).unwrap().command, vec!["zls"]);
    }

    #[test]
    fn toml_errors_name_the_field() {
        let mut c = Config::default();
        let e = c
            .apply_toml("[lsp.servers.python]\ncomand = [\"x\"]\n")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Toml(_)), "{e}");
        assert!(e.to_string().contains("comand"), "{e}");
        let e = c
            .apply_toml("[lsp.servers.zig]\ncommand = [\"zls\"]\n")
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::NeedsExtensions(n) if n == "zig"),
            "{e}"
        );
        assert!(e.to_string().contains("extensions"), "{e}");
        let e = c
            .apply_toml("[lsp.servers.python]\ncommand = []\n")
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::EmptyCommand(n) if n == "python"),
            "{e}"
        );
    }

    #[test]
    fn server_flags() {
        let mut c = Config::default();
        c.apply_flag("rust=/opt/ra/rust-analyzer --log-file x")
            .unwrap();
        assert_eq!(
            c.by_name("rust").unwrap().command,
            vec!["/opt/ra/rust-analyzer", "--log-file", "x"]
        );
        assert!(c.apply_flag("rust").is_err());
        assert!(c.apply_flag("=x").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("600").unwrap(), Duration::from_secs(600));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(
            parse_duration("soon"),
            Err(DurationError::NotANumber("soon".into()))
        );
        assert_eq!(
            parse_duration("-1"),
            Err(DurationError::Negative("-1".into()))
        );
        assert_eq!(parse_duration("5y"), Err(DurationError::Unit("5y".into())));
    }

    #[test]
    fn finds_programs_on_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("surely-not-a-real-program-kitbag").is_none());
        assert!(find_program("/bin/sh").is_some());
    }
}
