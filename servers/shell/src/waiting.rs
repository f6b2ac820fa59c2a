//! Whether a command waits for input on its terminal — read from the kernel, not guessed from
//! the text: a process of the command asleep in a `read` of the command's terminal.
//!
//! `/proc/PID/syscall` names the call a sleeping process is in and its first argument (the
//! descriptor); the descriptor is the terminal when it is the terminal's device, or `/dev/tty`
//! while the terminal is the process's controlling one (`/proc/PID/stat`). Where `syscall`
//! cannot be read (another user's process, a kernel without it), a process asleep in the
//! terminal driver's read (`/proc/PID/wchan`) that holds the terminal counts.

use std::os::unix::fs::MetadataExt;

use kitbag_shared::proc_stat;

/// read, pread64, readv, preadv, preadv2.
#[cfg(target_arch = "x86_64")]
const READS: &[u64] = &[0, 17, 19, 295, 327];
#[cfg(target_arch = "aarch64")]
const READS: &[u64] = &[63, 67, 65, 69, 286];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const READS: &[u64] = &[];

/// `/dev/tty`: 5:0.
const DEV_TTY: (u32, u32) = (5, 0);

/// A terminal, by its device numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal {
    pub major: u32,
    pub minor: u32,
}

impl Terminal {
    /// The terminal `fd` is open on.
    pub fn of(fd: impl std::os::fd::AsFd) -> std::io::Result<Terminal> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Terminal {
            major: rustix::fs::major(st.st_rdev),
            minor: rustix::fs::minor(st.st_rdev),
        })
    }

    fn is(&self, rdev: u64) -> bool {
        (rustix::fs::major(rdev), rustix::fs::minor(rdev)) == (self.major, self.minor)
    }

    /// Whether `/dev/tty` opened by `pid` is this terminal (its controlling one).
    fn controls(&self, pid: i32) -> bool {
        proc_stat::read(pid)
            .is_some_and(|s| proc_stat::tty_device(s.tty_nr) == (self.major, self.minor))
    }

    /// Whether descriptor `fd` of `pid` is this terminal.
    fn is_fd_of(&self, pid: i32, fd: &str) -> bool {
        let Ok(m) = std::fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
            return false;
        };
        let rdev = m.rdev();
        self.is(rdev)
            || ((rustix::fs::major(rdev), rustix::fs::minor(rdev)) == DEV_TTY && self.controls(pid))
    }
}

/// Whether process `pid` sleeps reading `tty`.
pub fn reading(pid: i32, tty: Terminal) -> bool {
    if proc_stat::read(pid).is_none_or(|s| s.state != 'S') {
        return false;
    }
    let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return asleep_in_tty_read(pid, tty);
    };
    let mut fields = line.split_whitespace();
    let nr = fields.next().and_then(|n| n.parse::<u64>().ok());
    let fd = fields
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    match (nr, fd) {
        (Some(nr), Some(fd)) if READS.contains(&nr) => tty.is_fd_of(pid, &fd.to_string()),
        // Asleep in another call.
        (Some(_), _) => false,
        _ if line.trim() == "running" => false,
        _ => asleep_in_tty_read(pid, tty),
    }
}

/// The fallback: asleep in the terminal driver's read, holding the terminal.
fn asleep_in_tty_read(pid: i32, tty: Terminal) -> bool {
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    if !matches!(wchan.trim(), "n_tty_read" | "wait_woken") {
        return false;
    }
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|e| tty.is_fd_of(pid, &e.file_name().to_string_lossy()))
    })
}

/// The first of `pids` found reading `tty`.
pub fn first_reading(pids: &[i32], tty: Terminal) -> Option<i32> {
    pids.iter().copied().find(|&p| reading(p, tty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    /// A child reading a pseudo-terminal it was given is found; one sleeping is not.
    #[test]
    fn a_process_reading_its_terminal_is_found() {
        let pty = crate::spawn::Pty::open(24, 80).expect("pty");
        let tty = Terminal::of(&pty.tty).expect("terminal");
        let stdin = std::fs::File::from(pty.tty.try_clone().expect("dup"));
        let mut reader = std::process::Command::new("head")
            .args(["-c", "1"])
            .stdin(stdin)
            .spawn()
            .expect("head");
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pids = [sleeper.id() as i32, reader.id() as i32];
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut found = None;
        while found.is_none() && Instant::now() < deadline {
            found = first_reading(&pids, tty);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(found, Some(reader.id() as i32));
        assert!(!reading(sleeper.id() as i32, tty));
        let mut master = std::fs::File::from(pty.master.try_clone().expect("dup"));
        master.write_all(b"x\n").expect("answer");
        assert!(reader.wait().expect("wait").success());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
}
