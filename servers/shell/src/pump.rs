//! Moving a command along: its terminal's output into the log and the preview, its shell's
//! exit status out of the kernel — both from one `poll` on the terminal and a pidfd.
//!
//! A foreground command is pumped by the thread that waits for it (the call's own blocking
//! thread: no thread started, no hand-off per event; issue #43); a background job by a thread
//! of its own. Either way the result lands in [`Shared`], where any thread can wait for it.

use kitbag_shared::lock::LockExt;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::contain::ChildReg;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rustix::event::{PollFd, PollFlags};

use crate::logs::{CappedLog, LogDir};
use crate::screen::Screen;

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
    /// The terminal's screen as the output left it.
    pub screen: Screen,
    head_cap: usize,
    tail_cap: usize,
}

impl Capture {
    /// An empty capture writing `log`, keeping `preview_bytes` (head + tail) in memory and the
    /// screen of a `rows` × `cols` terminal.
    pub fn new(
        log_path: PathBuf,
        log: CappedLog,
        preview_bytes: usize,
        (rows, cols): (u16, u16),
    ) -> Capture {
        let half = preview_bytes / 2;
        Capture {
            log_path,
            log,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            eof: false,
            screen: Screen::new(rows, cols),
            head_cap: half,
            tail_cap: preview_bytes - half,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.log.write(bytes);
        self.screen.feed(bytes);
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

/// What is known of the command so far.
#[derive(Debug, Default, Clone)]
pub struct Status {
    /// The shell's exit, once reaped.
    pub exit: Option<Exit>,
    /// The terminal reached end-of-file (every process holding it closed it); the log is
    /// complete.
    pub eof: bool,
}

/// The status, and a condition variable told of every change.
#[derive(Default)]
pub struct Shared {
    status: Mutex<Status>,
    changed: Condvar,
}

impl Shared {
    pub fn status(&self) -> Status {
        self.status.locked().clone()
    }

    /// Block until `cond` holds or `deadline` passes (for a status another thread moves on).
    pub fn wait_until(&self, deadline: Instant, cond: impl Fn(&Status) -> bool) -> bool {
        let mut s = self.status.locked();
        loop {
            if cond(&s) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = match self.changed.wait_timeout(s, deadline - now) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.locked());
        self.changed.notify_all();
    }
}

/// Reads at most this many chunks per step, so that a flood cannot keep a step from
/// noticing the exit or a deadline.
const READS_PER_STEP: usize = 16;

/// Without a pidfd (kernel before 5.3), the exit is polled this often.
const NO_PIDFD_SLICE: Duration = Duration::from_millis(10);

/// One command's terminal and shell, moved along by [`Pump::step`].
pub struct Pump {
    /// The terminal's server side, non-blocking.
    master: File,
    /// Readable once the shell exited; `None` where pidfds are unavailable, or once reaped.
    pidfd: Option<OwnedFd>,
    pid: i32,
    /// Keeps the orphan reaper off the shell's status until it is reaped here.
    reg: Option<ChildReg>,
    capture: Arc<Mutex<Capture>>,
    logs: Arc<LogDir>,
    log_path: PathBuf,
    shared: Arc<Shared>,
    buf: Vec<u8>,
    eof: bool,
    exited: bool,
}

impl Pump {
    /// Pump `pid` (registered as `reg`) and the terminal `master` (non-blocking, see
    /// [`crate::spawn::Pty`]) into `capture`; the log is handed back to `logs` at end-of-file.
    pub fn new(
        master: OwnedFd,
        pid: i32,
        reg: ChildReg,
        capture: Arc<Mutex<Capture>>,
        logs: Arc<LogDir>,
        shared: Arc<Shared>,
    ) -> Pump {
        let log_path = capture.locked().log_path.clone();
        // Nobody else waits for (or reaps) the shell while it is registered, so the pid
        // still names it here.
        let pidfd = rustix::process::Pid::from_raw(pid).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        Pump {
            master: File::from(master),
            pidfd,
            pid,
            reg: Some(reg),
            capture,
            logs,
            log_path,
            shared,
            buf: vec![0u8; 64 * 1024],
            eof: false,
            exited: false,
        }
    }

    /// Both ends reached: the output ended and the shell was reaped.
    pub fn done(&self) -> bool {
        self.eof && self.exited
    }

    /// Wait up to `timeout` for output or the shell's exit, and take in what came.
    pub fn step(&mut self, timeout: Duration) {
        if self.done() {
            return;
        }
        let timeout = match &self.pidfd {
            None if !self.exited => timeout.min(NO_PIDFD_SLICE),
            _ => timeout,
        };
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos().into(),
        };
        let (mut out_ready, mut exit_ready) = (false, self.pidfd.is_none() && !self.exited);
        {
            let mut fds = Vec::with_capacity(2);
            if !self.eof {
                fds.push(PollFd::new(&self.master, PollFlags::IN));
            }
            let pid_slot = match &self.pidfd {
                Some(p) if !self.exited => {
                    fds.push(PollFd::from_borrowed_fd(p.as_fd(), PollFlags::IN));
                    Some(fds.len() - 1)
                }
                _ => None,
            };
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) => {
                    if !self.eof {
                        out_ready = !fds[0].revents().is_empty();
                    }
                    if let Some(i) = pid_slot {
                        exit_ready = !fds[i].revents().is_empty();
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => (out_ready, exit_ready) = (!self.eof, !self.exited),
            }
        }
        if out_ready {
            self.read_ready();
        }
        if exit_ready {
            self.reap();
        }
    }

    /// Pump until both ends are reached (a background job's thread; a dropped command's
    /// remainder).
    pub fn run_to_end(mut self) {
        while !self.done() {
            self.step(Duration::from_secs(60));
        }
    }

    fn read_ready(&mut self) {
        for _ in 0..READS_PER_STEP {
            match self.master.read(&mut self.buf) {
                Ok(0) => return self.end_of_output(),
                Ok(n) => self.capture.locked().push(&self.buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EIO once every holder of the terminal closed it.
                Err(_) => return self.end_of_output(),
            }
        }
    }

    fn end_of_output(&mut self) {
        {
            let mut c = self.capture.locked();
            c.log.finish();
            c.eof = true;
        }
        self.eof = true;
        self.logs.end(&self.log_path);
        self.shared.update(|s| s.eof = true);
    }

    /// Reap the shell if it exited.
    fn reap(&mut self) {
        let exit = match waitpid(Pid::from_raw(self.pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => Exit { code, signal: None },
            Ok(WaitStatus::Signaled(_, sig, _)) => Exit {
                code: 128 + sig as i32,
                signal: Some(signal_name(sig as i32)),
            },
            Err(nix::errno::Errno::EINTR) | Ok(_) => return,
            Err(_) => Exit {
                code: -1,
                signal: None,
            },
        };
        self.exited = true;
        self.pidfd = None;
        self.reg = None;
        self.shared.update(|s| s.exit = Some(exit));
    }
}

/// The signal's description as `strsignal` gives it (what answers have always shown).
fn signal_name(n: i32) -> String {
    let name = match n {
        1 => "Hangup",
        2 => "Interrupt",
        3 => "Quit",
        4 => "Illegal instruction",
        5 => "Trace/breakpoint trap",
        6 => "Aborted",
        7 => "Bus error",
        8 => "Floating point exception",
        9 => "Killed",
        10 => "User defined signal 1",
        11 => "Segmentation fault",
        12 => "User defined signal 2",
        13 => "Broken pipe",
        14 => "Alarm clock",
        15 => "Terminated",
        _ => return format!("Signal {n}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::{self, Pty};
    use std::ffi::CString;

    /// `sh -c script` in a terminal, pumped here until both ends; its status and output.
    fn run(script: &str, without_pidfd: bool) -> (Status, Vec<u8>) {
        let d = tempfile::tempdir().expect("tmp");
        let log_path = d.path().join("t.log");
        let logs = Arc::new(LogDir::new(d.path().to_path_buf(), 10, 0, 0));
        logs.begin(&log_path);
        let log = CappedLog::create(&log_path, 1 << 23, 1 << 23).expect("log");
        let capture = Arc::new(Mutex::new(Capture::new(
            log_path.clone(),
            log,
            4096,
            (24, 80),
        )));
        let pty = Pty::open(24, 80).expect("pty");
        let cwd = File::open(d.path()).expect("cwd");
        let argv = [
            c"/bin/sh".to_owned(),
            c"-c".to_owned(),
            CString::new(script).expect("c"),
        ];
        let envp = [c"PATH=/usr/bin:/bin".to_owned()];
        let (pid, reg) = {
            let mut children = ChildReg::lock();
            let pid = spawn::spawn(&spawn::Spec {
                program: c"/bin/sh",
                argv: &argv,
                envp: &envp,
                tty: pty.tty.as_fd(),
                cwd: cwd.as_fd(),
            })
            .expect("spawn");
            (pid, ChildReg::register(&mut children, pid))
        };
        drop(pty.tty);
        let shared = Arc::new(Shared::default());
        let mut pump = Pump::new(pty.master, pid, reg, capture.clone(), logs, shared.clone());
        if without_pidfd {
            pump.pidfd = None;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pump.done() && Instant::now() < deadline {
            pump.step(Duration::from_millis(100));
        }
        assert!(pump.done(), "{:?}", shared.status());
        let out = std::fs::read(&log_path).expect("read log");
        let (preview, cut) = capture.locked().preview();
        assert!(cut || preview == out, "the preview is the log when it fits");
        (shared.status(), out)
    }

    #[test]
    fn output_and_exit_are_taken_in_from_one_poll() {
        for without_pidfd in [false, true] {
            let (s, out) = run("echo out; echo err >&2; exit 3", without_pidfd);
            assert_eq!(
                s.exit,
                Some(Exit {
                    code: 3,
                    signal: None
                })
            );
            assert!(s.eof);
            assert_eq!(out, b"out\r\nerr\r\n");
            let (s, _) = run("kill -TERM $$", without_pidfd);
            assert_eq!(
                s.exit,
                Some(Exit {
                    code: 143,
                    signal: Some("Terminated".into())
                })
            );
        }
    }

    #[test]
    fn a_flood_is_read_in_bounded_steps() {
        let (s, out) = run("head -c 3000000 /dev/zero | tr '\\0' x", false);
        assert_eq!(s.exit.map(|e| e.code), Some(0));
        assert_eq!(out.len(), 3_000_000);
        assert!(out.iter().all(|&b| b == b'x'));
    }
}
