//! What differs per runtime, in one place: which adapter runs it, the launch arguments, how
//! "stop on entry" is done, and the adapter's hit-count syntax.

use std::collections::BTreeMap;
use std::path::Path;

use kitbag_shared::{ErrorCode, ToolError, ToolResult, args};
use serde_json::{Value, json};

use crate::cdp::Inspector;
use crate::config::{self, AdapterConfig, Config, Transport};

use super::params::HitSyntax;

/// The built-in runtimes, in the order error messages list them.
pub const BUILTIN: [&str; 5] = ["python", "node", "bun", "lldb", "go"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// debugpy.
    Python,
    /// Node.js through its inspector (kitbag's CDP bridge).
    Node,
    /// Bun through its inspector (kitbag's CDP bridge).
    Bun,
    /// lldb-dap: C, C++, Rust.
    Lldb,
    /// Delve's `dlv dap`.
    Go,
    /// A runtime added by `--config`.
    Configured(String),
}

/// How a launch stops on its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryStop {
    /// The adapter's `stopOnEntry` launch argument stops on the first line (debugpy, CDP).
    Adapter,
    /// The adapter's own entry stop is in the loader, before any source: a temporary function
    /// breakpoint on the program's main function stands for it.
    FunctionBreakpoint(&'static str),
}

impl Runtime {
    /// The runtime a `runtime` argument names, or an error listing the accepted ones.
    pub fn parse(name: Option<&str>, config: &Config) -> ToolResult<Runtime> {
        let name = name.unwrap_or("python");
        let builtin = match name {
            "python" => Some(Runtime::Python),
            "node" => Some(Runtime::Node),
            "bun" => Some(Runtime::Bun),
            "lldb" => Some(Runtime::Lldb),
            "go" => Some(Runtime::Go),
            _ => None,
        };
        if let Some(r) = builtin {
            return Ok(r);
        }
        if config.adapters.contains_key(name) {
            return Ok(Runtime::Configured(name.to_string()));
        }
        let mut names: Vec<&str> = BUILTIN.to_vec();
        names.extend(
            config
                .adapters
                .keys()
                .map(String::as_str)
                .filter(|k| !BUILTIN.contains(k)),
        );
        Err(args::not_one_of("runtime", name, &names))
    }

    pub fn name(&self) -> &str {
        match self {
            Runtime::Python => "python",
            Runtime::Node => "node",
            Runtime::Bun => "bun",
            Runtime::Lldb => "lldb",
            Runtime::Go => "go",
            Runtime::Configured(n) => n,
        }
    }

    /// The inspector kitbag's CDP bridge drives for it (unless `--config` names an adapter
    /// for it).
    pub fn inspector(&self) -> Option<Inspector> {
        match self {
            Runtime::Node => Some(Inspector::Node),
            Runtime::Bun => Some(Inspector::Bun),
            _ => None,
        }
    }

    /// Whether kitbag's CDP bridge runs it (unless `--config` names an adapter for it).
    pub fn is_inspector(&self) -> bool {
        self.inspector().is_some()
    }

    pub fn hit_syntax(&self) -> HitSyntax {
        match self {
            Runtime::Python | Runtime::Go | Runtime::Node | Runtime::Bun => HitSyntax::Operators,
            Runtime::Lldb | Runtime::Configured(_) => HitSyntax::Number,
        }
    }

    /// The expression language `watch` is checked in, where the adapter does not keep
    /// `watch` free of side effects itself (None: Node's inspector, which V8 checks).
    pub fn watch_syntax(&self, configured: bool) -> Option<super::watch::Syntax> {
        use super::watch::Syntax;
        match self {
            Runtime::Node if !configured => None,
            Runtime::Python => Some(Syntax::Python),
            Runtime::Node | Runtime::Bun => Some(Syntax::JavaScript),
            Runtime::Lldb => Some(Syntax::C),
            Runtime::Go => Some(Syntax::Go),
            Runtime::Configured(_) => Some(Syntax::Other),
        }
    }

    pub fn entry_stop(&self) -> EntryStop {
        match self {
            Runtime::Lldb => EntryStop::FunctionBreakpoint("main"),
            Runtime::Go => EntryStop::FunctionBreakpoint("main.main"),
            _ => EntryStop::Adapter,
        }
    }

    /// The `adapterID` sent in `initialize`.
    fn adapter_id(&self) -> &str {
        match self {
            Runtime::Python => "debugpy",
            Runtime::Lldb => "lldb-dap",
            Runtime::Node => "node",
            Runtime::Bun => "bun",
            Runtime::Go => "go",
            Runtime::Configured(n) => n,
        }
    }
}

/// What to launch: already checked against the path policy.
pub struct LaunchPlan<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub stop_on_entry: bool,
    /// Delve's build output, in a temporary directory of kitbag's.
    pub go_output: Option<&'a Path>,
}

