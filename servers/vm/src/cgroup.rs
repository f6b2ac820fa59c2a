//! An instance's cgroups: memory, pids and CPU limits, the freezer for pause, usage figures.
//!
//! Directories are made under the server's own cgroup (`…/kitbag-vm-<server pid>/<id>`), in
//! the unified hierarchy when it carries the memory controller, else in the v1 hierarchies.
//! Where they cannot be made (an unprivileged user without a delegated cgroup) the instance
//! still runs, with `enforced: false` and the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_shared::contain::{cgroup_mounts, own_cgroup_path};

use crate::error::{VmError, VmResult};

/// The limits asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: u64,
    /// `/work`'s size in MiB (None: no limit); held by the engine, not cgroups (`crate::disk`).
    pub disk_mb: Option<u64>,
}

/// What an instance uses right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Usage {
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub pids: Option<u64>,
}

#[derive(Debug)]
enum Layout {
    V2(PathBuf),
    /// (controller, directory) per v1 hierarchy.
    V1(Vec<(&'static str, PathBuf)>),
}

/// One instance's cgroups.
#[derive(Debug)]
pub struct InstanceCgroups {
    layout: Option<Layout>,
    /// Every limit was written.
    pub enforced: bool,
    /// Why limits or the freezer are missing.
    pub note: Option<String>,
}

const V1_CONTROLLERS: [&str; 5] = ["memory", "pids", "cpu", "cpuacct", "freezer"];

/// The per-server parent directory name.
pub fn server_dir_name() -> String {
    format!("kitbag-vm-{}", std::process::id())
}

impl InstanceCgroups {
    /// No cgroups at all (tests, or when the caller chose none).
    pub fn none(reason: impl Into<String>) -> Self {
        InstanceCgroups {
            layout: None,
            enforced: false,
            note: Some(reason.into()),
        }
    }

    /// Make the instance's cgroups and write its limits.
    pub fn create(id: &str, limits: Limits) -> Self {
        let mounts = cgroup_mounts();
        let v2 = mounts.iter().find(|m| m.v2).and_then(|m| {
            let own = own_cgroup_path(None)?;
            let base = m.mount_point.join(own);
            let controllers = std::fs::read_to_string(base.join("cgroup.controllers")).ok()?;
            controllers
                .split_whitespace()
                .any(|c| c == "memory")
                .then_some(base)
        });
        match v2 {
            Some(base) => Self::create_v2(&base, id, limits),
            None => Self::create_v1(&mounts, id, limits),
        }
    }

    fn create_v2(own: &Path, id: &str, limits: Limits) -> Self {
        let parent = own.join(server_dir_name());
        let dir = parent.join(id);
        let made = (|| -> std::io::Result<()> {
            // Controllers must be enabled on the way down (our own cgroup, then ours).
            let _ = std::fs::write(own.join("cgroup.subtree_control"), "+memory +pids +cpu");
            mkdir(&parent)?;
            std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
            mkdir(&dir)
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_dir(&dir);
            return Self::none(format!(
                "cgroup v2 at {} not writable ({e}); limits not enforced",
                parent.display()
            ));
        }
        let mut failed = Vec::new();
        let quota = (limits.cpus * 100_000.0).round() as u64;
        for (file, value) in [
            ("memory.max", (limits.memory_mb << 20).to_string()),
            ("memory.swap.max", "0".to_string()),
            ("pids.max", limits.pids.to_string()),
            ("cpu.max", format!("{quota} 100000")),
        ] {
            if let Err(e) = std::fs::write(dir.join(file), value)
                && file != "memory.swap.max"
            {
                failed.push(format!("{file}: {e}"));
            }
        }
        InstanceCgroups {
            enforced: failed.is_empty(),
            note: (!failed.is_empty()).then(|| failed.join("; ")),
            layout: Some(Layout::V2(dir)),
        }
    }

    fn create_v1(mounts: &[kitbag_shared::contain::CgroupMount], id: &str, limits: Limits) -> Self {
        let mut dirs = Vec::new();
        let mut failed = Vec::new();
        for ctl in V1_CONTROLLERS {
            let Some(m) = mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|c| c == ctl))
            else {
                failed.push(format!("no {ctl} hierarchy"));
                continue;
            };
            let Some(own) = own_cgroup_path(Some(ctl)) else {
                failed.push(format!("not in a {ctl} cgroup"));
                continue;
            };
            let dir = m.mount_point.join(own).join(server_dir_name()).join(id);
            // cpu and cpuacct are often one hierarchy: one directory serves both.
            if dirs.iter().any(|(_, d)| d == &dir) {
                dirs.push((ctl, dir));
                continue;
            }
            match dir
                .parent()
                .map(mkdir)
                .unwrap_or(Ok(()))
                .and_then(|()| mkdir(&dir))
            {
                Ok(()) => dirs.push((ctl, dir)),
                Err(e) => failed.push(format!("{}: {e}", dir.display())),
            }
        }
        let quota = ((limits.cpus * 100_000.0).round() as u64).max(1000);
        let writes: [(&str, &str, String); 4] = [
            (
                "memory",
                "memory.limit_in_bytes",
                (limits.memory_mb << 20).to_string(),
            ),
            ("pids", "pids.max", limits.pids.to_string()),
            ("cpu", "cpu.cfs_period_us", "100000".to_string()),
            ("cpu", "cpu.cfs_quota_us", quota.to_string()),
        ];
        for (ctl, file, value) in writes {
            if let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == ctl)
                && let Err(e) = std::fs::write(dir.join(file), value)
            {
                failed.push(format!("{file}: {e}"));
            }
        }
        // Swap would let a memory limit be exceeded; not every kernel accounts it.
        if let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == "memory") {
            let _ = std::fs::write(
                dir.join("memory.memsw.limit_in_bytes"),
                (limits.memory_mb << 20).to_string(),
            );
        }
        let limited = ["memory", "pids", "cpu"]
            .iter()
            .all(|c| dirs.iter().any(|(d, _)| d == c));
        InstanceCgroups {
            enforced: failed.is_empty() && limited,
            note: (!failed.is_empty()).then(|| {
                format!(
                    "cgroups (v1) incomplete: {}; limits not fully enforced",
                    failed.join("; ")
                )
            }),
            layout: Some(Layout::V1(dirs)),
        }
    }

    /// Move a process (the sandbox's first process, before it runs anything) into every cgroup.
    pub fn attach(&self, pid: i32) -> VmResult<()> {
        let mut errors = Vec::new();
        for dir in self.dirs() {
            if let Err(e) = std::fs::write(dir.join("cgroup.procs"), pid.to_string()) {
                errors.push(format!("{}: {e}", dir.display()));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(VmError::engine(errors.join("; ")))
        }
    }

    fn dirs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = match &self.layout {
            Some(Layout::V2(d)) => vec![d.clone()],
            Some(Layout::V1(dirs)) => dirs.iter().map(|(_, d)| d.clone()).collect(),
            None => Vec::new(),
        };
        out.dedup();
        out
    }

    /// Whether pause can use the freezer.
    pub fn has_freezer(&self) -> bool {
        match &self.layout {
            Some(Layout::V2(d)) => d.join("cgroup.freeze").exists(),
            Some(Layout::V1(dirs)) => dirs.iter().any(|(c, _)| *c == "freezer"),
            None => false,
        }
    }

    /// Freeze (`true`) or thaw every process, waiting until the kernel reports it done.
    pub fn set_frozen(&self, frozen: bool) -> VmResult<()> {
        let (file, value, state_file, want): (PathBuf, &str, PathBuf, &str) = match &self.layout {
            Some(Layout::V2(d)) => (
                d.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
                d.join("cgroup.events"),
                if frozen { "frozen 1" } else { "frozen 0" },
            ),
            Some(Layout::V1(dirs)) => {
                let Some((_, d)) = dirs.iter().find(|(c, _)| *c == "freezer") else {
                    return Err(VmError::engine("no freezer cgroup"));
                };
                let v = if frozen { "FROZEN" } else { "THAWED" };
                (d.join("freezer.state"), v, d.join("freezer.state"), v)
            }
            None => return Err(VmError::engine("no freezer cgroup")),
        };
        std::fs::write(&file, value).map_err(|e| VmError::io(file.display(), e))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = std::fs::read_to_string(&state_file).unwrap_or_default();
            if now.lines().any(|l| l.trim() == want) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(VmError::engine(format!(
                    "{} did not reach {want}",
                    state_file.display()
                )));
            }
            // v1 FREEZING → FROZEN needs the write repeated when tasks were busy.
            let _ = std::fs::write(&file, value);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn usage(&self) -> Usage {
        layout_usage(self.layout.as_ref())
    }

    /// The pids in the instance's cgroup (for the sweep and for checks).
    pub fn pids(&self) -> Vec<i32> {
        let Some(dir) = self.dirs().into_iter().next() else {
            return Vec::new();
        };
        read_pids(&dir)
    }

    /// Remove the directories (after every process is gone). Killing what is left first.
    pub fn remove(&self) {
        remove_dirs(&self.dirs());
    }

    /// The directories, for the record a later sweep reads.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs()
    }
}

