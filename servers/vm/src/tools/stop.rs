//! `instance_stop`: stop (or pause) an instance, and by default remove it.

use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::instance::State;
use crate::lifecycle::{self, StopOutcome};
use crate::proto::ExitStatus;
use crate::tools::validate;
use crate::{Caller, VmState};

pub const DEF: ToolDef = ToolDef::write(
    "instance_stop",
    "Stop instance",
    "Stop an instance (SIGTERM, then SIGKILL), closing its ports and leases.",
)
.destructive()
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopParams {
    pub instance: String,
    /// 0–60, default 5.
    #[serde(default)]
    pub grace_seconds: Option<u64>,
    /// Freeze instead; next use resumes it.
    #[serde(default)]
    pub pause: Option<bool>,
    /// Delete record and /work; default true.
    #[serde(default)]
    pub remove: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StopResult {
    pub instance: String,
    pub state: State,
    pub exit: Option<ExitStatus>,
    pub removed: bool,
    pub closed_ports: Vec<u16>,
    pub released_leases: u64,
    /// Instances it had spawned (nested use), stopped with it.
    pub stopped_descendants: Vec<String>,
}

pub async fn run(
    state: Arc<VmState>,
    p: StopParams,
    caller: Caller,
) -> ToolResult<Reply<StopResult>> {
    validate::writable(&state)?;
    let grace = validate::range("grace_seconds", p.grace_seconds.unwrap_or(5), 0, 60)?;
    let remove = p.remove.unwrap_or(true);
    let id = VmState::find(&state.lock(), &p.instance, "instance", &caller)?;
    if p.pause.unwrap_or(false) {
        return pause(&state, &id);
    }
    let out: StopOutcome =
        lifecycle::stop_instance(&state, &id, Duration::from_secs(grace), "request", remove).await;
    let text = format!(
        "{id} {}{}{}",
        out.state.as_str(),
        out.exit
            .map(|e| format!(", exit code {}", e.code))
            .unwrap_or_default(),
        if out.removed { ", removed" } else { "" }
    );
    Ok(Reply::new(
        StopResult {
            instance: id,
            state: out.state,
            exit: out.exit,
            removed: out.removed,
            closed_ports: out.closed_ports,
            released_leases: out.released_leases,
            stopped_descendants: out.stopped_descendants,
        },
        text,
    ))
}

fn pause(state: &Arc<VmState>, id: &str) -> ToolResult<Reply<StopResult>> {
    let mut map = state.lock();
    let Some(inst) = map.get_mut(id) else {
        return Err(ToolError::internal("instance vanished"));
    };
    match (inst.state, &inst.sandbox) {
        (State::Paused, _) => {}
        (State::Running, Some(s)) => {
            s.pause().map_err(|e| e.operation_error("pause"))?;
            inst.state = State::Paused;
        }
        (other, _) => {
            return Err(ToolError::new(
                ErrorCode::InstanceNotRunning,
                format!(
                    "instance {id} is {}: only a running instance can be paused",
                    other.as_str()
                ),
            ));
        }
    }
    Ok(Reply::new(
        StopResult {
            instance: id.to_string(),
            state: State::Paused,
            exit: None,
            removed: false,
            closed_ports: Vec::new(),
            released_leases: 0,
            stopped_descendants: Vec::new(),
        },
        format!("{id} paused; the next exec, copy, connection or keepalive resumes it"),
    ))
}
