//! Containing the commands a server runs (shell, cron), so that every process a command
//! starts can be found and killed — including the ones that leave its process group
//! (`setsid -f`, `setsid cmd &`, `setpgid(0, 0)`).
//!
//! Three layers, strongest first:
//!
//! - **cgroup v2** (`cgroup.kill`): each command gets `<server's cgroup>/kitbag-<name>-<pid>/job-N`;
//!   the shell is moved in right after spawn and moves itself in before running the command.
//! - **cgroup v1 freezer**: `/sys/fs/cgroup/freezer/<server's>/kitbag-<name>-<pid>/job-N`;
//!   frozen, every member SIGKILLed, thawed.
//! - **subreaper + environment tag**, always on: the server is a child subreaper, so orphans
//!   of a command are re-parented to it rather than to init, and every command's processes
//!   inherit `KITBAG_JOB=<tag>`; the sweep finds them by reading `/proc/<pid>/environ`. A
//!   process that rewrites its environment block (or execs with a cleared environment) after
//!   leaving the process group is no longer told apart by job; see escapees below.
//!
//! **Escapees.** Root can leave any cgroup (write its pid to another `cgroup.procs`); a cgroup
//! namespace does not stop that (the kernel confines migrations to the namespace only on a
//! cgroup2 mount with `nsdelegate`, never on v1, and root can `setns` back), so membership
//! alone is not the answer as root. The process tree is: while the server (a subreaper) lives,
//! everything a command starts stays its descendant, whatever cgroup or environment it has.
//! A child of the server that the server did not spawn, outside its job cgroups and without
//! its tag, is an escapee and is killed with everything below it — when any job ends, every
//! 2 s on the reaper thread, and at exit (where every descendant goes). An ordinary user
//! cannot leave the cgroup except within a subtree delegated to it; the same rule covers that.
//!
//! Zombies re-parented to the server are reaped here, only by pid and only when they are not
//! a direct child that tokio or the shell's pump waits on (see [`ChildReg`]).

use crate::lock::LockExt;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// The environment variable every contained command's processes inherit.
pub const JOB_VAR: &str = "KITBAG_JOB";
/// `auto` (default): the strongest layer available; `cgroup-v1`: skip cgroup v2;
/// `subreaper`: skip cgroups.
pub const MODE_VAR: &str = "KITBAG_CONTAIN";

/// How a command is contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    CgroupV2,
    CgroupV1Freezer,
    Subreaper,
    /// Not a subreaper (prctl failed): orphans go to init, found by the tag alone.
    EnvTag,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::CgroupV2 => "cgroup-v2",
            Kind::CgroupV1Freezer => "cgroup-v1-freezer",
            Kind::Subreaper => "subreaper",
            Kind::EnvTag => "env-tag",
        }
    }

    pub fn is_cgroup(self) -> bool {
        matches!(self, Kind::CgroupV2 | Kind::CgroupV1Freezer)
    }
}

#[derive(Debug, Clone)]
enum Base {
    V2(PathBuf),
    V1(PathBuf),
}

/// The server-wide container: the subreaper flag, the cgroup base, the tag prefix.
pub struct Container {
    subreaper: bool,
    base: Option<Base>,
    /// Why there is no cgroup (for the note).
    why_not: String,
    prefix: String,
    seq: AtomicU64,
}

static GLOBAL: OnceLock<Container> = OnceLock::new();
static CHILDREN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// The server's container, set up on first use (`name` names the cgroup directory).
pub fn container(name: &str) -> &'static Container {
    GLOBAL.get_or_init(|| Container::new(name))
}

/// The container, if [`init_server`] (or [`container`]) set one up.
pub fn current() -> Option<&'static Container> {
    GLOBAL.get()
}

/// Make this process the server it is: a container, and a thread that reaps re-parented
/// orphans every few seconds. Call once at start.
pub fn init_server(name: &str) -> &'static Container {
    let c = container(name);
    if c.subreaper {
        let _ = std::thread::Builder::new()
            .name("kitbag-reaper".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(2));
                    // An escapee of a job that is still running is adopted when its parent
                    // exits; found here rather than only when some job ends.
                    c.stop_escapees();
                    reap_orphans();
                }
            });
    }
    c
}

