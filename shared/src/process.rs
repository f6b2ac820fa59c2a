//! Stopping processes: process groups (the one implementation every server uses) and whole
//! child-process trees.
//!
//! Every process kitbag starts leads a process group of its own, so a group signal reaches
//! what it started too. Language servers and debug adapters start helpers of their own
//! (tsserver, the debuggee) that may leave the group: [`kill_tree`] finds those by parentage.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Send `signal` to process group `pgid`. A group that is already gone only makes this fail,
/// which is not an error here; `pgid` ≤ 0 (never a group kitbag made) is ignored.
pub fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// Whether any process of group `pgid` is still there (zombies included).
pub fn group_alive(pgid: i32) -> bool {
    pgid > 0 && killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Whether process `pid` runs: it exists and is not a zombie waiting to be reaped.
pub fn running(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(crate::proc_stat::running)
}

/// What a stop acts on: every process it is made of, and whether it is still there.
pub trait Stoppable {
    /// Send `signal` to every process of it.
    fn signal(&self, signal: Signal);
    /// Whether it is still there (what "gone" means is the target's: see [`Groups`], [`Group`]).
    fn alive(&self) -> bool;
}

/// Process groups, gone once every group's leader has exited (a zombie counts as gone): the
/// host's children, whose leader is the server.
pub struct Groups<'a>(pub &'a [i32]);

impl Stoppable for Groups<'_> {
    fn signal(&self, signal: Signal) {
        for &g in self.0 {
            signal_group(g, signal);
        }
    }

    fn alive(&self) -> bool {
        self.0.iter().any(|&g| g > 0 && running(g as u32))
    }
}

/// One process group, gone once no process of it is left: a command whose helpers may
/// outlive its first process and deserve their grace too.
pub struct Group(pub i32);

impl Stoppable for Group {
    fn signal(&self, signal: Signal) {
        signal_group(self.0, signal);
    }

    fn alive(&self) -> bool {
        group_alive(self.0)
    }
}

/// How often a stop looks whether its target is gone.
const STOP_POLL: Duration = Duration::from_millis(20);

/// The one stop sequence: SIGTERM, and SIGCONT (a stopped process acts on SIGTERM only once
/// continued); up to `grace` for the target to go; then SIGKILL to whatever is left of it.
/// True when the grace ran out with the target still there. Blocks.
pub fn stop(target: &impl Stoppable, grace: Duration) -> bool {
    let deadline = begin_stop(target, grace);
    let overdue = loop {
        if let Some(overdue) = stop_settled(target, deadline) {
            break overdue;
        }
        std::thread::sleep(STOP_POLL);
    };
    target.signal(Signal::SIGKILL);
    overdue
}

/// [`stop`] on the runtime: the same sequence, awaiting instead of sleeping.
pub async fn stop_async(target: &impl Stoppable, grace: Duration) -> bool {
    let deadline = begin_stop(target, grace);
    let overdue = loop {
        if let Some(overdue) = stop_settled(target, deadline) {
            break overdue;
        }
        tokio::time::sleep(STOP_POLL).await;
    };
    target.signal(Signal::SIGKILL);
    overdue
}

/// The stop's first step; returns when its grace runs out.
fn begin_stop(target: &impl Stoppable, grace: Duration) -> Instant {
    target.signal(Signal::SIGTERM);
    target.signal(Signal::SIGCONT);
    Instant::now() + grace
}

/// Whether the wait is over: `Some(false)` the target is gone, `Some(true)` the grace ran out.
fn stop_settled(target: &impl Stoppable, deadline: Instant) -> Option<bool> {
    if !target.alive() {
        Some(false)
    } else if Instant::now() >= deadline {
        Some(true)
    } else {
        None
    }
}

/// [`stop`] the groups ([`Groups`]: until their leaders are gone). Blocks.
pub fn terminate_groups(groups: &[i32], grace: Duration) {
    stop(&Groups(groups), grace);
}

/// [`terminate_groups`] for one group without blocking the caller: the stop runs on a helper
/// thread (for a child being restarted or retired while the process goes on).
pub fn terminate_group_soon(pgid: i32, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    std::thread::spawn(move || stop(&Groups(&[pgid]), grace));
}

/// Set by the kitbag host on every server it starts: how many hosts are above that process.
/// A host that finds it refuses to start (it would be one of its own children). Commands an
/// agent runs (shell, cron) do not inherit it: running `kitbag` there is a deliberate act.
pub const HOST_DEPTH_VAR: &str = "KITBAG_HOST_DEPTH";

/// Where a command would run from: a path containing `/` as given, otherwise the first
/// executable file of that name on `PATH`. `None` when there is none.
pub fn locate(command: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = std::path::PathBuf::from(command);
        return runnable(&p).then_some(p);
    }
    if command.is_empty() {
        return None;
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(command))
        .find(|c| runnable(c))
}

/// Every descendant of `pid`, read from /proc (empty where /proc is unavailable).
pub fn descendants(pid: u32) -> Vec<u32> {
    let parent: Vec<(u32, u32)> = crate::proc_stat::parentage()
        .into_iter()
        .filter_map(|(p, pp)| Some((u32::try_from(p).ok()?, u32::try_from(pp).ok()?)))
        .collect();
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
    let kill = |p: u32| {
        if let Ok(p) = i32::try_from(p) {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    };
    for d in descendants(pid) {
        kill(d);
    }
    if let Ok(group) = i32::try_from(pid) {
        signal_group(group, Signal::SIGKILL);
    }
    kill(pid);
}

/// Have the child started by `cmd` get SIGKILL when the thread that starts it ends — with
/// the server, since a tokio worker thread lives as long as the runtime (start it from a
/// task, not from `spawn_blocking`, whose threads retire). For a child that would otherwise
/// outlive a server killed outright (a runtime paused under its debugger).
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    // One of the four places kitbag uses `unsafe` (the others: the SQLite VFS in
    // state/sqlite.rs, kitbag-vm's nsfd.rs and its QEMU launch in qemu/mod.rs): `pre_exec` runs between fork and exec, where
    // only async-signal-safe calls are allowed; prctl(PR_SET_PDEATHSIG) is one, and nothing
    // is allocated or locked.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn terminate_groups_waits_for_the_willing_and_kills_the_rest() {
        // One group exits on SIGTERM; the other ignores it and is killed after the grace.
        let mut polite = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut stubborn = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30 & wait; sleep 30"])
            .process_group(0)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let groups = [polite.id() as i32, stubborn.id() as i32];
        let started = Instant::now();
        terminate_groups(&groups, Duration::from_millis(500));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(450), "{took:?}");
        assert!(polite.wait().is_ok() && stubborn.wait().is_ok());
        std::thread::sleep(Duration::from_millis(50));
        // Members still running (zombies aside: this test process may be a subreaper).
        let survivors: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, r)| r.split_whitespace().collect())
                    .unwrap_or_default();
                fields
                    .get(2)
                    .and_then(|g| g.parse::<i32>().ok())
                    .is_some_and(|g| groups.contains(&g))
                    && running(p)
            })
            .collect();
        assert!(survivors.is_empty(), "still running: {survivors:?}");
    }

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
