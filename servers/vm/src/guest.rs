//! Nesting: a kitbag-vm started inside an instance (guest mode) serves the same tools by
//! forwarding every call to the kitbag-vm that runs the instance, over the instance's private
//! socket (`/run/kitbag/vm.sock`, `$KITBAG_VM_SOCKET`). The parent's side of that socket is
//! [`crate::tools::guest_socket`]: it knows the caller from the socket the call came in on —
//! never from anything the guest says — so a guest sees and stops only the instances it
//! spawned (and theirs), and `expose_port`/`keepalive_*`/`self_*` without `instance` act on its
//! own instance.
//!
//! Wire: one call per connection; the guest writes `{"tool", "arguments"}` as a JSON line,
//! the parent answers with the `CallToolResult` as a JSON line. Closing the connection cancels
//! the call.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kitbag_shared::rmcp::model::{CallToolResult, JsonObject};
use kitbag_shared::{ErrorCode, McpServer, ToolError, ToolResult, ToolRouter};

use crate::Args;

pub use kitbag_shared::vmlink::SOCKET_VAR;

/// Guest side: forward one call to the parent and return its answer as is.
async fn forward(socket: &Path, tool: &str, arguments: JsonObject) -> ToolResult<CallToolResult> {
    kitbag_shared::vmlink::call(socket, tool, arguments)
        .await
        .map_err(|e| {
            ToolError::new(
                ErrorCode::ServerUnavailable,
                format!(
                    "the kitbag-vm that runs this instance does not answer on {} ({e})",
                    socket.display()
                ),
            )
        })
}

/// What a guest-mode server holds: where its parent listens.
pub struct GuestState {
    socket: PathBuf,
}

/// Serve the same tools as the host mode, each forwarded to the parent.
pub async fn run_guest(args: &Args, socket: PathBuf) -> anyhow::Result<()> {
    let mut router: ToolRouter<GuestState> = ToolRouter::new();
    for tool in crate::tools::router().list() {
        let name = tool.name.to_string();
        router = router.raw_tool(tool, move |s: Arc<GuestState>, a, _ctx| {
            let name = name.clone();
            async move { forward(&s.socket, &name, a).await }
        });
    }
    let policy = args.common.policy()?;
    let server = McpServer::new(crate::IDENTITY, GuestState { socket }, router, policy)
        .with_common_args(&args.common)?;
    kitbag_shared::serve(server, &args.common).await
}
