//! Starting a command's shell without copying the server (issue #43).
//!
//! `fork()` of the server — a multi-threaded process with a runtime, caches and buffers —
//! copies its page tables and then takes copy-on-write faults on both sides: a quarter of a
//! short command's time. `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`) shares the
//! address space until the child execs, so its cost does not grow with the server.
//!
//! Everything the child needs before `exec` is a spawn attribute or file action, applied by
//! glibc in this order:
//!
//! 1. every signal with a handler, and those in the default set below, back to `SIG_DFL`
//!    (an ignored `SIGHUP`/`SIGPIPE`/… of the server is not passed on);
//! 2. `setsid()`: a session and process-group leader of its own, without a terminal;
//! 3. the file actions: the terminal opened as fd 0 through `/proc/self/fd/N` (no `O_NOCTTY`:
//!    a session leader without a terminal that opens one gets it as its controlling terminal,
//!    what `ioctl(TIOCSCTTY)` does), dup'ed to 1 and 2; `fchdir` to the working directory's
//!    descriptor (the directory checked, whatever its path leads to by now); every other
//!    descriptor closed (`closefrom(3)`, including ones the server inherited without
//!    close-on-exec);
//! 4. the signal mask emptied;
//! 5. `execve` with exactly the environment given.
//!
//! A failure of any step (or of the exec) is returned by `posix_spawn` itself: nothing runs.
//!
//! This module holds the shell crate's only `unsafe`: the libc calls below, each with its
//! SAFETY note. The terminal is opened with safe calls ([`Pty::open`]).

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::signal::{SigSet, Signal};
use rustix::pty::OpenptFlags;

/// A pseudo-terminal: the side the server reads (`master`, non-blocking) and the terminal
/// the command gets.
pub struct Pty {
    pub master: OwnedFd,
    pub tty: OwnedFd,
}

impl Pty {
    /// A new terminal of `rows` × `cols`. Both descriptors are close-on-exec from the start:
    /// no other spawn can inherit them.
    pub fn open(rows: u16, cols: u16) -> io::Result<Pty> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = rustix::pty::openpt(flags)?;
        rustix::io::ioctl_fionbio(&master, true)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        // The terminal side straight from the master (Linux 4.13+), else by its name.
        let tty = match rustix::pty::ioctl_tiocgptpeer(&master, flags) {
            Ok(fd) => fd,
            Err(_) => {
                let name = rustix::pty::ptsname(&master, Vec::new())?;
                rustix::fs::open(
                    name.as_c_str(),
                    rustix::fs::OFlags::RDWR
                        | rustix::fs::OFlags::NOCTTY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )?
            }
        };
        set_size(&tty, rows, cols)?;
        Ok(Pty { master, tty })
    }
}

