//! The line from a process inside a kitbag-vm instance to the kitbag-vm that runs it
//! (`$KITBAG_VM_SOCKET`, `/run/kitbag/vm.sock`): one tool call per connection, a JSON line
//! `{"tool", "arguments"}` out, the `CallToolResult` as a JSON line back. kitbag-vm's guest
//! mode forwards every call this way; other servers use [`call`] for single calls (kitbag-cron
//! holds a keepalive lease while it has enabled entries).

use std::path::{Path, PathBuf};

use rmcp::model::{CallToolResult, JsonObject};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// The environment variable naming the socket inside an instance.
pub const SOCKET_VAR: &str = "KITBAG_VM_SOCKET";
/// The largest answer read (an exec's two 1 MB previews, JSON-escaped, fit).
const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// One call on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub struct GuestCall {
    pub tool: String,
    #[serde(default)]
    pub arguments: JsonObject,
}

/// The socket, when this process runs inside a kitbag-vm instance.
pub fn socket() -> Option<PathBuf> {
    std::env::var_os(SOCKET_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Call `tool` on the kitbag-vm that runs this instance.
pub async fn call(
    socket: &Path,
    tool: &str,
    arguments: JsonObject,
) -> std::io::Result<CallToolResult> {
    let stream = UnixStream::connect(socket).await?;
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(&GuestCall {
        tool: tool.to_string(),
        arguments,
    })?;
    line.push(b'\n');
    write.write_all(&line).await?;
    write.flush().await?;
    let mut answer = Vec::new();
    BufReader::new(read)
        .take(MAX_ANSWER_BYTES)
        .read_until(b'\n', &mut answer)
        .await?;
    Ok(serde_json::from_slice(&answer)?)
}
