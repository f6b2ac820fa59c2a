//! `instance_spawn`: start an instance.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kitbag_shared::rustix::fs::OFlags;
use kitbag_shared::{Access, CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::bwrap::{Sandbox, SandboxSpec};
use crate::cgroup::Limits;
use crate::engine::Engine;
use crate::instance::{Instance, InstanceInfo, Network, OnIdle, State};
use crate::lifecycle;
use crate::qemu::{QemuVm, VmSpec};
use crate::tools::validate;
use crate::{Caller, VmState};

pub const DEF: ToolDef = ToolDef::write(
    "instance_spawn",
    "Spawn instance",
    "Start an isolated instance: a bubblewrap sandbox (default: host files read-only, writable \
     /work on the host at `work_dir`, cgroup limits) or, with `backend: \"qemu\"`, a virtual \
     machine (its own kernel; /work inside it; no mounts). No network unless `network: \
     \"outbound\"`. Without \
     `command` it is an idle environment for instance_exec; with one it ends with the command. \
     Pauses after `idle_timeout_seconds` without activity (tool calls on it, relayed connections; \
     not its own processes) unless an exec, connection or keepalive lease holds it; \
     `ttl_seconds` is a hard cap. Instances end with this server. Example: \
     {\"command\":[\"python3\",\"-m\",\"http.server\",\"8080\"],\"ports\":[8080],\"ready\":{\"port\":8080}}",
)
.exec();

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Bwrap,
    Qemu,
    Docker,
    Kube,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MountMode {
    Ro,
    Rw,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MountParam {
    /// Root-relative host path.
    pub host: String,
    /// Absolute guest path.
    pub guest: String,
    /// ro (default) or rw.
    #[serde(default)]
    pub mode: Option<MountMode>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourcesParam {
    /// MiB (default 1024).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Cores (default all).
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Processes (default 512).
    #[serde(default)]
    pub pids: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadyParam {
    /// Guest port that must accept.
    #[serde(default)]
    pub port: Option<u16>,
    /// Regex the main output must match.
    #[serde(default)]
    pub log: Option<String>,
    /// Default 30; past it the instance is removed.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnParams {
    /// Unique name [a-z0-9-], usable as the id.
    #[serde(default)]
    pub name: Option<String>,
    /// bwrap (default) or qemu (a VM; self_info says if it runs here).
    #[serde(default)]
    pub backend: Option<Backend>,
    /// Main command argv.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Default /work.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment (KITBAG_* reserved).
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// bwrap: host (default) or a rootfs name; qemu: default.
    #[serde(default)]
    pub image: Option<String>,
    /// Host paths bound in.
    #[serde(default)]
    pub mounts: Option<Vec<MountParam>>,
    /// Guest ports to expose (see expose_port).
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    /// none (default) or outbound.
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub resources: Option<ResourcesParam>,
    /// Hard lifetime, s (0 none).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Default 900; 0 never.
    #[serde(default)]
    pub idle_timeout_seconds: Option<u64>,
    /// pause (default) or stop.
    #[serde(default)]
    pub on_idle: Option<OnIdle>,
    /// Answer once ready.
    #[serde(default)]
    pub ready: Option<ReadyParam>,
    /// Up to 16.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SpawnResult {
    #[serde(flatten)]
    pub instance: InstanceInfo,
    pub elapsed_ms: u64,
}

struct Checked {
    backend: Backend,
    name: Option<String>,
    command: Option<Vec<String>>,
    cwd: String,
    env: Vec<(String, String)>,
    mounts: Vec<(std::path::PathBuf, String, bool, (u64, u64))>,
    ports: Vec<u16>,
    network: Network,
    limits: Limits,
    ttl: u64,
    idle: u64,
    on_idle: OnIdle,
    ready: Option<(Option<u16>, Option<regex::Regex>, Duration)>,
    labels: BTreeMap<String, String>,
    image: String,
    rootfs: Option<std::path::PathBuf>,
}

fn check(state: &VmState, p: SpawnParams, ctx: &CallCtx) -> ToolResult<Checked> {
    validate::writable(state)?;
    let backend = p.backend.unwrap_or(Backend::Bwrap);
    match backend {
        Backend::Bwrap => {
            let (ok, detail) = state.probe().clone();
            if !ok {
                return Err(ToolError::new(
                    ErrorCode::BackendUnavailable,
                    format!("bwrap: {detail}"),
                )
                .with_detail(json!({ "field": "backend", "backend": "bwrap" })));
            }
        }
        #[cfg(feature = "backend-docker")]
        Backend::Docker => {
            // The engine was probed before this check (run awaits it).
            match state.docker.as_ref().and_then(|d| d.probed()) {
                Some(p) if p.available => {}
                Some(p) => {
                    return Err(ToolError::new(
                        ErrorCode::BackendUnavailable,
                        format!("backend: docker is not available here: {}", p.detail),
                    )
                    .with_detail(json!({ "field": "backend", "backend": "docker" })));
                }
                None => {
                    return Err(ToolError::new(
                        ErrorCode::BackendUnavailable,
                        "backend: docker has no engine address (--docker-host)",
                    )
                    .with_detail(json!({ "field": "backend", "backend": "docker" })));
                }
            }
        }
        Backend::Qemu => {
            let probe = state.qemu_probe();
            if !probe.available {
                return Err(ToolError::new(
                    ErrorCode::BackendUnavailable,
                    format!("backend: qemu is not available here: {}", probe.detail),
                )
                .with_detail(json!({ "field": "backend", "backend": "qemu" })));
            }
        }
        other => {
            return Err(ToolError::new(
                ErrorCode::BackendUnavailable,
                format!(
                    "backend: {} is not available in this build of kitbag-vm; use \"bwrap\" or \"qemu\" (self_info lists the backends)",
                    format!("{other:?}").to_lowercase()
                ),
            )
            .with_detail(json!({ "field": "backend", "available": ["bwrap", "qemu"] })));
        }
    }
    if backend == Backend::Docker && p.network == Some(Network::Outbound) && !docker_bridge(state) {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            "network: \"outbound\" needs the engine's bridge network, which it does not have",
        )
        .with_detail(json!({ "field": "network", "backend": "docker" })));
    }
    if backend != Backend::Bwrap && p.mounts.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            format!(
                "mounts: backend {} cannot mount host paths{}; copy files in with instance_copy",
                format!("{backend:?}").to_lowercase(),
                if backend == Backend::Qemu {
                    " (Debian's cloud kernel has no 9p and bookworm no virtiofsd)"
                } else {
                    ""
                }
            ),
        )
        .with_detail(
            json!({ "field": "mounts", "backend": format!("{backend:?}").to_lowercase() }),
        ));
    }
    if let Some(n) = &p.name {
        validate::name("name", n)?;
    }
    if let Some(c) = &p.command {
        validate::argv("command", c)?;
    }
    let cwd = p.cwd.unwrap_or_else(|| "/work".into());
    validate::guest_path("cwd", &cwd)?;
    let env = validate::env("env", &p.env.unwrap_or_default())?;
    let image = p.image.clone().unwrap_or_else(|| match backend {
        Backend::Qemu => "default".into(),
        Backend::Docker => default_docker_image().into(),
        _ => "host".into(),
    });
    let rootfs = match image.as_str() {
        _ if backend == Backend::Docker => {
            // An engine's image name; whether it exists is the engine's to say at start.
            if image.is_empty()
                || image.len() > 255
                || image.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(ToolError::invalid_field(
                    "image",
                    format!("{image:?} is not an image name"),
                ));
            }
            None
        }
        "default" if backend == Backend::Qemu => None,
        other if backend == Backend::Qemu => {
            return Err(ToolError::invalid_field(
                "image",
                format!(
                    "{other:?} is not a QEMU image; backend qemu boots \"default\" (Debian's cloud kernel, busybox, the kitbag agent)"
                ),
            ));
        }
        "host" => None,
        name => {
            let dir = state.images_dir.join("rootfs").join(name);
            if validate::name("image", name).is_err() || !dir.is_dir() {
                return Err(ToolError::invalid_field(
                    "image",
                    format!(
                        "{name:?} is not available; images: \"host\" (the host's root){}",
                        available_images(&state.images_dir)
                    ),
                ));
            }
            Some(dir)
        }
    };
    let mut mounts = Vec::new();
    for (i, m) in p.mounts.unwrap_or_default().into_iter().enumerate() {
        let field = format!("mounts[{i}].host");
        let rw = m.mode == Some(MountMode::Rw);
        validate::guest_path(&format!("mounts[{i}].guest"), &m.guest)?;
        if ["/", "/work", "/run", "/proc", "/dev"].contains(&m.guest.trim_end_matches('/'))
            || m.guest.starts_with("/run/kitbag")
        {
            return Err(ToolError::invalid_field(
                &format!("mounts[{i}].guest"),
                format!(
                    "{} is managed by kitbag-vm; mount elsewhere (e.g. /mnt/data)",
                    m.guest
                ),
            ));
        }
        if !mount_point_possible(&m.guest) {
            return Err(ToolError::invalid_field(
                &format!("mounts[{i}].guest"),
                format!(
                    "{} cannot be made inside the read-only host root: use a path that exists on the host, a new top-level directory (e.g. /data/x), or a path under /tmp or /work",
                    m.guest
                ),
            ));
        }
        let access = if rw { Access::Write } else { Access::Read };
        let resolved = ctx.policy().resolve(&m.host, &field, access)?;
        // Bound through a descriptor: a link swapped in after the check changes nothing.
        let fd = ctx
            .policy()
            .open_real(&resolved.abs, OFlags::PATH | OFlags::CLOEXEC)
            .map_err(|e| ToolError::io(&m.host, &e).with_detail(json!({ "field": field })))?;
        let st = kitbag_shared::rustix::fs::fstat(&fd).map_err(|e| {
            ToolError::io(&m.host, &e.into()).with_detail(json!({ "field": field }))
        })?;
        mounts.push((resolved.abs, m.guest, rw, (st.st_dev, st.st_ino)));
    }
    let ports = p.ports.unwrap_or_default();
    for (i, port) in ports.iter().enumerate() {
        validate::range(&format!("ports[{i}]"), *port, 1, 65535)?;
    }
    let network = p.network.unwrap_or_default();
    if network == Network::Outbound && !state.opts.allow_network {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "network: \"outbound\" is refused: this server was started with --no-network",
        ));
    }
    let r = p.resources.unwrap_or_default();
    let host_mb = host_memory_mb();
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let limits = Limits {
        memory_mb: validate::range(
            "resources.memory_mb",
            r.memory_mb
                .unwrap_or(state.opts.default_memory_mb.min(host_mb)),
            16,
            host_mb,
        )?,
        cpus: validate::range("resources.cpus", r.cpus.unwrap_or(ncpu), 0.1, ncpu)?,
        pids: validate::range(
            "resources.pids",
            r.pids.unwrap_or(state.opts.default_pids),
            16,
            65536,
        )?,
    };
    let ttl = validate::range(
        "ttl_seconds",
        p.ttl_seconds.unwrap_or(state.opts.default_ttl),
        0,
        state.opts.max_ttl,
    )?;
    let idle = validate::range(
        "idle_timeout_seconds",
        p.idle_timeout_seconds
            .unwrap_or(state.opts.default_idle_timeout),
        0,
        30 * 86_400,
    )?;
    let ready = match p.ready {
        None => None,
        Some(r) => {
            let timeout = validate::range(
                "ready.timeout_seconds",
                r.timeout_seconds.unwrap_or(30),
                1,
                600,
            )?;
            let re = match r.log {
                Some(l) => Some(regex::Regex::new(&l).map_err(|e| {
                    ToolError::invalid_field(
                        "ready.log",
                        format!("not a valid regular expression: {e}"),
                    )
                })?),
                None => None,
            };
            if r.port.is_none() && re.is_none() {
                return Err(ToolError::invalid_field("ready", "give port, log or both"));
            }
            if re.is_some() && p.command.is_none() {
                return Err(ToolError::invalid_field(
                    "ready.log",
                    "needs a main command whose output to watch",
                ));
            }
            Some((r.port, re, Duration::from_secs(timeout)))
        }
    };
    let labels = p.labels.unwrap_or_default();
    validate::labels("labels", &labels)?;
    Ok(Checked {
        backend,
        name: p.name,
        command: p.command,
        cwd,
        env,
        mounts,
        ports,
        network,
        limits,
        ttl,
        idle,
        on_idle: p.on_idle.unwrap_or_default(),
        ready,
        labels,
        image,
        rootfs,
    })
}

