//! What `/proc/<pid>/stat` says about a process: its start time, which tells it from a later
//! process given the same pid, and its parent. Records, the sweep, owner labels and the
//! agent's peer check all go by it.

/// `/proc/<pid>/stat`'s start time (field 22), to tell a process from a later one with its pid.
pub fn start_time(pid: i32) -> Option<u64> {
    stat_field(pid, 19)
}

/// `/proc/<pid>/stat`'s parent pid (field 4).
pub fn parent_pid(pid: i32) -> Option<i32> {
    stat_field(pid, 1).and_then(|p| i32::try_from(p).ok())
}

/// The `n`th number after the command name in `/proc/<pid>/stat` (0 = the state letter).
fn stat_field(pid: i32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(n)?.parse().ok()
}
