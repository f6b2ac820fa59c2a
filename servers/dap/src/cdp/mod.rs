//! Node.js and Bun through their inspectors: a DAP adapter of kitbag's own (`adapter`),
//! speaking the inspector protocol (CDP over WebSocket, `ws`) to the runtime it starts
//! (`process`), with source maps for TypeScript builds (`sourcemap`). The rest of kitbag-dap
//! drives it over an in-process stream exactly as it drives an adapter process.

mod adapter;
pub mod failure;
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
