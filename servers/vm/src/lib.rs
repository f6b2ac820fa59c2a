//! kitbag-vm: child instances an agent can spawn, reach, keep alive and restart.
//!
//! The embedded backend is bubblewrap ([`bwrap`]): namespaces for isolation, cgroups for
//! limits and pause ([`cgroup`]), and the same binary as an agent inside each instance
//! ([`agent`], over [`proto`]). [`qemu`] boots a virtual machine with that agent inside
//! instead; [`engine`] is the one face both show the tools. Everything generic — records, ports, leases, idle and TTL
//! timers — lives here and in [`instance`], [`lifecycle`] and [`ports`]; each tool has its
//! module under [`tools`].

pub mod agent;
pub mod agent_link;
pub mod backend;
pub mod bwrap;
pub mod cgroup;
pub mod disk;
#[cfg(feature = "backend-docker")]
pub mod docker;
pub mod engine;
pub mod error;
pub mod guest;
pub mod instance;
pub mod instance_dir;
#[cfg(feature = "backend-kube")]
pub mod kube;
pub mod lifecycle;
pub mod nsfd;
pub mod owner;
pub mod ports;
pub mod proto;
pub mod qemu;
pub mod remote;
pub mod spawner;
pub mod sweep;
pub mod tools;
pub mod tree;

use kitbag_shared::lock::LockExt;
use kitbag_shared::state::StateDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use clap::Parser;
use kitbag_shared::rmcp::{Peer, RoleServer};
use kitbag_shared::{CommonArgs, ErrorCode, Extras, Identity, McpServer, ToolError, ToolResult};
use serde_json::json;

use crate::engine::Engine;
use crate::instance::{Instance, State};

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-vm",
    version,
    about = "MCP server: child instances (bubblewrap sandboxes, QEMU virtual machines) an agent can spawn, reach, keep alive and restart"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Where instance directories (/work, logs, sockets) live. Default: <root>/.kitbag/vm.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Where named root file systems live: `<DIR>/rootfs/<name>/` is image `<name>`.
    /// Default: $XDG_CACHE_HOME/kitbag/vm (else ~/.cache/kitbag/vm).
    #[arg(long, value_name = "DIR")]
    pub images_dir: Option<PathBuf>,

    /// The most instances alive at once (per owner: the client, or each nesting guest).
    #[arg(long, default_value_t = 8)]
    pub max_instances: usize,

    /// Seconds without activity before an instance is paused (or stopped); 0: never.
    #[arg(long, default_value_t = 900)]
    pub default_idle_timeout: u64,

    /// Default hard lifetime in seconds; 0: none.
    #[arg(long, default_value_t = 0)]
    pub default_ttl: u64,

    /// The longest TTL a spawn may ask for, in seconds.
    #[arg(long, default_value_t = 86_400)]
    pub max_ttl: u64,

    /// Seconds an ended instance stays listed (with its logs) before it is removed.
    #[arg(long, default_value_t = 3_600)]
    pub retain_exited: u64,

    /// Memory limit of an instance unless the spawn says otherwise, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub default_memory_mb: u64,

    /// Process limit of an instance unless the spawn says otherwise.
    #[arg(long, default_value_t = 512)]
    pub default_pids: u64,

    /// Refuse to spawn when limits cannot be enforced (no writable cgroups).
    #[arg(long)]
    pub require_limits: bool,

    /// Refuse `network: "outbound"`.
    #[arg(long)]
    pub no_network: bool,

    /// Permit `expose_port` to bind addresses other than loopback.
    #[arg(long)]
    pub allow_non_loopback: bool,

    /// How deep instances may nest (an instance's guest spawning its own).
    #[arg(long, default_value_t = 2)]
    pub max_depth: u32,

    /// QEMU's accelerator: `auto` (KVM when /dev/kvm opens and the CPU has vmx/svm), `kvm`
    /// (try KVM whenever /dev/kvm opens), `tcg` (always emulate). A KVM guest that does not
    /// reach its agent within 20 s (the boot probe, on the first VM) means TCG from then on.
    #[arg(long, value_enum, default_value_t = qemu::Accel::Auto)]
    pub qemu_accel: qemu::Accel,

    /// The Docker Engine API for `backend: "docker"` (dockerd, or `podman system service`):
    /// `unix:///path`. Default: $DOCKER_HOST, else unix:///var/run/docker.sock.
    #[cfg(feature = "backend-docker")]
    #[arg(long, value_name = "URL")]
    pub docker_host: Option<String>,

    /// The cluster for `backend: "kube"`: a kubeconfig file. Default: $KUBECONFIG, else
    /// ~/.kube/config, else the pod's own service account when run inside a cluster.
    #[cfg(feature = "backend-kube")]
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current-context).
    #[cfg(feature = "backend-kube")]
    #[arg(long, value_name = "NAME")]
    pub kube_context: Option<String>,

    /// The namespace instances are created in (default: the context's, else `default`).
    #[cfg(feature = "backend-kube")]
    #[arg(long, value_name = "NAME")]
    pub kube_namespace: Option<String>,

    /// How far ahead a Sandbox's `shutdownTime` is kept (renewed every third of it): a
    /// server that is gone leaves its Sandboxes running at most this long.
    #[cfg(feature = "backend-kube")]
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub kube_lease_seconds: u64,

    /// `host` (run instances), `guest` (forward every call to the kitbag-vm that runs this
    /// instance, over $KITBAG_VM_SOCKET), or `auto`: guest when KITBAG_VM_SOCKET is set.
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Auto,
    Host,
    Guest,
}

