//! The embedded default backend: a bubblewrap sandbox with the agent as its first process.
//!
//! Start-up (verified pieces in vm.md §2.1): bwrap is told to report its child's pid on a
//! status pipe and to wait on a block pipe; the server moves that child into the instance's
//! cgroups, starts slirp4netns for outbound networking, then releases it. Ready when the
//! agent answers a ping on its socket.

use crate::backend::Backend;
use futures::future::BoxFuture;
use kitbag_shared::lock::LockExt;
use std::io::{BufRead, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::agent_link::{AgentPeer, connect_agent, open_ctl};
use crate::cgroup::InstanceCgroups;
use crate::disk::DiskInfo;
use crate::error::{VmError, VmResult};
use crate::instance_dir::{self, backend_log};
use crate::proto::{AGENT_SOCKET, ExitStatus, Request, Stream};
use crate::spawner::Spawner;
use kitbag_shared::proc_stat::{is_root, start_time};

mod command;

pub use command::{
    AGENT_ALONE, AGENT_EXE, AGENT_LIB, SandboxSpec, host_loader, instance_env, overlay_dirs,
    state_cover, write_main_spec,
};
use command::{WorkDisk, bwrap_command, guest_join, prepare_dirs};

/// What a later server needs to clean up after this one died (`record.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub server_pid: u32,
    /// The server's start time (`/proc/<pid>/stat`): the processes it started are younger.
    #[serde(default)]
    pub server_start: u64,
    /// (pid, starttime from /proc/<pid>/stat) of bwrap and slirp4netns.
    pub processes: Vec<(i32, u64)>,
    pub cgroups: Vec<PathBuf>,
    #[serde(default)]
    pub lost: bool,
}

/// A running sandbox.
pub struct Sandbox {
    pub id: String,
    pub dir: PathBuf,
    /// The outer bwrap process (our child).
    bwrap_pid: i32,
    /// The sandbox's first process, as the host sees it.
    pub child_pid: i32,
    cgroups: InstanceCgroups,
    /// The control directory, opened once: the agent socket is reached through it.
    ctl_fd: OwnedFd,
    /// Who may answer on the agent socket: the first process of the sandbox's child.
    peer: AgentPeer,
    slirp: Mutex<Option<Child>>,
    exit: watch::Receiver<Option<ExitStatus>>,
    frozen: Mutex<bool>,
    /// `/work`'s size limit, when one was asked for.
    disk: Option<DiskInfo>,
}

/// Whether bubblewrap is usable here, with a human-readable detail.
pub fn probe() -> (bool, String) {
    match Command::new("bwrap").arg("--version").output() {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let trial = Command::new("bwrap")
                .args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--unshare-all",
                    "--die-with-parent",
                    "true",
                ])
                .stderr(Stdio::piped())
                .output();
            match trial {
                Ok(t) if t.status.success() => (true, format!("{version}; namespaces ok")),
                Ok(t) => (
                    false,
                    format!(
                        "{version} cannot create namespaces here: {} (user namespaces disabled, or an AppArmor/seccomp policy)",
                        String::from_utf8_lossy(&t.stderr).trim()
                    ),
                ),
                Err(e) => (false, format!("{version}: {e}")),
            }
        }
        _ => (
            false,
            "bubblewrap (bwrap) is not installed: apt-get install bubblewrap".into(),
        ),
    }
}

/// A program that did not run: `missing` (how to install it) when it is not there.
fn run_failed(e: std::io::Error, program: &str, missing: &str) -> VmError {
    if e.kind() == std::io::ErrorKind::NotFound {
        VmError::missing(missing)
    } else {
        VmError::io(format!("cannot run {program}"), e)
    }
}

/// A start that failed after bwrap ran: kill it, drop its cgroups, and tell why with the
/// tail of its log.
fn start_failed(
    bwrap_pid: i32,
    msg: String,
    spec: &SandboxSpec,
    cgroups: &InstanceCgroups,
) -> VmError {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bwrap_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    cgroups.remove();
    let log = instance_dir::tail_server_file(&backend_log(&spec.dir), 2048);
    VmError::Engine(if log.is_empty() {
        msg
    } else {
        format!("{msg}: {log}")
    })
}

