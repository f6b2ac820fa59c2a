//! This server as an owner label on what it creates outside its own state (containers, pods):
//! host, pid and start time, so that a later server's sweep can tell whether the owner is
//! still alive.

use kitbag_shared::proc_stat::start_time;

/// This server as a label value: a later server can tell whether it is still alive.
pub fn owner() -> String {
    let pid = std::process::id();
    let start = start_time(pid as i32).unwrap_or(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}/{pid}/{start}", host.trim())
}

pub fn owner_alive(label: &str) -> bool {
    let mut it = label.split('/');
    let (Some(host), Some(pid), Some(start)) = (it.next(), it.next(), it.next()) else {
        return false;
    };
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    if host != here.trim() {
        return true; // another machine's server: not ours to judge
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
        return false;
    };
    start_time(pid) == Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_alive_and_dead() {
        assert!(owner_alive(&owner()), "this process is alive");
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        assert!(
            !owner_alive(&format!("{}/{}/1", host.trim(), std::process::id())),
            "another start time"
        );
        assert!(owner_alive("some-other-machine/1/1"), "not ours to judge");
        assert!(!owner_alive("garbage"));
    }
}
