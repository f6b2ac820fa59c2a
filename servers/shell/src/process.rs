//! A command running in its own PTY session, its output streamed to a log file.
//!
//! portable-pty makes the shell a session and process-group leader (`setsid`), so the tree
//! it starts — `&` jobs and `nohup` children included — shares its process group. Processes
//! that leave the group (`setsid -f`, `setpgid(0, 0)`) are still found through the command's
//! containment ([`kitbag_shared::contain`]: a cgroup where writable, else the subreaper and
//! the `KITBAG_JOB` environment tag); [`Running::terminate`] stops both.

use kitbag_shared::lock::LockExt;
use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::contain::{self, ChildReg};
use kitbag_shared::process::{Stoppable, signal_group};

use crate::logs::{CappedLog, LogDir};
use nix::sys::signal::Signal;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub signal: Option<String>,
}

/// Output captured so far: the stream goes to the (capped) log file; the first and last bytes
/// are also kept in memory for the preview.
pub struct Capture {
    pub log_path: PathBuf,
    pub log: CappedLog,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    pub total: u64,
    pub eof: bool,
    head_cap: usize,
    tail_cap: usize,
}

impl Capture {
    fn push(&mut self, bytes: &[u8]) {
        self.log.write(bytes);
        self.total += bytes.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        for &b in rest {
            if self.tail.len() == self.tail_cap {
                self.tail.pop_front();
            }
            self.tail.push_back(b);
        }
    }

    /// The whole output if it fit, else head + tail; and whether anything was left out.
    pub fn preview(&self) -> (Vec<u8>, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let mut out = self.head.clone();
        if kept >= self.total {
            out.extend(self.tail.iter());
            return (out, false);
        }
        let elided = self.total - kept;
        let where_ = if self.log.dropped() > 0 {
            "the log file keeps the first and last part of the output"
        } else {
            "the full output is in the log file"
        };
        out.extend_from_slice(format!("\n… [{elided} bytes elided; {where_}] …\n").as_bytes());
        out.extend(self.tail.iter());
        (out, true)
    }
}

pub struct Running {
    pub pid: i32,
    pub capture: Arc<Mutex<Capture>>,
    exit_rx: Mutex<Receiver<Exit>>,
    reader_rx: Mutex<Receiver<()>>,
    pub started: Instant,
    /// Every process of the command, wherever it moved.
    pub contain: contain::Job,
    /// Keeps the PTY open for the session's lifetime.
    _master: Mutex<Box<dyn portable_pty::MasterPty + Send>>,
}

pub struct SpawnSpec<'a> {
    pub command: &'a str,
    /// The working directory as an open descriptor (see [`spawn`]).
    pub cwd: BorrowedFd<'a>,
    pub env: &'a [(String, String)],
    pub log_path: PathBuf,
    pub preview_bytes: usize,
    /// Head and tail kept of the log ([`crate::logs::split_cap`]).
    pub log_caps: (u64, u64),
    /// Told when the log is complete, so that it may be pruned.
    pub logs: Arc<LogDir>,
}

pub fn spawn(spec: SpawnSpec<'_>) -> anyhow::Result<Running> {
    // Marked as being written from before the file exists until its output ends (or the
    // spawn fails), so that pruning never takes it.
    spec.logs.begin(&spec.log_path);
    let (logs, log_path) = (spec.logs.clone(), spec.log_path.clone());
    spawn_logged(spec).inspect_err(|_| logs.end(&log_path))
}

fn spawn_logged(spec: SpawnSpec<'_>) -> anyhow::Result<Running> {
    let pty = native_pty_system();
    let pair = pty.openpty(PtySize {
        rows: 50,
        cols: 200,
        pixel_width: 0,
        pixel_height: 0,
    })?;
    let job = contain::container("shell").job();
    let cmd = shell_command(&spec, &job);
    if let Some(dir) = spec.log_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = CappedLog::create(&spec.log_path, spec.log_caps.0, spec.log_caps.1)?;
    // Registered under the reaper's lock: the orphan reaper never takes this child's status.
    let (child, pid, reg) = {
        let mut children = ChildReg::lock();
        let child = pair.slave.spawn_command(cmd)?;
        let pid = child
            .process_id()
            .map(|p| p as i32)
            .ok_or_else(|| anyhow::anyhow!("spawned process has no pid"))?;
        let reg = ChildReg::register(&mut children, pid);
        (child, pid, reg)
    };
    job.attach(pid);
    drop(pair.slave); // only the child holds the terminal now: EOF when it (and its tree) close it
    let reader = pair.master.try_clone_reader()?;
    let half = spec.preview_bytes / 2;
    let capture = Arc::new(Mutex::new(Capture {
        log_path: spec.log_path.clone(),
        log,
        head: Vec::new(),
        tail: VecDeque::new(),
        total: 0,
        eof: false,
        head_cap: half,
        tail_cap: spec.preview_bytes - half,
    }));
    let reader_rx = read_output(reader, capture.clone(), spec.logs.clone(), spec.log_path);
    let exit_rx = wait_exit(child, reg);
    Ok(Running {
        pid,
        capture,
        exit_rx: Mutex::new(exit_rx),
        reader_rx: Mutex::new(reader_rx),
        started: Instant::now(),
        contain: job,
        _master: Mutex::new(pair.master),
    })
}

