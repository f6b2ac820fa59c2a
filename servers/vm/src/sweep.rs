//! Start-up sweep: what a server killed with SIGKILL left behind. Its sandboxes died with it
//! (parent-death signal), but a record can point at processes that survived some other way
//! (slirp4netns, a PID reused since), at cgroup directories and sockets. Records are marked
//! `lost` and listed.
//!
//! A record is untrusted input: whoever could write it must not be able to make this server
//! kill a process or write a cgroup file of its choosing. A process is killed only when it is
//! still the one recorded (same start time), is younger than the server that recorded it, and
//! is one of the programs a server starts (bwrap, slirp4netns, QEMU); a cgroup is acted on
//! only when it is an instance directory under this server's own cgroup base
//! (`…/kitbag-vm-<pid>/<id>` of the record's own id). Anything else is reported, never acted on.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use crate::VmState;
use crate::bwrap::Record;
use crate::cgroup;
use crate::instance::{Instance, State};
use kitbag_shared::proc_stat::start_time;

#[derive(Debug, Default)]
pub struct SweepReport {
    pub lost: usize,
    pub cgroups: usize,
    /// What records named that was not acted on, one line each.
    pub refused: Vec<String>,
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
        let Some(record) = read_record(&dir) else {
            // No record: an instance stopped cleanly, or one that never started.
            continue;
        };
        if e.file_name().to_str() != Some(record.id.as_str()) {
            report.refused.push(format!(
                "{}: its record names instance {:?}; ignored",
                dir.display(),
                record.id
            ));
            continue;
        }
        let mut record = record;
        let mut refused = Vec::new();
        if record.server_pid != std::process::id() && !record.lost {
            if Path::new(&format!("/proc/{}", record.server_pid)).exists()
                && start_time(record.server_pid as i32).is_some()
                && !server_is_gone(&record)
            {
                continue; // another live server owns it
            }
            refused = clean_up(&record);
            let _ = std::fs::remove_file(dir.join("ctl").join(crate::proto::AGENT_SOCKET));
            record.lost = true;
            if let Ok(b) = serde_json::to_vec_pretty(&record) {
                let _ = kitbag_shared::atomic::write_atomic_volatile(&dir.join("record.json"), &b);
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
            let mut why = format!(
                "the kitbag-vm server (pid {}) that ran it ended without stopping it; its processes and cgroups were cleaned up, its files kept",
                record.server_pid
            );
            if !refused.is_empty() {
                why.push_str(&format!(
                    "; its record also named what was left alone: {}",
                    refused.join("; ")
                ));
            }
            inst.error = Some(why);
            state.lock().insert(inst.id.clone(), inst);
        }
        for r in refused {
            tracing::warn!(instance = record.id, "start-up sweep: {r}");
            report.refused.push(format!("{}: {r}", record.id));
        }
    }
    report
}

/// The record of an instance directory, read without following a link or blocking.
fn read_record(dir: &Path) -> Option<Record> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::instance_dir::open_untrusted(dir, Path::new("record.json"))
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut bytes)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Kill the record's processes and remove its cgroups — only those that are what a server
/// leaves behind. Returns what was left alone, and why.
fn clean_up(record: &Record) -> Vec<String> {
    let mut refused = Vec::new();
    for &(pid, started) in &record.processes {
        if started == 0 || start_time(pid) != Some(started) {
            continue; // gone, or another process has the pid now
        }
        match not_a_leftover(record, pid, started) {
            None => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Some(why) => refused.push(format!("process {pid} not killed: {why}")),
        }
    }
    let mut dirs = Vec::new();
    for path in &record.cgroups {
        if cgroup::is_instance_dir(path, &record.id) {
            dirs.push(path.clone());
        } else {
            refused.push(format!(
                "{} left alone: not an instance cgroup under this server's cgroup base",
                path.display()
            ));
        }
    }
    cgroup::remove_dirs(&dirs);
    refused
}

/// Why a live process is not one a server of ours left (None when it is: younger than that
/// server, and a program servers start).
fn not_a_leftover(record: &Record, pid: i32, started: u64) -> Option<String> {
    if record.server_start == 0 || started < record.server_start {
        return Some("it is not younger than the server the record names".into());
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    let ours = comm == "bwrap" || comm == "slirp4netns" || comm.starts_with("qemu-system");
    (!ours).then(|| format!("it runs {comm:?}, not bwrap, slirp4netns or QEMU"))
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
