//! Breakpoints of every kind, as kitbag keeps them and as DAP sends them (the actions are in
//! `breakpoint_actions`). Source, function and exception breakpoints are kept across
//! sessions (set before launch, sent at configuration); instruction and data breakpoints name
//! addresses and data of one run, so they live and die with the session. DAP replaces a
//! kind's whole list on each request: the lists here are the truth, and each change resends
//! one list.

use kitbag_shared::lock::LockExt;
use std::collections::BTreeMap;
use std::path::PathBuf;

use kitbag_shared::{PathPolicy, ToolResult};
use serde_json::{Value, json};

use crate::dap::{RequestError, error_message};

use super::params::{AccessType, HitCount, HitSyntax};
use super::result::BreakpointEntry;
use super::{Core, DapState, REQUEST_TIMEOUT, adapter_failure};

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
    pub(super) source: BTreeMap<PathBuf, Vec<SourceBp>>,
    pub(super) functions: Vec<NamedBp>,
    /// None: the default (`uncaught` after a launch).
    pub(super) exception_filters: Option<Vec<String>>,
    pub(super) instructions: Vec<NamedBp>,
    pub(super) data: Vec<NamedBp>,
}

impl Breakpoints {
    pub(super) fn new_id(&mut self) -> i64 {
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

    pub(super) fn entries(&self, policy: &PathPolicy) -> Vec<BreakpointEntry> {
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

pub(super) fn source_args(file: &std::path::Path, list: &[SourceBp], syntax: HitSyntax) -> Value {
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

pub(super) fn function_args(list: &[NamedBp], entry: Option<&str>, syntax: HitSyntax) -> Value {
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

pub(super) fn instruction_args(list: &[NamedBp], syntax: HitSyntax) -> Value {
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

pub(super) fn data_args(list: &[NamedBp], syntax: HitSyntax) -> Value {
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
pub(super) fn apply<'a>(
    answer: &Value,
    commons: impl Iterator<Item = &'a mut Common>,
) -> Vec<Option<i64>> {
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

pub(super) fn apply_source(answer: &Value, list: &mut [SourceBp]) {
    let lines = apply(answer, list.iter_mut().map(|b| &mut b.common));
    for (b, line) in list.iter_mut().zip(lines) {
        b.actual_line = line;
    }
}

/// Send every breakpoint list at configuration time, all requests in flight at once, and
/// record the answers. After a launch with no filters set, stop on uncaught exceptions.
pub async fn configure(state: &DapState, core: &Core, launched: bool) -> Result<(), RequestError> {
    let client = &core.client;
    let syntax = core.runtime.hit_syntax();
    let entry = core.entry.locked().as_ref().map(|e| e.function);
    let mut bps = state.breakpoints.lock().await;
    bps.reset_for_session();
    let mut files = Vec::new();
    for (file, list) in &bps.source {
        let rx = client
            .start("setBreakpoints", source_args(file, list, syntax))
            .await
            .map_err(RequestError::Write)?;
        files.push((file.clone(), rx));
    }
    let functions = if !bps.functions.is_empty() || entry.is_some() {
        let args = function_args(&bps.functions, entry, syntax);
        Some(
            client
                .start("setFunctionBreakpoints", args)
                .await
                .map_err(RequestError::Write)?,
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
                .map_err(RequestError::Write)?,
        ),
        None => None,
    };
    for (file, rx) in files {
        let resp = answer(rx, "setBreakpoints").await?;
        if resp["success"].as_bool() != Some(true) {
            return Err(RequestError::Refused(error_message(
                &resp,
                "setBreakpoints failed",
            )));
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
            if let Some(entry) = core.entry.locked().as_mut() {
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

async fn answer(
    rx: tokio::sync::oneshot::Receiver<Value>,
    what: &str,
) -> Result<Value, RequestError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(_)) => Err(RequestError::Ended),
        Err(_) => Err(RequestError::NoAnswer(what.to_string())),
    }
}

/// Resend the function breakpoints (after a change, or to drop the entry breakpoint).
pub async fn resend_functions(state: &DapState, core: &Core) -> ToolResult<Value> {
    let entry = core.entry.locked().as_ref().map(|e| e.function);
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
