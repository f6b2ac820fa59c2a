//! While paused: frames (through source maps), scopes (each dialect's kinds), variables,
//! evaluate, exception info, loaded sources.

use serde_json::{Value, json};

use super::{Adapter, Dialect, Handle};
use crate::cdp::failure::{AdapterFailure, AdapterResult};
use crate::cdp::values::{top_level_names, type_text, value_text};

impl Adapter {
    pub(super) fn frame(&self, frame_id: i64) -> AdapterResult<&Value> {
        let paused = self.paused.as_ref().ok_or(AdapterFailure::NotPaused)?;
        usize::try_from(frame_id - 1)
            .ok()
            .and_then(|i| paused.frames.get(i))
            .ok_or(AdapterFailure::NoFrame(frame_id))
    }

    /// A V8 location (0-based) as (path, 1-based line, 1-based column), through the
    /// script's source map when it has one.
    pub(super) fn place(&self, location: &Value) -> (Option<String>, i64, i64) {
        let script = self
            .scripts
            .get(location["scriptId"].as_str().unwrap_or(""));
        let line = location["lineNumber"].as_i64().unwrap_or(0);
        let column = location["columnNumber"].as_i64().unwrap_or(0);
        if let Some(s) = script {
            if let Some(orig) = s.map.as_ref().and_then(|m| m.original(line, column)) {
                return (
                    Some(orig.path.to_string_lossy().into_owned()),
                    orig.line + 1,
                    orig.column + 1,
                );
            }
            let path = s
                .path
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .or_else(|| (!s.url.is_empty()).then(|| s.url.clone()));
            return (path, line + 1, column + 1);
        }
        (None, line + 1, column + 1)
    }

    pub(super) fn stack_trace(&self, args: &Value) -> AdapterResult<Value> {
        let paused = self.paused.as_ref().ok_or(AdapterFailure::NotPaused)?;
        let start = args["startFrame"].as_u64().unwrap_or(0) as usize;
        let levels = args["levels"].as_u64().filter(|l| *l > 0).unwrap_or(1000) as usize;
        let frames: Vec<Value> = paused
            .frames
            .iter()
            .enumerate()
            .skip(start)
            .take(levels)
            .map(|(i, f)| {
                let (path, line, column) = self.place(&f["location"]);
                let name = match f["functionName"].as_str() {
                    Some(n) if !n.is_empty() => n.to_string(),
                    _ => "(anonymous)".to_string(),
                };
                let mut frame = json!({"id": i + 1, "name": name, "line": line, "column": column});
                if let Some(p) = path {
                    frame["source"] = json!({"path": p});
                }
                frame
            })
            .collect();
        Ok(json!({"stackFrames": frames, "totalFrames": paused.frames.len()}))
    }

    /// A DAP variable for a RemoteObject: its text, type, and a handle to expand an object.
    fn variable(&mut self, name: &str, value: &Value) -> Value {
        let reference = match value["objectId"].as_str() {
            Some(id) if value["type"] == "object" && value["subtype"] != "null" => self.handle(id),
            _ => 0,
        };
        json!({"name": name, "value": value_text(value), "type": type_text(value),
            "variablesReference": reference})
    }

    pub(super) fn handle(&mut self, object_id: &str) -> i64 {
        self.handles.push(Handle::Object(object_id.to_string()));
        self.handles.len() as i64
    }

    /// A module frame's top-level names (WebKit), from the script's source.
    pub(super) async fn module_names(&self, frame: &Value) -> Vec<String> {
        let Some(cdp) = &self.cdp else {
            return Vec::new();
        };
        let script = frame["location"]["scriptId"].clone();
        match cdp
            .call("Debugger.getScriptSource", json!({"scriptId": script}))
            .await
        {
            Ok(r) => top_level_names(r["scriptSource"].as_str().unwrap_or("")),
            Err(_) => Vec::new(),
        }
    }

