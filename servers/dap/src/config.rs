//! Per-runtime adapter commands from a `--config` TOML file (the seed's `dap.adapters` shape):
//!
//! ```toml
//! [dap.adapters.python]
//! command = ["python3", "-m", "debugpy.adapter"]
//! [dap.adapters.lldb]
//! command = ["/usr/bin/lldb-dap-22"]
//! ```
//!
//! A configured runtime replaces the built-in adapter command; a new runtime name adds one
//! (launched with `program`, `args`, `cwd` plus the table's `launch` arguments). `transport`
//! says how it speaks DAP: `stdio`, or `client-addr` (it dials in to an address we give it as
//! `--client-addr`, as `dlv dap` does).
//!
//! Seed 004's list form is read too, each item naming its runtime:
//!
//! ```toml
//! [[dap.adapters]]
//! runtime = "node"
//! command = ["node", "--inspect-brk"]   # how the runtime is started
//! adapter = ["js-debug-adapter"]        # the debug adapter → `command` above
//! type = "pwa-node"                     # → `adapter_id`
//! ```
//!
//! An item that describes what kitbag-dap does already (bun or node started with their
//! inspector, python through debugpy) keeps the built-in and says so in [`Config::notes`];
//! one kitbag-dap cannot honour is refused with what to write instead.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// One runtime's adapter.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterConfig {
    /// The adapter command and its arguments.
    pub command: Vec<String>,
    /// The `adapterID` sent in `initialize` (default: the runtime name).
    #[serde(default)]
    pub adapter_id: Option<String>,
    /// Extra `launch` request arguments, merged over the built-in ones.
    #[serde(default)]
    pub launch: Option<toml::Table>,
    /// How the adapter's DAP stream reaches us (default: `client-addr` for `go`, whose
    /// `dlv dap` has no stdio mode; `stdio` otherwise).
    #[serde(default)]
    pub transport: Option<Transport>,
}

/// How an adapter speaks DAP to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// On its stdin/stdout.
    Stdio,
    /// Over TCP: it is given `--client-addr=127.0.0.1:PORT` (Delve's flag) and dials in to a
    /// listener we opened for it alone.
    ClientAddr,
}

impl Transport {
    /// A runtime's transport when its configuration names none.
    pub fn default_for(runtime: &str) -> Transport {
        if runtime == "go" {
            Transport::ClientAddr
        } else {
            Transport::Stdio
        }
    }
}