/// bwrap needs a mount point to exist or be creatable: the sandbox's own root, /tmp, /run,
/// /var/tmp and /work are writable while it is set up; the host's directories are not.
fn mount_point_possible(guest: &str) -> bool {
    let path = std::path::Path::new(guest);
    let top_level_new = path
        .components()
        .nth(1)
        .is_some_and(|c| !std::path::Path::new("/").join(c).exists());
    top_level_new
        || ["/tmp/", "/var/tmp/", "/work/", "/run/"]
            .iter()
            .any(|p| guest.starts_with(p))
        || path.exists()
}

/// `, "a", "b" (under <dir>/rootfs)` — the names a spawn may pass as `image`.
fn available_images(images_dir: &std::path::Path) -> String {
    let dir = images_dir.join("rootfs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(|n| format!("{n:?}")))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        format!(
            "; no named images in {} (a root file system directory there, e.g. from mmdebstrap, becomes one)",
            dir.display()
        )
    } else {
        format!(", {} (in {})", names.join(", "), dir.display())
    }
}

fn host_memory_mb() -> u64 {
    crate::tools::selftools::memory_total_mb().unwrap_or(1024)
}

fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("i-{:08x}", h.finish() as u32)
}

/// Tears down a spawn that did not finish (an error, a timeout, or the client cancelling:
/// the tool's future is dropped and this runs).
struct Pending {
    state: Arc<VmState>,
    id: String,
    sandbox: Option<Arc<Engine>>,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Out of the list first, so no call finds a half-torn-down instance.
        let removed = self.state.lock().remove(&self.id);
        if let Some(close) = removed.as_ref().and_then(|i| i.guest_close.clone()) {
            close.cancel();
        }
        let dir = removed.map(|i| i.dir);
        if let Some(s) = self.sandbox.take() {
            s.kill();
            s.cleanup();
        }
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub async fn run(
    state: Arc<VmState>,
    p: SpawnParams,
    ctx: CallCtx,
    caller: Caller,
) -> ToolResult<Reply<SpawnResult>> {
    let started = Instant::now();
    if caller.is_some() && p.mounts.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "mounts: a guest has no access to the host's files; copy files in with instance_copy",
        )
        .with_detail(json!({ "field": "mounts" })));
    }
    #[cfg(feature = "backend-docker")]
    if p.backend == Some(Backend::Docker)
        && let Some(engine) = &state.docker
    {
        engine.probe().await;
    }
    let c = check(&state, p, &ctx)?;
    let id = {
        let mut map = state.lock();
        // A guest's children sit one level below it, within --max-depth, and get no more
        // network than it has.
        let (depth, parent_network) = match &caller {
            Some(me) => match map.get(me) {
                Some(i) => (i.depth + 1, i.network),
                None => {
                    return Err(ToolError::new(
                        ErrorCode::InstanceNotRunning,
                        "the calling instance is gone",
                    ));
                }
            },
            None => (0, Network::Outbound),
        };
        if depth > state.opts.max_depth {
            return Err(ToolError::new(
                ErrorCode::InstanceLimit,
                format!("instances nest at most {} deep (--max-depth); this one would be at depth {depth}", state.opts.max_depth),
            )
            .with_detail(json!({ "max_depth": state.opts.max_depth })));
        }
        if c.network == Network::Outbound && parent_network == Network::None {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                "network: this instance has no outbound network, so the instances it spawns cannot have it either",
            )
            .with_detail(json!({ "field": "network" })));
        }
        if let Some(n) = &c.name
            && let Some(other) = map.values().find(|i| i.name.as_deref() == Some(n))
        {
            return Err(ToolError::new(
                ErrorCode::InstanceExists,
                format!("name: an instance named {n:?} exists ({}, {}); stop it with remove: true or pick another name", other.id, other.state.as_str()),
            )
            .with_detail(json!({ "field": "name", "instance": other.id })));
        }
        let live = map
            .values()
            .filter(|i| i.state.is_live() && i.owner == caller)
            .count();
        if live >= state.opts.max_instances {
            return Err(ToolError::new(
                ErrorCode::InstanceLimit,
                format!("{live} instances are alive, the most this server allows (--max-instances {}); stop one first", state.opts.max_instances),
            )
            .with_detail(json!({ "max": state.opts.max_instances })));
        }
        let mut id = new_id();
        while map.contains_key(&id) {
            id = new_id();
        }
        let dir = state.state_dir.join("instances").join(&id);
        let mut inst = Instance::new(id.clone(), dir, State::Starting);
        inst.name = c.name.clone();
        inst.owner = caller.clone();
        inst.depth = depth;
        inst.command = c.command.clone();
        inst.cwd = c.cwd.clone();
        inst.image = c.image.clone();
        inst.network = c.network;
        inst.labels = c.labels.clone();
        inst.limits = c.limits;
        inst.idle_timeout = c.idle;
        inst.on_idle = c.on_idle;
        inst.ttl_seconds = c.ttl;
        inst.backend = match c.backend {
            Backend::Qemu => "qemu",
            Backend::Docker => "docker",
            _ => "bwrap",
        };
        map.insert(id.clone(), inst);
        id
    };
    let mut pending = Pending {
        state: state.clone(),
        id: id.clone(),
        sandbox: None,
        done: false,
    };
    let sandbox = match c.backend {
        Backend::Qemu => start_vm(&state, &id, &c, &ctx).await?,
        #[cfg(feature = "backend-docker")]
        Backend::Docker => start_container(&state, &id, &c).await?,
        _ => start_sandbox(&state, &id, &c).await?,
    };
    pending.sandbox = Some(sandbox.clone());
    let (enforced, note) = sandbox.limits_enforced();
    if state.opts.require_limits && !enforced {
        return Err(ToolError::new(
            ErrorCode::SpawnFailed,
            format!(
                "limits cannot be enforced here and --require-limits is set: {}",
                note.unwrap_or_default()
            ),
        ));
    }
    {
        let mut map = state.lock();
        let Some(inst) = map.get_mut(&id) else {
            return Err(ToolError::new(
                ErrorCode::Cancelled,
                "the instance was removed while starting",
            ));
        };
        if inst.state != State::Starting {
            // instance_stop (or its owner's stop) came while it started: honour it.
            drop(map);
            return Err(ToolError::new(
                ErrorCode::Cancelled,
                format!("instance {id} was stopped while it started"),
            ));
        }
        inst.sandbox = Some(sandbox.clone());
        inst.state = State::Running;
        inst.started_at = Some(SystemTime::now());
        if c.ttl > 0 {
            let d = Duration::from_secs(c.ttl);
            inst.ttl_deadline = Some((Instant::now() + d, SystemTime::now() + d));
        }
        inst.touch();
    }
    lifecycle::watch_exit(state.clone(), id.clone());
    for port in &c.ports {
        crate::tools::ports::expose(&state, &id, *port, 0, "127.0.0.1").await?;
    }
    if let Some((port, re, timeout)) = &c.ready {
        wait_ready(&sandbox, *port, re.as_ref(), *timeout, &ctx).await?;
    }
    pending.done = true;
    let map = state.lock();
    let Some(inst) = map.get(&id) else {
        return Err(ToolError::internal("the instance vanished"));
    };
    let info = inst.info(&state.root);
    let mut text = inst.line();
    match &info.work_dir {
        Some(w) => text.push_str(&format!("; /work = {w}")),
        None => text.push_str(&format!("; {}", crate::qemu::guest_note())),
    }
    if inst.idle_timeout > 0 {
        text.push_str(&format!(
            "; {} after {} s idle",
            match inst.on_idle {
                OnIdle::Pause => "pauses",
                OnIdle::Stop => "stops",
            },
            inst.idle_timeout
        ));
    }
    Ok(Reply::new(
        SpawnResult {
            instance: info,
            elapsed_ms: started.elapsed().as_millis() as u64,
        },
        text,
    ))
}