impl Sandbox {
    /// Start a sandbox and wait until its agent answers (at most `timeout`).
    pub async fn start(
        spec: SandboxSpec,
        spawner: &Spawner,
        timeout: Duration,
    ) -> VmResult<Arc<Sandbox>> {
        // Each step's time since the start, for the debug log (profiling a slow start).
        let t0 = Instant::now();
        let mut steps: Vec<(&str, u128)> = Vec::with_capacity(8);
        let mut mark = |step| steps.push((step, t0.elapsed().as_micros()));
        let disk = match spec.limits.disk_mb {
            Some(mb) => Some(WorkDisk::choose(&spec.dir, mb).await),
            None => None,
        };
        // The directories, the log and bwrap's arguments (which list the root): one trip to
        // a blocking thread for all of it.
        let (ctl_fd, log, mut cmd) = {
            let (spec, disk) = (spec.clone(), disk.clone());
            tokio::task::spawn_blocking(move || -> VmResult<_> {
                let ctl_fd = open_ctl(&prepare_dirs(&spec)?)?;
                let log = std::fs::File::create(backend_log(&spec.dir))
                    .map_err(|e| VmError::io("backend.log", e))?;
                Ok((ctl_fd, log, bwrap_command(&spec, disk.as_ref())?))
            })
            .await
            .map_err(|e| VmError::engine(format!("preparing the sandbox failed: {e}")))??
        };
        mark("prepared");
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(log);
        let mut child = spawner.spawn(cmd).await.map_err(|e| {
            run_failed(
                e,
                "bwrap",
                "bwrap is not installed (apt-get install bubblewrap)",
            )
        })?;
        let bwrap_pid = child.id() as i32;
        mark("spawned");
        let (Some(mut block), Some(status)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(VmError::engine("bwrap's pipes were not set up"));
        };
        // The monitor thread reads bwrap's status lines and waits for it; it is not the
        // spawning thread, so its lifetime does not matter to --die-with-parent.
        let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<Option<i32>>();
        let (exit_tx, exit_rx) = watch::channel(None);
        let dir = spec.dir.clone();
        std::thread::Builder::new()
            .name(format!("vm-{}", spec.id))
            .spawn(move || monitor(child, status, pid_tx, exit_tx, dir))
            .map_err(|e| VmError::io("the monitor thread", e))?;
        // bwrap waits on its block pipe before it starts anything inside: the cgroups are
        // made meanwhile (~0.7 ms), and joined before it is released.
        let cgroups = InstanceCgroups::create(&spec.id, spec.limits);
        mark("cgroups");
        let fail =
            |msg: String, cgroups: &InstanceCgroups| start_failed(bwrap_pid, msg, &spec, cgroups);
        let child_pid = match tokio::time::timeout(timeout, pid_rx).await {
            Ok(Ok(Some(pid))) => pid,
            _ => return Err(fail("bwrap did not start".into(), &cgroups)),
        };
        mark("child");
        if let Err(e) = cgroups.attach(child_pid) {
            // A child that already ended (bwrap failed a mount) fails the start below with
            // bwrap's own message; only a live child running without its limits is news.
            if kitbag_shared::proc_stat::running(child_pid) {
                tracing::warn!(instance = spec.id, "cgroup attach failed: {e}");
            } else {
                tracing::debug!(
                    instance = spec.id,
                    "cgroup attach: the child has ended: {e}"
                );
            }
        }
        let slirp = if spec.outbound {
            match start_slirp(spawner, child_pid, &spec.dir).await {
                Ok(c) => Some(c),
                Err(e) => return Err(fail(e.to_string(), &cgroups)),
            }
        } else {
            None
        };
        if block.write_all(b"1").is_err() {
            return Err(fail("bwrap ended before it was released".into(), &cgroups));
        }
        drop(block);
        let sandbox = Arc::new(Sandbox {
            id: spec.id.clone(),
            dir: spec.dir.clone(),
            bwrap_pid,
            child_pid,
            cgroups,
            ctl_fd,
            peer: AgentPeer::new(Some(child_pid)),
            slirp: Mutex::new(slirp),
            exit: exit_rx,
            frozen: Mutex::new(false),
            disk: disk.as_ref().map(WorkDisk::info),
        });
        mark("released");
        sandbox.write_record();
        let appeared = match sandbox.wait_for_agent(timeout).await {
            Ok(at) => at,
            Err(why) => {
                let msg = fail(why.into(), &sandbox.cgroups);
                sandbox.kill();
                return Err(msg);
            }
        };
        steps.push(("socket", appeared.duration_since(t0).as_micros()));
        steps.push(("answered", t0.elapsed().as_micros()));
        tracing::debug!(
            instance = spec.id,
            ?steps,
            "sandbox start: µs at the end of each step"
        );
        sandbox.check_mounts(&spec)?;
        if spec.command.is_some() {
            match sandbox.request(&Request::StartMain).await {
                Ok(a) if a.ok => {}
                other => {
                    sandbox.kill();
                    sandbox.cleanup();
                    return Err(VmError::engine(format!(
                        "the main command did not start: {other:?}"
                    )));
                }
            }
        }
        Ok(sandbox)
    }

