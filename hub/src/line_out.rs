//! One pipe or socket written a line at a time by many senders: the host's stdout (rmcp's
//! answers and the byte path's) and each child's stdin.
//!
//! A sender writes its line itself, at once, when nothing is queued before it and the
//! descriptor takes it whole — a forwarded call reaches its child, and an answer its client,
//! without waiting for a writer task's turn (a task hop per message cost ~4 µs in a relay
//! measured both ways). Whatever the descriptor does not take is queued, and one writer task
//! writes the queue when it becomes writable. Lines never interleave: a direct write happens
//! only with the queue empty, under the queue's lock.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kitbag_shared::lock::LockExt;
use kitbag_shared::stdin::PolledWriter;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// One message with its newline.
pub type Line = Vec<u8>;

struct Queue {
    lines: VecDeque<Line>,
    /// How much of the front line is already written.
    written: usize,
    /// The writer task has a line out of the queue and is writing it (generic writers only).
    busy: bool,
    /// The descriptor failed or the writer stopped: nothing more is taken.
    closed: bool,
}

struct Shared {
    queue: std::sync::Mutex<Queue>,
    direct: Option<PolledWriter>,
    wake: Notify,
    senders: AtomicUsize,
}

/// A sender of whole lines (each ends with its newline). Clones share the descriptor; when
/// the last one is dropped, the writer writes what is queued and closes it.
pub struct LineOut {
    shared: Arc<Shared>,
}

/// The descriptor is closed: the line was not taken.
#[derive(Debug)]
pub struct Closed;

impl Clone for LineOut {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        LineOut {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for LineOut {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.wake.notify_one();
        }
    }
}

impl LineOut {
    /// Write `line` now if it can be, else queue it for the writer task.
    pub fn send(&self, line: Line) -> Result<(), Closed> {
        let mut q = self.shared.queue.locked();
        if q.closed {
            return Err(Closed);
        }
        if q.lines.is_empty()
            && !q.busy
            && let Some(direct) = &self.shared.direct
        {
            match write_some(direct, &line) {
                Ok(n) if n == line.len() => return Ok(()),
                Ok(n) => q.written = n,
                Err(_) => {
                    q.closed = true;
                    return Err(Closed);
                }
            }
        }
        q.lines.push_back(line);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }
}

/// Write what the descriptor takes now (0 when it takes nothing).
fn write_some(direct: &PolledWriter, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match direct.try_write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A line sender over `direct`, and its writer task. Once `finish` resolves (or the last
/// sender is gone) the writer writes what is queued and stops.
pub fn direct(
    direct: PolledWriter,
    finish: impl Future<Output = ()> + Send + 'static,
) -> (LineOut, tokio::task::JoinHandle<()>) {
    let shared = new_shared(Some(direct));
    let task = tokio::spawn(write_direct(shared.clone(), finish));
    (LineOut { shared }, task)
}

/// A line sender over any writer: every line goes through the writer task.
pub fn queued<W: AsyncWrite + Unpin + Send + 'static>(
    w: W,
    finish: impl Future<Output = ()> + Send + 'static,
) -> (LineOut, tokio::task::JoinHandle<()>) {
    let shared = new_shared(None);
    let task = tokio::spawn(write_queued(shared.clone(), w, finish));
    (LineOut { shared }, task)
}

fn new_shared(direct: Option<PolledWriter>) -> Arc<Shared> {
    Arc::new(Shared {
        queue: std::sync::Mutex::new(Queue {
            lines: VecDeque::new(),
            written: 0,
            busy: false,
            closed: false,
        }),
        direct,
        wake: Notify::new(),
        senders: AtomicUsize::new(1),
    })
}

/// What the writer does next.
enum Next {
    /// Wait for a sender (or for `finish`).
    Idle,
    /// Wait until the descriptor takes more.
    Blocked,
    Stop,
}

async fn write_direct(shared: Arc<Shared>, finish: impl Future<Output = ()>) {
    let Some(direct) = &shared.direct else {
        return;
    };
    tokio::pin!(finish);
    let mut finishing = false;
    loop {
        let next = {
            let mut q = shared.queue.locked();
            loop {
                let written = q.written;
                let Some(front) = q.lines.front() else {
                    break if finishing || shared.senders.load(Ordering::Acquire) == 0 {
                        Next::Stop
                    } else {
                        Next::Idle
                    };
                };
                match write_some(direct, &front[written..]) {
                    Ok(n) if written + n == front.len() => {
                        q.lines.pop_front();
                        q.written = 0;
                    }
                    Ok(n) => {
                        q.written = written + n;
                        break Next::Blocked;
                    }
                    Err(_) => break Next::Stop,
                }
            }
        };
        match next {
            Next::Stop => break,
            Next::Blocked => {
                if direct.writable().await.is_err() {
                    break;
                }
            }
            Next::Idle => {
                tokio::select! {
                    () = shared.wake.notified() => {}
                    () = &mut finish, if !finishing => finishing = true,
                }
            }
        }
    }
    close(&shared);
}

async fn write_queued<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    mut w: W,
    finish: impl Future<Output = ()>,
) {
    tokio::pin!(finish);
    let mut finishing = false;
    loop {
        let line = {
            let mut q = shared.queue.locked();
            let line = q.lines.pop_front();
            q.busy = line.is_some();
            line
        };
        let Some(line) = line else {
            if finishing || shared.senders.load(Ordering::Acquire) == 0 {
                break;
            }
            // Flush before waiting, so a burst costs one flush.
            if w.flush().await.is_err() {
                break;
            }
            tokio::select! {
                () = shared.wake.notified() => {}
                () = &mut finish, if !finishing => finishing = true,
            }
            continue;
        };
        let wrote = w.write_all(&line).await;
        shared.queue.locked().busy = false;
        if wrote.is_err() {
            break;
        }
    }
    let _ = w.flush().await;
    close(&shared);
}