/// Who is calling: the top-level client (`None`) or a guest inside instance `Some(id)`. A
/// guest sees and acts on only its own instance's descendants.
pub type Caller = Option<String>;

pub const IDENTITY: Identity = Identity {
    name: "kitbag-vm",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Spawn isolated child instances (bubblewrap sandboxes: the host's files read-only, a writable /work, no network unless asked) with instance_spawn; run commands in them with instance_exec, move files with instance_copy, reach their servers with expose_port. Instances pause when idle and end with this server.",
};

/// Settings from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub max_instances: usize,
    pub default_idle_timeout: u64,
    pub default_ttl: u64,
    pub max_ttl: u64,
    pub retain_exited: u64,
    pub default_memory_mb: u64,
    pub default_pids: u64,
    pub require_limits: bool,
    pub allow_network: bool,
    pub allow_non_loopback: bool,
    pub max_depth: u32,
    pub qemu_accel: qemu::Accel,
    pub read_only: bool,
}

pub struct VmState {
    pub root: PathBuf,
    /// Named root file systems: `<images_dir>/rootfs/<name>/`.
    pub images_dir: PathBuf,
    /// The server's path policy, for calls that arrive from guests (not through MCP).
    pub policy: Arc<kitbag_shared::PathPolicy>,
    pub state_dir: PathBuf,
    /// This binary: mounted into every instance as its agent.
    pub exe: PathBuf,
    pub opts: Options,
    pub instances: Mutex<BTreeMap<String, Instance>>,
    /// Leases that expired on their own: (instance, when), for keepalive_release's answer.
    pub expired_leases: Mutex<BTreeMap<String, (String, SystemTime)>>,
    pub spawner: spawner::Spawner,
    /// The client, for warnings before an idle action or a TTL stop.
    pub peer: Mutex<Option<Peer<RoleServer>>>,
    pub started: Instant,
    probe: OnceLock<(bool, String)>,
    qemu_probe: OnceLock<qemu::Probe>,
    #[cfg(feature = "backend-docker")]
    pub docker: Option<docker::DockerEngine>,
    #[cfg(feature = "backend-kube")]
    pub kube: kube::KubeEngine,
}

/// A guard that marks an instance busy (a foreground exec or copy): the idle timer waits for
/// it, and its end counts as activity.
pub struct Busy {
    state: Arc<VmState>,
    id: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(i) = self.state.instances.locked().get_mut(&self.id) {
            i.busy = i.busy.saturating_sub(1);
            i.touch();
        }
    }
}

impl VmState {
    /// bubblewrap's availability, probed once.
    pub fn probe(&self) -> &(bool, String) {
        self.probe.get_or_init(bwrap::probe)
    }

