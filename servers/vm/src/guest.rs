//! Nesting: a kitbag-vm started inside an instance (guest mode) serves the same tools by
//! forwarding every call to the kitbag-vm that runs the instance, over the instance's private
//! socket (`/run/kitbag/vm.sock`, `$KITBAG_VM_SOCKET`). The parent knows the caller from the
//! socket the call came in on — never from anything the guest says — so a guest sees and stops
//! only the instances it spawned (and theirs), and `expose_port`/`keepalive_*`/`self_*`
//! without `instance` act on its own instance.
//!
//! Wire: one call per connection; the guest writes `{"tool", "arguments"}` as a JSON line,
//! the parent answers with the `CallToolResult` as a JSON line. Closing the connection cancels
//! the call.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kitbag_shared::rmcp::model::{CallToolResult, JsonObject};
use kitbag_shared::rustix::fs::{Mode, OFlags, openat};
use kitbag_shared::vmlink::GuestCall;
use kitbag_shared::{CallCtx, ErrorCode, McpServer, ToolError, ToolResult, ToolRouter};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::{Args, VmState};

pub use kitbag_shared::vmlink::SOCKET_VAR;
/// The socket's name in the control directory (`/run/kitbag/vm.sock` inside).
pub const GUEST_SOCKET: &str = "vm.sock";

/// Parent side: listen on `<ctl>/vm.sock` for instance `id`'s guest. The socket is bound
/// through the directory's descriptor, so a long state path cannot exceed the 108-byte limit.
pub fn listen(state: Arc<VmState>, id: String, ctl: &Path) -> std::io::Result<CancellationToken> {
    let dir = openat(
        kitbag_shared::rustix::fs::CWD,
        ctl,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let path = format!("/proc/self/fd/{}/{GUEST_SOCKET}", dir.as_raw_fd());
    let _ = std::fs::remove_file(&path);
    let std_listener = std::os::unix::net::UnixListener::bind(&path)?;
    drop(dir);
    std_listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(std_listener)?;
    let close = CancellationToken::new();
    let stop = close.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((stream, _)) = accepted else { continue };
            let state = state.clone();
            let id = id.clone();
            tokio::spawn(async move {
                if let Err(e) = serve_guest(state, id.clone(), stream).await {
                    tracing::debug!(instance = id, "guest call failed: {e}");
                }
            });
        }
    });
    Ok(close)
}

async fn serve_guest(state: Arc<VmState>, id: String, stream: UnixStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let call: GuestCall = crate::proto::read_line(&mut read).await?;
    let ctx = CallCtx::detached(state.policy.clone());
    let mut probe = [0u8; 1];
    let result = tokio::select! {
        r = crate::tools::call_as(&state, &call.tool, call.arguments, Some(id), ctx) => r,
        // The guest went away: its call is cancelled (dropped) here too.
        _ = read.read(&mut probe) => return Ok(()),
    };
    crate::proto::write_line(&mut write, &result).await
}

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