/// `sh -c` with the command, in the working directory, with a plain terminal's environment.
fn shell_command(spec: &SpawnSpec<'_>, job: &contain::Job) -> CommandBuilder {
    let mut cmd = CommandBuilder::new("/bin/sh");
    cmd.arg("-c");
    // Stdin at end-of-file: a program waiting for input sees EOF instead of hanging until the
    // timeout. Output still goes to the terminal. Same line, so sh's line numbers are unchanged.
    // Before anything else the shell moves itself into the job's cgroup (when there is one).
    cmd.arg(format!(
        "{}exec </dev/null; {}",
        job.shell_prefix(),
        spec.command
    ));
    // The child changes into the descriptor's directory itself: the standard library's
    // `chdir` runs in the forked child before `exec`, while this descriptor (close-on-exec)
    // is still open there, and `/proc/self/fd/N` names exactly the directory it holds — not
    // whatever its path leads to by now. `fchdir` in a `pre_exec` hook would do the same, but
    // portable-pty offers no hook.
    cmd.cwd(format!("/proc/self/fd/{}", spec.cwd.as_raw_fd()));
    // A plain terminal: no colours, no pagers waiting for a key press.
    for (k, v) in [
        ("TERM", "dumb"),
        ("NO_COLOR", "1"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
        ("GIT_TERMINAL_PROMPT", "0"),
    ] {
        cmd.env(k, v);
    }
    cmd.env_remove(kitbag_shared::process::HOST_DEPTH_VAR);
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    // After the caller's variables: a command cannot choose its own tag.
    let (k, v) = job.env();
    cmd.env(k, v);
    cmd
}

/// Copy the terminal's output into `capture` until EOF, on a thread; the receiver hears
/// when the log is complete.
fn read_output(
    mut reader: Box<dyn Read + Send>,
    cap: Arc<Mutex<Capture>>,
    logs: Arc<LogDir>,
    log_path: PathBuf,
) -> Receiver<()> {
    let (reader_tx, reader_rx) = channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break, // EOF, or EIO once every holder of the terminal closed it
                Ok(n) => cap.locked().push(&buf[..n]),
            }
        }
        {
            let mut c = cap.locked();
            c.log.finish();
            c.eof = true;
        }
        logs.end(&log_path);
        let _ = reader_tx.send(());
    });
    reader_rx
}

/// Wait for the child on a thread (its registration with the reaper ends with the wait).
fn wait_exit(
    mut child: Box<dyn portable_pty::Child + Send + Sync>,
    reg: ChildReg,
) -> Receiver<Exit> {
    let (exit_tx, exit_rx) = channel();
    std::thread::spawn(move || {
        let status = child.wait();
        drop(reg);
        let exit = match status {
            Ok(s) => match s.signal() {
                Some(name) => Exit {
                    code: 128 + signal_number(name),
                    signal: Some(name.to_string()),
                },
                None => Exit {
                    code: s.exit_code() as i32,
                    signal: None,
                },
            },
            Err(_) => Exit {
                code: -1,
                signal: None,
            },
        };
        let _ = exit_tx.send(exit);
    });
    exit_rx
}

fn signal_number(name: &str) -> i32 {
    match name {
        "Hangup" => 1,
        "Interrupt" => 2,
        "Quit" => 3,
        "Aborted" => 6,
        "Killed" => 9,
        "Segmentation fault" => 11,
        "Broken pipe" => 13,
        "Alarm clock" => 14,
        "Terminated" => 15,
        _ => 0,
    }
}

/// Why waiting stopped.
pub enum Waited {
    Exited(Exit),
    TimedOut,
    Cancelled,
}

impl Running {
    /// Wait for the shell to exit, the deadline, or `cancelled()` to turn true.
    pub fn wait(&self, deadline: Instant, cancelled: &dyn Fn() -> bool) -> Waited {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Waited::TimedOut;
            }
            let slice = (deadline - now).min(Duration::from_millis(50));
            match self.exit_rx.locked().recv_timeout(slice) {
                Ok(exit) => return Waited::Exited(exit),
                Err(RecvTimeoutError::Disconnected) => {
                    return Waited::Exited(Exit {
                        code: -1,
                        signal: None,
                    });
                }
                Err(RecvTimeoutError::Timeout) => {
                    if cancelled() {
                        return Waited::Cancelled;
                    }
                }
            }
        }
    }

    /// Non-blocking: the exit, if the shell has ended.
    pub fn try_exit(&self) -> Option<Exit> {
        self.exit_rx.locked().try_recv().ok()
    }

    /// Block until the shell's exit is known (after a kill).
    pub fn wait_exit(&self, limit: Duration) -> Option<Exit> {
        self.exit_rx.locked().recv_timeout(limit).ok()
    }

    /// Whether any process of the command (shell, group, escaped descendants) is alive.
    pub fn alive(&self) -> bool {
        group_alive(self.pid) || self.contain.alive()
    }

    /// SIGTERM every process of the command, `grace` to exit, then SIGKILL what is left —
    /// the process group and everything the containment finds outside it. True when the
    /// grace ran out.
    pub fn terminate(&self, grace: Duration) -> bool {
        let overdue = kitbag_shared::process::stop(self, grace);
        // Whatever is left (or raced in), then the cgroup is removed and orphans reaped.
        self.contain.kill();
        overdue
    }

    /// Let the reader drain what the terminal still holds (bounded).
    pub fn drain(&self, limit: Duration) {
        let _ = self.reader_rx.locked().recv_timeout(limit);
    }
}

pub use kitbag_shared::process::group_alive;

/// A command is every process of it: its group and what escaped it (shared's stop sequence).
impl Stoppable for Running {
    fn signal(&self, signal: Signal) {
        signal_group(self.pid, signal);
        self.contain.signal(signal);
    }

    fn alive(&self) -> bool {
        Running::alive(self)
    }
}