/// The `launch` request's arguments for a runtime's adapter.
pub fn launch_arguments(runtime: &Runtime, plan: &LaunchPlan) -> Value {
    let program = plan.program.to_string_lossy();
    let cwd = plan.cwd.to_string_lossy();
    let entry = plan.stop_on_entry && runtime.entry_stop() == EntryStop::Adapter;
    match runtime {
        Runtime::Python => json!({
            "program": program, "args": plan.args, "cwd": cwd, "env": plan.env,
            "console": "internalConsole", "justMyCode": true, "stopOnEntry": entry,
        }),
        Runtime::Lldb => json!({
            "program": program, "args": plan.args, "cwd": cwd, "stopOnEntry": false,
            "env": plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        Runtime::Go => json!({
            "mode": "debug", "program": program, "args": plan.args, "cwd": cwd,
            "env": plan.env, "output": plan.go_output, "stopOnEntry": false,
        }),
        Runtime::Node | Runtime::Bun | Runtime::Configured(_) => json!({
            "program": program, "args": plan.args, "cwd": cwd, "env": plan.env,
            "stopOnEntry": entry,
        }),
    }
}

/// How to start a runtime's adapter and reach it.
pub struct AdapterCommand {
    pub program: String,
    pub args: Vec<String>,
    pub adapter_id: String,
    pub transport: Transport,
}

/// The adapter for a runtime: `--config`'s when it names one (its `launch` table merged
/// into `launch_args`), else the built-in. Existence is a file lookup, never a process start.
pub fn adapter_command(
    runtime: &Runtime,
    config: &Config,
    launch_args: &mut Value,
) -> ToolResult<AdapterCommand> {
    if let Some(a) = config.adapters.get(runtime.name()) {
        return configured(runtime, a, launch_args);
    }
    match runtime {
        Runtime::Python => {
            let Some(python) = config::locate("python3") else {
                return Err(debugpy_missing(None));
            };
            Ok(AdapterCommand {
                program: python.to_string_lossy().into_owned(),
                args: vec!["-m".into(), "debugpy.adapter".into()],
                adapter_id: runtime.adapter_id().into(),
                transport: Transport::Stdio,
            })
        }
        Runtime::Lldb => {
            let Some(bin) = find_lldb_dap() else {
                return Err(not_found(
                    "lldb",
                    "lldb-dap is not installed",
                    "apt-get install -y lldb-22",
                ));
            };
            Ok(AdapterCommand {
                program: bin.to_string_lossy().into_owned(),
                args: vec![],
                adapter_id: runtime.adapter_id().into(),
                transport: Transport::Stdio,
            })
        }
        Runtime::Go => {
            let Some(bin) = config::locate("dlv") else {
                return Err(not_found(
                    "go",
                    "dlv is not installed",
                    "go install github.com/go-delve/delve/cmd/dlv@latest",
                ));
            };
            // `dlv dap` has no stdio mode: it dials in to the address we give it.
            Ok(AdapterCommand {
                program: bin.to_string_lossy().into_owned(),
                args: vec!["dap".into()],
                adapter_id: runtime.adapter_id().into(),
                transport: Transport::ClientAddr,
            })
        }
        Runtime::Node | Runtime::Bun => Err(ToolError::internal(
            "the inspector runtimes are started by the CDP bridge",
        )),
        Runtime::Configured(name) => Err(ToolError::invalid_field(
            "runtime",
            format!("no adapter is configured for `{name}`"),
        )),
    }
}

/// lldb-dap: `lldb-dap` on PATH, else Debian's newest versioned one (`lldb-dap-22`, ...).
pub fn find_lldb_dap() -> Option<std::path::PathBuf> {
    config::locate("lldb-dap").or_else(|| {
        (15..=40)
            .rev()
            .map(|v| std::path::PathBuf::from(format!("/usr/bin/lldb-dap-{v}")))
            .find(|p| p.is_file())
    })
}

fn not_found(runtime: &str, what: &str, install: &str) -> ToolError {
    ToolError::new(
        ErrorCode::DapAdapterNotFound,
        format!("{what}; install it with: {install}"),
    )
    .with_detail(json!({"runtime": runtime, "install": install}))
}

/// A `--config` adapter: its command must exist (a path, or a name on PATH).
fn configured(
    runtime: &Runtime,
    a: &AdapterConfig,
    launch_args: &mut Value,
) -> ToolResult<AdapterCommand> {
    let name = runtime.name();
    let Some((first, rest)) = a.command.split_first() else {
        return Err(ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!("the adapter command for runtime `{name}` in --config is empty"),
        )
        .with_detail(json!({"runtime": name, "command": ""})));
    };
    let Some(exe) = config::locate(first) else {
        return Err(ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!(
                "the adapter command `{first}` configured for runtime `{name}` (--config dap.adapters.{name}.command) does not exist"
            ),
        )
        .with_detail(json!({"runtime": name, "command": first})));
    };
    if let Value::Object(m) = launch_args {
        m.extend(a.launch_json());
    }
    Ok(AdapterCommand {
        program: exe.to_string_lossy().into_owned(),
        args: rest.to_vec(),
        adapter_id: a
            .adapter_id
            .clone()
            .unwrap_or_else(|| runtime.adapter_id().to_string()),
        transport: a.transport.unwrap_or_else(|| Transport::default_for(name)),
    })
}

