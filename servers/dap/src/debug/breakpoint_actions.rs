//! The breakpoint actions: set_breakpoint, remove_breakpoint and list_breakpoints (source
//! lines, or a function by `name`), set_function_breakpoint, set_exception_breakpoints, and the
//! per-run instruction and data breakpoints. Each change resends one kind's whole list.

use kitbag_shared::limits;
use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, Resolved, ToolError, ToolResult, args};
use serde_json::json;

use super::breakpoints::{
    Common, NamedBp, SourceBp, apply, apply_source, data_args, instruction_args, resend_functions,
    source_args,
};
use super::params::{Action, DebugParams, HitSyntax};
use super::result::{BreakpointEntry, DataBreakpointInfo, DebugResult};
use super::source::read_source;
use super::{Core, DapState, REQUEST_TIMEOUT, adapter_failure, inspect, need, require_capability};

/// Check condition / hit count / log message against the adapter's capabilities.
fn check_features(core: Option<&Core>, p: &DebugParams) -> ToolResult<()> {
    if let Some(h) = &p.hit_count {
        h.condition(HitSyntax::Number)?;
    }
    let Some(core) = core else { return Ok(()) };
    let wanted = [
        (
            p.condition.is_some(),
            "supportsConditionalBreakpoints",
            "condition",
        ),
        (
            p.hit_count.is_some(),
            "supportsHitConditionalBreakpoints",
            "hit_count",
        ),
        (p.log_message.is_some(), "supportsLogPoints", "log_message"),
    ];
    for (asked, capability, field) in wanted {
        if asked {
            require_capability(&core.client, capability, field)?;
        }
    }
    Ok(())
}

/// set_breakpoint, remove_breakpoint (a source line, or a function by `name`),
/// list_breakpoints.
pub async fn source(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    if p.action == Action::ListBreakpoints {
        return list(state, policy, p).await;
    }
    if p.action == Action::RemoveBreakpoint && p.path.is_none() && p.name.is_some() {
        return remove_function(state, p).await;
    }
    let (resolved, line) = source_line(policy, p)?;
    let core = state.live().await.ok();
    let setting = p.action == Action::SetBreakpoint;
    if setting {
        check_features(core.as_deref(), p)?;
    }
    let mut bps = state.breakpoints.lock().await;
    let existed = bps
        .source
        .get(&resolved.abs)
        .is_some_and(|l| l.iter().any(|b| b.line == line));
    if !setting && !existed {
        return Err(ToolError::invalid_field(
            "line",
            format!("no breakpoint at {}:{line}", resolved.rel),
        ));
    }
    let id = if setting { bps.new_id() } else { 0 };
    let entry = bps.source.entry(resolved.abs.clone()).or_default();
    entry.retain(|b| b.line != line);
    if setting {
        entry.push(SourceBp {
            common: Common {
                id,
                condition: p.condition.clone(),
                hit_count: p.hit_count.clone(),
                ..Common::default()
            },
            line,
            log_message: p.log_message.clone(),
            actual_line: None,
        });
    }
    if let Some(core) = &core {
        let args = source_args(&resolved.abs, entry, core.runtime.hit_syntax());
        let body = core
            .client
            .request("setBreakpoints", args, REQUEST_TIMEOUT)
            .await
            .map_err(|m| adapter_failure(&core.client, m))?;
        apply_source(&body, entry);
    }
    if entry.is_empty() {
        bps.source.remove(&resolved.abs);
    }
    let mut r = DebugResult::new(p.action, "ok");
    r.path = Some(resolved.rel.clone());
    if !setting {
        return Ok(Reply::new(
            r,
            format!("breakpoint removed at {}:{line}", resolved.rel),
        ));
    }
    let b = bps
        .source
        .get(&resolved.abs)
        .and_then(|l| l.iter().find(|b| b.common.id == id))
        .ok_or_else(|| ToolError::internal("the breakpoint just set is missing"))?;
    Ok(set_reply(r, b, line, &resolved.rel, core.is_some()))
}

