//! `instance_spawn`: start an instance ([`check`] its arguments, [`start`] it on its engine).

mod check;
mod start;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::Engine;
use crate::instance::{Instance, InstanceInfo, Network, OnIdle, State};
use crate::lifecycle;
use crate::{Caller, VmState};

pub const DEF: ToolDef = ToolDef::write(
    "instance_spawn",
    "Spawn instance",
    "Start an isolated instance (bubblewrap by default: host files read-only, /work \
     writable). No `command`: an idle box for instance_exec. Idle, it pauses or stops \
     unless leased.",
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
    /// Root-relative.
    pub host: String,
    pub guest: String,
    /// Default ro.
    #[serde(default)]
    pub mode: Option<MountMode>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourcesParam {
    /// Default 1024.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Default all.
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Default 512.
    #[serde(default)]
    pub pids: Option<u64>,
    /// /work cap; default none.
    #[serde(default)]
    pub disk_mb: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadyParam {
    #[serde(default)]
    pub port: Option<u16>,
    /// Regex on main output.
    #[serde(default)]
    pub log: Option<String>,
    /// Default 30.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnParams {
    /// [a-z0-9-]; usable as the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Default bwrap; see self_info.
    #[serde(default)]
    pub backend: Option<Backend>,
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Default /work.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// bwrap: host (default) or a rootfs; docker: local image; kube: image or warmpool:NAME.
    #[serde(default)]
    pub image: Option<String>,
    /// bwrap only.
    #[serde(default)]
    pub mounts: Option<Vec<MountParam>>,
    /// Guest ports to expose.
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    /// Default none.
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub resources: Option<ResourcesParam>,
    /// Hard lifetime; 0 none.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Default 900; 0 never.
    #[serde(default)]
    pub idle_timeout_seconds: Option<u64>,
    /// Default pause.
    #[serde(default)]
    pub on_idle: Option<OnIdle>,
    #[serde(default)]
    pub ready: Option<ReadyParam>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SpawnResult {
    #[serde(flatten)]
    pub instance: InstanceInfo,
    pub elapsed_ms: u64,
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
    #[cfg(feature = "backend-kube")]
    if p.backend == Some(Backend::Kube) {
        state.kube.probe().await;
    }
    let c = check::check(&state, p, &ctx)?;
    let id = reserve(&state, &c, &caller)?;
    let mut pending = Pending {
        state: state.clone(),
        id: id.clone(),
        sandbox: None,
        done: false,
    };
    let sandbox = match c.backend {
        Backend::Qemu => start::start_vm(&state, &id, &c, &ctx).await?,
        #[cfg(feature = "backend-docker")]
        Backend::Docker => start::start_container(&state, &id, &c).await?,
        #[cfg(feature = "backend-kube")]
        Backend::Kube => start::start_pod(&state, &id, &c).await?,
        _ => start::start_sandbox(&state, &id, &c).await?,
    };
    pending.sandbox = Some(sandbox.clone());
    let (mut enforced, mut note) = sandbox.limits_enforced();
    if let Some(d) = sandbox.disk().filter(|d| !d.enforced) {
        enforced = false;
        note = d.note.map(|n| format!("disk_mb: {n}"));
    }
    if state.opts.require_limits && !enforced {
        return Err(ToolError::new(
            ErrorCode::SpawnFailed,
            format!(
                "limits cannot be enforced here and --require-limits is set: {}",
                note.unwrap_or_default()
            ),
        ));
    }
    mark_running(&state, &id, &sandbox, c.ttl)?;
    lifecycle::watch_exit(state.clone(), id.clone());
    for port in &c.ports {
        crate::tools::ports::expose(&state, &id, *port, 0, "127.0.0.1").await?;
    }
    if let Some((port, re, timeout)) = &c.ready {
        start::wait_ready(&sandbox, *port, re.as_ref(), *timeout, &ctx).await?;
    }
    pending.done = true;
    let map = state.lock();
    let Some(inst) = map.get(&id) else {
        return Err(ToolError::internal("the instance vanished"));
    };
    let mut info = inst.info(&state.root);
    // A command of up to 256 KB is not sent back whole.
    info.fit_within(kitbag_shared::limits::RESULT_BUDGET_BYTES - 64);
    let text = summary(inst, &info);
    Ok(Reply::new(
        SpawnResult {
            instance: info,
            elapsed_ms: started.elapsed().as_millis() as u64,
        },
        text,
    ))
}

/// The instance registered as `starting`, once the server's limits allow it: nesting depth,
/// a guest's network, a unique name, live instances per owner.
fn reserve(state: &VmState, c: &check::Checked, caller: &Caller) -> ToolResult<String> {
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
            format!(
                "instances nest at most {} deep (--max-depth); this one would be at depth {depth}",
                state.opts.max_depth
            ),
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
    // Names are unique among what the caller sees: a guest learns nothing of its siblings
    // (not even that a name is taken).
    if let Some(n) = &c.name
        && let Some(other) = map
            .values()
            .find(|i| i.name.as_deref() == Some(n) && crate::visible(&map, &i.id, caller))
    {
        return Err(ToolError::new(
            ErrorCode::InstanceExists,
            format!("name: an instance named {n:?} exists ({}, {}); stop it with remove: true or pick another name", other.id, other.state.as_str()),
        )
        .with_detail(json!({ "field": "name", "instance": other.id })));
    }
    let live = map
        .values()
        .filter(|i| i.state.is_live() && &i.owner == caller)
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
        Backend::Kube => "kube",
        _ => "bwrap",
    };
    map.insert(id.clone(), inst);
    Ok(id)
}

/// The started instance becomes `running` — unless a stop came while it started.
fn mark_running(
    state: &VmState,
    id: &str,
    sandbox: &Arc<crate::engine::Engine>,
    ttl: u64,
) -> ToolResult<()> {
    let mut map = state.lock();
    let Some(inst) = map.get_mut(id) else {
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
    if ttl > 0 {
        let d = Duration::from_secs(ttl);
        inst.ttl_deadline = Some((Instant::now() + d, SystemTime::now() + d));
    }
    inst.touch();
    Ok(())
}

/// The answer's text: the instance's line, where /work is, what idling does.
fn summary(inst: &Instance, info: &InstanceInfo) -> String {
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
    text
}