/// A bubblewrap sandbox, with its own line to this server for a kitbag-vm started inside.
async fn start_sandbox(state: &Arc<VmState>, id: &str, c: &Checked) -> ToolResult<Arc<Engine>> {
    let ctl = state.state_dir.join("instances").join(id).join("ctl");
    std::fs::create_dir_all(&ctl).map_err(|e| ToolError::io(&ctl.display().to_string(), &e))?;
    let guest_close = crate::guest::listen(state.clone(), id.to_string(), &ctl).map_err(|e| {
        ToolError::new(
            ErrorCode::SpawnFailed,
            format!("the instance's control socket: {e}"),
        )
    })?;
    if let Some(inst) = state.lock().get_mut(id) {
        inst.guest_close = Some(guest_close);
    }
    let mut env = c.env.clone();
    env.push((
        crate::guest::SOCKET_VAR.to_string(),
        format!("{}/{}", crate::proto::CTL_DIR, crate::guest::GUEST_SOCKET),
    ));
    let spec = SandboxSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        state_dir: state.state_dir.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env,
        outbound: c.network == Network::Outbound,
        limits: c.limits,
        mounts: c.mounts.clone(),
        exe: state.exe.clone(),
        rootfs: c.rootfs.clone(),
    };
    let sandbox = Sandbox::start(spec, &state.spawner, Duration::from_secs(20))
        .await
        .map_err(|e| {
            ToolError::new(
                ErrorCode::SpawnFailed,
                format!("the sandbox did not start: {e}"),
            )
            .with_detail(json!({ "backend": "bwrap" }))
        })?;
    Ok(Arc::new(Engine::Bwrap(sandbox)))
}

