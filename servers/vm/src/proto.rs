//! The wire protocol between kitbag-vm and the agent inside each instance.
//!
//! One operation per connection to the instance's unix socket: the client writes one JSON
//! header line ([`Request`]), then the operation's raw bytes (stdin, file content); the agent
//! answers with one JSON line ([`Answer`]) or, for `exec`, with [`Frame`]s. After `connect`'s
//! answer the connection carries the guest TCP stream's bytes as they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

/// A connection to the agent: a unix socket (bubblewrap) or a TCP stream through QEMU's
/// forwarded port. One type, so every operation is written once.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}
pub type Stream = Box<dyn Duplex>;
pub type ReadHalf = tokio::io::ReadHalf<Stream>;
pub type WriteHalf = tokio::io::WriteHalf<Stream>;

/// The first line on a TCP connection to an agent (QEMU): the instance's secret, given to the
/// guest on its kernel command line. Anyone on the host can dial the forwarded port; only
/// this server knows the token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub token: String,
}

/// The longest header line accepted (argv and environment of an exec fit easily).
pub const MAX_HEADER_BYTES: usize = 1 << 20;
/// Buffer per direction of a relayed port connection (tokio's default, 8 KiB, held relayed
/// throughput to a tenth of loopback's).
pub const RELAY_BUF: usize = 256 * 1024;
/// The largest frame payload an agent sends.
pub const MAX_FRAME_BYTES: usize = 64 * 1024;

/// Where the instance's control directory is mounted inside, and the agent's socket in it.
pub const CTL_DIR: &str = "/run/kitbag";
pub const AGENT_SOCKET: &str = "agent.sock";
/// The main command's spec, written by the server before the sandbox starts.
pub const MAIN_SPEC: &str = "main.json";
/// Logs the agent writes (`main.log`, `job-N.log`, their `.exit` files).
pub const LOGS_DIR: &str = "logs";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Ping,
    Exec(ExecRequest),
    /// Dial `127.0.0.1:port` inside the instance, then relay bytes.
    Connect {
        port: u16,
    },
    /// `size` bytes follow the header: the file's content.
    CopyIn {
        path: String,
        size: u64,
        overwrite: bool,
    },
    /// A file's bytes follow the answer; with `tree`, a directory's entries (see
    /// [`crate::tree`]).
    CopyOut {
        path: String,
        max_bytes: u64,
        #[serde(default)]
        tree: bool,
    },
    /// A directory's entries follow the header (see [`crate::tree`]); written under `path`.
    CopyInTree {
        path: String,
        overwrite: bool,
        max_bytes: u64,
    },
    /// Stop the main command and every job: SIGTERM, `grace_ms`, SIGKILL; then the agent exits.
    Shutdown {
        grace_ms: u64,
    },
    /// Start the main command. The server sends it once the sandbox is checked (mounts are
    /// what was resolved), so nothing the instance runs sees a sandbox that will be refused.
    StartMain,
    /// Stop the main command (SIGTERM, grace, SIGKILL) and start it again with the same spec.
    RestartMain {
        grace_ms: u64,
    },
    /// A VM's agent only: the environment every command starts with and the main command,
    /// sent once after boot (a bubblewrap sandbox gets both from bwrap and its control
    /// directory).
    Setup {
        env: Vec<(String, String)>,
        #[serde(default)]
        main: Option<MainSpec>,
    },
    /// The logs' new bytes: for each file of the logs directory, what lies past the size the
    /// server already `has` of it (from 0 when the file is new or shorter than that), as
    /// [`LogChunk`] lines each followed by its bytes, ended by a chunk with an empty name.
    /// Logs only grow, so the server keeps a copy without moving it all again.
    LogsSince {
        #[serde(default)]
        has: BTreeMap<String, u64>,
    },
    /// Hold the connection open: when it closes (the server ended, however it ended) the
    /// agent stops every process and exits. For engines whose instances are not the server's
    /// children (a container belongs to its engine's daemon).
    Hold,
    /// A VM's agent only: answer (with `exit`) once the main command has ended. A VM's agent
    /// outlives its main command so the server can collect its logs first.
    WaitMain,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// Bytes of stdin that follow the header.
    #[serde(default)]
    pub stdin_len: u64,
    /// Run detached: output to `logs/job-<job>.log`, exit to `logs/job-<job>.exit`.
    #[serde(default)]
    pub job: Option<String>,
}

/// The main command, as the server wrote it into the control directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MainSpec {
    pub argv: Vec<String>,
    pub cwd: String,
}

/// One file's new bytes in a `logs_since` answer (`len` bytes follow the line).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogChunk {
    pub name: String,
    pub offset: u64,
    pub len: u64,
}

/// A one-line answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Machine-readable reason: `not_found`, `exists`, `too_large`, `is_dir`, `refused`, `io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// copy_out: bytes that follow; copy_in: bytes written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// copy_out: `file` or `tree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// ping / exec of a job: the pid inside the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// wait_main: how the main command ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitStatus>,
}

impl Answer {
    pub fn ok() -> Self {
        Answer {
            ok: true,
            ..Default::default()
        }
    }
    pub fn fail(code: &str, error: impl Into<String>) -> Self {
        Answer {
            ok: false,
            code: Some(code.into()),
            error: Some(error.into()),
            ..Default::default()
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExitStatus {
    /// The exit code, or 128 + signal when a signal ended it.
    pub code: i32,
    /// The signal number that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn from_std(s: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(code), _) => ExitStatus { code, signal: None },
            (None, Some(sig)) => ExitStatus {
                code: 128 + sig,
                signal: Some(sig),
            },
            (None, None) => ExitStatus {
                code: -1,
                signal: None,
            },
        }
    }
}

/// One piece of an exec's answer stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The process started (its pid inside the instance).
    Started(i32),
    Exit(ExitStatus),
    /// The process could not be started.
    Error(String),
}