impl AdapterConfig {
    /// The extra launch arguments as JSON.
    pub fn launch_json(&self) -> serde_json::Map<String, Value> {
        self.launch
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|v| match v {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    #[serde(default)]
    dap: DapSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DapSection {
    /// A table of runtimes (kitbag's form) or a list of items (seed 004's form).
    #[serde(default)]
    adapters: Option<toml::Value>,
}

/// One item of seed 004's `dap.adapters` list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedAdapter {
    runtime: String,
    /// How the runtime itself is started (e.g. `["bun", "--inspect-brk=0", "--inspect-wait"]`).
    #[serde(default)]
    command: Option<Vec<String>>,
    /// The debug adapter's command.
    #[serde(default)]
    adapter: Option<Vec<String>>,
    /// The adapter's type (`adapterID`).
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    launch: Option<toml::Table>,
    #[serde(default)]
    transport: Option<Transport>,
}

/// Runtimes kitbag-dap debugs through their own inspector, started by itself.
const INSPECTOR_RUNTIMES: [(&str, &str); 2] =
    [("bun", "KITBAG_DAP_BUN"), ("node", "KITBAG_DAP_NODE")];

/// The file name of a command's program.
fn program_name(cmd: &[String]) -> &str {
    cmd.first()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .unwrap_or("")
}

fn valid_runtime(runtime: &str) -> bool {
    !runtime.is_empty()
        && runtime
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Seed 004's list, as runtime tables plus notes on the items that keep a built-in.
fn from_list(
    items: Vec<toml::Value>,
) -> Result<(BTreeMap<String, AdapterConfig>, Vec<String>), ConfigError> {
    let mut adapters = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut notes = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("dap.adapters[{i}]");
        let a: SeedAdapter = item
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Item(at.clone(), e.message().to_string()))?;
        let rt = a.runtime.clone();
        if !valid_runtime(&rt) {
            return Err(ConfigError::Item(
                format!("{at}.runtime"),
                format!("`{rt}`: a runtime name is letters, digits, `_` or `-`"),
            ));
        }
        if !seen.insert(rt.clone()) {
            return Err(ConfigError::Item(
                at,
                format!("runtime `{rt}` is listed twice; keep one item per runtime"),
            ));
        }
        let inspector = INSPECTOR_RUNTIMES.iter().find(|(r, _)| *r == rt);
        // The runtime's own command: only its program's default name can be honoured (the
        // adapter or kitbag-dap starts it, with the debugger flags it needs).
        if let Some(cmd) = &a.command {
            let prog = program_name(cmd);
            if cmd.first().is_none_or(|p| p.trim().is_empty()) {
                return Err(ConfigError::Item(
                    format!("{at}.command"),
                    "must name a program (it is empty)".into(),
                ));
            }
            if prog != rt || cmd[0].contains('/') {
                let instead = match inspector {
                    Some((_, var)) if a.adapter.is_none() => format!(
                        "kitbag-dap starts {rt} itself, paused in its inspector; to use another {rt} executable set {var}={} in the server's environment and drop `command`",
                        cmd[0]
                    ),
                    _ => format!(
                        "kitbag-dap cannot choose how `{rt}` is started; drop `command`, and pass another executable through the adapter's launch arguments (`launch`, e.g. runtimeExecutable for js-debug)"
                    ),
                };
                return Err(ConfigError::Item(format!("{at}.command"), instead));
            }
        }
        match (&a.adapter, inspector) {
            (Some(adapter), _) if program_name(adapter) == "debugpy" => {
                if rt != "python" {
                    return Err(ConfigError::Item(
                        format!("{at}.adapter"),
                        format!(
                            "debugpy debugs python; name `runtime = \"python\"`, or give `{rt}`'s own adapter"
                        ),
                    ));
                }
                notes.push(format!(
                    "{at} (python): debugpy is the built-in adapter, spoken to on stdio as `python3 -m debugpy.adapter` (`{}` is not started)",
                    adapter.join(" ")
                ));
            }
            (Some(adapter), _) => {
                if adapter.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(ConfigError::Item(
                        format!("{at}.adapter"),
                        "must name a program (it is empty)".into(),
                    ));
                }
                if let Some(cmd) = &a.command {
                    notes.push(format!(
                        "{at} ({rt}): `{}` is left to the adapter `{}`, which starts {rt} itself",
                        cmd.join(" "),
                        adapter.join(" ")
                    ));
                }
                adapters.insert(
                    rt,
                    AdapterConfig {
                        command: adapter.clone(),
                        adapter_id: a.kind,
                        launch: a.launch,
                        transport: a.transport,
                    },
                );
            }
            (None, Some(_)) => {
                if a.launch.is_some() || a.transport.is_some() {
                    return Err(ConfigError::Item(
                        at,
                        format!(
                            "`launch` and `transport` need an `adapter`; {rt} without one is debugged through its own inspector"
                        ),
                    ));
                }
                notes.push(format!(
                    "{at} ({rt}): the built-in — kitbag-dap starts {rt} paused in its inspector{}",
                    a.command
                        .as_ref()
                        .map(|c| format!(" (as `{}` does)", c.join(" ")))
                        .unwrap_or_default()
                ));
            }
            (None, None) => {
                return Err(ConfigError::Item(
                    at,
                    format!(
                        "`{rt}` needs `adapter`: the debug adapter's command (e.g. adapter = [\"/usr/bin/lldb-dap-22\"]); only bun and node are debugged without one"
                    ),
                ));
            }
        }
    }
    Ok((adapters, notes))
}

/// What is wrong with a `--config` file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Toml(toml::de::Error),
    #[error("dap.adapters.{0}: a runtime name is letters, digits, `_` or `-`")]
    RuntimeName(String),
    #[error("dap.adapters.{0}.command: must name a program (it is empty)")]
    NoProgram(String),
    #[error("dap.adapters.{0}.command: the program name is blank")]
    BlankProgram(String),
    /// An item of the list form: where, and what to write instead.
    #[error("{0}: {1}")]
    Item(String, String),
}

/// Configured adapters by runtime name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub adapters: BTreeMap<String, AdapterConfig>,
    /// Items of the list form that keep a built-in, and why (logged at load).
    pub notes: Vec<String>,
}

