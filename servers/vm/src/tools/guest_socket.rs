//! The parent's side of nesting (see [`crate::guest`]): each sandbox's private socket in its
//! control directory, on which the kitbag-vm inside sends its calls. A call is made as the
//! instance the socket belongs to, whatever the guest says.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use kitbag_shared::CallCtx;
use kitbag_shared::rustix::fs::{Mode, OFlags, openat};
use kitbag_shared::vmlink::GuestCall;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::VmState;

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
        r = super::call_as(&state, &call.tool, call.arguments, Some(id), ctx) => r,
        // The guest went away: its call is cancelled (dropped) here too.
        _ = read.read(&mut probe) => return Ok(()),
    };
    crate::proto::write_line(&mut write, &result).await
}