impl Container {
    fn new(name: &str) -> Container {
        let subreaper = set_subreaper();
        let me = std::process::id();
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000_000)
            .unwrap_or(0);
        let mode = std::env::var(MODE_VAR).unwrap_or_default();
        let (base, why_not) = if mode == "subreaper" {
            (None, format!("cgroups skipped ({MODE_VAR}=subreaper)"))
        } else {
            probe_cgroup(&format!("kitbag-{name}-{me}"), mode != "cgroup-v1")
        };
        Container {
            subreaper,
            base,
            why_not,
            prefix: format!("{name}-{me}-{nonce}-"),
            seq: AtomicU64::new(0),
        }
    }

    /// The containment new jobs get (before a cgroup move can fail).
    pub fn kind(&self) -> Kind {
        match (&self.base, self.subreaper) {
            (Some(Base::V2(_)), _) => Kind::CgroupV2,
            (Some(Base::V1(_)), _) => Kind::CgroupV1Freezer,
            (None, true) => Kind::Subreaper,
            (None, false) => Kind::EnvTag,
        }
    }

    /// A new job: its tag, and its cgroup where one can be made.
    pub fn job(&self) -> Job {
        let n = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let tag = format!("{}{n}", self.prefix);
        let mut note = None;
        let cgroup = match &self.base {
            Some(b) => {
                let (base, v2) = match b {
                    Base::V2(p) => (p, true),
                    Base::V1(p) => (p, false),
                };
                let dir = base.join(format!("job-{n}"));
                match make_base(base).and_then(|()| std::fs::create_dir(&dir)) {
                    Ok(()) => Some((dir, v2)),
                    Err(e) => {
                        note = Some(format!("cannot create {}: {e}", dir.display()));
                        None
                    }
                }
            }
            None => {
                note = Some(self.why_not.clone());
                None
            }
        };
        Job {
            tag,
            subreaper: self.subreaper,
            cgroup: Mutex::new(cgroup),
            note: Mutex::new(note),
        }
    }

    /// The cgroup every job's cgroup lives under, if there is one.
    fn base_dir(&self) -> Option<&Path> {
        match &self.base {
            Some(Base::V2(p) | Base::V1(p)) => Some(p),
            None => None,
        }
    }

    /// Kill the escapees among this server's descendants (see [`escapees`]).
    fn stop_escapees(&self) {
        if self.subreaper {
            stop_escapees(self.base_dir(), &self.prefix, false);
        }
    }

    /// Server exit: kill every process of every job this server ran, remove its cgroups.
    pub fn shutdown(&self) {
        if let Some(b) = &self.base {
            let (dir, v2) = match b {
                Base::V2(p) => (p.clone(), true),
                Base::V1(p) => (p.clone(), false),
            };
            cgroup_kill(&dir, v2);
            remove_tree(&dir);
        }
        sweep_kill(&format!("{JOB_VAR}={}", self.prefix));
        // Then whatever is left of the server's descendants, contained or not: none of them
        // may outlive the server, and one that left its cgroup and cleared its environment
        // is found only this way.
        if self.subreaper {
            stop_escapees(self.base_dir(), &self.prefix, true);
        }
        reap_orphans();
    }
}

