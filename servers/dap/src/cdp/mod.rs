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
use crate::debug::runtime::Runtime;

/// The in-process stream's buffer: DAP messages are small; output lines are capped.
const STREAM_BUFFER: usize = 1 << 20;

/// Start the inspector bridge for `runtime` and a client of it. The runtime itself starts on
/// `launch` (or is reached on `attach`).
pub fn spawn(runtime: &Runtime) -> ToolResult<Arc<Client>> {
    if !runtime.is_inspector() {
        return Err(ToolError::internal(format!(
            "runtime `{}` has no inspector",
            runtime.name()
        )));
    }
    if let Err(e) = process::binary(runtime) {
        return Err(ToolError::new(ErrorCode::DapAdapterNotFound, e.to_string())
            .with_detail(serde_json::json!({"runtime": runtime.name()})));
    }
    let (client_side, adapter_side) = tokio::io::duplex(STREAM_BUFFER);
    let owned: Arc<Mutex<Vec<u32>>> = Arc::default();
    tokio::spawn(adapter::run(runtime.clone(), adapter_side, owned.clone()));
    Ok(Client::in_process(client_side, owned))
}