    pub(super) async fn scopes(&mut self, args: &Value) -> AdapterResult<Value> {
        let frame = self.frame(args["frameId"].as_i64().unwrap_or(0))?.clone();
        let mut scopes = Vec::new();
        let mut first_closure = true;
        let mut own: Option<(&Value, &Value)> = None;
        for s in frame["scopeChain"].as_array().into_iter().flatten() {
            let kind = s["type"].as_str().unwrap_or("");
            let Some(object) = s["object"]["objectId"].as_str() else {
                continue;
            };
            if self.dialect == Dialect::WebKit
                && kind == "closure"
                && first_closure
                && s["empty"].as_bool() == Some(true)
                && frame["functionName"] == "module code"
            {
                first_closure = false;
                let names = self.module_names(&frame).await;
                self.handles.push(Handle::Module {
                    call_frame: frame["callFrameId"].clone(),
                    names,
                });
                scopes.push(json!({"name": "Local", "presentationHint": "locals",
                    "variablesReference": self.handles.len(), "expensive": false}));
                continue;
            }
            let name = match (self.dialect, kind) {
                // JavaScriptCore calls the function's own scopes closures (the first, and
                // any more of the same function: parameters and body apart) and a block's
                // `nestedLexical`.
                (Dialect::WebKit, "closure")
                    if first_closure
                        || (own.is_some() && own == Some((&s["name"], &s["location"]))) =>
                {
                    if first_closure {
                        own = s.get("name").map(|n| (n, &s["location"]));
                    }
                    first_closure = false;
                    "Local".to_string()
                }
                (Dialect::WebKit, "nestedLexical") => "Block".into(),
                (Dialect::WebKit, "globalLexicalEnvironment") => "Script".into(),
                (Dialect::WebKit, "functionName") => continue,
                _ => {
                    let mut n: String = kind.chars().take(1).flat_map(char::to_uppercase).collect();
                    n.push_str(kind.get(1..).unwrap_or(""));
                    n
                }
            };
            let reference = self.handle(object);
            let mut scope = json!({"name": name, "variablesReference": reference,
                "expensive": kind == "global"});
            if name == "Local" {
                scope["presentationHint"] = json!("locals");
            }
            scopes.push(scope);
        }
        Ok(json!({"scopes": scopes}))
    }