fn set_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Find a writable cgroup to put jobs under: v2 first, then the v1 freezer.
fn probe_cgroup(dirname: &str, try_v2: bool) -> (Option<Base>, String) {
    let mut why = Vec::new();
    let mut v2_mount = None;
    let mut freezer_mount = None;
    for m in cgroup_mounts() {
        if m.v2 && v2_mount.is_none() {
            v2_mount = Some(m.mount_point);
        } else if !m.v2 && m.controllers.iter().any(|c| c == "freezer") {
            freezer_mount = Some(m.mount_point);
        }
    }
    if !try_v2 {
        v2_mount = None;
        why.push(format!("cgroup v2 skipped ({MODE_VAR}=cgroup-v1)"));
    }
    match (v2_mount, own_cgroup_path(None)) {
        (Some(m), Some(p)) => {
            let dir = m.join(p).join(dirname);
            remove_stale(&dir, true);
            match make_base(&dir) {
                Ok(()) if dir.join("cgroup.kill").exists() => {
                    // Made again by the first job: a server that runs no command leaves none.
                    let _ = std::fs::remove_dir(&dir);
                    return (Some(Base::V2(dir)), String::new());
                }
                Ok(()) => {
                    why.push("cgroup v2 has no cgroup.kill (kernel before 5.14)".to_string());
                    let _ = std::fs::remove_dir(&dir);
                }
                Err(e) => why.push(format!("cgroup v2 not writable ({e})")),
            }
        }
        _ if try_v2 => why.push("no cgroup v2 mount".into()),
        _ => {}
    }
    match (freezer_mount, own_cgroup_path(Some("freezer"))) {
        (Some(m), Some(p)) => {
            let dir = m.join(p).join(dirname);
            remove_stale(&dir, false);
            match make_base(&dir) {
                Ok(()) if dir.join("freezer.state").exists() => {
                    let _ = std::fs::remove_dir(&dir);
                    return (Some(Base::V1(dir)), String::new());
                }
                Ok(()) => {
                    why.push("cgroup v1 freezer directory has no freezer.state".into());
                    let _ = std::fs::remove_dir(&dir);
                }
                Err(e) => why.push(format!("cgroup v1 freezer not writable ({e})")),
            }
        }
        _ => why.push("no cgroup v1 freezer".into()),
    }
    (None, why.join("; "))
}

/// A mounted cgroup hierarchy.
#[derive(Debug, Clone)]
pub struct CgroupMount {
    pub mount_point: PathBuf,
    /// cgroup2 (the unified hierarchy) rather than a v1 hierarchy.
    pub v2: bool,
    /// v1: the controllers this hierarchy carries (`memory`, `pids`, `cpu`, `freezer`, …).
    pub controllers: Vec<String>,
}

/// Every cgroup hierarchy mounted in this process's mount namespace (from mountinfo).
pub fn cgroup_mounts() -> Vec<CgroupMount> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // mountinfo: id parent maj:min root mountpoint opts ... - fstype source superopts
    let mut out = Vec::new();
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let v2 = match r[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        out.push(CgroupMount {
            mount_point: PathBuf::from(unescape(l[4])),
            v2,
            controllers: r[2].split(',').map(str::to_string).collect(),
        });
    }
    out
}

/// This process's path in a hierarchy (no leading `/`): v2 when `controller` is `None`,
/// else the v1 hierarchy carrying that controller.
pub fn own_cgroup_path(controller: Option<&str>) -> Option<String> {
    cgroup_path_in(
        &std::fs::read_to_string("/proc/self/cgroup").ok()?,
        controller,
    )
}

/// A process's path in a hierarchy, from its `/proc/<pid>/cgroup` text (no leading `/`): v2
/// when `controller` is `None`, else the v1 hierarchy carrying that controller.
pub fn cgroup_path_in(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (id, ctl, path) = (it.next()?, it.next()?, it.next()?);
        let hit = match controller {
            None => id == "0" && ctl.is_empty(),
            Some(c) => ctl.split(',').any(|x| x == c),
        };
        hit.then(|| path.trim_start_matches('/').to_string())
    })
}

/// Siblings `kitbag-<name>-<pid>` of `dir` left by a server that died without cleaning up
/// (SIGKILL): what is still in them is killed, the directories removed.
fn remove_stale(dir: &Path, v2: bool) {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return;
    };
    let Some(stem) = name.rsplit_once('-').map(|(s, _)| format!("{s}-")) else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name();
        let Some(pid) = n
            .to_str()
            .and_then(|n| n.strip_prefix(&stem))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            cgroup_kill(&e.path(), v2);
            remove_tree(&e.path());
        }
    }
}