    /// QEMU's availability and accelerator, probed once.
    pub fn qemu_probe(&self) -> &qemu::Probe {
        self.qemu_probe
            .get_or_init(|| qemu::probe(self.opts.qemu_accel))
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Instance>> {
        self.instances.locked()
    }

    /// The id of the instance `key` names (an id or a name), among those `caller` may see.
    pub fn find(
        map: &BTreeMap<String, Instance>,
        key: &str,
        field: &str,
        caller: &Caller,
    ) -> ToolResult<String> {
        let hit = match map.get(key) {
            Some(i) => Some(i.id.clone()),
            None => {
                // A name is unique among one caller's view; the top level sees every guest's
                // too: its own instance of that name first.
                let named: Vec<&Instance> = map
                    .values()
                    .filter(|i| i.name.as_deref() == Some(key) && visible(map, &i.id, caller))
                    .collect();
                named
                    .iter()
                    .find(|i| &i.owner == caller)
                    .or_else(|| named.first())
                    .map(|i| i.id.clone())
            }
        };
        if let Some(id) = hit.filter(|id| visible(map, id, caller)) {
            return Ok(id);
        }
        let known: Vec<String> = map
            .values()
            .filter(|i| visible(map, &i.id, caller))
            .map(|i| match &i.name {
                Some(n) => format!("{} ({n})", i.id),
                None => i.id.clone(),
            })
            .collect();
        Err(ToolError::new(
            ErrorCode::InstanceNotFound,
            format!(
                "{field}: no instance {key:?}; {}",
                if known.is_empty() {
                    "there are none (instance_spawn makes one)".to_string()
                } else {
                    format!("known: {}", known.join(", "))
                }
            ),
        )
        .with_detail(json!({ "field": field, "instance": key, "known": known })))
    }

    /// `key`, or the caller's own instance when a guest leaves it out.
    pub fn key_or_own(key: Option<String>, caller: &Caller) -> ToolResult<String> {
        match (key, caller) {
            (Some(k), _) => Ok(k),
            (None, Some(own)) => Ok(own.clone()),
            (None, None) => Err(ToolError::new(
                ErrorCode::Unsupported,
                "instance: required — this server runs on the host itself, not inside an instance; for a port of this machine connect to 127.0.0.1:<port> directly",
            )
            .with_detail(json!({ "field": "instance" }))),
        }
    }

    /// The sandbox of a live instance, resumed if it was paused, with the use counted as
    /// activity. `busy` also holds the idle timer until the returned guard drops.
    pub fn sandbox(
        self: &Arc<Self>,
        key: &str,
        busy: bool,
        caller: &Caller,
    ) -> ToolResult<(String, Arc<Engine>, Option<Busy>)> {
        let mut map = self.lock();
        let id = Self::find(&map, key, "instance", caller)?;
        let Some(inst) = map.get_mut(&id) else {
            return Err(ToolError::internal("instance vanished"));
        };
        let sandbox = match (&inst.sandbox, inst.state) {
            (Some(s), State::Running | State::Paused) => s.clone(),
            _ => {
                return Err(ToolError::new(
                    ErrorCode::InstanceNotRunning,
                    format!(
                        "instance {id} is {}{}",
                        inst.state.as_str(),
                        inst.exit
                            .map(|e| format!(" (exit code {})", e.code))
                            .unwrap_or_default()
                    ),
                )
                .with_detail(json!({ "instance": id, "state": inst.state })));
            }
        };
        if inst.state == State::Paused {
            sandbox.resume().map_err(|e| {
                ToolError::internal(format!("instance {id} could not be resumed: {e}"))
            })?;
            inst.state = State::Running;
        }
        inst.touch();
        let guard = busy.then(|| {
            inst.busy += 1;
            Busy {
                state: self.clone(),
                id: id.clone(),
            }
        });
        Ok((id, sandbox, guard))
    }

    /// Send a warning to the client (best effort, see [`kitbag_shared::ClientLog`]); the
    /// deadline is also in instance_list for clients that drop it.
    pub fn warn_client(&self, message: String) {
        tracing::info!("{message}");
        let peer = self.peer.locked().clone();
        if let (Some(peer), Ok(runtime)) = (peer, tokio::runtime::Handle::try_current()) {
            kitbag_shared::ClientLog::new(peer, runtime)
                .warning("kitbag-vm", json!({ "message": message }));
        }
    }
}

/// Whether `caller` may see instance `id`: the top level sees all; a guest sees its own
/// instance and the instances it spawned, and theirs (its descendants) — never its siblings
/// or anything above it.
pub fn visible(map: &BTreeMap<String, Instance>, id: &str, caller: &Caller) -> bool {
    let Some(me) = caller else { return true };
    if id == me {
        return true; // its own instance: self_info, keepalive, expose_port without `instance`
    }
    let mut cur = map.get(id).and_then(|i| i.owner.clone());
    let mut hops = 0;
    while let Some(owner) = cur {
        if &owner == me {
            return true;
        }
        hops += 1;
        if hops > 64 {
            return false;
        }
        cur = map.get(&owner).and_then(|i| i.owner.clone());
    }
    false
}

/// Every instance below `id` (its children, theirs, …).
pub fn descendants(map: &BTreeMap<String, Instance>, id: &str) -> Vec<String> {
    let caller: Caller = Some(id.to_string());
    map.keys()
        .filter(|k| k.as_str() != id && visible(map, k, &caller))
        .cloned()
        .collect()
}

struct VmExtras;

impl Extras<VmState> for VmExtras {
    fn on_connected(&self, state: Arc<VmState>, peer: Peer<RoleServer>) {
        {
            let mut p = state.peer.locked();
            *p = Some(peer);
        }
    }
}

pub fn router() -> kitbag_shared::ToolRouter<VmState> {
    tools::router()
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<VmState>> {
    let policy = args.common.policy()?;
    let root = policy.root().to_path_buf();
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| root.join(".kitbag/vm"));
    let read_only = args.common.read_only || policy.is_read_only();
    if !read_only {
        // Instances are working state, never project content.
        StateDir::open(&policy, &state_dir.join("instances"), true)?;
        StateDir::open(&policy, &state_dir, false)?.ignore_all();
    }
    // Its real path: what mounts are compared with (one holding it gets it covered).
    let state_dir = std::fs::canonicalize(&state_dir).unwrap_or(state_dir);
    let images_dir = args.images_dir.clone().unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| root.join(".kitbag/cache"))
            .join("kitbag/vm")
    });
    let exe = std::env::current_exe()?;
    let state = VmState {
        images_dir,
        root,
        policy: Arc::new(policy.clone()),
        state_dir,
        exe: exe.clone(),
        opts: Options {
            max_instances: args.max_instances.max(1),
            default_idle_timeout: args.default_idle_timeout,
            default_ttl: args.default_ttl,
            max_ttl: args.max_ttl,
            retain_exited: args.retain_exited,
            default_memory_mb: args.default_memory_mb.max(16),
            default_pids: args.default_pids.max(16),
            require_limits: args.require_limits,
            allow_network: !args.no_network,
            allow_non_loopback: args.allow_non_loopback,
            max_depth: args.max_depth,
            qemu_accel: args.qemu_accel,
            read_only,
        },
        instances: Mutex::new(BTreeMap::new()),
        expired_leases: Mutex::new(BTreeMap::new()),
        spawner: spawner::Spawner::start()?,
        peer: Mutex::new(None),
        started: Instant::now(),
        probe: OnceLock::new(),
        qemu_probe: OnceLock::new(),
        #[cfg(feature = "backend-docker")]
        docker: docker::DockerEngine::new(&docker::api::default_host(args.docker_host.as_deref()))
            .map_err(|e| tracing::warn!("--docker-host: {e}"))
            .ok(),
        #[cfg(feature = "backend-kube")]
        kube: kube::KubeEngine::new(
            args.kubeconfig.as_deref(),
            args.kube_context.as_deref(),
            args.kube_namespace.as_deref(),
            std::time::Duration::from_secs(args.kube_lease_seconds.max(3)),
            exe.clone(),
        ),
    };
    McpServer::new(IDENTITY, state, router(), policy)
        .with_common_args(&args.common)
        .map(|s| s.with_extras(VmExtras))
}

