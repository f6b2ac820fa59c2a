//! Inspector events: scripts loading, breakpoints binding, pauses (and which pause is due
//! to a breakpoint whose hit count is not reached yet), and resuming.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Adapter, Expect, Paused, Script, url_path};
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
        if hit.is_empty() && counted_out && expect == Expect::Nothing && !exception {
            if let Some(cdp) = &self.cdp {
                drop(cdp.send("Debugger.resume", json!({})));
            }
            return;
        }
        let reason = if !hit.is_empty() {
            "breakpoint"
        } else if exception {
            "exception"
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

    pub(super) async fn resume(&mut self, method: &str, expect: Expect) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        if self.paused.is_none() {
            return Err(AdapterFailure::NotPaused);
        }
        self.expect = expect;
        cdp.call(method, json!({})).await?;
        Ok(json!({"allThreadsContinued": true}))
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
