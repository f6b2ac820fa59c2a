//! Instances: their records, states, leases and ports, and the object tools return.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::cgroup::{Limits, Usage};
use crate::engine::Engine;
use crate::proto::ExitStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
// The variants' meanings are said on `InstanceInfo::state` (a doc comment here would be sent
// to the model with every `instance_list` filter, as a one-entry schema per value).
pub enum State {
    Starting,
    Running,
    Paused,
    Stopping,
    // Stopped by a request, its TTL or its idle policy (`stop_reason` says which).
    Stopped,
    // The main command ended by itself (`exit`).
    Exited,
    // It never came up (`failure`).
    Failed,
    // A server that ran it ended without stopping it; the next server cleaned up after it.
    Lost,
}

impl State {
    pub fn is_live(self) -> bool {
        matches!(
            self,
            State::Starting | State::Running | State::Paused | State::Stopping
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Paused => "paused",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
            State::Exited => "exited",
            State::Failed => "failed",
            State::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    // Loopback only. (Meanings on `InstanceInfo::network`, not here: see `State`.)
    #[default]
    None,
    // Outbound connections through slirp4netns; the host's loopback stays unreachable.
    Outbound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnIdle {
    #[default]
    Pause,
    Stop,
}

pub struct Lease {
    pub holder: String,
    pub reason: String,
    pub expires: SystemTime,
}

/// An exposed port: the server's loopback listener and its relays.
pub struct Port {
    pub host: String,
    pub host_port: u16,
    pub connections: Arc<AtomicUsize>,
    pub close: CancellationToken,
}

/// One instance, as the server keeps it.
pub struct Instance {
    pub id: String,
    pub name: Option<String>,
    /// The instance whose guest spawned this one (None: the top-level client did).
    pub owner: Option<String>,
    pub depth: u32,
    /// Closes the instance's guest socket (`/run/kitbag/vm.sock`) when it ends.
    pub guest_close: Option<CancellationToken>,
    pub state: State,
    pub created_at: SystemTime,
    pub started_at: Option<SystemTime>,
    pub ended_at: Option<SystemTime>,
    pub exit: Option<ExitStatus>,
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    /// `host` or the name of a root file system image.
    pub image: String,
    pub network: Network,
    pub labels: BTreeMap<String, String>,
    pub limits: Limits,
    pub dir: PathBuf,
    pub idle_timeout: u64,
    pub on_idle: OnIdle,
    pub last_activity: Instant,
    pub last_activity_at: SystemTime,
    pub idle_warned: bool,
    pub ttl_seconds: u64,
    pub ttl_deadline: Option<(Instant, SystemTime)>,
    pub ttl_warned: bool,
    pub sandbox: Option<Arc<Engine>>,
    /// The engine: `bwrap` or `qemu`.
    pub backend: &'static str,
    pub ports: BTreeMap<u16, Port>,
    pub leases: BTreeMap<String, Lease>,
    /// Foreground execs and copies in progress: they block the idle timer.
    pub busy: usize,
    pub job_seq: u64,
}

impl Instance {
    /// A record in `state` with nothing running yet: no sandbox, ports, leases, timers or
    /// limits; callers set what they know.
    pub fn new(id: String, dir: PathBuf, state: State) -> Instance {
        let now = SystemTime::now();
        Instance {
            id,
            name: None,
            owner: None,
            depth: 0,
            guest_close: None,
            state,
            created_at: now,
            started_at: None,
            ended_at: None,
            exit: None,
            error: None,
            stop_reason: None,
            command: None,
            cwd: "/work".into(),
            image: "host".into(),
            network: Network::None,
            labels: BTreeMap::new(),
            limits: Limits {
                memory_mb: 0,
                cpus: 0.0,
                pids: 0,
                disk_mb: None,
            },
            dir,
            idle_timeout: 0,
            on_idle: OnIdle::Pause,
            last_activity: Instant::now(),
            last_activity_at: now,
            idle_warned: false,
            ttl_seconds: 0,
            ttl_deadline: None,
            ttl_warned: false,
            sandbox: None,
            backend: "bwrap",
            ports: BTreeMap::new(),
            leases: BTreeMap::new(),
            busy: 0,
            job_seq: 0,
        }
    }

    pub fn touch(&mut self) {
        self.last_activity = Instant::now();
        self.last_activity_at = SystemTime::now();
        self.idle_warned = false;
    }

    pub fn open_connections(&self) -> usize {
        self.ports
            .values()
            .map(|p| p.connections.load(Ordering::Relaxed))
            .sum()
    }

    /// What keeps the idle timer from running now.
    pub fn idle_blockers(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.busy > 0 {
            out.push("exec".to_string());
        }
        if self.open_connections() > 0 {
            out.push("connection".to_string());
        }
        let now = SystemTime::now();
        if self.leases.values().any(|l| l.expires > now) {
            out.push("lease".to_string());
        }
        out
    }

    /// When the idle action would happen if nothing else occurs (None: never, or blocked).
    pub fn idle_deadline(&self) -> Option<SystemTime> {
        if self.idle_timeout == 0
            || self.state != State::Running
            || !self.idle_blockers().is_empty()
        {
            return None;
        }
        Some(self.last_activity_at + Duration::from_secs(self.idle_timeout))
    }

    pub fn info(&self, root: &std::path::Path) -> InstanceInfo {
        let usage = self
            .sandbox
            .as_ref()
            .filter(|_| self.state.is_live())
            .map(|s| s.usage());
        let (enforced, note) = match &self.sandbox {
            Some(s) => s.limits_enforced(),
            None => (false, None),
        };
        let mut capabilities = capabilities(self.backend);
        // The engine may show /work on the host, and this instance does (no size limit).
        capabilities.work_on_host &= match &self.sandbox {
            Some(s) => s.work_on_host(),
            None => self.limits.disk_mb.is_none(),
        };
        let work = capabilities
            .work_on_host
            .then(|| crate::instance_dir::work_dir(&self.dir));
        let disk = match &self.sandbox {
            Some(s) if self.state.is_live() => s.disk(),
            Some(s) => s
                .disk()
                .map(|d| crate::disk::DiskInfo { used_mb: None, ..d }),
            None => None,
        };
        InstanceInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            backend: self.backend.into(),
            capabilities,
            state: self.state,
            owner: self.owner.clone(),
            parent: self.owner.clone(),
            depth: self.depth,
            created_at: rfc3339(self.created_at),
            started_at: self.started_at.map(rfc3339),
            ended_at: self.ended_at.map(rfc3339),
            exit: self.exit,
            failure: self.error.clone(),
            stop_reason: self.stop_reason.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            image: self.image.clone(),
            work_dir: work.map(|w| shown(root, &w)),
            network: self.network,
            ports: self
                .ports
                .iter()
                .map(|(g, p)| PortInfo {
                    guest_port: *g,
                    host: p.host.clone(),
                    host_port: p.host_port,
                    url: format!("http://{}:{}", url_host(&p.host), p.host_port),
                    connections: p.connections.load(Ordering::Relaxed) as u64,
                })
                .collect(),
            leases: self
                .leases
                .iter()
                .map(|(id, l)| LeaseInfo {
                    lease_id: id.clone(),
                    holder: l.holder.clone(),
                    reason: l.reason.clone(),
                    expires_at: rfc3339(l.expires),
                })
                .collect(),
            leases_total: self.leases.len() as u64,
            leases_truncated: false,
            idle: IdleInfo {
                timeout_seconds: self.idle_timeout,
                on_idle: self.on_idle,
                last_activity: rfc3339(self.last_activity_at),
                deadline: self.idle_deadline().map(rfc3339),
                blocked_by: self.idle_blockers(),
            },
            ttl: TtlInfo {
                seconds: self.ttl_seconds,
                deadline: self.ttl_deadline.map(|(_, at)| rfc3339(at)),
            },
            resources: ResourcesInfo {
                memory_mb: self.limits.memory_mb,
                cpus: self.limits.cpus,
                pids: self.limits.pids,
                enforced,
                note,
                pause: self.sandbox.as_ref().map(|s| s.pause_method().to_string()),
                usage,
                disk,
            },
            labels: self.labels.clone(),
        }
    }

    /// The one-line summary used in text answers.
    pub fn line(&self) -> String {
        let mut s = self.id.clone();
        if let Some(n) = &self.name {
            s.push_str(&format!(" \"{n}\""));
        }
        s.push_str(&format!(" ({}) {}", self.backend, self.state.as_str()));
        if let Some(e) = &self.exit {
            s.push_str(&format!(" exit {}", e.code));
        }
        if let Some(r) = &self.stop_reason {
            s.push_str(&format!(" ({r})"));
        }
        for (g, p) in &self.ports {
            s.push_str(&format!(
                "; {g} → http://{}:{}",
                url_host(&p.host),
                p.host_port
            ));
        }
        s
    }
}

fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// A host path as tools show it: root-relative when inside the root.
pub fn shown(root: &std::path::Path, p: &std::path::Path) -> String {
    p.strip_prefix(root)
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| p.display().to_string())
}

pub fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl InstanceInfo {
    /// Cut this record to serialize within `max` bytes, where its leases (as many as were
    /// acquired) and the main command (up to 256 KB of arguments) are what make it larger: the
    /// leases that fit are kept (`leases_truncated`), then the arguments that fit, and a last
    /// one says how much was cut.
    pub fn fit_within(&mut self, max: usize) {
        use kitbag_shared::limits::{json_len, json_prefix};
        if json_len(&*self) > max && self.leases.len() > 1 {
            // Leases first (instance_list pages them), the first always kept so that paging
            // moves on: those that fit beside the rest of the record.
            let leases = std::mem::take(&mut self.leases);
            let all = leases.len();
            self.leases_truncated = true;
            let mut used = json_len(&*self);
            for l in leases {
                let weight = json_len(&l) + 1;
                if !self.leases.is_empty() && used + weight > max {
                    break;
                }
                used += weight;
                self.leases.push(l);
            }
            self.leases_truncated = self.leases.len() < all;
        }
        let over = json_len(&*self).saturating_sub(max);
        let Some(cmd) = self.command.as_mut().filter(|_| over > 0) else {
            return;
        };
        // Room for the command, less its marker.
        let room = json_len(&*cmd).saturating_sub(over + 128);
        let all: usize = cmd.iter().map(String::len).sum();
        let mut kept: Vec<String> = Vec::new();
        let mut used = 2;
        for a in cmd.iter() {
            let weight = json_len(a) + 1;
            if used + weight > room {
                let part = json_prefix(a, room.saturating_sub(used + 3) + 2).0;
                if !part.is_empty() {
                    kept.push(part.to_string());
                }
                break;
            }
            used += weight;
            kept.push(a.clone());
        }
        let shown: usize = kept.iter().map(String::len).sum();
        kept.push(format!(
            "… [command cut to fit the answer: {shown} of {all} bytes shown]"
        ));
        *cmd = kept;
    }
}

/// An instance as tools return it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InstanceInfo {
    /// `i-` and 8 hex digits.
    pub id: String,
    pub name: Option<String>,
    /// The engine: `bwrap` (bubblewrap namespaces and cgroups), `qemu` (a virtual machine)
    /// or `docker` (a container of a Docker engine).
    pub backend: String,
    /// What this engine can do; an operation it cannot answers `unsupported` naming it.
    pub capabilities: Capabilities,
    /// `stopped`: by a request, its TTL or its idle policy (`stop_reason` says which);
    /// `exited`: the main command ended by itself (`exit`); `failed`: it never came up
    /// (`failure`); `lost`: a server that ran it ended without stopping it, and the next one
    /// cleaned up after it.
    pub state: State,
    /// The instance that spawned this one (nested use), or null when the top-level client did.
    pub owner: Option<String>,
    pub parent: Option<String>,
    pub depth: u32,
    pub created_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// How the main command (or the instance) ended.
    pub exit: Option<ExitStatus>,
    // Not `error`: that name is the error object every result may carry instead of its
    // fields, and a validating client holds this field against it.
    /// Why it failed or was lost.
    pub failure: Option<String>,
    /// Why it was stopped: `request`, `ttl`, `idle`, `server_exit`.
    pub stop_reason: Option<String>,
    /// The main command; null for an idle environment driven by instance_exec.
    pub command: Option<Vec<String>>,
    pub cwd: String,
    /// `host` (the host's root) or a named root file system; read-only either way.
    pub image: String,
    /// The instance's writable /work, as a path on the host (root-relative when inside the
    /// root); null for a QEMU VM, whose /work is inside the guest (use instance_copy).
    pub work_dir: Option<String>,
    /// `none`: loopback only; `outbound`: through slirp4netns, the host's loopback unreachable.
    pub network: Network,
    pub ports: Vec<PortInfo>,
    pub leases: Vec<LeaseInfo>,
    /// Its live leases in all.
    pub leases_total: u64,
    /// More leases follow these, cut to fit the answer: instance_list with `instance` and
    /// `leases_offset`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub leases_truncated: bool,
    pub idle: IdleInfo,
    pub ttl: TtlInfo,
    pub resources: ResourcesInfo,
    pub labels: BTreeMap<String, String>,
}

