//! `self_info` and `self_restart`.

use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use kitbag_shared::limits::{json_len, within_budget};

use crate::instance::State;
use crate::{Caller, VmState};

pub const INFO_DEF: ToolDef = ToolDef::read(
    "self_info",
    "Describe this server",
    "This server, its kitbag host, the machine, backend availability, instance counts.",
);

pub const RESTART_DEF: ToolDef = ToolDef::write(
    "self_restart",
    "Restart host or instance",
    "Under the kitbag host: answer, then reload its config (a bad one changes nothing). In \
     an instance: restart its main command.",
)
.destructive()
.exec();

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InfoParams {}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ServerInfo {
    pub version: String,
    pub pid: u32,
    pub uptime_seconds: u64,
    /// `host`: the caller talks to this server directly; `guest`: the caller runs inside
    /// `instance` and its calls are forwarded here (this describes the server running it).
    pub mode: String,
    pub root: String,
    pub state_dir: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct HostInfo {
    pub pid: i32,
    /// The config file the host read (absent: its embedded default).
    pub config: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct MachineInfo {
    pub hostname: String,
    pub kernel: String,
    pub cpus: u64,
    pub memory_total_mb: u64,
    /// Which cgroup hierarchies are mounted.
    pub cgroups: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct BackendInfo {
    pub name: String,
    pub available: bool,
    pub detail: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Children {
    pub running: u64,
    pub paused: u64,
    pub max: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct InfoResult {
    pub server: ServerInfo,
    /// Guest mode: the instance this call came from (the caller's own).
    pub instance: Option<crate::instance::InstanceInfo>,
    /// The kitbag host running this server, when there is one.
    pub host: Option<HostInfo>,
    pub machine: MachineInfo,
    pub backends: Vec<BackendInfo>,
    pub children: Children,
    /// Live keepalive leases on the instances the caller sees, cut to fit the answer.
    pub leases: Vec<HeldLease>,
    /// Those leases in all.
    pub leases_total: u64,
    /// Some were left out: instance_list with `instance` and `leases_offset` lists them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub leases_truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct HeldLease {
    pub instance: String,
    #[serde(flatten)]
    pub lease: crate::instance::LeaseInfo,
}

/// The kitbag host, when it is this process's parent (`KITBAG_HOST_PID` = parent pid).
pub fn host() -> Option<HostInfo> {
    let pid: i32 = std::env::var("KITBAG_HOST_PID").ok()?.parse().ok()?;
    (pid == nix::unistd::getppid().as_raw()).then(|| HostInfo {
        pid,
        config: std::env::var("KITBAG_HOST_CONFIG")
            .ok()
            .filter(|c| !c.is_empty()),
    })
}

/// The machine's memory (`MemTotal` in /proc/meminfo), in MiB.
pub fn memory_total_mb() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn info(
    state: &Arc<VmState>,
    _p: InfoParams,
    caller: &Caller,
) -> ToolResult<Reply<InfoResult>> {
    let (ok, detail) = state.probe().clone();
    let (running, paused, leases) = visible_children(state, caller);
    let cgroups = cgroups_summary();
    let mut result = InfoResult {
        server: ServerInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            uptime_seconds: state.started.elapsed().as_secs(),
            mode: if caller.is_some() { "guest" } else { "host" }.into(),
            root: state.root.display().to_string(),
            state_dir: crate::instance::shown(&state.root, &state.state_dir),
        },
        instance: caller
            .as_ref()
            .and_then(|me| state.lock().get(me).map(|i| i.info(&state.root)))
            .map(|mut i| {
                i.fit_within(kitbag_shared::limits::RESULT_BUDGET_BYTES / 2);
                i
            }),
        host: if caller.is_some() { None } else { host() },
        machine: MachineInfo {
            hostname: read_trim("/proc/sys/kernel/hostname"),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u64)
                .unwrap_or(1),
            memory_total_mb: memory_total_mb().unwrap_or(0),
            cgroups,
        },
        backends: backends(state, ok, detail),
        leases: Vec::new(),
        leases_total: leases.len() as u64,
        leases_truncated: true,
        children: Children {
            running,
            paused,
            max: state.opts.max_instances as u64,
        },
    };
    let (kept, cut) = within_budget(json_len(&result), leases);
    result.leases = kept;
    result.leases_truncated = cut;
    let mut text = format!(
        "kitbag-vm {} pid {} ({}); bwrap {}; {} running, {} paused of {}",
        result.server.version,
        result.server.pid,
        match &result.host {
            Some(h) => format!("under the kitbag host, pid {}", h.pid),
            None => "no kitbag host".into(),
        },
        if ok { "available" } else { "unavailable" },
        running,
        paused,
        state.opts.max_instances
    );
    if cut {
        text.push_str(&format!(
            "; {} of {} leases shown (instance_list with instance and leases_offset for the rest)",
            result.leases.len(),
            result.leases_total
        ));
    }
    Ok(Reply::new(result, text))
}

/// Running and paused instances the caller can see, and the leases they hold.
fn visible_children(state: &VmState, caller: &Caller) -> (u64, u64, Vec<HeldLease>) {
    let map = state.lock();
    let seen: Vec<&crate::instance::Instance> = map
        .values()
        .filter(|i| crate::visible(&map, &i.id, caller))
        .collect();
    let leases = seen
        .iter()
        .flat_map(|i| {
            i.info(&state.root)
                .leases
                .into_iter()
                .map(|lease| HeldLease {
                    instance: i.id.clone(),
                    lease,
                })
        })
        .collect::<Vec<_>>();
    (
        seen.iter().filter(|i| i.state == State::Running).count() as u64,
        seen.iter().filter(|i| i.state == State::Paused).count() as u64,
        leases,
    )
}

/// Which cgroup hierarchies are mounted, naming the v1 controllers instances use.
fn cgroups_summary() -> String {
    let mounts = kitbag_shared::contain::cgroup_mounts();
    let v1: Vec<String> = mounts
        .iter()
        .filter(|m| !m.v2)
        .flat_map(|m| {
            m.controllers
                .iter()
                .filter(|c| ["memory", "pids", "cpu", "freezer"].contains(&c.as_str()))
                .cloned()
        })
        .collect();
    match (mounts.iter().any(|m| m.v2), v1.is_empty()) {
        (true, true) => "v2".to_string(),
        (true, false) => format!("hybrid (v1: {})", v1.join(",")),
        (false, false) => format!("v1 ({})", v1.join(",")),
        (false, true) => "none mounted".to_string(),
    }
}

fn backends(state: &VmState, bwrap_ok: bool, bwrap_detail: String) -> Vec<BackendInfo> {
    let not_built = |name: &str| BackendInfo {
        name: name.into(),
        available: false,
        detail: "not built into this version of kitbag-vm".into(),
    };
    let q = state.qemu_probe();
    vec![
        BackendInfo {
            name: "bwrap".into(),
            available: bwrap_ok,
            detail: bwrap_detail,
        },
        BackendInfo {
            name: "qemu".into(),
            available: q.available,
            detail: format!("{}{}", q.detail, crate::qemu::kvm_boot_note()),
        },
        docker_info(state).unwrap_or_else(|| not_built("docker")),
        kube_info(state).unwrap_or_else(|| not_built("kube")),
    ]
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Auto,
    Host,
    Instance,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartParams {
    #[serde(default)]
    pub scope: Option<Scope>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RestartResult {
    pub scope: String,
    /// `host_reload`.
    pub action: String,
    pub target_pid: i32,
    /// The action happens this long after the answer.
    pub scheduled_in_ms: u64,
    pub dry_run: bool,
    pub note: String,
}

const RELOAD_DELAY: Duration = Duration::from_millis(250);

pub async fn restart(
    state: Arc<VmState>,
    p: RestartParams,
    caller: Caller,
) -> ToolResult<Reply<RestartResult>> {
    let scope = p.scope.unwrap_or_default();
    if let Some(me) = &caller {
        if scope == Scope::Host {
            return Err(ToolError::new(
                ErrorCode::Unsupported,
                "scope: \"host\" — this server runs inside an instance, not under the kitbag host; use scope \"instance\" to restart this instance's main command",
            )
            .with_detail(json!({ "field": "scope" })));
        }
        return restart_instance(state, me.clone(), p.dry_run.unwrap_or(false)).await;
    }
    let unsupported = |why: &str| {
        ToolError::new(ErrorCode::Unsupported, why.to_string())
            .with_detail(json!({ "field": "scope" }))
    };
    if scope == Scope::Instance {
        return Err(unsupported(
            "scope: \"instance\" restarts the main command of the instance this server runs in, but this server runs on the host, not inside a kitbag instance",
        ));
    }
    let Some(host) = host() else {
        return Err(unsupported(
            "not running under the kitbag host or inside a kitbag instance: restart the MCP client (or call host_reload if your host has it)",
        ));
    };
    // The embedded default (no config file): a reload would re-read nothing.
    let Some(config) = &host.config else {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            format!(
                "the host (pid {}) runs its built-in servers, not a config file: there is nothing to reload; write agent.json and start the host with it (or restart the MCP client)",
                host.pid
            ),
        ));
    };
    {
        let text = tokio::fs::read_to_string(config).await.map_err(|e| {
            ToolError::new(
                ErrorCode::ConfigInvalid,
                format!("the host's config {config} cannot be read: {e}; nothing was restarted"),
            )
        })?;
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
            return Err(ToolError::new(
                ErrorCode::ConfigInvalid,
                format!("the host's config {config} is not valid JSON ({e}); fix it first — nothing was restarted"),
            )
            .with_detail(json!({ "config": config })));
        }
    }
    let dry_run = p.dry_run.unwrap_or(false);
    if !dry_run {
        let pid = host.pid;
        tracing::info!(
            reason = p.reason.as_deref().unwrap_or(""),
            "self_restart: asking the host (pid {pid}) to reload"
        );
        // After the answer is on its way: the host waits for in-flight calls before it
        // stops a child, and this delay covers hosts that do not.
        tokio::spawn(async move {
            tokio::time::sleep(RELOAD_DELAY).await;
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGHUP,
            );
        });
    }
    Ok(Reply::new(
        RestartResult {
            scope: "host".into(),
            action: "host_reload".into(),
            target_pid: host.pid,
            scheduled_in_ms: RELOAD_DELAY.as_millis() as u64,
            dry_run,
            note: "the host re-reads its config: new and changed servers start, removed ones stop, unchanged ones (this one included, with its instances) keep running; tools/list_changed follows".into(),
        },
        format!(
            "{} the host (pid {}) to reload its config in {} ms",
            if dry_run { "would ask" } else { "asked" },
            host.pid,
            RELOAD_DELAY.as_millis()
        ),
    ))
}

/// Restart the caller's instance's main command (files, ports and leases stay), after the
/// answer is on its way: the caller is often part of that main command.
async fn restart_instance(
    state: Arc<VmState>,
    id: String,
    dry_run: bool,
) -> ToolResult<Reply<RestartResult>> {
    let (_, sandbox, _) = state.sandbox(&id, false, &Some(id.clone()))?;
    let has_main = state.lock().get(&id).is_some_and(|i| i.command.is_some());
    if !has_main {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            format!("instance {id} has no main command to restart (it is an idle environment)"),
        ));
    }
    if !dry_run {
        let target = sandbox.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RELOAD_DELAY).await;
            let req = crate::proto::Request::RestartMain { grace_ms: 5_000 };
            if let Err(e) = target.request(&req).await {
                tracing::warn!("restart of the main command failed: {e}");
            }
        });
    }
    Ok(Reply::new(
        RestartResult {
            scope: "instance".into(),
            action: "restart_main".into(),
            target_pid: sandbox.pid(),
            scheduled_in_ms: RELOAD_DELAY.as_millis() as u64,
            dry_run,
            note: "the main command gets SIGTERM (SIGKILL after 5 s) and starts again with the same command, environment and directory; /work, exposed ports and leases stay".into(),
        },
        format!(
            "{} the main command of {id} in {} ms",
            if dry_run { "would restart" } else { "restarting" },
            RELOAD_DELAY.as_millis()
        ),
    ))
}