/// debugpy is missing for `python` (the interpreter checked, found on the server's PATH —
/// inside a virtualenv that is the venv's, which may lack what the system python has).
pub fn debugpy_missing(python: Option<&str>) -> ToolError {
    let (message, install) = match python {
        Some(p) => (
            format!(
                "debugpy is not installed for {p} (the python3 on this server's PATH); install it with: {p} -m pip install debugpy"
            ),
            format!("{p} -m pip install debugpy"),
        ),
        None => (
            "no python3 on this server's PATH; install Python 3, then: python3 -m pip install debugpy".to_string(),
            "python3 -m pip install debugpy".to_string(),
        ),
    };
    ToolError::new(ErrorCode::DapAdapterNotFound, message).with_detail(json!({
        "runtime": "python", "interpreter": python, "install": install
    }))
}

/// Whether `python` can import debugpy (asked only after the adapter failed to start).
pub fn debugpy_importable(python: &str) -> bool {
    std::process::Command::new(python)
        .args([
            "-c",
            "import sys, importlib.util; sys.exit(importlib.util.find_spec(\"debugpy\") is None)",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What `attach` connects to for a runtime, and how the user starts such a process.
pub fn attach_target(runtime: &Runtime) -> ToolResult<&'static str> {
    match runtime {
        Runtime::Python => Ok("python -m debugpy --listen HOST:PORT program.py"),
        Runtime::Go => {
            Ok("dlv debug|exec|attach --headless --listen=HOST:PORT --accept-multiclient")
        }
        Runtime::Node => Ok("node --inspect=HOST:PORT program.js"),
        Runtime::Bun => Ok("bun --inspect=HOST:PORT program.ts"),
        _ => Err(ToolError::invalid_field(
            "runtime",
            "attach supports: python (a debugpy --listen process), node or bun (an --inspect process), go (a dlv --headless server)",
        )),
    }
}

/// The `attach` request's arguments.
pub fn attach_arguments(runtime: &Runtime, host: &str, port: u16) -> Value {
    match runtime {
        // Delve's headless server already holds the program: attach to it as it is.
        Runtime::Go => json!({"mode": "remote"}),
        _ => json!({"connect": {"host": host, "port": port}, "justMyCode": true}),
    }
}

/// The `initialize` arguments for an adapter.
pub fn initialize_arguments(adapter_id: &str) -> Value {
    json!({"clientID": "kitbag", "clientName": "kitbag", "adapterID": adapter_id,
        "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path",
        "supportsVariableType": true, "supportsRunInTerminalRequest": false,
        "supportsMemoryReferences": true})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn runtimes_parse_and_errors_list_them() {
        let cfg = Config::parse("[dap.adapters.ruby]\ncommand = [\"rdbg\"]\n").unwrap();
        assert_eq!(Runtime::parse(None, &cfg).unwrap(), Runtime::Python);
        assert_eq!(Runtime::parse(Some("node"), &cfg).unwrap(), Runtime::Node);
        assert_eq!(
            Runtime::parse(Some("ruby"), &cfg).unwrap(),
            Runtime::Configured("ruby".into())
        );
        let e = Runtime::parse(Some("cobol"), &cfg).unwrap_err();
        assert_eq!(e.detail["field"], "runtime");
        assert!(
            e.message.contains("python, node, bun, lldb, go, ruby"),
            "{}",
            e.message
        );
    }

    #[test]
    fn entry_stops_and_launch_arguments_per_adapter() {
        let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
        let plan = LaunchPlan {
            program: Path::new("/r/app"),
            args: &[],
            cwd: Path::new("/r"),
            env: &env,
            stop_on_entry: true,
            go_output: None,
        };
        let py = launch_arguments(&Runtime::Python, &plan);
        assert_eq!(py["stopOnEntry"], true);
        assert_eq!(py["env"]["A"], "1");
        // lldb's own entry stop is in the loader: a `main` function breakpoint stands for it.
        let lldb = launch_arguments(&Runtime::Lldb, &plan);
        assert_eq!(lldb["stopOnEntry"], false);
        assert_eq!(lldb["env"][0], "A=1");
        assert_eq!(
            Runtime::Lldb.entry_stop(),
            EntryStop::FunctionBreakpoint("main")
        );
        assert_eq!(
            Runtime::Go.entry_stop(),
            EntryStop::FunctionBreakpoint("main.main")
        );
        let off = LaunchPlan {
            stop_on_entry: false,
            ..plan
        };
        assert_eq!(
            launch_arguments(&Runtime::Python, &off)["stopOnEntry"],
            false
        );
    }
}