/// list_breakpoints: the kept list, updated with what the adapter reported meanwhile.
async fn list(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let skip = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let changes = match state.live().await {
        Ok(core) => core.client.events().breakpoint_changes(),
        Err(_) => Default::default(),
    };
    let mut bps = state.breakpoints.lock().await;
    bps.absorb(&changes);
    let all = bps.entries(policy);
    drop(bps);
    let total = all.len();
    let mut r = DebugResult::new(p.action, "ok");
    r.total = Some(total as u64);
    // Held to the result budget: each text field bounded, the list cut at the last entry
    // that fits (page on with `offset`).
    let shown: Vec<BreakpointEntry> = all.into_iter().skip(skip).map(bounded_entry).collect();
    let (list, _) = super::within_budget(&r, shown);
    let next = skip + list.len();
    let mut text = list
        .iter()
        .map(|b| match (&b.path, b.line, &b.target) {
            (Some(path), Some(line), _) => format!("#{} {path}:{line}", b.id),
            (_, _, Some(t)) => format!("#{} {} {t}", b.id, b.kind),
            _ => format!("#{}", b.id),
        })
        .collect::<Vec<_>>()
        .join("\n");
    if next < total {
        r.truncated = Some(true);
        r.next_offset = Some(next as u64);
        text.push_str(&format!(
            "\n[{} of {total} breakpoints; more: offset {next}]",
            list.len()
        ));
    }
    r.breakpoints = Some(list);
    if text.is_empty() {
        text = "no breakpoints".to_string();
    }
    Ok(Reply::new(r, text))
}

/// Most bytes (as JSON) one breakpoint's path, target, condition, hit count or log message
/// shows in a listing: one entry stays well under the result budget.
const ENTRY_FIELD_BYTES: usize = 4000;

fn bounded_entry(mut b: BreakpointEntry) -> BreakpointEntry {
    let fit = |s: &mut Option<String>| {
        if let Some(v) = s.as_mut() {
            *v = limits::fit_str(v, ENTRY_FIELD_BYTES, "… [truncated]").0;
        }
    };
    fit(&mut b.path);
    fit(&mut b.target);
    fit(&mut b.condition);
    fit(&mut b.hit_count);
    fit(&mut b.log_message);
    b
}

/// The source file and line a breakpoint goes on: the file readable, the line inside it.
fn source_line(policy: &PathPolicy, p: &DebugParams) -> ToolResult<(Resolved, i64)> {
    let path = need(&p.path, "path", "a root-relative source file")?;
    let line = *need(&p.line, "line", "a 1-based line number")?;
    let resolved = policy.resolve(path, "path", Access::Read)?;
    // Read through a descriptor opened beneath the root (issue #22 §1), not the path again.
    let text = read_source(policy, &resolved.abs)
        .map_err(|e| ToolError::invalid_field("path", format!("cannot read {path}: {e}")))?;
    let lines = text.lines().count() as i64;
    if line < 1 || line > lines {
        return Err(ToolError::invalid_field(
            "line",
            format!("a line between 1 and {lines} (the file's length)"),
        ));
    }
    Ok((resolved, line))
}