    /// Ping the agent until it answers (and when its socket appeared, for the start's
    /// profile); why not, when the sandbox ends or `timeout` passes.
    async fn wait_for_agent(&self, timeout: Duration) -> Result<Instant, &'static str> {
        let deadline = Instant::now() + timeout;
        self.socket_appeared(deadline.min(Instant::now() + Duration::from_secs(1)))
            .await;
        let appeared = Instant::now();
        loop {
            if let Ok(a) = self.request(&Request::Ping).await
                && a.ok
            {
                return Ok(appeared);
            }
            if self.exit_status().is_some() || Instant::now() > deadline {
                return Err(if self.exit_status().is_some() {
                    "the sandbox ended during start-up"
                } else {
                    "the agent did not answer in time"
                });
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    }

    /// Whether the agent's socket appeared in the control directory before `until` (or the
    /// sandbox's end). It appears 1–2 ms after the release; watched in 100 µs steps on a
    /// blocking thread, since each of tokio's timer waits rounds up to a millisecond.
    async fn socket_appeared(&self, until: Instant) -> bool {
        use kitbag_shared::rustix::fs::{AtFlags, statat};
        let Ok(ctl) = self.ctl_fd.try_clone() else {
            return false;
        };
        let exit = self.exit.clone();
        tokio::task::spawn_blocking(move || {
            while Instant::now() < until && exit.borrow().is_none() {
                if statat(&ctl, AGENT_SOCKET, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            false
        })
        .await
        .unwrap_or(false)
    }

    /// bwrap binds mounts by path: a link swapped in after the server resolved a path
    /// would bind something else. Compare what is mounted with what was resolved; on a
    /// mismatch the sandbox is killed and removed before anything ran in it.
    fn check_mounts(&self, spec: &SandboxSpec) -> VmResult<()> {
        for (host, guest, _, want) in &spec.mounts {
            let inside = format!("/proc/{}/root{guest}", self.child_pid);
            let got = std::fs::metadata(&inside).map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            });
            // The state directory's cover must be in place (a tmpfs), whatever happened on
            // the host between the check and bwrap's mounts.
            let covered = state_cover(&spec.state_dir, host).is_none_or(|rel| {
                let cover = format!("/proc/{}/root{}", self.child_pid, guest_join(guest, &rel));
                nix::sys::statfs::statfs(cover.as_str())
                    .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
            });
            if got.as_ref().ok() != Some(want) || !covered {
                self.kill();
                self.cleanup();
                return Err(VmError::engine(format!(
                    "{} changed while the instance started (is it being replaced?); nothing ran",
                    host.display()
                )));
            }
        }
        Ok(())
    }

    fn write_record(&self) {
        let mut processes = vec![(self.bwrap_pid, start_time(self.bwrap_pid).unwrap_or(0))];
        if let Some(s) = self.slirp.locked().as_ref() {
            let pid = s.id() as i32;
            processes.push((pid, start_time(pid).unwrap_or(0)));
        }
        let record = Record {
            id: self.id.clone(),
            server_pid: std::process::id(),
            server_start: start_time(std::process::id() as i32).unwrap_or(0),
            processes,
            cgroups: self.cgroups.paths(),
            lost: false,
        };
        if let Ok(bytes) = serde_json::to_vec_pretty(&record) {
            let _ =
                kitbag_shared::atomic::write_atomic_volatile(&self.dir.join("record.json"), &bytes);
        }
    }

    /// Every process of the sandbox: the first process and its descendants.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = vec![self.child_pid];
        pids.extend(
            kitbag_shared::process::descendants(self.child_pid as u32)
                .into_iter()
                .map(|p| p as i32),
        );
        pids
    }