const T_STDOUT: u8 = b'o';
const T_STDERR: u8 = b'e';
const T_STARTED: u8 = b's';
const T_EXIT: u8 = b'x';
const T_ERROR: u8 = b'E';

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    let (t, body): (u8, std::borrow::Cow<[u8]>) = match f {
        Frame::Stdout(b) => (T_STDOUT, b.as_slice().into()),
        Frame::Stderr(b) => (T_STDERR, b.as_slice().into()),
        Frame::Started(pid) => (T_STARTED, pid.to_string().into_bytes().into()),
        Frame::Exit(s) => (T_EXIT, serde_json::to_vec(s).unwrap_or_default().into()),
        Frame::Error(e) => (T_ERROR, e.as_bytes().into()),
    };
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut head = [0u8; 5];
    head[0] = t;
    head[1..].copy_from_slice(&len.to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(&body[..len as usize]).await?;
    Ok(())
}

/// The next frame, or `None` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME_BYTES + 1024 {
        return Err(invalid(format!("frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    let text = || String::from_utf8_lossy(&body).into_owned();
    Ok(Some(match head[0] {
        T_STDOUT => Frame::Stdout(body),
        T_STDERR => Frame::Stderr(body),
        T_STARTED => Frame::Started(text().parse().map_err(|_| invalid("bad pid"))?),
        T_EXIT => Frame::Exit(serde_json::from_slice(&body).map_err(|e| invalid(e.to_string()))?),
        T_ERROR => Frame::Error(text()),
        t => return Err(invalid(format!("unknown frame type {t}"))),
    }))
}

fn invalid(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// Write a value as one JSON line.
pub async fn write_line<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    v: &T,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(|e| invalid(e.to_string()))?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

/// Read one JSON line (at most [`MAX_HEADER_BYTES`]).
pub async fn read_line<R: AsyncBufRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> std::io::Result<T> {
    let mut line = Vec::new();
    let mut limited = r.take(MAX_HEADER_BYTES as u64 + 1);
    let n = limited.read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a header line",
        ));
    }
    if line.last() != Some(&b'\n') {
        return Err(invalid("header line too long or unterminated"));
    }
    serde_json::from_slice(&line).map_err(|e| invalid(format!("bad header: {e}")))
}

/// How an instance ended, once its engine publishes it (any engine's exit watch).
pub async fn wait_exit(exit: &tokio::sync::watch::Receiver<Option<ExitStatus>>) -> ExitStatus {
    let mut rx = exit.clone();
    let lost = ExitStatus {
        code: -1,
        signal: None,
    };
    match rx.wait_for(|s| s.is_some()).await {
        Ok(s) => s.unwrap_or(lost),
        Err(_) => lost,
    }
}

/// A one-line request and its one-line answer.
pub async fn request(stream: Stream, req: &Request) -> std::io::Result<Answer> {
    let mut s = tokio::io::BufReader::new(stream);
    write_line(&mut s, req).await?;
    read_line(&mut s).await
}

/// A request whose bytes follow its header (`body` writes them), and its one-line answer.
/// The agent may refuse (a target exists) before reading the body: its answer then matters
/// more than the broken pipe that follows.
pub async fn request_with_body<F, Fut>(
    stream: Stream,
    req: &Request,
    body: F,
) -> std::io::Result<Answer>
where
    F: FnOnce(WriteHalf) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<WriteHalf>>,
{
    let (read, mut write) = tokio::io::split(stream);
    let sent = async {
        write_line(&mut write, req).await?;
        let mut write = body(write).await?;
        write.flush().await
    }
    .await;
    // Failing here (a host file that could not be read) leaves the agent waiting for the
    // rest of the body: dropping both halves closes the connection. Only a closed connection
    // (the agent refused and hung up) sends us on to read its answer.
    let sent = match sent {
        Err(e)
            if !matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return Err(e);
        }
        other => other,
    };
    let mut read = tokio::io::BufReader::new(read);
    match read_line::<_, Answer>(&mut read).await {
        Ok(a) => Ok(a),
        Err(e) => Err(sent.err().unwrap_or(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip() {
        let frames = [
            Frame::Started(7),
            Frame::Stdout(b"hi\n".to_vec()),
            Frame::Stderr(vec![0, 255]),
            Frame::Exit(ExitStatus {
                code: 137,
                signal: Some(9),
            }),
            Frame::Error("no such file".into()),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            write_frame(&mut buf, f).await.expect("write");
        }
        let mut r = buf.as_slice();
        for f in &frames {
            assert_eq!(read_frame(&mut r).await.expect("read").as_ref(), Some(f));
        }
        assert_eq!(read_frame(&mut r).await.expect("eof"), None);
    }

    #[tokio::test]
    async fn requests_are_tagged_lines() {
        let mut buf = Vec::new();
        write_line(&mut buf, &Request::Connect { port: 8080 })
            .await
            .expect("write");
        assert_eq!(buf, b"{\"op\":\"connect\",\"port\":8080}\n");
        let mut r = tokio::io::BufReader::new(buf.as_slice());
        let back: Request = read_line(&mut r).await.expect("read");
        assert!(matches!(back, Request::Connect { port: 8080 }));
    }

    #[tokio::test]
    async fn an_unterminated_header_is_refused() {
        let mut r = tokio::io::BufReader::new(&b"{\"op\":\"ping\"}"[..]);
        assert!(read_line::<_, Request>(&mut r).await.is_err());
    }
}