fn make_base(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// One command's containment.
pub struct Job {
    tag: String,
    subreaper: bool,
    /// The job's cgroup and whether it is v2; None once a move failed.
    cgroup: Mutex<Option<(PathBuf, bool)>>,
    note: Mutex<Option<String>>,
}

impl Job {
    /// `(JOB_VAR, tag)`: set it on the command, after the caller's own variables.
    pub fn env(&self) -> (&'static str, &str) {
        (JOB_VAR, &self.tag)
    }

    /// A shell prefix that moves the shell into the cgroup before it runs anything (closes
    /// the gap between spawn and [`Job::attach`]). Empty without a cgroup.
    pub fn shell_prefix(&self) -> String {
        match &*lock(&self.cgroup) {
            Some((dir, _)) => {
                let p = dir.join("cgroup.procs").display().to_string();
                format!("echo $$ >'{}' 2>/dev/null; ", p.replace('\'', "'\\''"))
            }
            None => String::new(),
        }
    }

    /// Move `pid` (the freshly spawned shell) into the job's cgroup. On failure the job
    /// falls back to the subreaper layer and says why in its note.
    pub fn attach(&self, pid: i32) {
        let mut cg = lock(&self.cgroup);
        let Some((dir, _)) = &*cg else { return };
        let res = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .and_then(|mut f| f.write_all(pid.to_string().as_bytes()));
        if let Err(e) = res {
            // ESRCH: it already exited; the shell prefix put it in or there is nothing left.
            if e.raw_os_error() != Some(nix::libc::ESRCH) {
                *lock(&self.note) = Some(format!(
                    "cannot move the command into {}: {e}",
                    dir.display()
                ));
                let _ = std::fs::remove_dir(dir);
                *cg = None;
            }
        }
    }

    pub fn kind(&self) -> Kind {
        match &*lock(&self.cgroup) {
            Some((_, true)) => Kind::CgroupV2,
            Some((_, false)) => Kind::CgroupV1Freezer,
            None if self.subreaper => Kind::Subreaper,
            None => Kind::EnvTag,
        }
    }

    /// Why containment is weaker than a cgroup, if it is.
    pub fn note(&self) -> Option<String> {
        if self.kind().is_cgroup() {
            return None;
        }
        let why = lock(&self.note).clone().unwrap_or_default();
        let (limit, shed) = match self.kind() {
            Kind::EnvTag => (
                "not a subreaper either: orphans go to init and",
                "and escape",
            ),
            _ => (
                "descendants that left the process group",
                "(an orphan without it is stopped when any command ends)",
            ),
        };
        Some(format!(
            "containment is {} rather than a cgroup ({why}); {limit} are found by the {JOB_VAR} environment tag, which a process that rewrites its environment can shed {shed}",
            self.kind().as_str()
        ))
    }

    /// Every live process of the job. With a cgroup its member list is the answer (only a
    /// privileged process can leave it); without one, `/proc/*/environ` is searched for the tag.
    pub fn members(&self) -> Vec<i32> {
        let mut out = match &*lock(&self.cgroup) {
            Some((dir, _)) => {
                let mut pids = cgroup_pids(dir);
                pids.retain(|&p| alive(p));
                return pids;
            }
            None => Vec::new(),
        };
        for p in tagged(&self.needle()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out.retain(|&p| alive(p));
        out
    }

    pub fn alive(&self) -> bool {
        !self.members().is_empty()
    }

    fn needle(&self) -> String {
        format!("{JOB_VAR}={}\0", self.tag)
    }

    /// Send `sig` to every process of the job.
    pub fn signal(&self, sig: Signal) {
        for p in self.members() {
            let _ = kill(Pid::from_raw(p), sig);
        }
    }

    /// SIGTERM every process of the job, `grace` to exit, then SIGKILL whatever is left.
    /// Returns true when SIGKILL was needed.
    pub fn terminate(&self, grace: Duration) -> bool {
        let members = self.members();
        if members.is_empty() {
            self.cleanup();
            return false;
        }
        if crate::process::stop(self, grace) {
            self.kill();
            return true;
        }
        self.cleanup();
        false
    }

    /// SIGKILL every process of the job now, and remove its cgroup.
    pub fn kill(&self) {
        if let Some((dir, v2)) = &*lock(&self.cgroup) {
            cgroup_kill(dir, *v2);
        }
        self.cleanup();
    }

    /// The job has ended: what is left outside its cgroup goes too — processes still carrying
    /// its tag (a root process can leave the cgroup and keep its environment) and the server's
    /// escapees (a root process that left the cgroup and cleared its environment).
    fn cleanup(&self) {
        sweep_kill(&self.needle());
        if let Some(c) = current() {
            c.stop_escapees();
        }
        reap_orphans();
        if let Some((dir, _)) = &*lock(&self.cgroup)
            && cgroup_pids(dir).is_empty()
        {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some((dir, _)) = &*lock(&self.cgroup) {
            remove_tree(dir);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.locked()
}

/// Pids in a cgroup and its sub-cgroups.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(cgroup_pids(&e.path()));
            }
        }
    }
    out
}

fn write(path: &Path, what: &str) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(what.as_bytes()))
        .is_ok()
}