#[cfg(feature = "backend-docker")]
fn default_docker_image() -> &'static str {
    crate::docker::DEFAULT_IMAGE
}
#[cfg(not(feature = "backend-docker"))]
fn default_docker_image() -> &'static str {
    ""
}

#[cfg(feature = "backend-docker")]
fn docker_bridge(state: &VmState) -> bool {
    state
        .docker
        .as_ref()
        .and_then(|d| d.probed())
        .is_some_and(|p| p.bridge)
}
#[cfg(not(feature = "backend-docker"))]
fn docker_bridge(_: &VmState) -> bool {
    false
}

/// A container of the Docker engine.
#[cfg(feature = "backend-docker")]
async fn start_container(state: &Arc<VmState>, id: &str, c: &Checked) -> ToolResult<Arc<Engine>> {
    let Some(engine) = &state.docker else {
        return Err(ToolError::new(
            ErrorCode::BackendUnavailable,
            "backend: docker has no engine",
        ));
    };
    let spec = crate::docker::BoxSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        exe: state.exe.clone(),
        image: c.image.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env: c.env.clone(),
        outbound: c.network == Network::Outbound,
        limits: c.limits,
        deadline: (c.ttl > 0).then(|| SystemTime::now() + Duration::from_secs(c.ttl)),
    };
    let container = crate::docker::Container::start(engine, spec, Duration::from_secs(60))
        .await
        .map_err(|e| {
            let field = e.contains("is not an image of this engine");
            let err = ToolError::new(
                if field {
                    ErrorCode::InvalidParams
                } else {
                    ErrorCode::SpawnFailed
                },
                if field {
                    format!("image: {e}")
                } else {
                    format!("the container did not start: {e}")
                },
            );
            if field {
                err.with_detail(json!({ "field": "image", "backend": "docker" }))
            } else {
                err.with_detail(json!({ "backend": "docker" }))
            }
        })?;
    Ok(Arc::new(Engine::Docker(container)))
}

