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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    #[serde(default)]
    adapters: BTreeMap<String, AdapterConfig>,
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
}

/// Configured adapters by runtime name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub adapters: BTreeMap<String, AdapterConfig>,
}

impl Config {
    /// Parse the TOML text; errors name the offending field or runtime.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let shape: FileShape = toml::from_str(text).map_err(ConfigError::Toml)?;
        for (runtime, a) in &shape.dap.adapters {
            if runtime.is_empty()
                || !runtime
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
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
        Ok(Config {
            adapters: shape.dap.adapters,
        })
    }

    /// Read and parse a file; errors name the file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))
    }
}

/// Where a command would run from: a path containing `/` as given, otherwise the first
/// match on PATH. `None` when it does not exist.
pub fn locate(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        let p = PathBuf::from(command);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(command))
        .find(|c| c.is_file())
}

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

    #[test]
    fn locate_checks_paths_and_path() {
        assert!(locate("sh").is_some());
        assert!(locate("/bin/sh").is_some());
        assert!(locate("/nonexistent/kitbag-adapter").is_none());
        assert!(locate("kitbag-no-such-adapter-xyz").is_none());
    }
}