/// A breakpoint set: where it landed and whether the adapter verified it (without a live
/// session it is sent at launch).
fn set_reply(
    mut r: DebugResult,
    b: &SourceBp,
    line: i64,
    rel: &str,
    live: bool,
) -> Reply<DebugResult> {
    let id = b.common.id;
    r.breakpoint_id = Some(id);
    r.verified = Some(b.common.verified);
    r.actual_line = Some(b.actual_line.unwrap_or(line));
    r.message = b.common.message.clone();
    let state_text = match (live, b.common.verified) {
        (false, _) => " (sent at launch)".to_string(),
        (true, true) => String::new(),
        (true, false) => format!(
            " (not verified{})",
            b.common
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    };
    Reply::new(
        r,
        format!(
            "breakpoint #{id} set at {rel}:{}{state_text}",
            b.actual_line.unwrap_or(line)
        ),
    )
}

/// set_function_breakpoint: kept across sessions like source breakpoints.
pub async fn function(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let name = need(&p.name, "name", "a function name")?.trim().to_string();
    if name.is_empty() {
        return Err(ToolError::invalid_field(
            "name",
            "a function name (it is empty)",
        ));
    }
    let core = state.live().await.ok();
    if let Some(c) = &core {
        require_capability(
            &c.client,
            "supportsFunctionBreakpoints",
            "set_function_breakpoint",
        )?;
    }
    check_features(core.as_deref(), p)?;
    let id = {
        let mut bps = state.breakpoints.lock().await;
        bps.functions.retain(|b| b.target != name);
        let id = bps.new_id();
        bps.functions.push(NamedBp {
            common: Common {
                id,
                condition: p.condition.clone(),
                hit_count: p.hit_count.clone(),
                ..Common::default()
            },
            target: name.clone(),
            offset: 0,
            access: None,
        });
        id
    };
    if let Some(core) = &core {
        resend_functions(state, core).await?;
    }
    named_reply(state, p, id, &name, core.is_some()).await
}

async fn remove_function(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let name = need(&p.name, "name", "a function name")?.trim().to_string();
    {
        let mut bps = state.breakpoints.lock().await;
        let before = bps.functions.len();
        bps.functions.retain(|b| b.target != name);
        if bps.functions.len() == before {
            return Err(ToolError::invalid_field(
                "name",
                format!("no function breakpoint on `{name}`"),
            ));
        }
    }
    if let Ok(core) = state.live().await {
        resend_functions(state, &core).await?;
    }
    Ok(Reply::new(
        DebugResult::new(p.action, "ok"),
        format!("function breakpoint on {name} removed"),
    ))
}

/// The answer for a named breakpoint just set: its id and whether the adapter bound it.
async fn named_reply(
    state: &DapState,
    p: &DebugParams,
    id: i64,
    target: &str,
    live: bool,
) -> ToolResult<Reply<DebugResult>> {
    let bps = state.breakpoints.lock().await;
    let b = bps
        .functions
        .iter()
        .chain(&bps.instructions)
        .chain(&bps.data)
        .find(|b| b.common.id == id);
    let mut r = DebugResult::new(p.action, "ok");
    r.breakpoint_id = Some(id);
    r.verified = Some(b.is_some_and(|b| b.common.verified));
    r.message = b.and_then(|b| b.common.message.clone());
    let how = match (live, r.verified) {
        (false, _) => " (sent at launch)".to_string(),
        (true, Some(true)) => String::new(),
        _ => format!(
            " (not verified{})",
            r.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    };
    Ok(Reply::new(r, format!("breakpoint #{id} on {target}{how}")))
}

/// set_exception_breakpoints: the filters replace the default (`uncaught` after launch).
pub async fn exceptions(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let filters = need(&p.filters, "filters", "a list of exception filter ids")?.clone();
    let core = state.live().await.ok();
    if let Some(core) = &core {
        let offered = core.client.events().exception_filters();
        if let Some(bad) = filters.iter().find(|f| !offered.contains(f)) {
            return Err(ToolError::invalid_field(
                "filters",
                format!(
                    "filter ids this adapter offers: {} (`{bad}` is not one)",
                    offered.join(", ")
                ),
            ));
        }
        core.client
            .request(
                "setExceptionBreakpoints",
                json!({"filters": filters}),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|m| adapter_failure(&core.client, m))?;
    }
    state.breakpoints.lock().await.exception_filters = Some(filters.clone());
    Ok(Reply::new(
        DebugResult::new(p.action, "ok"),
        if filters.is_empty() {
            "no exception breakpoints".to_string()
        } else {
            format!("breaking on exceptions: {}", filters.join(", "))
        },
    ))
}

/// set_instruction_breakpoint / remove_instruction_breakpoint (this session only).
pub async fn instruction(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    require_capability(
        &core.client,
        "supportsInstructionBreakpoints",
        &p.action.name(),
    )?;
    let reference = need(
        &p.memory_reference,
        "memory_reference",
        "an instruction address (memoryReference), e.g. a frame's instruction_pointer",
    )?
    .clone();
    let offset = p.offset.unwrap_or(0);
    let setting = p.action == Action::SetInstructionBreakpoint;
    if setting {
        check_features(Some(&core), p)?;
    }
    let id = {
        let mut bps = state.breakpoints.lock().await;
        let previous = bps.instructions.clone();
        let before = bps.instructions.len();
        bps.instructions
            .retain(|b| !(b.target == reference && b.offset == offset));
        if !setting && bps.instructions.len() == before {
            return Err(ToolError::invalid_field(
                "memory_reference",
                format!("no instruction breakpoint at {reference}"),
            ));
        }
        let id = if setting { bps.new_id() } else { 0 };
        if setting {
            bps.instructions.push(NamedBp {
                common: Common {
                    id,
                    condition: p.condition.clone(),
                    hit_count: p.hit_count.clone(),
                    ..Common::default()
                },
                target: reference.clone(),
                offset,
                access: None,
            });
        }
        let args = instruction_args(&bps.instructions, core.runtime.hit_syntax());
        let body = match core
            .client
            .request("setInstructionBreakpoints", args, REQUEST_TIMEOUT)
            .await
        {
            Ok(b) => b,
            Err(m) => {
                bps.instructions = previous;
                return Err(adapter_failure(&core.client, m));
            }
        };
        apply(&body, bps.instructions.iter_mut().map(|b| &mut b.common));
        id
    };
    if !setting {
        return Ok(Reply::new(
            DebugResult::new(p.action, "ok"),
            format!("instruction breakpoint at {reference} removed"),
        ));
    }
    named_reply(state, p, id, &reference, true).await
}

/// data_breakpoint_info: whether (and how) a variable can be watched.
pub async fn data_info(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    require_capability(
        &core.client,
        "supportsDataBreakpoints",
        "data_breakpoint_info",
    )?;
    let name = need(&p.name, "name", "the variable to watch, e.g. \"count\"")?;
    let (args, shown) = inspect::data_info_target(&core, p, name).await?;
    let body = core
        .client
        .request("dataBreakpointInfo", args, REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(&core.client, m))?;
    let info = DataBreakpointInfo {
        data_id: body["dataId"].as_str().map(String::from),
        description: body["description"].as_str().unwrap_or("").to_string(),
        access_types: body["accessTypes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let text = match &info.data_id {
        Some(id) => format!(
            "{shown}: data_id {id} ({}){}",
            info.description,
            if info.access_types.is_empty() {
                String::new()
            } else {
                format!("; access: {}", info.access_types.join(", "))
            }
        ),
        None => format!("{shown} cannot be watched: {}", info.description),
    };
    let mut r = DebugResult::new(p.action, "ok");
    r.data_breakpoint = Some(info);
    Ok(Reply::new(r, text))
}

/// set_data_breakpoint / remove_data_breakpoint (this session only).
pub async fn data(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    require_capability(&core.client, "supportsDataBreakpoints", &p.action.name())?;
    let data_id = need(
        &p.data_id,
        "data_id",
        "the data_id that data_breakpoint_info returned",
    )?
    .clone();
    let setting = p.action == Action::SetDataBreakpoint;
    if setting {
        check_features(Some(&core), p)?;
    }
    let mut bps = state.breakpoints.lock().await;
    // Restored when the adapter refuses: a refused change changes nothing.
    let previous = bps.data.clone();
    let before = bps.data.len();
    bps.data.retain(|b| b.target != data_id);
    if !setting && bps.data.len() == before {
        return Err(ToolError::invalid_field(
            "data_id",
            format!("no data breakpoint on {data_id}"),
        ));
    }
    let id = if setting { bps.new_id() } else { 0 };
    if setting {
        bps.data.push(NamedBp {
            common: Common {
                id,
                condition: p.condition.clone(),
                hit_count: p.hit_count.clone(),
                ..Common::default()
            },
            target: data_id.clone(),
            offset: 0,
            access: p.access_type,
        });
    }
    let args = data_args(&bps.data, core.runtime.hit_syntax());
    let body = match core
        .client
        .request("setDataBreakpoints", args, REQUEST_TIMEOUT)
        .await
    {
        Ok(b) => b,
        Err(m) => {
            bps.data = previous;
            return Err(adapter_failure(&core.client, m));
        }
    };
    apply(&body, bps.data.iter_mut().map(|b| &mut b.common));
    drop(bps);
    if !setting {
        return Ok(Reply::new(
            DebugResult::new(p.action, "ok"),
            format!("data breakpoint on {data_id} removed"),
        ));
    }
    let r = named_reply(state, p, id, &data_id, true).await?;
    if r.data.verified == Some(false) {
        let message = r.data.message.clone().unwrap_or_default();
        state
            .breakpoints
            .lock()
            .await
            .data
            .retain(|b| b.common.id != id);
        return Err(ToolError::new(
            ErrorCode::AdapterError,
            format!("the adapter could not set the data breakpoint: {message}"),
        ));
    }
    Ok(r)
}