fn mkdir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn read_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kill whatever is still in these cgroups (thawing first: a frozen task does not die), then
/// remove them, and their per-server parent once empty.
pub fn remove_dirs(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let pids = read_pids(dir);
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(dir);
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Where this server's per-server cgroup directories are made, one per hierarchy it uses:
/// its own cgroup in each.
fn bases() -> Vec<PathBuf> {
    cgroup_mounts()
        .into_iter()
        .filter_map(|m| {
            let own = if m.v2 {
                own_cgroup_path(None)
            } else {
                m.controllers
                    .iter()
                    .find(|c| V1_CONTROLLERS.contains(&c.as_str()))
                    .and_then(|c| own_cgroup_path(Some(c)))
            }?;
            Some(m.mount_point.join(own))
        })
        .collect()
}

/// Whether `path` is an instance cgroup a kitbag-vm server makes, for instance `id`:
/// `<one of our bases>/kitbag-vm-<pid>/<id>`, written plainly (no `..`). A record naming
/// anything else is not acted on.
pub fn is_instance_dir(path: &Path, id: &str) -> bool {
    use std::path::Component;
    if !path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        || path.file_name().and_then(|n| n.to_str()) != Some(id)
    {
        return false;
    }
    let Some(server_dir) = path.parent() else {
        return false;
    };
    let named_like_ours = server_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("kitbag-vm-"))
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    named_like_ours
        && server_dir
            .parent()
            .is_some_and(|b| bases().iter().any(|o| o == b))
}