    fn signal_all(&self, sig: nix::sys::signal::Signal) {
        // Repeat until the set is stable: a process may fork while we signal.
        for _ in 0..3 {
            for pid in self.pids() {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    }
}

impl Backend for Sandbox {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn pid(&self) -> i32 {
        self.child_pid
    }

    fn exit(&self) -> &watch::Receiver<Option<ExitStatus>> {
        &self.exit
    }

    /// A connection to the agent, checked to be the agent (see [`crate::agent_link`]): the
    /// instance can write its control directory.
    fn agent(&self) -> BoxFuture<'_, std::io::Result<Stream>> {
        Box::pin(async move { connect_agent(&self.ctl_fd, &self.peer).await })
    }

    fn is_frozen(&self) -> bool {
        *self.frozen.locked()
    }

    /// Whether pause freezes (cgroup freezer) or stops processes with SIGSTOP.
    fn pause_method(&self) -> &'static str {
        if self.cgroups.has_freezer() {
            "freezer"
        } else {
            "sigstop"
        }
    }

    /// Freeze every process of the instance (agent included).
    fn pause(&self) -> VmResult<()> {
        if self.cgroups.has_freezer() {
            self.cgroups.set_frozen(true)?;
        } else {
            self.signal_all(nix::sys::signal::Signal::SIGSTOP);
        }
        *self.frozen.locked() = true;
        Ok(())
    }

    fn resume(&self) -> VmResult<()> {
        if self.cgroups.has_freezer() {
            self.cgroups.set_frozen(false)?;
        } else {
            self.signal_all(nix::sys::signal::Signal::SIGCONT);
        }
        {
            let mut f = self.frozen.locked();
            *f = false;
        }
        Ok(())
    }

    fn usage(&self) -> crate::cgroup::Usage {
        self.cgroups.usage()
    }

    fn limits_enforced(&self) -> (bool, Option<String>) {
        (self.cgroups.enforced, self.cgroups.note.clone())
    }

    fn disk(&self) -> Option<DiskInfo> {
        let mut d = self.disk.clone()?;
        d.used_mb = crate::disk::used_mb(Path::new(&format!("/proc/{}/root/work", self.child_pid)));
        Some(d)
    }

    /// With a size limit `/work` is a file system of the sandbox's own, not the host's
    /// directory.
    fn work_on_host(&self) -> bool {
        self.disk.is_none()
    }

    /// SIGKILL the sandbox: bwrap's --die-with-parent chain takes every process with it.
    fn kill(&self) {
        if self.is_frozen() {
            let _ = self.resume();
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.bwrap_pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// After the end: slirp4netns stopped, cgroups removed, the record and socket gone.
    fn cleanup(&self) {
        let slirp = self.slirp.locked().take();
        if let Some(mut s) = slirp {
            let _ = s.kill();
            let _ = s.wait();
        }
        self.cgroups.remove();
        let _ = std::fs::remove_file(self.dir.join("ctl").join(AGENT_SOCKET));
        let _ = std::fs::remove_file(self.dir.join("record.json"));
    }

    fn force_end(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.kill() })
    }
}

