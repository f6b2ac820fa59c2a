//! Child-process trees: finding every descendant and killing them all.
//!
//! Language servers and debug adapters start helpers of their own (tsserver, the
//! debuggee); killing only the direct child leaves orphans behind.

use std::process::{Command, Stdio};

/// Set by the kitbag host on every server it starts: how many hosts are above that process.
/// A host that finds it refuses to start (it would be one of its own children). Commands an
/// agent runs (shell, cron) do not inherit it: running `kitbag` there is a deliberate act.
pub const HOST_DEPTH_VAR: &str = "KITBAG_HOST_DEPTH";

/// Every descendant of `pid`, read from /proc (empty where /proc is unavailable).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // Fields after the closing paren of the command name: state ppid ...
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(pp) = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
                parent.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(cur) = todo.pop() {
        for (c, pp) in &parent {
            if *pp == cur && !out.contains(c) {
                out.push(*c);
                todo.push(*c);
            }
        }
    }
    out
}

/// SIGKILL `pid`'s process group and every descendant (which may have left the group).
pub fn kill_tree(pid: u32) {
    let mut targets: Vec<String> = descendants(pid).iter().map(u32::to_string).collect();
    targets.push(format!("-{pid}"));
    targets.push(pid.to_string());
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg("--")
        .args(&targets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kills_a_child_and_its_grandchild() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut kids = Vec::new();
        for _ in 0..100 {
            kids = descendants(pid);
            if !kids.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!kids.is_empty(), "sh should have started sleeps");
        kill_tree(pid);
        child.wait().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        for k in kids {
            let alive = std::fs::read_to_string(format!("/proc/{k}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false);
            assert!(!alive, "descendant {k} survived");
        }
    }
}