/// Give a terminal (either side) the size `rows` × `cols`; its foreground programs get
/// `SIGWINCH` when it changes.
pub fn set_size(terminal: impl AsFd, rows: u16, cols: u16) -> io::Result<()> {
    rustix::termios::tcsetwinsize(
        terminal,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// What to start.
pub struct Spec<'a> {
    /// An absolute path: no `PATH` search.
    pub program: &'a CStr,
    /// `argv`, `argv[0]` included.
    pub argv: &'a [CString],
    /// The whole environment, `KEY=VALUE` each.
    pub envp: &'a [CString],
    /// The terminal: the child's stdin, stdout, stderr and controlling terminal.
    pub tty: BorrowedFd<'a>,
    /// The working directory, an open descriptor (`O_PATH` will do).
    pub cwd: BorrowedFd<'a>,
}

/// Signals set back to their default action in the child even when the server ignores
/// them (the set the spawn reset before issue #43, and `SIGPIPE`, which Rust programs ignore).
const DEFAULT_SIGNALS: [Signal; 7] = [
    Signal::SIGCHLD,
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGALRM,
    Signal::SIGPIPE,
];

/// Start `spec.program` as described in the module documentation; its pid.
pub fn spawn(spec: &Spec<'_>) -> io::Result<i32> {
    let mut attr = Attr::new()?;
    let mut sigdef = SigSet::empty();
    for s in DEFAULT_SIGNALS {
        sigdef.add(s);
    }
    attr.configure(&sigdef, &SigSet::empty())?;
    let tty_path = CString::new(format!("/proc/self/fd/{}", spec.tty.as_raw_fd()))
        .map_err(io::Error::other)?;
    let mut actions = Actions::new()?;
    actions.open_rdwr(0, &tty_path)?;
    actions.dup2(0, 1)?;
    actions.dup2(0, 2)?;
    actions.fchdir(spec.cwd)?;
    actions.close_from(3)?;
    let argv = nul_terminated(spec.argv);
    let envp = nul_terminated(spec.envp);
    // The descriptors named in the actions must stay open until the spawn returns.
    let _keep = (spec.tty.as_fd(), spec.cwd.as_fd());
    let mut pid: libc::pid_t = 0;
    // SAFETY: `pid` is a valid out-pointer; `spec.program` is a NUL-terminated string;
    // `actions` and `attr` were initialised by their `_init` functions and are destroyed
    // only when dropped, after this call; `argv` and `envp` are arrays of pointers into
    // `CString`s that outlive the call, each array ending with a null pointer. posix_spawn
    // does not write through the `*mut` pointers it is given.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            spec.program.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    check(rc)?;
    Ok(pid)
}

/// The `char *const []` form of `strings`: their pointers, then a null pointer.
fn nul_terminated(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// posix_spawn* functions return an error number rather than setting `errno`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A `posix_spawnattr_t`, destroyed on drop. (glibc's holds no pointer into itself: moving
/// it is fine.)
struct Attr(libc::posix_spawnattr_t);

#[allow(unsafe_code)]
impl Attr {
    fn new() -> io::Result<Attr> {
        let mut a = MaybeUninit::<libc::posix_spawnattr_t>::uninit();
        // SAFETY: init writes a valid attribute object into `a`; it is read (assume_init)
        // only once init reported success.
        check(unsafe { libc::posix_spawnattr_init(a.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        Ok(Attr(unsafe { a.assume_init() }))
    }

    /// A new session; `sigdef` to their default action; the signal mask `mask`.
    fn configure(&mut self, sigdef: &SigSet, mask: &SigSet) -> io::Result<()> {
        let flags = libc::POSIX_SPAWN_SETSID
            | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short
            | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short;
        // SAFETY: `self.0` is an initialised attribute object; the sigset_t pointers come
        // from live `SigSet`s and are only read (copied) by these calls.
        unsafe {
            check(libc::posix_spawnattr_setflags(&mut self.0, flags))?;
            check(libc::posix_spawnattr_setsigdefault(
                &mut self.0,
                sigdef.as_ref(),
            ))?;
            check(libc::posix_spawnattr_setsigmask(&mut self.0, mask.as_ref()))?;
        }
        Ok(())
    }
}

#[allow(unsafe_code)]
impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.0);
        }
    }
}

/// A `posix_spawn_file_actions_t`, destroyed on drop. (glibc's points to a heap array, never
/// into itself: moving it is fine.)
struct Actions(libc::posix_spawn_file_actions_t);

#[allow(unsafe_code)]
impl Actions {
    fn new() -> io::Result<Actions> {
        let mut a = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
        // SAFETY: as for `Attr::new`.
        check(unsafe { libc::posix_spawn_file_actions_init(a.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        Ok(Actions(unsafe { a.assume_init() }))
    }

    /// Open `path` read-write as `fd` (without `O_NOCTTY`).
    fn open_rdwr(&mut self, fd: libc::c_int, path: &CStr) -> io::Result<()> {
        // SAFETY: `self.0` is initialised; glibc copies `path` (a NUL-terminated string).
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, path.as_ptr(), libc::O_RDWR, 0)
        })
    }

    fn dup2(&mut self, from: libc::c_int, to: libc::c_int) -> io::Result<()> {
        // SAFETY: `self.0` is initialised; only numbers are passed.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }

    /// `fchdir(dir)` in the child (glibc 2.29+).
    fn fchdir(&mut self, dir: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: `self.0` is initialised; only a number is passed (the caller keeps the
        // descriptor open until the spawn returns).
        check(unsafe { libc::posix_spawn_file_actions_addfchdir_np(&mut self.0, dir.as_raw_fd()) })
    }

    /// Close every descriptor from `from` up in the child (glibc 2.34+).
    fn close_from(&mut self, from: libc::c_int) -> io::Result<()> {
        // SAFETY: `self.0` is initialised; only a number is passed.
        check(unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut self.0, from) })
    }
}

#[allow(unsafe_code)]
impl Drop for Actions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.0);
        }
    }
}