/// How long a VM may take to boot: TCG emulation on a loaded machine is slow (vm.md §2.2:
/// 2 s idle, 3.5 s under a build).
const VM_BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A QEMU virtual machine; boot stages go out as progress notifications when the caller
/// asked for them.
async fn start_vm(
    state: &Arc<VmState>,
    id: &str,
    c: &Checked,
    ctx: &CallCtx,
) -> ToolResult<Arc<Engine>> {
    let probe = state.qemu_probe().clone();
    let spec = VmSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        images_dir: state.images_dir.clone(),
        exe: state.exe.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env: c.env.clone(),
        outbound: c.network == Network::Outbound,
        memory_mb: c.limits.memory_mb,
        cpus: c.limits.cpus,
        kvm: probe.kvm,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let forward = {
        let ctx = ctx.clone();
        async move {
            let mut step = 0.0;
            while let Some(stage) = rx.recv().await {
                step += 1.0;
                ctx.progress(step, None, Some(stage)).await;
            }
        }
    };
    let report = move |stage: &str| {
        let _ = tx.send(stage.to_string());
    };
    let started = async {
        let vm = QemuVm::start(spec, &state.spawner, VM_BOOT_TIMEOUT, &report).await;
        drop(report);
        vm
    };
    let (vm, ()) = tokio::join!(started, forward);
    let vm = vm.map_err(|e| {
        ToolError::new(ErrorCode::SpawnFailed, format!("the VM did not start: {e}"))
            .with_detail(json!({ "backend": "qemu" }))
    })?;
    Ok(Arc::new(Engine::Qemu(vm)))
}

