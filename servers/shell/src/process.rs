//! A command running in its own PTY session, its output streamed to a log file.
//!
//! The shell is started with `posix_spawn` ([`crate::spawn`]: no copy of the server's address
//! space) as a session and process-group leader (`setsid`) with the terminal as its
//! controlling terminal, so the tree it starts — `&` jobs and `nohup` children included —
//! shares its process group. Processes that leave the group (`setsid -f`, `setpgid(0, 0)`)
//! are still found through the command's containment ([`kitbag_shared::contain`]: a cgroup
//! where writable, else the subreaper and the `KITBAG_JOB` environment tag);
//! [`Running::terminate`] stops both.

use kitbag_shared::lock::LockExt;
use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::contain::{self, ChildReg};
use kitbag_shared::process::{Stoppable, signal_group};

use crate::logs::{CappedLog, LogDir};
pub use crate::pump::{Capture, Exit};
use crate::pump::{Pump, Shared, Status};
use crate::spawn::{self, Pty};
use crate::waiting::{self, Terminal};
use nix::sys::signal::Signal;

/// The size of every command's terminal at start.
pub const TERMINAL_SIZE: (u16, u16) = (50, 200);

pub struct Running {
    pub pid: i32,
    pub capture: Arc<Mutex<Capture>>,
    /// The exit and end-of-output, as the pump finds them.
    shared: Arc<Shared>,
    /// A foreground command's pump, moved along by whoever waits (see [`crate::pump`]);
    /// `None` for a background job, pumped by a thread of its own.
    pump: Option<Mutex<Pump>>,
    pub started: Instant,
    /// Every process of the command, wherever it moved.
    pub contain: contain::Job,
    /// The terminal's server side again, for what is typed into it and its size.
    input: std::fs::File,
    /// The command's terminal, to tell when a process of it waits reading it.
    tty: Terminal,
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
    /// A background job: its output is read on a thread of its own; else by the caller's
    /// thread while it waits ([`Running::wait`], [`Running::drain`], …). A background job's
    /// stdin is its terminal (answered with `shell_input`); a foreground command's is at EOF.
    pub background: bool,
}

pub fn spawn(spec: SpawnSpec<'_>) -> anyhow::Result<Running> {
    // Marked as being written from before the file exists until its output ends (or the
    // spawn fails), so that pruning never takes it.
    spec.logs.begin(&spec.log_path);
    let (logs, log_path) = (spec.logs.clone(), spec.log_path.clone());
    spawn_logged(spec).inspect_err(|_| logs.end(&log_path))
}

fn spawn_logged(spec: SpawnSpec<'_>) -> anyhow::Result<Running> {
    let (rows, cols) = TERMINAL_SIZE;
    let pty = Pty::open(rows, cols)?;
    let tty = Terminal::of(&pty.tty)?;
    let input = std::fs::File::from(rustix::io::fcntl_dupfd_cloexec(&pty.master, 3)?);
    let job = contain::container("shell").job();
    let (argv, envp) = shell_command(&spec, &job)?;
    if let Some(dir) = spec.log_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = CappedLog::create(&spec.log_path, spec.log_caps.0, spec.log_caps.1)?;
    // Registered under the reaper's lock: the orphan reaper never takes this child's status.
    let (pid, reg) = {
        let mut children = ChildReg::lock();
        let pid = spawn::spawn(&spawn::Spec {
            program: SHELL,
            argv: &argv,
            envp: &envp,
            tty: pty.tty.as_fd(),
            cwd: spec.cwd,
        })?;
        let reg = ChildReg::register(&mut children, pid);
        (pid, reg)
    };
    job.attach(pid);
    drop(pty.tty); // only the child holds the terminal now: EOF when it (and its tree) close it
    // The logs pruned to make room for this one go while the shell loads: nothing of its
    // output is written before the pump's first read.
    spec.logs.sweep();
    let capture = Arc::new(Mutex::new(Capture::new(
        spec.log_path.clone(),
        log,
        spec.preview_bytes,
        TERMINAL_SIZE,
    )));
    let shared = Arc::new(Shared::default());
    let pump = Pump::new(
        pty.master,
        pid,
        reg,
        capture.clone(),
        spec.logs.clone(),
        shared.clone(),
    );
    let pump = if spec.background {
        std::thread::spawn(move || pump.run_to_end());
        None
    } else {
        Some(Mutex::new(pump))
    };
    Ok(Running {
        pid,
        capture,
        shared,
        pump,
        started: Instant::now(),
        contain: job,
        input,
        tty,
    })
}

