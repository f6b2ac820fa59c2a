//! Inspector events: scripts loading, breakpoints binding, pauses (and which pause is due
//! to a breakpoint whose hit count is not reached yet), and resuming.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::breakpoints::url_pattern;
use super::{Adapter, Dialect, Expect, Paused, Script, url_path};
use crate::cdp::failure::{AdapterFailure, AdapterResult};
use crate::cdp::sourcemap;

impl Adapter {
    /// An event while the session runs: recorded, and told to the client.
    pub(super) async fn event(&mut self, method: &str, params: Value) {
        match method {
            "Debugger.paused" => self.on_paused(params).await,
            "Debugger.resumed" => {
                if self.paused.take().is_some() {
                    self.handles.clear();
                    self.out
                        .event(
                            "continued",
                            json!({"threadId": 1, "allThreadsContinued": true}),
                        )
                        .await;
                }
            }
            "Debugger.breakpointResolved" => self.on_resolved(&params).await,
            _ => self.event_quiet(method, params).await,
        }
    }

    /// Events that only update what the adapter knows (and the start-up pause).
    pub(super) async fn event_quiet(&mut self, method: &str, params: Value) {
        match method {
            "Debugger.scriptParsed" => self.on_script(params).await,
            "Debugger.paused" if !self.configured => {
                self.paused = Some(Paused {
                    frames: params["callFrames"].as_array().cloned().unwrap_or_default(),
                    exception: None,
                });
            }
            "Debugger.paused" => self.on_paused(params).await,
            "Debugger.breakpointResolved" => self.on_resolved(&params).await,
            "Runtime.executionContextCreated" => {
                let ctx = &params["context"];
                if self.main_context.is_none() && ctx["auxData"]["isDefault"] != json!(false) {
                    self.main_context = ctx["id"].as_i64();
                }
            }
            "Runtime.executionContextDestroyed" => {
                // The program is done; Node waits for the debugger to detach before it exits.
                if self.launched
                    && params["executionContextId"].as_i64() == self.main_context
                    && let Some(cdp) = self.cdp.take()
                {
                    cdp.close();
                }
            }
            _ => {}
        }
    }

    pub(super) async fn on_script(&mut self, p: Value) {
        let id = p["scriptId"].as_str().unwrap_or("").to_string();
        let url = p["url"].as_str().unwrap_or("").to_string();
        let path = url_path(&url);
        let map = match (p["sourceMapURL"].as_str(), &path) {
            (Some(m), Some(script)) if !m.is_empty() => sourcemap::load(m, script).map(Arc::new),
            _ => None,
        };
        let mapped = map.clone();
        self.scripts.insert(id.clone(), Script { url, path, map });
        // Breakpoints in sources this script maps: bind them now that it is here.
        if let Some(map) = mapped {
            let wanted: Vec<PathBuf> = self.bps.keys().filter(|p| map.covers(p)).cloned().collect();
            for file in wanted {
                self.bind_mapped(&file, &id, &map).await;
            }
        }
    }

    pub(super) async fn on_resolved(&mut self, p: &Value) {
        let cdp_id = p["breakpointId"].as_str().unwrap_or("");
        let line = p["location"]["lineNumber"].as_i64().map(|l| l + 1);
        let mut changed = None;
        for list in self.bps.values_mut() {
            for b in list.iter_mut() {
                if b.cdp_ids.iter().any(|c| c == cdp_id) && !b.verified {
                    b.verified = true;
                    b.actual_line = b.actual_line.or(line);
                    changed = Some(
                        json!({"id": b.id, "verified": true, "line": b.actual_line.unwrap_or(b.line)}),
                    );
                }
            }
        }
        if let Some(bp) = changed {
            self.out
                .event("breakpoint", json!({"reason": "changed", "breakpoint": bp}))
                .await;
        }
    }

