//! Start-up sweep: what a server killed with SIGKILL left behind. Its sandboxes died with it
//! (parent-death signal), but a record can point at processes that survived some other way
//! (slirp4netns, a PID reused since), at cgroup directories and sockets. Processes are killed
//! only when their start time matches the record; records are marked `lost` and listed.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use crate::VmState;
use crate::bwrap::{Record, start_time};
use crate::cgroup;
use crate::instance::{Instance, State};

#[derive(Debug, Default)]
pub struct SweepReport {
    pub lost: usize,
    pub cgroups: usize,
}

pub fn sweep(state: &Arc<VmState>) -> SweepReport {
    let mut report = SweepReport {
        cgroups: cgroup::sweep_stale(),
        ..Default::default()
    };
    let Ok(rd) = std::fs::read_dir(state.state_dir.join("instances")) else {
        return report;
    };
    for e in rd.flatten() {
        let dir = e.path();
        let Ok(bytes) = std::fs::read(dir.join("record.json")) else {
            // No record: an instance stopped cleanly, or one that never started.
            continue;
        };
        let Ok(mut record) = serde_json::from_slice::<Record>(&bytes) else {
            continue;
        };
        if record.server_pid != std::process::id() && !record.lost {
            if Path::new(&format!("/proc/{}", record.server_pid)).exists()
                && start_time(record.server_pid as i32).is_some()
                && !server_is_gone(&record)
            {
                continue; // another live server owns it
            }
            for (pid, started) in &record.processes {
                if *started != 0 && start_time(*pid) == Some(*started) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(*pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            cgroup::remove_dirs(&record.cgroups);
            let _ = std::fs::remove_file(dir.join("ctl").join(crate::proto::AGENT_SOCKET));
            record.lost = true;
            if let Ok(b) = serde_json::to_vec_pretty(&record) {
                let _ = kitbag_shared::atomic::write_atomic(&dir.join("record.json"), &b, false);
            }
        }
        if record.lost {
            report.lost += 1;
            let mut inst = Instance::new(record.id.clone(), dir.clone(), State::Lost);
            inst.created_at = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .unwrap_or(inst.created_at);
            inst.ended_at = Some(SystemTime::now());
            inst.image = String::new();
            inst.error = Some(format!(
                "the kitbag-vm server (pid {}) that ran it ended without stopping it; its processes and cgroups were cleaned up, its files kept",
                record.server_pid
            ));
            state.lock().insert(inst.id.clone(), inst);
        }
    }
    report
}

/// The recorded server pid is alive but is some other process now (PID reused): compare
/// with the bwrap process's start time — a server starts before its sandboxes.
fn server_is_gone(record: &Record) -> bool {
    let Some(server_start) = start_time(record.server_pid as i32) else {
        return true;
    };
    record
        .processes
        .first()
        .is_some_and(|(_, sandbox_start)| *sandbox_start != 0 && server_start > *sandbox_start)
}

/// This server as a label value: a later server can tell whether it is still alive.
pub fn owner() -> String {
    let pid = std::process::id();
    let start = crate::bwrap::start_time(pid as i32).unwrap_or(0);
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
    crate::bwrap::start_time(pid) == Some(start)
}

#[cfg(test)]
mod owner_tests {
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