/// The shell every command runs in.
const SHELL: &std::ffi::CStr = c"/bin/sh";

/// `sh -c` with the command, and a plain terminal's environment: `argv` and `envp`.
fn shell_command(
    spec: &SpawnSpec<'_>,
    job: &contain::Job,
) -> anyhow::Result<(Vec<CString>, Vec<CString>)> {
    // A foreground command's stdin at end-of-file: a program waiting for input sees EOF
    // instead of hanging until the timeout (one that opens /dev/tty is found waiting, see
    // `crate::waiting`). A background job keeps the terminal, where shell_input types. Same
    // line, so sh's line numbers are unchanged. Before anything else the shell moves itself
    // into the job's cgroup (when there is one).
    let stdin = if spec.background {
        ""
    } else {
        "exec </dev/null; "
    };
    let script = format!("{}{stdin}{}", job.shell_prefix(), spec.command);
    let argv = vec![
        SHELL.to_owned(),
        c"-c".to_owned(),
        CString::new(script).map_err(|_| anyhow::anyhow!("the command holds a NUL byte"))?,
    ];
    // The server's environment, `SHELL` set (the login shell unless the server has one).
    let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    env.entry("SHELL".into())
        .or_insert_with(|| login_shell().into());
    // A plain terminal: no colours, no pagers waiting for a key press.
    for (k, v) in [
        ("TERM", "dumb"),
        ("NO_COLOR", "1"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
        ("GIT_TERMINAL_PROMPT", "0"),
    ] {
        env.insert(k.into(), v.into());
    }
    env.remove(std::ffi::OsStr::new(kitbag_shared::process::HOST_DEPTH_VAR));
    for (k, v) in spec.env {
        env.insert(k.into(), v.into());
    }
    // After the caller's variables: a command cannot choose its own tag.
    let (k, v) = job.env();
    env.insert(k.into(), v.into());
    let envp = env
        .into_iter()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    Ok((argv, envp))
}

/// The user's login shell from the password database (`/bin/sh` when there is none).
fn login_shell() -> String {
    static SHELL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHELL
        .get_or_init(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.shell.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/bin/sh".into())
        })
        .clone()
}

/// Why waiting stopped.
pub enum Waited {
    Exited(Exit),
    TimedOut,
    Cancelled,
    /// A process of the command sleeps reading the terminal.
    Input,
}

/// How long a command runs before it is first checked for a read of its terminal, and how
/// often after that: reading `/proc` for every call would cost a fast command its speed.
const INPUT_CHECK: Duration = Duration::from_millis(250);

impl Running {
    /// Move the command along until `cond` holds or `limit` passes: pump it here (a
    /// foreground command), or wait for its thread to (a background job).
    fn until(&self, limit: Duration, cond: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + limit;
        match &self.pump {
            None => {
                self.shared.wait_until(deadline, &cond);
            }
            Some(pump) => {
                let mut pump = pump.locked();
                loop {
                    let now = Instant::now();
                    if cond(&self.shared.status()) || now >= deadline || pump.done() {
                        break;
                    }
                    pump.step(deadline - now);
                }
            }
        }
        self.shared.status()
    }