    pub(super) async fn on_paused(&mut self, p: Value) {
        let frames = p["callFrames"].as_array().cloned().unwrap_or_default();
        // V8 lists the breakpoints hit; WebKit names one in the pause's data.
        let mut hit_cdp: Vec<String> = p["hitBreakpoints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if p["reason"] == "Breakpoint"
            && let Some(id) = p["data"]["breakpointId"].as_str()
        {
            hit_cdp.push(id.to_string());
        }
        let mut hit = Vec::new();
        let mut counted_out = false;
        for list in self.bps.values_mut() {
            for b in list.iter_mut() {
                if b.cdp_ids.iter().any(|c| hit_cdp.contains(c)) {
                    b.hits += 1;
                    if b.hit.is_none_or(|h| h.breaks(b.hits)) {
                        hit.push(b.id);
                    } else {
                        counted_out = true;
                    }
                }
            }
        }
        let cdp_reason = p["reason"].as_str().unwrap_or("");
        let expect = std::mem::replace(&mut self.expect, Expect::Nothing);
        let exception = matches!(cdp_reason, "exception" | "promiseRejection");
        // A breakpoint not due yet (hit count): go on as if nothing happened.
        if hit.is_empty()
            && counted_out
            && matches!(expect, Expect::Nothing | Expect::Entry)
            && !exception
        {
            self.expect = expect;
            if let Some(cdp) = &self.cdp {
                drop(cdp.send("Debugger.resume", json!({})));
            }
            return;
        }
        // The entry stop is over at the first pause, wherever it is.
        if expect == Expect::Entry {
            self.end_entry();
        }
        let reason = if !hit.is_empty() {
            "breakpoint"
        } else if exception {
            "exception"
        } else if expect == Expect::Entry && frames.first().is_some_and(|f| self.in_program(f)) {
            "entry"
        } else if expect == Expect::Step {
            "step"
        } else if expect == Expect::Pause {
            "pause"
        } else if cdp_reason == "Break on start" {
            "entry"
        } else {
            "debugger statement"
        };
        let text = exception.then(|| {
            p["data"]["description"]
                .as_str()
                .unwrap_or("exception")
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        });
        self.paused = Some(Paused {
            frames,
            exception: exception.then(|| p["data"].clone()),
        });
        self.handles.clear();
        self.stopped(reason, &hit, text).await;
    }

    /// Whether a call frame is in the launched script itself.
    pub(super) fn in_program(&self, frame: &Value) -> bool {
        let Some(program) = &self.program else {
            return false;
        };
        let id = frame["location"]["scriptId"].as_str().unwrap_or("");
        self.scripts
            .get(id)
            .and_then(|s| s.path.as_ref())
            .is_some_and(|p| p == program || std::fs::canonicalize(p).is_ok_and(|c| &c == program))
    }

    /// Whether the start-up pause is in the launched script itself.
    pub(super) fn paused_in_program(&self) -> bool {
        self.paused
            .as_ref()
            .and_then(|p| p.frames.first())
            .is_some_and(|f| self.in_program(f))
    }

    /// Run from a start-up pause in an imported module to the script's own first line: a
    /// temporary breakpoint on its first line (V8); Bun's `--inspect-brk` starts the entry
    /// script with a `debugger;` statement, which pauses once debugger statements do.
    pub(super) async fn run_to_entry(&mut self) -> AdapterResult<()> {
        let cdp = self.cdp()?;
        match (self.dialect, &self.program) {
            (Dialect::V8, Some(program)) => {
                // The script's first top-level statement, where V8 knows the script already
                // (ES modules are all parsed before the first runs). A breakpoint at line 0
                // would bind to the first place V8 can stop, which may be inside a function
                // declared above the first statement — hit only once the top-level code ran.
                let first = self.first_statement(&cdp).await;
                let r = match first {
                    Some(location) => {
                        cdp.call("Debugger.setBreakpoint", json!({"location": location}))
                            .await?
                    }
                    None => {
                        cdp.call(
                            "Debugger.setBreakpointByUrl",
                            json!({"lineNumber": 0, "urlRegex": url_pattern(program)}),
                        )
                        .await?
                    }
                };
                self.entry_bp = r["breakpointId"].as_str().map(String::from);
            }
            (Dialect::WebKit, _) => {
                cdp.call(
                    "Debugger.setPauseOnDebuggerStatements",
                    json!({"enabled": true}),
                )
                .await?;
            }
            _ => {}
        }
        self.paused = None;
        self.handles.clear();
        self.expect = Expect::Entry;
        cdp.call("Debugger.resume", json!({})).await?;
        Ok(())
    }

    /// Where the launched script's top-level code begins: the first place V8 can stop in the
    /// script's own function (not in the functions it declares). None when V8 has not parsed
    /// the script yet.
    async fn first_statement(&self, cdp: &crate::cdp::ws::Cdp) -> Option<Value> {
        let script = self.scripts.keys().find(|id| {
            let frame = json!({"location": {"scriptId": id}});
            self.in_program(&frame)
        })?;
        let r = cdp
            .call(
                "Debugger.getPossibleBreakpoints",
                json!({"start": {"scriptId": script, "lineNumber": 0, "columnNumber": 0},
                       "restrictToFunction": true}),
            )
            .await
            .ok()?;
        let first = r["locations"].as_array()?.first()?;
        Some(
            json!({"scriptId": script, "lineNumber": first["lineNumber"],
                    "columnNumber": first["columnNumber"]}),
        )
    }

    /// Undo what stood for the entry stop.
    fn end_entry(&mut self) {
        let Some(cdp) = &self.cdp else { return };
        match self.entry_bp.take() {
            Some(id) => drop(cdp.send("Debugger.removeBreakpoint", json!({"breakpointId": id}))),
            None if self.dialect == Dialect::WebKit => drop(cdp.send(
                "Debugger.setPauseOnDebuggerStatements",
                json!({"enabled": false}),
            )),
            None => {}
        }
    }

    pub(super) async fn resume(&mut self, method: &str, expect: Expect) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        if self.paused.is_none() {
            return Err(AdapterFailure::NotPaused);
        }
        self.expect = expect;
        match cdp.call(method, json!({})).await {
            // The program ran to its end and the runtime went before it answered: it did
            // resume (its exit is told next).
            Ok(_) | Err(AdapterFailure::Closed) => Ok(json!({"allThreadsContinued": true})),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn pause(&mut self) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        if self.paused.is_some() {
            return Ok(json!({}));
        }
        self.expect = Expect::Pause;
        cdp.call("Debugger.pause", json!({})).await?;
        Ok(json!({}))
    }
}
