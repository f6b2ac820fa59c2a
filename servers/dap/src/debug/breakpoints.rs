//! Breakpoints of every kind. Source, function and exception breakpoints are kept across
//! sessions (set before launch, sent at configuration); instruction and data breakpoints name
//! addresses and data of one run, so they live and die with the session. DAP replaces a
//! kind's whole list on each request: the lists here are the truth, and each change resends
//! one list.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, ToolError, ToolResult};
use serde_json::{Value, json};

use crate::dap::error_message;

use super::params::{AccessType, Action, DebugParams, HitCount, HitSyntax};
use super::result::{BreakpointEntry, DataBreakpointInfo, DebugResult};
use super::session::read_source;
use super::{Core, DapState, REQUEST_TIMEOUT, adapter_failure, inspect, need, require_capability};

/// What every breakpoint carries.
#[derive(Debug, Clone, Default)]
pub struct Common {
    pub id: i64,
    pub condition: Option<String>,
    pub hit_count: Option<HitCount>,
    pub verified: bool,
    /// The adapter's id for it in the live session.
    pub adapter_id: Option<i64>,
    pub message: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SourceBp {
    pub common: Common,
    pub line: i64,
    pub log_message: Option<String>,
    pub actual_line: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct NamedBp {
    pub common: Common,
    /// Function name, instruction reference (with offset) or data id.
    pub target: String,
    pub offset: i64,
    pub access: Option<AccessType>,
}

#[derive(Debug, Default)]
pub struct Breakpoints {
    next_id: i64,
    source: BTreeMap<PathBuf, Vec<SourceBp>>,
    functions: Vec<NamedBp>,
    /// None: the default (`uncaught` after a launch).
    exception_filters: Option<Vec<String>>,
    instructions: Vec<NamedBp>,
    data: Vec<NamedBp>,
}

impl Breakpoints {
    fn new_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// kitbag's id for the adapter's breakpoint id `adapter`.
    pub fn by_adapter_id(&self, adapter: i64) -> Option<i64> {
        self.all_common()
            .find(|c| c.adapter_id == Some(adapter))
            .map(|c| c.id)
    }

    /// The source breakpoint at `path:line` (when an adapter names no breakpoint id).
    pub fn at(&self, path: &std::path::Path, line: i64) -> Option<i64> {
        self.source.get(path).and_then(|list| {
            list.iter()
                .find(|b| b.actual_line.unwrap_or(b.line) == line || b.line == line)
                .map(|b| b.common.id)
        })
    }

    fn all_common(&self) -> impl Iterator<Item = &Common> {
        self.source
            .values()
            .flatten()
            .map(|b| &b.common)
            .chain(self.functions.iter().map(|b| &b.common))
            .chain(self.instructions.iter().map(|b| &b.common))
            .chain(self.data.iter().map(|b| &b.common))
    }

    /// A new session: nothing is verified yet; per-run breakpoints are gone.
    pub fn reset_for_session(&mut self) {
        self.instructions.clear();
        self.data.clear();
        for c in self.source.values_mut().flatten().map(|b| &mut b.common) {
            c.verified = false;
            c.adapter_id = None;
        }
        for c in self.functions.iter_mut().map(|b| &mut b.common) {
            c.verified = false;
            c.adapter_id = None;
        }
    }

    /// What the adapter has said since in `breakpoint` events (a pending breakpoint bound
    /// when its script loaded).
    pub fn absorb(&mut self, changes: &std::collections::HashMap<i64, (bool, Option<i64>)>) {
        for list in self.source.values_mut() {
            for b in list.iter_mut() {
                if let Some((verified, line)) = b.common.adapter_id.and_then(|id| changes.get(&id))
                {
                    b.common.verified = *verified;
                    if line.is_some() {
                        b.actual_line = *line;
                    }
                }
            }
        }
    }

    fn entries(&self, policy: &PathPolicy) -> Vec<BreakpointEntry> {
        let mut out = Vec::new();
        for (file, list) in &self.source {
            for b in list {
                out.push(BreakpointEntry {
                    id: b.common.id,
                    kind: "source".into(),
                    path: Some(policy.display(file)),
                    line: Some(b.actual_line.unwrap_or(b.line)),
                    target: None,
                    condition: b.common.condition.clone(),
                    hit_count: b.common.hit_count.as_ref().map(hit_text),
                    log_message: b.log_message.clone(),
                    verified: b.common.verified,
                });
            }
        }
        let named = [
            ("function", &self.functions),
            ("instruction", &self.instructions),
            ("data", &self.data),
        ];
        for (kind, list) in named {
            for b in list {
                out.push(BreakpointEntry {
                    id: b.common.id,
                    kind: kind.into(),
                    path: None,
                    line: None,
                    target: Some(b.target.clone()),
                    condition: b.common.condition.clone(),
                    hit_count: b.common.hit_count.as_ref().map(hit_text),
                    log_message: None,
                    verified: b.common.verified,
                });
            }
        }
        for f in self.exception_filters.iter().flatten() {
            out.push(BreakpointEntry {
                id: 0,
                kind: "exception".into(),
                path: None,
                line: None,
                target: Some(f.clone()),
                condition: None,
                hit_count: None,
                log_message: None,
                verified: true,
            });
        }
        out
    }
}

fn hit_text(h: &HitCount) -> String {
    match h {
        HitCount::Number(n) => n.to_string(),
        HitCount::Text(t) => t.trim().to_string(),
    }
}

/// The fields common to every breakpoint request entry.
fn common_json(c: &Common, syntax: HitSyntax) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    if let Some(cond) = &c.condition {
        m.insert("condition".into(), json!(cond));
    }
    if let Some(h) = c.hit_count.as_ref().and_then(|h| h.condition(syntax).ok()) {
        m.insert("hitCondition".into(), json!(h));
    }
    m
}

fn source_args(file: &std::path::Path, list: &[SourceBp], syntax: HitSyntax) -> Value {
    let bps: Vec<Value> = list
        .iter()
        .map(|b| {
            let mut m = common_json(&b.common, syntax);
            m.insert("line".into(), json!(b.line));
            if let Some(log) = &b.log_message {
                m.insert("logMessage".into(), json!(log));
            }
            Value::Object(m)
        })
        .collect();
    json!({"source": {"path": file.to_string_lossy()}, "breakpoints": bps})
}

fn function_args(list: &[NamedBp], entry: Option<&str>, syntax: HitSyntax) -> Value {
    let mut bps: Vec<Value> = list
        .iter()
        .map(|b| {
            let mut m = common_json(&b.common, syntax);
            m.insert("name".into(), json!(b.target));
            Value::Object(m)
        })
        .collect();
    if let Some(e) = entry {
        bps.push(json!({"name": e}));
    }
    json!({"breakpoints": bps})
}

fn instruction_args(list: &[NamedBp], syntax: HitSyntax) -> Value {
    let bps: Vec<Value> = list
        .iter()
        .map(|b| {
            let mut m = common_json(&b.common, syntax);
            m.insert("instructionReference".into(), json!(b.target));
            if b.offset != 0 {
                m.insert("offset".into(), json!(b.offset));
            }
            Value::Object(m)
        })
        .collect();
    json!({"breakpoints": bps})
}

fn data_args(list: &[NamedBp], syntax: HitSyntax) -> Value {
    let bps: Vec<Value> = list
        .iter()
        .map(|b| {
            let mut m = common_json(&b.common, syntax);
            m.insert("dataId".into(), json!(b.target));
            m.insert(
                "accessType".into(),
                json!(b.access.unwrap_or(AccessType::Write).dap()),
            );
            Value::Object(m)
        })
        .collect();
    json!({"breakpoints": bps})
}

/// Record what the adapter said of each breakpoint (its answer is in request order).
fn apply<'a>(answer: &Value, commons: impl Iterator<Item = &'a mut Common>) -> Vec<Option<i64>> {
    let said = answer["breakpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut lines = Vec::new();
    for (c, b) in commons.zip(said.iter()) {
        c.verified = b["verified"].as_bool().unwrap_or(false);
        c.adapter_id = b["id"].as_i64();
        c.message = b["message"].as_str().map(String::from);
        lines.push(b["line"].as_i64());
    }
    lines
}

fn apply_source(answer: &Value, list: &mut [SourceBp]) {
    let lines = apply(answer, list.iter_mut().map(|b| &mut b.common));
    for (b, line) in list.iter_mut().zip(lines) {
        b.actual_line = line;
    }
}

/// Send every breakpoint list at configuration time, all requests in flight at once, and
/// record the answers. After a launch with no filters set, stop on uncaught exceptions.
pub async fn configure(state: &DapState, core: &Core, launched: bool) -> Result<(), String> {
    let client = &core.client;
    let syntax = core.runtime.hit_syntax();
    let entry = core
        .entry
        .lock()
        .ok()
        .and_then(|e| e.as_ref().map(|e| e.function));
    let mut bps = state.breakpoints.lock().await;
    bps.reset_for_session();
    let write_failed = |e: std::io::Error| format!("adapter write failed: {e}");
    let mut files = Vec::new();
    for (file, list) in &bps.source {
        let rx = client
            .start("setBreakpoints", source_args(file, list, syntax))
            .await
            .map_err(write_failed)?;
        files.push((file.clone(), rx));
    }
    let functions = if !bps.functions.is_empty() || entry.is_some() {
        let args = function_args(&bps.functions, entry, syntax);
        Some(
            client
                .start("setFunctionBreakpoints", args)
                .await
                .map_err(write_failed)?,
        )
    } else {
        None
    };
    let filters = match (&bps.exception_filters, launched) {
        (Some(f), _) => Some(f.clone()),
        (None, true) => Some(vec!["uncaught".to_string()]),
        (None, false) => None,
    };
    let exceptions = match filters {
        Some(f) => Some(
            client
                .start("setExceptionBreakpoints", json!({"filters": f}))
                .await
                .map_err(write_failed)?,
        ),
        None => None,
    };
    for (file, rx) in files {
        let resp = answer(rx, "setBreakpoints").await?;
        if resp["success"].as_bool() != Some(true) {
            return Err(error_message(&resp, "setBreakpoints failed"));
        }
        if let Some(list) = bps.source.get_mut(&file) {
            apply_source(&resp["body"], list);
        }
    }
    if let Some(rx) = functions {
        let resp = answer(rx, "setFunctionBreakpoints").await?;
        // An adapter without function breakpoints refuses: the entry stop is then lost, not
        // the session.
        if resp["success"].as_bool() == Some(true) {
            let n = bps.functions.len();
            apply(
                &resp["body"],
                bps.functions.iter_mut().map(|b| &mut b.common),
            );
            if let Ok(mut e) = core.entry.lock()
                && let Some(entry) = e.as_mut()
            {
                entry.adapter_id = resp["body"]["breakpoints"][n]["id"].as_i64();
            }
        }
    }
    if let Some(rx) = exceptions {
        // An adapter without an `uncaught` filter may refuse it; that is not fatal.
        let _ = answer(rx, "setExceptionBreakpoints").await?;
    }
    Ok(())
}

async fn answer(rx: tokio::sync::oneshot::Receiver<Value>, what: &str) -> Result<Value, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(_)) => Err("debug adapter ended".into()),
        Err(_) => Err(format!("adapter did not answer `{what}`")),
    }
}