    /// Wait for the shell to exit, the deadline, `cancelled()` to turn true, or (with
    /// `watch_input`) a process of the command to wait reading the terminal.
    pub fn wait(
        &self,
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
        watch_input: bool,
    ) -> Waited {
        let mut next_check = self.started + INPUT_CHECK;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Waited::TimedOut;
            }
            let slice = (deadline - now).min(Duration::from_millis(50));
            if let Some(exit) = self.until(slice, |s| s.exit.is_some()).exit {
                return Waited::Exited(exit);
            }
            if cancelled() {
                return Waited::Cancelled;
            }
            if watch_input && Instant::now() >= next_check {
                if self.waiting_for_input() {
                    return Waited::Input;
                }
                next_check = Instant::now() + INPUT_CHECK;
            }
        }
    }

    /// Whether a process of the command sleeps reading its terminal.
    pub fn waiting_for_input(&self) -> bool {
        if self.shared.status().exit.is_some() && !self.alive() {
            return false;
        }
        let mut pids = vec![self.pid];
        pids.extend(
            kitbag_shared::process::descendants(self.pid as u32)
                .into_iter()
                .filter_map(|p| i32::try_from(p).ok()),
        );
        for p in self.contain.members() {
            if !pids.contains(&p) {
                pids.push(p);
            }
        }
        if waiting::first_reading(&pids, self.tty).is_none() {
            return false;
        }
        // What it printed before it blocked (its prompt) may still sit in the terminal: let
        // the pump take it in, so that the screen shown with the answer holds it.
        let deadline = Instant::now() + Duration::from_millis(300);
        while self.output_pending() && Instant::now() < deadline {
            self.until(Duration::from_millis(10), |_| false);
        }
        true
    }

    /// Whether the terminal holds output the pump has not read yet.
    fn output_pending(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &self.input,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
            && fds[0].revents().contains(rustix::event::PollFlags::IN)
    }

    /// Type `bytes` into the terminal (waiting up to `stall` whenever its buffer stays full).
    pub fn type_in(&self, bytes: &[u8], stall: Duration) -> std::io::Result<()> {
        write_while_read(&self.input, bytes, stall, &|| false).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the terminal's buffer stays full: the program is not reading",
                )
            } else {
                e
            }
        })
    }

    /// Give the terminal a new size (its programs get `SIGWINCH`), and the screen with it.
    pub fn resize(&self, rows: u16, cols: u16) -> std::io::Result<()> {
        spawn::set_size(&self.input, rows, cols)?;
        self.capture.locked().screen.resize(rows, cols);
        Ok(())
    }

    /// Hand a foreground command's output to a thread of its own: it becomes a background
    /// job (one found waiting for input is answered with shell_input).
    pub fn detach(&mut self) {
        if let Some(pump) = self.pump.take() {
            let pump = pump.into_inner().unwrap_or_else(|p| p.into_inner());
            if !pump.done() {
                std::thread::spawn(move || pump.run_to_end());
            }
        }
    }

    /// Block until output has been quiet for `quiet`, the shell exits, or `limit` passes.
    pub fn settle(&self, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut seen = self.capture.locked().total;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let status = self.until(quiet.min(deadline - now), |s| s.exit.is_some());
            let total = self.capture.locked().total;
            if status.exit.is_some() || total == seen {
                return;
            }
            seen = total;
        }
    }

    /// Non-blocking: the exit, if the shell has ended.
    pub fn try_exit(&self) -> Option<Exit> {
        self.until(Duration::ZERO, |s| s.exit.is_some()).exit
    }

    /// Block until the shell's exit is known (after a kill).
    pub fn wait_exit(&self, limit: Duration) -> Option<Exit> {
        self.until(limit, |s| s.exit.is_some()).exit
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

    /// Take in what the terminal still holds, until its end-of-file (bounded).
    pub fn drain(&self, limit: Duration) {
        self.until(limit, |s| s.eof);
    }
}

/// A foreground command dropped before its output ended or its shell was reaped (a
/// descendant holding the terminal past the drain): a thread finishes the log and the reap.
impl Drop for Running {
    fn drop(&mut self) {
        self.detach();
    }
}

pub use kitbag_shared::process::group_alive;

/// Write all of `bytes` to the non-blocking `out` while its reader keeps reading: `TimedOut`
/// once nothing was taken for `stall`, `BrokenPipe` once `gone()` says the reader ended.
pub fn write_while_read(
    mut out: &std::fs::File,
    mut bytes: &[u8],
    stall: Duration,
    gone: &dyn Fn() -> bool,
) -> std::io::Result<()> {
    use std::io::{ErrorKind, Write};
    let mut progress = Instant::now();
    while !bytes.is_empty() {
        match out.write(bytes) {
            Ok(n) => {
                bytes = &bytes[n..];
                progress = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if gone() {
                    return Err(ErrorKind::BrokenPipe.into());
                }
                if progress.elapsed() > stall {
                    return Err(ErrorKind::TimedOut.into());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

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