/// Kill everything in a cgroup: `cgroup.kill` on v2 (falling back to a kill loop), freeze +
/// kill + thaw on the v1 freezer. Waits (bounded) until it is empty.
fn cgroup_kill(dir: &Path, v2: bool) {
    if cgroup_pids(dir).is_empty() {
        return;
    }
    if v2 {
        write(&dir.join("cgroup.kill"), "1");
    } else {
        let state = dir.join("freezer.state");
        if write(&state, "FROZEN") {
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until
                && std::fs::read_to_string(&state).is_ok_and(|s| s.trim() != "FROZEN")
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let pids: Vec<i32> = cgroup_pids(dir).into_iter().filter(|&p| alive(p)).collect();
        if pids.is_empty() || Instant::now() > until {
            break;
        }
        for p in pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        if !v2 {
            write(&dir.join("freezer.state"), "THAWED");
        }
        reap_orphans();
        std::thread::sleep(Duration::from_millis(10));
    }
    if !v2 {
        write(&dir.join("freezer.state"), "THAWED");
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Live processes whose environment holds `needle` (`VAR=value\0`, or a prefix of one).
fn tagged(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    live_pids()
        .into_iter()
        .filter(|&p| p != me && has_tag(p, needle))
        .collect()
}

/// Whether `pid`'s environment holds `needle` (as [`tagged`]).
fn has_tag(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|&b| b == 0)
            .any(|var| with_nul_matches(var, needle.as_bytes()))
    })
}

/// Every pid in /proc.
fn live_pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// `var` (without its NUL) matches `needle`: exactly when the needle ends in NUL, else by prefix.
fn with_nul_matches(var: &[u8], needle: &[u8]) -> bool {
    match needle.split_last() {
        Some((0, exact)) => var == exact,
        _ => var.starts_with(needle),
    }
}

/// SIGKILL every process carrying the tag until none is left (bounded: forks race the scan).
fn sweep_kill(needle: &str) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let pids: Vec<i32> = tagged(needle).into_iter().filter(|&p| alive(p)).collect();
        if pids.is_empty() || Instant::now() > until {
            break;
        }
        for p in pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
        reap_orphans();
    }
}

/// Kill the server's escapees (see [`escapees`]), or with `all` every descendant of the server,
/// each stopped before it is killed so that a forking tree cannot outrun the sweep. Bounded,
/// like [`sweep_kill`].
fn stop_escapees(base: Option<&Path>, prefix: &str, all: bool) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let pids = escapees(base, prefix, all);
        if pids.is_empty() || Instant::now() > until {
            break;
        }
        for sig in [Signal::SIGSTOP, Signal::SIGKILL] {
            for &p in &pids {
                let _ = kill(Pid::from_raw(p), sig);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
        reap_orphans();
    }
}