/// The runtime this server runs on (its own binary and `kitbag server vm` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let parent = std::env::var_os(guest::SOCKET_VAR).filter(|v| !v.is_empty());
    match (args.mode, parent) {
        (Mode::Guest, None) => anyhow::bail!(
            "--mode guest needs {} (set inside kitbag-vm instances)",
            guest::SOCKET_VAR
        ),
        (Mode::Guest | Mode::Auto, Some(socket)) => {
            return guest::run_guest(&args, PathBuf::from(socket)).await;
        }
        _ => {}
    }
    let server = build(&args)?;
    let state = server.state().clone();
    if !state.opts.read_only {
        let report = sweep::sweep(&state);
        if report.lost > 0 || report.cgroups > 0 {
            tracing::info!(
                "swept what earlier servers left: {} instances marked lost, {} cgroup directories removed",
                report.lost,
                report.cgroups
            );
        }
    }
    #[cfg(feature = "backend-docker")]
    {
        // Probe the engine early (self_info shows it; leftovers of dead servers go now).
        let s = state.clone();
        tokio::spawn(async move {
            if let Some(d) = &s.docker {
                d.probe().await;
            }
        });
    }
    let ticker = tokio::spawn(lifecycle::tick_forever(state.clone()));
    let result = kitbag_shared::serve(server, &args.common).await;
    ticker.abort();
    // The client is gone: no instance outlives the server.
    lifecycle::stop_all(&state).await;
    result
}

/// `kitbag-vm __agent …` runs the in-instance agent instead of the server.
pub fn agent_args() -> Option<Vec<String>> {
    let mut args = std::env::args().skip(1);
    (args.next().as_deref() == Some("__agent")).then(|| args.collect())
}