#[cfg(feature = "backend-docker")]
fn docker_info(state: &VmState) -> Option<BackendInfo> {
    let engine = state.docker.as_ref()?;
    Some(match engine.probed() {
        Some(p) => BackendInfo {
            name: "docker".into(),
            available: p.available,
            detail: p.detail.clone(),
        },
        None => BackendInfo {
            name: "docker".into(),
            available: false,
            detail: format!(
                "not probed yet ({}); a docker spawn probes it",
                engine.api.socket.display()
            ),
        },
    })
}

#[cfg(not(feature = "backend-docker"))]
fn docker_info(_: &VmState) -> Option<BackendInfo> {
    None
}

#[cfg(feature = "backend-kube")]
fn kube_info(state: &VmState) -> Option<BackendInfo> {
    let engine = &state.kube;
    Some(match (engine.probed(), &engine.api) {
        (Some(p), _) => BackendInfo {
            name: "kube".into(),
            available: p.available,
            detail: p.detail.clone(),
        },
        (None, Err(e)) => BackendInfo {
            name: "kube".into(),
            available: false,
            detail: e.to_string(),
        },
        (None, Ok(api)) => BackendInfo {
            name: "kube".into(),
            available: false,
            detail: format!(
                "not probed yet ({}, {}); a kube spawn probes it",
                api.cfg.server, api.cfg.source
            ),
        },
    })
}

#[cfg(not(feature = "backend-kube"))]
fn kube_info(_: &VmState) -> Option<BackendInfo> {
    None
}