    pub(super) async fn variables(&mut self, args: &Value) -> AdapterResult<Value> {
        let reference = args["variablesReference"].as_i64().unwrap_or(0);
        let handle = usize::try_from(reference - 1)
            .ok()
            .and_then(|i| self.handles.get(i))
            .ok_or(AdapterFailure::NoReference(reference))?;
        let object = match handle {
            Handle::Object(id) => id.clone(),
            Handle::Module { call_frame, names } => {
                let (call_frame, names) = (call_frame.clone(), names.clone());
                return self.module_variables(call_frame, &names).await;
            }
        };
        let cdp = self.cdp()?;
        // WebKit's scope objects answer only `getDisplayableProperties` (Web Inspector's
        // own call for them); it works for plain objects too.
        let props = match self.dialect {
            Dialect::V8 => {
                cdp.call(
                    "Runtime.getProperties",
                    json!({"objectId": object, "ownProperties": true, "generatePreview": true}),
                )
                .await?
            }
            Dialect::WebKit => {
                cdp.call(
                    "Runtime.getDisplayableProperties",
                    json!({"objectId": object, "generatePreview": true}),
                )
                .await?
            }
        };
        let mut vars = Vec::new();
        // V8 answers `result`, WebKit `properties`.
        let list = props.get("result").or(props.get("properties"));
        for p in list.and_then(Value::as_array).into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or("").to_string();
            let Some(value) = p.get("value") else {
                // An accessor (Node's `process` on the global object): reading it runs code,
                // so it is listed, not read; evaluate it to see the value.
                if p.get("get").is_some() {
                    vars.push(json!({"name": name, "value": "(getter: evaluate to read)",
                        "type": "accessor", "variablesReference": 0}));
                }
                continue;
            };
            vars.push(self.variable(&name, value));
        }
        Ok(json!({"variables": vars}))
    }

    /// A module's bindings, each read on its frame (one still in its temporal dead zone is
    /// left out).
    pub(super) async fn module_variables(
        &mut self,
        call_frame: Value,
        names: &[String],
    ) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        let pending: Vec<_> = names
            .iter()
            .map(|n| {
                cdp.send(
                    "Debugger.evaluateOnCallFrame",
                    json!({"callFrameId": call_frame, "expression": n, "generatePreview": true,
                        "doNotPauseOnExceptionsAndMuteConsole": true, "objectGroup": "kitbag"}),
                )
            })
            .collect();
        let mut vars = Vec::new();
        for (name, rx) in names.iter().zip(pending) {
            let Ok(Ok(answer)) = rx.await else { continue };
            if answer["wasThrown"].as_bool() == Some(true) {
                continue;
            }
            let value = &answer["result"];
            vars.push(self.variable(name, value));
        }
        Ok(json!({"variables": vars}))
    }

    pub(super) async fn evaluate(&mut self, args: &Value) -> AdapterResult<Value> {
        let cdp = self.cdp()?;
        let expression = args["expression"].as_str().unwrap_or("");
        let watch = args["context"].as_str() != Some("repl");
        let mut params = json!({"expression": expression, "generatePreview": true});
        match self.dialect {
            Dialect::V8 => {
                params["throwOnSideEffect"] = json!(watch);
            }
            // JavaScriptCore has no side-effect check: a watch expression is evaluated as
            // it is, without pausing on its exceptions or printing.
            Dialect::WebKit => {
                params["doNotPauseOnExceptionsAndMuteConsole"] = json!(watch);
                params["objectGroup"] = json!("kitbag");
            }
        }
        let answer = match args["frameId"].as_i64() {
            Some(f) => {
                params["callFrameId"] = self.frame(f)?["callFrameId"].clone();
                cdp.call("Debugger.evaluateOnCallFrame", params).await?
            }
            None => {
                if self.dialect == Dialect::V8 {
                    params["replMode"] = json!(!watch);
                }
                cdp.call("Runtime.evaluate", params).await?
            }
        };
        let thrown = answer
            .get("exceptionDetails")
            .map(|ex| {
                ex["exception"]["description"]
                    .as_str()
                    .or(ex["text"].as_str())
                    .unwrap_or("the expression threw")
                    .to_string()
            })
            .or_else(|| {
                (answer["wasThrown"].as_bool() == Some(true)).then(|| {
                    answer["result"]["description"]
                        .as_str()
                        .unwrap_or("the expression threw")
                        .to_string()
                })
            });
        if let Some(text) = thrown {
            return Err(AdapterFailure::Threw(
                text.lines().next().unwrap_or(&text).to_string(),
            ));
        }
        let result = &answer["result"];
        let reference = match result["objectId"].as_str() {
            Some(id) if result["type"] == "object" => self.handle(id),
            _ => 0,
        };
        Ok(
            json!({"result": value_text(result), "type": type_text(result),
            "variablesReference": reference}),
        )
    }

    pub(super) fn exception_info(&self) -> AdapterResult<Value> {
        let ex = self
            .paused
            .as_ref()
            .and_then(|p| p.exception.as_ref())
            .ok_or(AdapterFailure::NoException)?;
        let description = ex["description"].as_str().unwrap_or("");
        Ok(
            json!({"exceptionId": ex["className"].as_str().unwrap_or("Error"),
            "description": description.lines().next().unwrap_or(description),
            "breakMode": "unhandled"}),
        )
    }

    pub(super) fn loaded_sources(&self) -> Value {
        let mut sources: Vec<Value> = Vec::new();
        for s in self.scripts.values() {
            if let Some(p) = &s.path {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                sources.push(json!({"name": name, "path": p}));
            }
            if let Some(m) = &s.map {
                for o in m.sources() {
                    let name = o
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    sources.push(json!({"name": name, "path": o}));
                }
            }
        }
        json!({"sources": sources})
    }
}
