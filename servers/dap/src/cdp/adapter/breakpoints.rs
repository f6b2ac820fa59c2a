//! Source breakpoints: by URL pattern, or through a source map into the generated script;
//! exception pauses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Adapter, Bp, Dialect};
use crate::cdp::failure::{AdapterFailure, AdapterResult};
use crate::cdp::sourcemap::SourceMap;
use crate::cdp::values::{HitCondition, logpoint_condition};

impl Adapter {
    pub(super) async fn set_exceptions(&mut self, args: &Value) -> AdapterResult<Value> {
        let filters: Vec<&str> = args["filters"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let state = if filters.contains(&"all") {
            "all"
        } else if filters.contains(&"uncaught") {
            "uncaught"
        } else {
            "none"
        };
        self.cdp()?
            .call("Debugger.setPauseOnExceptions", json!({"state": state}))
            .await?;
        Ok(json!({}))
    }

    pub(super) async fn set_breakpoints(&mut self, args: &Value) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        let file = PathBuf::from(args["source"]["path"].as_str().unwrap_or(""));
        if let Some(old) = self.bps.remove(&file) {
            for id in old.iter().flat_map(|b| &b.cdp_ids) {
                let _ = cdp
                    .call("Debugger.removeBreakpoint", json!({"breakpointId": id}))
                    .await;
            }
        }
        let mut list = Vec::new();
        for b in args["breakpoints"].as_array().into_iter().flatten() {
            self.next_bp += 1;
            let log = b["logMessage"].as_str();
            let condition = b["condition"].as_str().filter(|c| !c.trim().is_empty());
            let condition = match log {
                Some(m) => Some(logpoint_condition(m, condition)),
                None => condition.map(String::from),
            };
            let hit = match b["hitCondition"].as_str() {
                Some(h) if log.is_none() => Some(
                    HitCondition::parse(h)
                        .ok_or_else(|| AdapterFailure::BadHitCondition(h.to_string()))?,
                ),
                _ => None,
            };
            list.push(Bp {
                id: self.next_bp,
                line: b["line"].as_i64().unwrap_or(1),
                hit,
                hits: 0,
                cdp_ids: Vec::new(),
                verified: false,
                actual_line: None,
                condition,
            });
        }
        self.bps.insert(file.clone(), list);
        // A source some loaded script maps to (TypeScript built to JavaScript) is bound
        // through the map; any other by its URL, now or when it loads.
        let mapped: Vec<(String, Arc<SourceMap>)> = self
            .scripts
            .iter()
            .filter_map(|(id, s)| {
                s.map
                    .clone()
                    .filter(|m| m.covers(&file))
                    .map(|m| (id.clone(), m))
            })
            .collect();
        if mapped.is_empty() {
            self.bind_by_url(&file).await;
        } else {
            for (id, map) in mapped {
                self.bind_mapped(&file, &id, &map).await;
            }
        }
        let answer: Vec<Value> = self
            .bps
            .get(&file)
            .into_iter()
            .flatten()
            .map(|b| {
                let mut v = json!({"id": b.id, "verified": b.verified,
                    "line": b.actual_line.unwrap_or(b.line)});
                if !b.verified {
                    v["message"] = json!("pending: bound when the script loads");
                }
                v
            })
            .collect();
        Ok(json!({"breakpoints": answer}))
    }

    pub(super) async fn bind_by_url(&mut self, file: &Path) {
        let Some(cdp) = self.cdp.clone() else { return };
        let pattern = url_pattern(file);
        let self_dialect = self.dialect;
        let Some(list) = self.bps.get_mut(file) else {
            return;
        };
        for b in list.iter_mut() {
            let mut params = json!({"lineNumber": b.line - 1, "urlRegex": pattern});
            set_condition(&mut params, self_dialect, b.condition.as_deref());
            if let Ok(r) = cdp.call("Debugger.setBreakpointByUrl", params).await {
                if let Some(id) = r["breakpointId"].as_str() {
                    b.cdp_ids.push(id.to_string());
                }
                if let Some(loc) = r["locations"].as_array().and_then(|l| l.first()) {
                    b.verified = true;
                    b.actual_line = loc["lineNumber"].as_i64().map(|l| l + 1);
                }
            }
        }
    }

    /// Bind a source file's breakpoints in a script generated from it.
    pub(super) async fn bind_mapped(&mut self, file: &Path, script_id: &str, map: &SourceMap) {
        let Some(cdp) = self.cdp.clone() else { return };
        let mut resolved = Vec::new();
        let self_dialect = self.dialect;
        let Some(list) = self.bps.get_mut(file) else {
            return;
        };
        for b in list.iter_mut() {
            let Some((line, column)) = map.generated(file, b.line - 1) else {
                continue;
            };
            let mut params = json!({"location": {"scriptId": script_id,
                "lineNumber": line, "columnNumber": column}});
            set_condition(&mut params, self_dialect, b.condition.as_deref());
            if let Ok(r) = cdp.call("Debugger.setBreakpoint", params).await
                && let Some(id) = r["breakpointId"].as_str()
            {
                b.cdp_ids.push(id.to_string());
                if !b.verified {
                    b.verified = true;
                    resolved.push(json!({"id": b.id, "verified": true, "line": b.line}));
                }
            }
        }
        for bp in resolved {
            self.out
                .event("breakpoint", json!({"reason": "changed", "breakpoint": bp}))
                .await;
        }
    }
}

/// A breakpoint's condition: V8 takes it as `condition`, WebKit inside `options`.
fn set_condition(params: &mut Value, dialect: Dialect, condition: Option<&str>) {
    if let Some(c) = condition {
        match dialect {
            Dialect::V8 => params["condition"] = json!(c),
            Dialect::WebKit => params["options"] = json!({"condition": c}),
        }
    }
}

/// The URLs a runtime may give a file's script: its `file://` URL, or the bare path (Node's
/// type-stripped TypeScript carries a `sourceURL` of the path).
pub(super) fn url_pattern(path: &Path) -> String {
    let raw = path.to_string_lossy();
    let url = url::Url::from_file_path(path)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| format!("file://{raw}"));
    format!("^(?:{}|{})$", regex_escape(&url), regex_escape(&raw))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
