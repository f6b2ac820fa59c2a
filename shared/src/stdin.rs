//! A server's stdin as an async reader that never holds the process at exit, whatever the
//! client gave it.
//!
//! rmcp reads a FIFO stdin non-blocking (its own reopened description), and anything else
//! with tokio's `stdin()`: a read on a blocking-pool thread that only returns when data or EOF
//! comes. On a Unix socket — Claude Code's stdio — or a terminal that thread is still waiting
//! when the server is told to stop, and the runtime's shutdown waits its whole grace for it.
//! So those two are read through the runtime's reactor instead:
//! - a socket as a non-blocking stream (the client's end is the client's own description; ours
//!   is only read by this process — children get their own stdin);
//! - a terminal through a description of its own (`/proc/self/fd/0` reopened `O_NONBLOCK`),
//!   so the terminal the user's shell reads stays blocking.
//!
//! A regular file and `/dev/null` answer every read at once: rmcp's reader is right for them.

use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::transport::io::{StdioReader, StdioWriter};
use rustix::fs::{FileType, Mode, OFlags};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// The process's stdin, read without a blocking thread wherever that is possible.
pub enum Stdin {
    /// A FIFO (non-blocking), a regular file or `/dev/null`: rmcp's reader.
    Rmcp(StdioReader),
    /// A socket, read as a non-blocking stream.
    Socket(UnixStream),
    /// A terminal, through a non-blocking description of its own.
    Terminal(pipe::Receiver),
}

/// stdin and stdout for a stdio server. Must be called inside a tokio runtime.
pub fn stdio() -> (Stdin, StdioWriter) {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    (Stdin::choose(reader), writer)
}

impl Stdin {
    fn choose(rmcp: StdioReader) -> Stdin {
        let stdin = io::stdin();
        let kind = rustix::fs::fstat(stdin.as_fd()).map(|st| FileType::from_raw_mode(st.st_mode));
        let reactor = match kind {
            Ok(FileType::Socket) => socket().map(Stdin::Socket),
            Ok(FileType::CharacterDevice) if stdin.is_terminal() => terminal().map(Stdin::Terminal),
            _ => return Stdin::Rmcp(rmcp),
        };
        reactor.unwrap_or_else(|e| {
            tracing::debug!("stdin cannot be polled ({e}); reading it on a blocking thread");
            Stdin::Rmcp(rmcp)
        })
    }
}

fn socket() -> io::Result<UnixStream> {
    let fd = io::stdin().as_fd().try_clone_to_owned()?;
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    UnixStream::from_std(stream)
}

fn terminal() -> io::Result<pipe::Receiver> {
    let path = format!("/proc/self/fd/{}", io::stdin().as_raw_fd());
    let fd = rustix::fs::open(
        path.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Not a FIFO, but read the same way: a non-blocking descriptor the reactor polls.
    pipe::Receiver::from_file_unchecked(std::fs::File::from(fd))
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdin::Rmcp(r) => Pin::new(r).poll_read(cx, buf),
            Stdin::Socket(s) => Pin::new(s).poll_read(cx, buf),
            Stdin::Terminal(t) => Pin::new(t).poll_read(cx, buf),
        }
    }
}

/// A pipe or socket the runtime polls, written without a blocking thread (rmcp's writer takes
/// the blocking pool for a socket stdout): the host's stdout and its children's stdin.
pub enum PolledWriter {
    Pipe(pipe::Sender),
    Socket(UnixStream),
}

impl PolledWriter {
    /// Write what the descriptor takes now; `WouldBlock` when it takes nothing.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PolledWriter::Pipe(p) => p.try_write(buf),
            PolledWriter::Socket(s) => s.try_write(buf),
        }
    }

    /// Wait until the descriptor takes more.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            PolledWriter::Pipe(p) => p.writable().await,
            PolledWriter::Socket(s) => s.writable().await,
        }
    }

    /// A child's stdin (a pipe).
    pub fn child_stdin(stdin: tokio::process::ChildStdin) -> io::Result<PolledWriter> {
        pipe::Sender::from_owned_fd(stdin.into_owned_fd()?).map(PolledWriter::Pipe)
    }
}

/// stdout when it is a FIFO — through a description of its own (`/proc/self/fd/1` reopened
/// `O_NONBLOCK`), so the stream children inherit stays blocking — or a socket (a non-blocking
/// copy); None for anything else (a terminal, a file, or one that cannot be polled). Must be
/// called inside a tokio runtime.
pub fn polled_stdout() -> Option<PolledWriter> {
    let stdout = io::stdout();
    let kind = rustix::fs::fstat(stdout.as_fd()).map(|st| FileType::from_raw_mode(st.st_mode));
    match kind.ok()? {
        FileType::Fifo => {
            let path = format!("/proc/self/fd/{}", stdout.as_raw_fd());
            let fd = rustix::fs::open(
                path.as_str(),
                OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            pipe::Sender::from_owned_fd(fd).ok().map(PolledWriter::Pipe)
        }
        FileType::Socket => {
            let fd = stdout.as_fd().try_clone_to_owned().ok()?;
            let stream = std::os::unix::net::UnixStream::from(fd);
            stream.set_nonblocking(true).ok()?;
            UnixStream::from_std(stream).ok().map(PolledWriter::Socket)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A socket read through the reactor ends at the peer's shutdown, and a read waiting on
    /// it is cancelled at once (no thread left blocked).
    #[tokio::test]
    async fn a_socket_is_read_without_a_blocking_thread() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
        theirs.set_nonblocking(true).expect("nonblocking");
        let mut stdin = Stdin::Socket(UnixStream::from_std(theirs).expect("stream"));
        use std::io::Write;
        (&ours).write_all(b"{\"a\":1}\n").expect("write");
        let mut got = [0u8; 64];
        let n = stdin.read(&mut got).await.expect("read");
        assert_eq!(&got[..n], b"{\"a\":1}\n");
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(20), stdin.read(&mut got)).await;
        assert!(waiting.is_err(), "nothing to read: the read waits");
        ours.shutdown(std::net::Shutdown::Write).expect("shutdown");
        assert_eq!(stdin.read(&mut got).await.expect("eof"), 0);
    }
}
