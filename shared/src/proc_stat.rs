//! What `/proc/<pid>/stat` says about a process — the one reader of it in the workspace.
//!
//! Its start time tells a process from a later one given the same pid (vm's records, sweep,
//! owner labels and the agent's peer check go by it); its state tells a running process from a
//! zombie; its parent and group find what a process started.

/// The fields of `/proc/<pid>/stat` kitbag reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `D`, `T`, `Z` (zombie), `X` (dead), …
    pub state: char,
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    pub session: i32,
    /// The controlling terminal's device number as the kernel encodes it here (major in bits
    /// 8–15, minor in bits 0–7 and 20–31; 0: none): see [`tty_device`].
    pub tty_nr: i32,
    /// CPU time in user and kernel mode, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Clock ticks after boot at which the process started.
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process still runs: not a zombie waiting to be reaped, not dead.
    pub fn running(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Process `pid`'s resident memory in bytes (`VmRSS` of its status); None when it is gone.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    kib_field(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// Process `pid`'s proportional share of memory in bytes (`Pss` of its smaps_rollup: pages
/// shared with others counted by share), which adds up across a process tree where resident
/// sizes count shared pages once per process (a browser's tree: 380 MB, against 920 MB of
/// summed VmRSS). None when it is gone or the kernel has no smaps_rollup.
pub fn proportional_bytes(pid: u32) -> Option<u64> {
    kib_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
}

/// A `Key:   1234 kB` line of a /proc file, in bytes.
fn kib_field(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Read process `pid`'s stat; None when it is gone (or there is no /proc).
pub fn read(pid: i32) -> Option<ProcStat> {
    if pid <= 0 {
        return None;
    }
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parse a stat line. The command name (field 2) is in parentheses and may hold spaces and
/// parentheses itself, so the fields are counted from its last `)`.
pub fn parse(stat: &str) -> Option<ProcStat> {
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let int = |i: usize| fields.get(i)?.parse::<i32>().ok();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: int(1)?,
        pgrp: int(2)?,
        session: int(3)?,
        tty_nr: int(4)?,
        utime: number(11)?,
        stime: number(12)?,
        start_time: number(19)?,
    })
}

/// `tty_nr` as (major, minor), to compare with a device's numbers (`rustix::fs::major`).
pub fn tty_device(tty_nr: i32) -> (u32, u32) {
    let n = tty_nr as u32;
    ((n >> 8) & 0xff, (n & 0xff) | ((n >> 12) & 0xfff00))
}

/// Whether process `pid` runs: it exists and is not a zombie.
pub fn running(pid: i32) -> bool {
    read(pid).is_some_and(|s| s.running())
}

/// Process `pid`'s start time (clock ticks after boot).
pub fn start_time(pid: i32) -> Option<u64> {
    read(pid).map(|s| s.start_time)
}

/// Process `pid`'s parent.
pub fn parent_pid(pid: i32) -> Option<i32> {
    read(pid).map(|s| s.ppid)
}

/// Every process's (pid, parent pid), read from /proc (empty where it is unavailable).
pub fn parentage() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, read(pid)?.ppid)))
        .collect()
}

/// Whether this process runs as root (its own `/proc` entry is owned by uid 0).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped_whole() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 987654 1000 10 0\n";
        let s = parse(line).unwrap();
        assert_eq!(
            s,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                tty_nr: 0,
                utime: 7,
                stime: 3,
                start_time: 987654,
            }
        );
        assert!(s.running());
        assert!(!parse(&line.replace(") S ", ") Z ")).unwrap().running());
        // /dev/pts/3 is 136:3; minor 300 spills into the high bits.
        assert_eq!(tty_device(34819), (136, 3));
        assert_eq!(tty_device((136 << 8) | 44 | (1 << 20)), (136, 300));
    }

    #[test]
    fn a_short_or_garbled_line_is_none() {
        assert_eq!(parse("12 (x) S 1 2"), None);
        assert_eq!(parse("no parenthesis at all"), None);
        assert_eq!(read(0), None);
        assert_eq!(read(-5), None);
    }

    #[test]
    fn this_process_reads_as_running_with_its_parent() {
        let me = std::process::id() as i32;
        let s = read(me).unwrap();
        assert!(s.running());
        assert_eq!(s.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(start_time(me), Some(s.start_time));
        assert!(parentage().contains(&(me, s.ppid)));
    }
}