/// Read bwrap's status lines (the child's pid first), then wait for bwrap to end and publish
/// how the instance ended: the main command's own status when the agent wrote one.
fn monitor(
    mut child: Child,
    status: std::process::ChildStdout,
    pid_tx: tokio::sync::oneshot::Sender<Option<i32>>,
    exit_tx: watch::Sender<Option<ExitStatus>>,
    dir: PathBuf,
) {
    #[derive(Deserialize)]
    struct Line {
        #[serde(rename = "child-pid")]
        child_pid: Option<i32>,
    }
    let mut pid_tx = Some(pid_tx);
    let reader = std::io::BufReader::new(status);
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if let Ok(l) = serde_json::from_str::<Line>(&line)
            && let Some(pid) = l.child_pid
            && let Some(tx) = pid_tx.take()
        {
            let _ = tx.send(Some(pid));
        }
    }
    if let Some(tx) = pid_tx.take() {
        let _ = tx.send(None);
    }
    let waited = child
        .wait()
        .map(ExitStatus::from_std)
        .unwrap_or(ExitStatus {
            code: -1,
            signal: None,
        });
    // Written by the agent, in a directory the instance can write: read as untrusted.
    let main = instance_dir::read_guest_log(&dir, "main.exit", 4096)
        .ok()
        .and_then(|b| serde_json::from_slice::<ExitStatus>(&b).ok());
    let _ = exit_tx.send(Some(main.unwrap_or(waited)));
}

/// slirp4netns into the sandbox's network namespace (host loopback unreachable), told to exit
/// when its stdin — a pipe only this server holds — closes, so it never outlives the server.
async fn start_slirp(spawner: &Spawner, child_pid: i32, dir: &Path) -> VmResult<Child> {
    let own_userns = tokio::fs::read_link("/proc/self/ns/user").await.ok();
    let their_userns = tokio::fs::read_link(format!("/proc/{child_pid}/ns/user"))
        .await
        .ok();
    // The user namespace that owns the sandbox's network namespace: the one slirp4netns must
    // join. Not always the sandbox's own — bwrap mounting a devpts makes a second, nested
    // user namespace late in its setup, and slirp4netns joining that one was refused the
    // network namespace (setns: EPERM) whenever it started after that point. Held open until
    // slirp4netns has configured the network.
    let owner = if !is_root() || own_userns != their_userns {
        Some(crate::nsfd::owner_of_net_ns(child_pid).map_err(|e| {
            VmError::io("cannot find the user namespace of the sandbox's network", e)
        })?)
    } else {
        None
    };
    let mut cmd = Command::new("slirp4netns");
    cmd.args([
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--exit-fd=0",
    ]);
    // An unprivileged bwrap always makes a user namespace, and joining the network namespace
    // needs its owner (as root there may be none: then our own would be refused).
    if let Some(owner) = &owner {
        use std::os::fd::AsRawFd;
        cmd.arg(format!(
            "--userns-path=/proc/{}/fd/{}",
            std::process::id(),
            owner.as_raw_fd()
        ));
    }
    let log = tokio::fs::File::create(dir.join("slirp4netns.log"))
        .await
        .map_err(|e| VmError::io("slirp4netns.log", e))?
        .into_std()
        .await;
    cmd.arg(child_pid.to_string())
        .arg("tap0")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log);
    let mut child = spawner.spawn(cmd).await.map_err(|e| {
        run_failed(
            e,
            "slirp4netns",
            "network \"outbound\" needs slirp4netns: apt-get install slirp4netns",
        )
    })?;
    // Ready once tap0 is up with its address in the sandbox.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = tokio::fs::read_to_string(dir.join("slirp4netns.log"))
            .await
            .unwrap_or_default();
        if log.contains("starting slirp") || log.contains("sent tapfd") {
            let route = tokio::fs::read_to_string(format!("/proc/{child_pid}/net/route"))
                .await
                .unwrap_or_default();
            if route.lines().any(|l| l.starts_with("tap0")) {
                return Ok(child);
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            let log = instance_dir::tail_server_file(&dir.join("slirp4netns.log"), 1024);
            let hint = if log.contains("/dev/net/tun") && log.contains("Permission denied") {
                " — an ordinary user needs /dev/net/tun readable and writable by all (mode 0666, the usual default) for network \"outbound\""
            } else {
                ""
            };
            return Err(VmError::engine(format!(
                "slirp4netns exited ({st}): {log}{hint}"
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(VmError::engine(format!(
                "slirp4netns did not configure the network in 5 s: {}",
                instance_dir::tail_server_file(&dir.join("slirp4netns.log"), 1024)
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