/// The server's escapees: live children of the server that it did not spawn itself (orphans
/// of commands, re-parented to it because it is a subreaper) and that are neither in the
/// server's job cgroups (`base`) nor carry a job tag of this server (`prefix`) — with
/// everything they started since. With `all`, every live descendant of the server.
///
/// Why this finds them: while the server lives, every process a command starts stays its
/// descendant — a process cannot choose its parent, and its orphans go to the nearest
/// subreaper — whatever cgroup it moves to and whatever environment it execs with.
fn escapees(base: Option<&Path>, prefix: &str, all: bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    let table: Vec<(i32, i32)> = live_pids()
        .into_iter()
        .filter_map(|p| {
            crate::proc_stat::read(p)
                .filter(|s| s.running())
                .map(|s| (p, s.ppid))
        })
        .collect();
    let mut roots: Vec<i32> = {
        // The spawners register their child under this lock: a child of the server that
        // is not registered after the snapshot was not spawned by it.
        let children = lock(&CHILDREN);
        table
            .iter()
            .filter(|&&(p, pp)| pp == me && (all || !children.contains(&p)))
            .map(|&(p, _)| p)
            .collect()
    };
    if roots.is_empty() {
        return roots;
    }
    if !all {
        let in_cgroups: BTreeSet<i32> = base
            .map(cgroup_pids)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let tag = format!("{JOB_VAR}={prefix}");
        roots.retain(|&p| !in_cgroups.contains(&p) && !has_tag(p, &tag));
    }
    // The roots and everything below them.
    let mut out = roots;
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            table
                .iter()
                .filter(|&&(_, pp)| pp == parent)
                .map(|&(p, _)| p),
        );
        i += 1;
    }
    out
}

/// Whether `pid` is a live process (not a zombie).
pub fn alive(pid: i32) -> bool {
    crate::proc_stat::running(pid)
}

/// A direct child some other code waits on (a tokio `Child`, the shell's pidfd pump): the
/// reaper leaves its exit status alone while this lives. Take [`ChildReg::lock`] before
/// spawning and [`ChildReg::register`] the pid under it, so the reaper never sees the child
/// unregistered.
pub struct ChildReg(i32);

impl ChildReg {
    pub fn lock() -> MutexGuard<'static, BTreeSet<i32>> {
        lock(&CHILDREN)
    }

    pub fn register(guard: &mut MutexGuard<'static, BTreeSet<i32>>, pid: i32) -> ChildReg {
        guard.insert(pid);
        ChildReg(pid)
    }
}

impl Drop for ChildReg {
    fn drop(&mut self) {
        lock(&CHILDREN).remove(&self.0);
    }
}

/// Reap zombies re-parented to this process: children that are not registered and that
/// left this process's group or session (so never a child some other code spawned plainly).
pub fn reap_orphans() {
    let me = std::process::id() as i32;
    let Some(mine) = crate::proc_stat::read(me) else {
        return;
    };
    let children = lock(&CHILDREN);
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Some(st) = crate::proc_stat::read(pid) else {
            continue;
        };
        if st.state == 'Z'
            && st.ppid == me
            && !children.contains(&pid)
            && (st.pgrp != mine.pgrp || st.session != mine.session)
        {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// A job stops the one way every process does ([`crate::process::stop`]): gone once none of
/// its processes is left.
impl crate::process::Stoppable for Job {
    fn signal(&self, signal: Signal) {
        Job::signal(self, signal);
    }

    fn alive(&self) -> bool {
        Job::alive(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn needle_matching() {
        assert!(with_nul_matches(b"KITBAG_JOB=a-1", b"KITBAG_JOB=a-1\0"));
        assert!(!with_nul_matches(b"KITBAG_JOB=a-12", b"KITBAG_JOB=a-1\0"));
        assert!(with_nul_matches(b"KITBAG_JOB=a-12", b"KITBAG_JOB=a-"));
    }
}