/// What an instance's engine can do.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Capabilities {
    /// Host paths can be bound in (`mounts`).
    pub mounts: bool,
    /// `/work` is a directory on the host (`work_dir`); otherwise reach it with instance_copy.
    pub work_on_host: bool,
    /// A kitbag-vm inside can spawn instances of its own (the control socket).
    pub nesting: bool,
    /// Paused processes resume where they were (frozen or halted, not lost).
    pub pause_keeps_processes: bool,
    /// `resources.pids` is enforced.
    pub pids_limit: bool,
    /// It runs its own kernel.
    pub own_kernel: bool,
}

/// The capabilities of an engine by name.
pub fn capabilities(backend: &str) -> Capabilities {
    match backend {
        "qemu" => Capabilities {
            mounts: false,
            work_on_host: false,
            nesting: false,
            pause_keeps_processes: true,
            pids_limit: false,
            own_kernel: true,
        },
        // Processes are lost when a Sandbox is suspended (its pod is deleted); a plain Pod
        // cannot pause at all.
        "kube" => Capabilities {
            mounts: false,
            work_on_host: false,
            nesting: false,
            pause_keeps_processes: false,
            pids_limit: false,
            own_kernel: false,
        },
        "docker" => Capabilities {
            mounts: false,
            work_on_host: true,
            nesting: false,
            pause_keeps_processes: true,
            pids_limit: true,
            own_kernel: false,
        },
        _ => Capabilities {
            mounts: true,
            work_on_host: true,
            nesting: true,
            pause_keeps_processes: true,
            pids_limit: true,
            own_kernel: false,
        },
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PortInfo {
    pub guest_port: u16,
    pub host: String,
    pub host_port: u16,
    pub url: String,
    /// Relayed connections open now.
    pub connections: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LeaseInfo {
    pub lease_id: String,
    pub holder: String,
    pub reason: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IdleInfo {
    /// 0: never idles.
    pub timeout_seconds: u64,
    pub on_idle: OnIdle,
    pub last_activity: String,
    /// When the idle action happens if nothing else occurs; null while blocked or paused.
    pub deadline: Option<String>,
    /// What keeps the timer from running: `exec`, `connection`, `lease`.
    pub blocked_by: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TtlInfo {
    /// 0: no TTL.
    pub seconds: u64,
    pub deadline: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResourcesInfo {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: u64,
    /// The limits are enforced by cgroups.
    pub enforced: bool,
    /// Why they are not (fully) enforced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How pause works: `freezer` (cgroup), `sigstop`, `qmp_stop` (a VM's CPUs halt) or
    /// `engine_pause` (the container engine's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `/work`'s size limit (`disk_mb`), when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::disk::DiskInfo>,
}