async fn wait_ready(
    sandbox: &Engine,
    port: Option<u16>,
    re: Option<&regex::Regex>,
    timeout: Duration,
    ctx: &CallCtx,
) -> ToolResult<()> {
    let deadline = Instant::now() + timeout;
    let log = crate::bwrap::logs_dir(sandbox.dir()).join("main.log");
    loop {
        if re.is_some() {
            sandbox.sync_logs().await;
        }
        let port_ok = match port {
            Some(p) => crate::ports::guest_listening(sandbox, p).await,
            None => true,
        };
        let log_ok = match re {
            Some(re) => re.is_match(&String::from_utf8_lossy(
                &std::fs::read(&log).unwrap_or_default(),
            )),
            None => true,
        };
        if port_ok && log_ok {
            return Ok(());
        }
        if let Some(exit) = sandbox.exit_status() {
            return Err(ToolError::new(
                ErrorCode::SpawnFailed,
                format!(
                    "the main command ended (exit code {}) before the instance was ready: {}",
                    exit.code,
                    crate::bwrap::tail(&log, 2048)
                ),
            ));
        }
        ctx.check_cancelled()?;
        if Instant::now() > deadline {
            return Err(ToolError::new(
                ErrorCode::Timeout,
                format!(
                    "the instance was not ready within {} s ({}); it was stopped and removed. Output: {}",
                    timeout.as_secs(),
                    match (port, re) {
                        (Some(p), _) => format!("nothing accepted on guest port {p}"),
                        _ => "the log did not match".to_string(),
                    },
                    crate::bwrap::tail(&log, 2048)
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
