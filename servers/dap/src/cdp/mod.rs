//! Node.js and Bun through their inspectors: a DAP adapter of kitbag's own (`adapter`),
//! speaking the inspector protocol (CDP over WebSocket, `ws`) to the runtime it starts
//! (`process`), with source maps for TypeScript builds (`sourcemap`). The rest of kitbag-dap
//! drives it over an in-process stream exactly as it drives an adapter process.

mod adapter;
pub mod failure;
mod printed;
mod process;
pub mod sourcemap;
mod values;
pub mod ws;

use std::sync::{Arc, Mutex};

use kitbag_shared::{ErrorCode, ToolError, ToolResult};

use crate::dap::Client;

/// The in-process stream's buffer: DAP messages are small; output lines are capped.
const STREAM_BUFFER: usize = 1 << 20;

/// The runtimes the bridge drives, by their inspector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inspector {
    /// Node.js: the V8 inspector.
    Node,
    /// Bun: WebKit's inspector.
    Bun,
}

impl Inspector {
    /// The runtime's name, as the `runtime` argument gives it.
    pub fn name(self) -> &'static str {
        match self {
            Inspector::Node => "node",
            Inspector::Bun => "bun",
        }
    }
}

/// Why attach by port alone cannot reach Bun: it lists no targets and serves only the random
/// path it printed (`bun --inspect=HOST:PORT/NAME` names the path).
pub const BUN_NEEDS_URL: &str = "Bun's inspector answers only at the address it printed under \"Listening:\" (ws://HOST:PORT/ID), and the program's output is not a file kitbag can read it from: pass that address as `url`";

/// The Node that first strips TypeScript types.
const NODE_FOR_TYPESCRIPT: &str = "22.6";

/// Checked before anything starts: a runtime too old for `script` (a Node older than 22.6
/// asked to run TypeScript) is told as such, naming the version found and the one needed.
pub fn preflight(runtime: Inspector, script: &std::path::Path) -> ToolResult<()> {
    // A missing binary is `spawn`'s to report.
    let Ok(bin) = process::binary(runtime) else {
        return Ok(());
    };
    match process::flags(runtime, &bin, script) {
        Err(failure::AdapterFailure::NoTypeScript { bin, major, minor }) => Err(ToolError::new(
            ErrorCode::RuntimeTooOld,
            format!(
                "runtime too old: {} is Node {major}.{minor}; TypeScript needs Node {NODE_FOR_TYPESCRIPT} or later (set KITBAG_DAP_NODE to one)",
                bin.display()
            ),
        )
        .with_detail(serde_json::json!({
            "runtime": runtime.name(),
            "version_found": format!("{major}.{minor}"),
            "version_needed": NODE_FOR_TYPESCRIPT,
            "command": bin.to_string_lossy(),
        }))),
        _ => Ok(()),
    }
}

/// Start the inspector bridge for `runtime` and a client of it. The runtime itself starts on
/// `launch` (or is reached on `attach`).
pub fn spawn(runtime: Inspector) -> ToolResult<Arc<Client>> {
    if let Err(e) = process::binary(runtime) {
        return Err(ToolError::new(ErrorCode::DapAdapterNotFound, e.to_string())
            .with_detail(serde_json::json!({"runtime": runtime.name()})));
    }
    let (client_side, adapter_side) = tokio::io::duplex(STREAM_BUFFER);
    let owned: Arc<Mutex<Vec<u32>>> = Arc::default();
    tokio::spawn(adapter::run(runtime, adapter_side, owned.clone()));
    Ok(Client::in_process(client_side, owned))
}
