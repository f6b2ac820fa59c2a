//! Execution control: continue, the steps and pause, and waiting (bounded) for the program
//! to stop or exit.

use kitbag_shared::lock::LockExt;
use std::path::Path;
use std::time::Duration;

use kitbag_shared::{ErrorCode, PathPolicy, Reply, ToolError, ToolResult};
use serde_json::{Value, json};

use super::params::{Action, DebugParams};
use super::result::DebugResult;
use super::source::location_of;
use super::{Core, DEFAULT_WAIT_MS, DapState, REQUEST_TIMEOUT, adapter_failure, cap};
use crate::dap::{RunState, Stop};

/// The longest `wait_ms`.
const MAX_WAIT_MS: u64 = 60_000;

/// continue, step_over, step_into, step_out, pause.
pub async fn resume(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let client = &core.client;
    if client.events().is_closed() {
        return Err(ToolError::new(
            ErrorCode::DapSessionEnded,
            "the debug adapter has ended; disconnect and launch again",
        ));
    }
    let stopped = match client.events().run_state() {
        RunState::Ended { .. } => {
            return Err(ToolError::new(
                ErrorCode::DapSessionEnded,
                "the program has exited; launch or attach again",
            ));
        }
        RunState::Stopped(_) => true,
        RunState::Running => false,
    };
    let command = match p.action {
        Action::Continue => "continue",
        Action::StepOver => "next",
        Action::StepInto => "stepIn",
        Action::StepOut => "stepOut",
        _ => "pause",
    };
    if p.action != Action::Pause && !stopped {
        return Err(ToolError::new(
            ErrorCode::NotStopped,
            format!(
                "{}: the program is running; pause it or wait for a breakpoint (status)",
                p.action.name()
            ),
        ));
    }
    let thread = match super::inspect::thread_of(&core, p.thread_id).await? {
        Some(t) => t,
        None if p.action == Action::Pause => first_thread(&core).await?,
        None => stopped_thread(&core).unwrap_or(1),
    };
    let mark = client.events().stop_mark();
    client
        .request(command, json!({"threadId": thread}), REQUEST_TIMEOUT)
        .await
        .map_err(|m| {
            let e = adapter_failure(client, m);
            if p.thread_id.is_some() && e.code == ErrorCode::AdapterError {
                ToolError::invalid_field("thread_id", format!("thread {thread}: {}", e.message))
            } else {
                e
            }
        })?;
    if p.action != Action::Pause {
        client.events().resumed(mark);
    }
    settle(state, &core, policy, p.action, p.wait_ms).await
}

/// The thread the program stopped in.
pub fn stopped_thread(core: &Core) -> Option<i64> {
    core.client.events().stop().and_then(|s| s.thread_id())
}

async fn first_thread(core: &Core) -> ToolResult<i64> {
    let threads = core
        .client
        .request("threads", json!({}), REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(&core.client, m))?;
    Ok(threads["threads"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|t| t["id"].as_i64())
        .unwrap_or(1))
}

/// Wait (bounded) for a stop or exit and describe where the program is.
pub async fn settle(
    state: &DapState,
    core: &Core,
    policy: &PathPolicy,
    action: Action,
    wait_ms: Option<u64>,
) -> ToolResult<Reply<DebugResult>> {
    let wait = Duration::from_millis(wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
    match core.client.events().settle(wait).await {
        RunState::Stopped(stop) => stopped_reply(state, core, policy, action, &stop).await,
        RunState::Ended { exit_code } => {
            let mut r = DebugResult::new(action, "exited");
            r.exit_code = exit_code;
            let text = match exit_code {
                Some(c) => format!("program exited with code {c}"),
                None => "program terminated".to_string(),
            };
            Ok(Reply::new(r, text))
        }
        RunState::Running => Ok(Reply::new(
            DebugResult::new(action, "running"),
            "program is still running; call status later".to_string(),
        )),
    }
}

/// Describe a stop: reason, breakpoint, location with its source line, exception text.
async fn stopped_reply(
    state: &DapState,
    core: &Core,
    policy: &PathPolicy,
    action: Action,
    stop: &Stop,
) -> ToolResult<Reply<DebugResult>> {
    let client = &core.client;
    let (thread, stop_count, stop) = (stop.thread_id(), stop.count, &stop.body);
    let top = super::inspect::frames(core, thread, 0, 1)
        .await
        .ok()
        .and_then(|(f, _)| f.into_iter().next())
        .unwrap_or(Value::Null);
    let location = location_of(policy, &top);
    let mut reason = stop["reason"].as_str().unwrap_or("").to_string();
    let hit_ids: Vec<i64> = stop["hitBreakpointIds"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    let (pending, reached) = entry_check(core, &reason, &hit_ids, &location.function);
    if reached {
        reason = "entry".into();
    }
    if pending {
        // The entry breakpoint has done its work (or was overtaken): take it out.
        let _ = super::breakpoints::resend_functions(state, core).await;
    }
    let breakpoint_id = if reason.contains("breakpoint") {
        let bps = state.breakpoints.lock().await;
        hit_ids
            .iter()
            .find_map(|&a| bps.by_adapter_id(a))
            .or_else(|| {
                top["source"]["path"]
                    .as_str()
                    .and_then(|p| bps.at(Path::new(p), location.line))
            })
    } else {
        None
    };
    let mut description = stop["text"]
        .as_str()
        .or(stop["description"].as_str())
        .unwrap_or("")
        .to_string();
    if reason == "exception"
        && let Ok(info) = client
            .request(
                "exceptionInfo",
                json!({"threadId": stop["threadId"]}),
                REQUEST_TIMEOUT,
            )
            .await
    {
        description = format!(
            "{}: {}",
            info["exceptionId"].as_str().unwrap_or(""),
            info["description"].as_str().unwrap_or("")
        );
    }
    if reason.contains("breakpoint")
        && core
            .reported_stop
            .swap(stop_count, std::sync::atomic::Ordering::SeqCst)
            != stop_count
    {
        core.audit(
            "debug.breakpoint_hit",
            json!({"breakpoint_id": breakpoint_id, "path": location.path, "line": location.line, "reason": reason}),
        );
    }
    let text = format!(
        "stopped ({reason}{}) thread {} at {}:{} in {}\n{}: {}{}",
        breakpoint_id.map(|b| format!(" #{b}")).unwrap_or_default(),
        thread.map_or_else(|| "?".to_string(), |t| t.to_string()),
        location.path,
        location.line,
        location.function,
        location.line,
        location.source_preview,
        if description.is_empty() {
            String::new()
        } else {
            format!("\n{}", cap(&description))
        }
    );
    let mut r = DebugResult::new(action, "stopped");
    r.stopped_reason = Some(reason);
    r.breakpoint_id = breakpoint_id;
    r.thread_id = thread;
    r.location = Some(location);
    r.description = (!description.is_empty()).then(|| cap(&description));
    Ok(Reply::new(r, text))
}

/// Whether an entry breakpoint was pending, and whether this stop is its. It is dropped at
/// the first stop, whatever the stop was.
fn entry_check(core: &Core, reason: &str, hit_ids: &[i64], function: &str) -> (bool, bool) {
    let mut slot = core.entry.locked();
    let Some(entry) = slot.take() else {
        return (false, false);
    };
    let reached = match entry.adapter_id {
        Some(id) if !hit_ids.is_empty() => hit_ids.contains(&id),
        _ => {
            reason.contains("function")
                && (function == entry.function
                    || function.ends_with(&format!("::{}", entry.function)))
        }
    };
    (true, reached)
}
