//! Node.js and Bun through their inspectors: a DAP adapter of kitbag's own, speaking the V8
//! inspector protocol (CDP over WebSocket) to the runtime.

use std::sync::Arc;

use kitbag_shared::{ErrorCode, ToolError, ToolResult};

use crate::dap::Client;
use crate::debug::runtime::Runtime;

/// Start the in-process adapter for `runtime`.
pub fn spawn(runtime: &Runtime) -> ToolResult<Arc<Client>> {
    Err(ToolError::new(
        ErrorCode::DapAdapterNotFound,
        format!("runtime `{}` is not available yet", runtime.name()),
    ))
}