impl Config {
    /// Parse the TOML text; errors name the offending field or runtime.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let shape: FileShape = toml::from_str(text).map_err(ConfigError::Toml)?;
        let (adapters, notes) = match shape.dap.adapters {
            None => (BTreeMap::new(), Vec::new()),
            Some(toml::Value::Array(items)) => from_list(items)?,
            Some(v) => (
                BTreeMap::<String, AdapterConfig>::deserialize(v).map_err(ConfigError::Toml)?,
                Vec::new(),
            ),
        };
        for (runtime, a) in &adapters {
            if !valid_runtime(runtime) {
                return Err(ConfigError::RuntimeName(runtime.clone()));
            }
            match a.command.first() {
                None => {
                    return Err(ConfigError::NoProgram(runtime.clone()));
                }
                Some(c) if c.trim().is_empty() => {
                    return Err(ConfigError::BlankProgram(runtime.clone()));
                }
                _ => {}
            }
        }
        Ok(Config { adapters, notes })
    }

    /// Read and parse a file; errors name the file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?;
        let cfg = Config::parse(&text)
            .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?;
        for note in &cfg.notes {
            tracing::info!("--config {}: {note}", path.display());
        }
        Ok(cfg)
    }
}

/// Where a command would run from (`PATH` lookup).
pub use kitbag_shared::process::locate;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_the_seed_shape() {
        let c = Config::parse(
            "[dap.adapters.python]\ncommand = [\"python3\", \"-m\", \"debugpy.adapter\"]\n\
             [dap.adapters.lldb]\ncommand = [\"/usr/bin/lldb-dap-22\"]\n",
        )
        .unwrap();
        assert_eq!(c.adapters.len(), 2);
        assert_eq!(
            c.adapters["python"].command,
            ["python3", "-m", "debugpy.adapter"]
        );
        assert_eq!(c.adapters["lldb"].command, ["/usr/bin/lldb-dap-22"]);
        assert_eq!(c.adapters["lldb"].adapter_id, None);
    }

    #[test]
    fn adds_a_runtime_with_launch_arguments() {
        let c = Config::parse(
            "[dap.adapters.node]\ncommand = [\"js-debug\", \"--stdio\"]\nadapter_id = \"pwa-node\"\n\
             [dap.adapters.node.launch]\nstopOnEntry = false\nenv = { A = \"1\" }\n",
        )
        .unwrap();
        let n = &c.adapters["node"];
        assert_eq!(n.adapter_id.as_deref(), Some("pwa-node"));
        let l = n.launch_json();
        assert_eq!(l["stopOnEntry"], Value::Bool(false));
        assert_eq!(l["env"]["A"], "1");
    }

    #[test]
    fn transport_is_read_and_defaults_per_runtime() {
        let c = Config::parse(
            "[dap.adapters.go]\ncommand = [\"/opt/dlv\", \"dap\"]\n\
             [dap.adapters.x]\ncommand = [\"x-dap\"]\ntransport = \"client-addr\"\n",
        )
        .unwrap();
        assert_eq!(c.adapters["go"].transport, None);
        assert_eq!(Transport::default_for("go"), Transport::ClientAddr);
        assert_eq!(Transport::default_for("python"), Transport::Stdio);
        assert_eq!(c.adapters["x"].transport, Some(Transport::ClientAddr));
        let e = Config::parse("[dap.adapters.x]\ncommand = [\"x\"]\ntransport = \"tcp\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transport") && e.contains("client-addr"), "{e}");
    }

    #[test]
    fn empty_file_is_no_overrides() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(Config::parse("[dap]\n").unwrap(), Config::default());
    }

    #[test]
    fn unknown_fields_are_named() {
        let e = Config::parse("[dap.adapters.python]\ncomand = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("comand"), "{e}");
        let e = Config::parse("[dap.adapter.python]\ncommand = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("adapter"), "{e}");
        let e = Config::parse("[lsp]\n").unwrap_err().to_string();
        assert!(e.contains("lsp"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = Config::parse("[dap.adapters.python]\ncommand = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dap.adapters.python.command"), "{e}");
        let e = Config::parse("[dap.adapters.python]\ncommand = [\" \"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dap.adapters.python.command"), "{e}");
        let e = Config::parse("[dap.adapters.python]\ncommand = \"python3\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("command"), "{e}");
        let e = Config::parse("[dap.adapters.python]\nadapter_id = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("command"), "{e}");
        let e = Config::parse("[dap.adapters.\"a b\"]\ncommand = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a b"), "{e}");
        assert!(Config::parse("not toml [").is_err());
    }

    /// Seed 004's `dap.adapters` list (`.kaged/project.yaml`), written as this file's TOML.
    const SEED_004_LIST: &str = r#"
[[dap.adapters]]
runtime = "bun"
command = ["bun", "--inspect-brk=0", "--inspect-wait"]
type = "bun"

[[dap.adapters]]
runtime = "node"
command = ["node", "--inspect-brk"]
adapter = ["js-debug-adapter"]
type = "pwa-node"

[[dap.adapters]]
runtime = "python"
adapter = ["debugpy", "--listen", "0"]
type = "debugpy"
"#;

    /// A `--config` file on disk, loaded as the server loads it.
    fn load_file(name: &str, text: &str) -> anyhow::Result<Config> {
        let dir =
            std::env::temp_dir().join(format!("kitbag-dap-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dap.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        c
    }

    #[test]
    fn the_seed_list_form_loads() {
        let c = load_file("seed", SEED_004_LIST).unwrap();
        // node gets the adapter the item names; bun and python keep their built-ins.
        assert_eq!(c.adapters.len(), 1, "{c:?}");
        let node = &c.adapters["node"];
        assert_eq!(node.command, ["js-debug-adapter"]);
        assert_eq!(node.adapter_id.as_deref(), Some("pwa-node"));
        assert_eq!(c.notes.len(), 3, "{:?}", c.notes);
        assert!(c.notes[0].contains("dap.adapters[0] (bun)") && c.notes[0].contains("built-in"));
        assert!(c.notes[1].contains("node --inspect-brk"), "{:?}", c.notes);
        assert!(
            c.notes[2].contains("python3 -m debugpy.adapter"),
            "{:?}",
            c.notes
        );
        // The inline spelling of the same list, with kitbag's own keys.
        let c = Config::parse(
            "[dap]\nadapters = [{ runtime = \"lldb\", adapter = [\"/usr/bin/lldb-dap-22\"] },\n\
             { runtime = \"go\", adapter = [\"/opt/dlv\", \"dap\"], transport = \"client-addr\" }]\n",
        )
        .unwrap();
        assert_eq!(c.adapters["lldb"].command, ["/usr/bin/lldb-dap-22"]);
        assert_eq!(c.adapters["go"].transport, Some(Transport::ClientAddr));
    }

    #[test]
    fn list_items_kitbag_cannot_honour_say_what_to_write() {
        let e = |text: &str| Config::parse(text).unwrap_err().to_string();
        let m = e(
            "[[dap.adapters]]\nruntime = \"bun\"\ncommand = [\"/opt/bun/bin/bun\", \"--inspect-brk=0\"]\n",
        );
        assert!(
            m.contains("dap.adapters[0].command") && m.contains("KITBAG_DAP_BUN=/opt/bun/bin/bun"),
            "{m}"
        );
        let m = e("[[dap.adapters]]\nruntime = \"ruby\"\ncommand = [\"ruby\"]\n");
        assert!(
            m.contains("dap.adapters[0]") && m.contains("needs `adapter`"),
            "{m}"
        );
        let m = e(
            "[[dap.adapters]]\nruntime = \"x\"\nadapter = [\"a\"]\n[[dap.adapters]]\nruntime = \"x\"\nadapter = [\"b\"]\n",
        );
        assert!(m.contains("dap.adapters[1]") && m.contains("twice"), "{m}");
        let m = e("[[dap.adapters]]\nruntime = \"x\"\nadaptor = [\"a\"]\n");
        assert!(
            m.contains("dap.adapters[0]") && m.contains("adaptor"),
            "{m}"
        );
        let m = e("[[dap.adapters]]\nruntime = \"a b\"\nadapter = [\"a\"]\n");
        assert!(m.contains("dap.adapters[0].runtime"), "{m}");
        let m = e("[[dap.adapters]]\nruntime = \"x\"\nadapter = []\n");
        assert!(m.contains("dap.adapters[0].adapter"), "{m}");
    }

    #[test]
    fn locate_checks_paths_and_path() {
        assert!(locate("sh").is_some());
        assert!(locate("/bin/sh").is_some());
        assert!(locate("/nonexistent/kitbag-adapter").is_none());
        assert!(locate("kitbag-no-such-adapter-xyz").is_none());
    }
}