/// Resend the function breakpoints (after a change, or to drop the entry breakpoint).
pub async fn resend_functions(state: &DapState, core: &Core) -> ToolResult<Value> {
    let entry = core
        .entry
        .lock()
        .ok()
        .and_then(|e| e.as_ref().map(|e| e.function));
    let mut bps = state.breakpoints.lock().await;
    let args = function_args(&bps.functions, entry, core.runtime.hit_syntax());
    let body = core
        .client
        .request("setFunctionBreakpoints", args, REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(&core.client, m))?;
    apply(&body, bps.functions.iter_mut().map(|b| &mut b.common));
    Ok(body)
}

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
        let changes = match state.live().await {
            Ok(core) => core
                .client
                .events
                .lock()
                .map(|e| e.breakpoint_changes.clone())
                .unwrap_or_default(),
            Err(_) => Default::default(),
        };
        let mut bps = state.breakpoints.lock().await;
        bps.absorb(&changes);
        let list = bps.entries(policy);
        drop(bps);
        let text = list
            .iter()
            .map(|b| match (&b.path, b.line, &b.target) {
                (Some(path), Some(line), _) => format!("#{} {path}:{line}", b.id),
                (_, _, Some(t)) => format!("#{} {} {t}", b.id, b.kind),
                _ => format!("#{}", b.id),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut r = DebugResult::new(p.action, "ok");
        r.breakpoints = Some(list);
        let text = if text.is_empty() {
            "no breakpoints".to_string()
        } else {
            text
        };
        return Ok(Reply::new(r, text));
    }
    if p.action == Action::RemoveBreakpoint && p.path.is_none() && p.name.is_some() {
        return remove_function(state, p).await;
    }
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
    r.breakpoint_id = Some(id);
    r.verified = Some(b.common.verified);
    r.actual_line = Some(b.actual_line.unwrap_or(line));
    r.message = b.common.message.clone();
    let state_text = match (&core, b.common.verified) {
        (None, _) => " (sent at launch)".to_string(),
        (Some(_), true) => String::new(),
        (Some(_), false) => format!(
            " (not verified{})",
            b.common
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    };
    Ok(Reply::new(
        r,
        format!(
            "breakpoint #{id} set at {}:{}{state_text}",
            resolved.rel,
            b.actual_line.unwrap_or(line)
        ),
    ))
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
        let offered: Vec<String> = core
            .client
            .events
            .lock()
            .map(|e| {
                e.caps["exceptionBreakpointFilters"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f["filter"].as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default();
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
        let body = core
            .client
            .request("setInstructionBreakpoints", args, REQUEST_TIMEOUT)
            .await
            .map_err(|m| adapter_failure(&core.client, m))?;
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
            // Nothing changes on a refusal.
            bps.data.retain(|b| b.common.id != id || !setting);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_carry_each_kind_and_answers_are_recorded_in_order() {
        let mut bps = Breakpoints::default();
        let id = bps.new_id();
        let mut list = vec![SourceBp {
            common: Common {
                id,
                condition: Some("i == 7".into()),
                hit_count: Some(HitCount::Number(3)),
                ..Common::default()
            },
            line: 4,
            log_message: Some("i={i}".into()),
            actual_line: None,
        }];
        let args = source_args(std::path::Path::new("/r/a.py"), &list, HitSyntax::Operators);
        assert_eq!(args["source"]["path"], "/r/a.py");
        assert_eq!(args["breakpoints"][0]["hitCondition"], ">=3");
        assert_eq!(args["breakpoints"][0]["logMessage"], "i={i}");
        assert_eq!(args["breakpoints"][0]["condition"], "i == 7");
        apply_source(
            &json!({"breakpoints": [{"id": 17, "verified": true, "line": 5}]}),
            &mut list,
        );
        assert_eq!(list[0].actual_line, Some(5));
        assert!(list[0].common.verified);
        bps.source.insert("/r/a.py".into(), list);
        assert_eq!(bps.by_adapter_id(17), Some(id));
        assert_eq!(bps.at(std::path::Path::new("/r/a.py"), 5), Some(id));
        bps.reset_for_session();
        assert_eq!(bps.by_adapter_id(17), None);

        let f = function_args(&[], Some("main"), HitSyntax::Number);
        assert_eq!(f["breakpoints"][0]["name"], "main");
        let d = data_args(
            &[NamedBp {
                common: Common::default(),
                target: "0x10/4".into(),
                offset: 0,
                access: None,
            }],
            HitSyntax::Number,
        );
        assert_eq!(d["breakpoints"][0]["accessType"], "write");
        assert_eq!(d["breakpoints"][0]["dataId"], "0x10/4");
    }
}