/// Nothing more is taken; what is queued is dropped.
fn close(shared: &Shared) {
    let mut q = shared.queue.locked();
    q.closed = true;
    q.lines.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;

    use tokio::net::unix::pipe;

    fn pipe_pair() -> (PolledWriter, pipe::Receiver) {
        let (tx, rx) = pipe::pipe().expect("a pipe");
        (PolledWriter::Pipe(tx), rx)
    }

    #[tokio::test]
    async fn lines_arrive_whole_and_in_order_past_a_full_pipe() {
        let (direct, rx) = pipe_pair();
        let (out, task) = super::direct(direct, std::future::pending());
        // 64 KB of pipe: most of these wait in the queue for the reader.
        let lines: Vec<Line> = (0..200)
            .map(|i| format!("{i:04} {}\n", "x".repeat(2000)).into_bytes())
            .collect();
        let reader = tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(rx).lines();
            let mut got = Vec::new();
            while let Ok(Some(l)) = r.next_line().await {
                got.push(l);
            }
            got
        });
        for l in &lines {
            out.send(l.clone()).expect("taken");
        }
        drop(out);
        task.await.expect("the writer ends");
        let got = reader.await.expect("read");
        assert_eq!(got.len(), lines.len());
        for (i, l) in got.iter().enumerate() {
            assert!(
                l.starts_with(&format!("{i:04} ")) && l.len() == 2005,
                "line {i}: {l:.20}"
            );
        }
    }

    #[tokio::test]
    async fn a_line_is_written_by_its_sender_when_nothing_waits() {
        // A plain pipe, read blocking: the second line must be in it before this
        // (single-threaded) runtime gives the writer task a turn. The first goes through the
        // writer task: the runtime knows the pipe writable only once its reactor has polled it.
        let (mut reader, writer) = std::io::pipe().expect("a pipe");
        let tx = pipe::Sender::from_owned_fd(writer.into()).expect("a sender");
        let (out, _task) = super::direct(PolledWriter::Pipe(tx), std::future::pending());
        let mut got = [0u8; 16];
        out.send(b"first\n".to_vec()).expect("taken");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let n = std::io::Read::read(&mut reader, &mut got).expect("read");
        assert_eq!(&got[..n], b"first\n");
        out.send(b"second\n".to_vec()).expect("taken");
        // Read without waiting: a line left to the writer task is not there yet.
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        fcntl(&reader, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("non-blocking");
        let n = std::io::Read::read(&mut reader, &mut got).expect("the line is there");
        assert_eq!(&got[..n], b"second\n");
    }

    #[tokio::test]
    async fn a_closed_reader_makes_sends_fail() {
        let (direct, rx) = pipe_pair();
        let (out, _task) = super::direct(direct, std::future::pending());
        drop(rx);
        let mut refused = false;
        for _ in 0..100 {
            if out.send(b"x\n".to_vec()).is_err() {
                refused = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(refused, "sends to a pipe nobody reads still succeed");
    }

    #[tokio::test]
    async fn finish_writes_what_is_queued_then_stops() {
        let (direct, rx) = pipe_pair();
        let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
        let (out, task) = super::direct(direct, async move {
            let _ = finish_rx.await;
        });
        let big = vec![b'y'; 200_000];
        let mut line = big.clone();
        line.push(b'\n');
        out.send(line).expect("taken");
        let _ = finish_tx.send(());
        let reader = tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(rx);
            let mut got = Vec::new();
            r.read_until(b'\n', &mut got).await.expect("read");
            got
        });
        task.await.expect("the writer ends");
        assert_eq!(reader.await.expect("read").len(), big.len() + 1);
        // `out` still exists: the writer stopped because it was told to.
        assert!(out.send(b"late\n".to_vec()).is_err());
    }

    #[tokio::test]
    async fn a_generic_writer_gets_every_line() {
        let (a, b) = tokio::io::duplex(1 << 10);
        let (out, task) = super::queued(a, std::future::pending());
        for i in 0..50 {
            out.send(format!("{i}\n").into_bytes()).expect("taken");
        }
        drop(out);
        task.await.expect("the writer ends");
        let mut r = tokio::io::BufReader::new(b).lines();
        let mut n = 0;
        while let Ok(Some(l)) = r.next_line().await {
            assert_eq!(l, n.to_string());
            n += 1;
        }
        assert_eq!(n, 50);
    }
}