/// Per-server cgroup directories left by servers that are gone (SIGKILL): kill what is in
/// them and remove them. Returns how many were removed.
pub fn sweep_stale() -> usize {
    let mut removed = 0;
    for base in bases() {
        let Ok(rd) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("kitbag-vm-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let children: Vec<PathBuf> = std::fs::read_dir(e.path())
                .map(|rd| {
                    rd.flatten()
                        .filter(|c| c.path().is_dir())
                        .map(|c| c.path())
                        .collect()
                })
                .unwrap_or_default();
            remove_dirs(&children);
            let _ = std::fs::remove_dir(e.path());
            removed += 1;
        }
    }
    removed
}

/// What the processes in a layout's cgroups use.
fn layout_usage(layout: Option<&Layout>) -> Usage {
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    match layout {
        Some(Layout::V2(d)) => Usage {
            memory_bytes: read(d.join("memory.current")),
            pids: read(d.join("pids.current")),
            cpu_seconds: std::fs::read_to_string(d.join("cpu.stat"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("usage_usec "))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .map(|us| us / 1e6)
                }),
        },
        Some(Layout::V1(dirs)) => {
            let dir = |ctl: &str| dirs.iter().find(|(c, _)| *c == ctl).map(|(_, d)| d.clone());
            Usage {
                memory_bytes: dir("memory").and_then(|d| read(d.join("memory.usage_in_bytes"))),
                pids: dir("pids").and_then(|d| read(d.join("pids.current"))),
                cpu_seconds: dir("cpuacct")
                    .and_then(|d| read(d.join("cpuacct.usage")))
                    .map(|ns| ns as f64 / 1e9),
            }
        }
        None => Usage::default(),
    }
}

/// What the cgroups of another process (a container's first process) use: its cgroup paths
/// from `/proc/<pid>/cgroup` under this namespace's mounts. Read only; nothing is created or
/// removed.
pub fn usage_of(pid: i32) -> Usage {
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Usage::default();
    };
    let mounts = cgroup_mounts();
    let path_of = |want: Option<&str>| kitbag_shared::contain::cgroup_path_in(&own, want);
    let v2 = mounts.iter().find(|m| m.v2).and_then(|m| {
        let dir = m.mount_point.join(path_of(None)?);
        dir.join("memory.current").exists().then_some(dir)
    });
    let layout = match v2 {
        Some(d) => Layout::V2(d),
        None => Layout::V1(
            ["memory", "pids", "cpuacct"]
                .into_iter()
                .filter_map(|ctl| {
                    let m = mounts
                        .iter()
                        .find(|m| !m.v2 && m.controllers.iter().any(|c| c == ctl))?;
                    Some((ctl, m.mount_point.join(path_of(Some(ctl))?)))
                })
                .collect(),
        ),
    };
    layout_usage(Some(&layout))
}
