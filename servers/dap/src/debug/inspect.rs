//! Inspection while stopped: threads, frames (the seed's numbering: 0 is the top frame of the
//! current stop), scopes, variables (by scope kind, by name path, nested), evaluate.

use kitbag_shared::{ErrorCode, PathPolicy, Reply, ToolError, ToolResult, args};
use serde_json::{Value, json};

use crate::dap::Client;

use super::expand;
use super::params::{DebugParams, EvalContext, Expand, ScopeWanted};
use super::result::{DebugResult, Frame, Scope, Thread};
use super::source::location_of;
use super::tree::{MAX_DEPTH, Tree, shown, variable};
use super::{Core, DapState, REQUEST_TIMEOUT, adapter_failure, cap, need};

/// Most frames one stack_trace returns.
const MAX_LEVELS: u64 = 1000;
const DEFAULT_LEVELS: u64 = 20;

pub async fn thread_list(client: &Client) -> ToolResult<Vec<Thread>> {
    let body = client
        .request("threads", json!({}), REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(client, m))?;
    Ok(body["threads"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| Thread {
                    id: t["id"].as_i64().unwrap_or(0),
                    name: t["name"].as_str().unwrap_or("").to_string(),
                })
                .collect()
        })
        .unwrap_or_default())
}

pub async fn threads(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let skip = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let core = state.live().await?;
    let all = thread_list(&core.client).await?;
    let total = all.len();
    let mut r = DebugResult::new(p.action, "ok");
    r.total = Some(total as u64);
    // Held to the result budget (Delve lists every goroutine): page on with `offset`.
    let (list, _) = super::within_budget(&r, all.into_iter().skip(skip).collect());
    let next = skip + list.len();
    let mut text = list
        .iter()
        .map(|t| format!("{} {}", t.id, t.name))
        .collect::<Vec<_>>()
        .join("\n");
    if next < total {
        r.truncated = Some(true);
        r.next_offset = Some(next as u64);
        text.push_str(&format!(
            "\n[{} of {total} threads; more: offset {next}]",
            list.len()
        ));
    }
    r.threads = Some(list);
    Ok(Reply::new(r, text))
}

/// The adapter's thread for a `thread_id` argument. The seed's examples say `thread_id: 1` for
/// "the main thread"; where the adapter numbers threads otherwise (debugpy and lldb-dap use
/// large ids), 1 means its first thread, the main one.
pub async fn thread_of(core: &Core, asked: Option<i64>) -> ToolResult<Option<i64>> {
    match asked {
        Some(1) => {
            let list = thread_list(&core.client).await?;
            if list.iter().any(|t| t.id == 1) {
                Ok(Some(1))
            } else {
                Ok(list.first().map(|t| t.id).or(Some(1)))
            }
        }
        other => Ok(other),
    }
}

fn not_stopped() -> ToolError {
    ToolError::new(
        ErrorCode::NotStopped,
        "the program is running: no frames to inspect; pause it or wait for a breakpoint",
    )
}

/// `levels` frames of a thread's stack from `start`, and the stack's total when the adapter
/// says. Fails when the program is running.
pub async fn frames(
    core: &Core,
    thread: Option<i64>,
    start: i64,
    levels: i64,
) -> ToolResult<(Vec<Value>, Option<i64>)> {
    // One look at the stop: whether there is one, and its thread.
    let stop = core.client.events().stop().map(|s| s.thread_id());
    let Some(stopped) = stop else {
        return Err(not_stopped());
    };
    let thread = thread.or(stopped).unwrap_or(1);
    let body = core
        .client
        .request(
            "stackTrace",
            json!({"threadId": thread, "startFrame": start, "levels": levels}),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|m| adapter_failure(&core.client, m))?;
    let list = body["stackFrames"].as_array().cloned().unwrap_or_default();
    Ok((list, body["totalFrames"].as_i64()))
}

/// The adapter's frame id for the seed's `frame_id` (0 = top of the current stop).
pub async fn frame_ref(core: &Core, p: &DebugParams) -> ToolResult<i64> {
    let index = p.frame_id.unwrap_or(0);
    if index < 0 {
        return Err(ToolError::invalid_field(
            "frame_id",
            "a frame index: 0 is the top frame, 1 its caller, ...",
        ));
    }
    let thread = thread_of(core, p.thread_id).await?;
    let (list, total) = frames(core, thread, index, 1).await?;
    match list.first().and_then(|f| f["id"].as_i64()) {
        Some(id) => Ok(id),
        None => {
            let depth = match total {
                Some(t) => t,
                None => frames(core, thread, 0, MAX_LEVELS as i64)
                    .await
                    .map(|(l, _)| l.len() as i64)
                    .unwrap_or(0),
            };
            Err(ToolError::invalid_field(
                "frame_id",
                format!(
                    "a frame index from 0 to {} (the stack has {depth} frames; 0 is the top)",
                    (depth - 1).max(0)
                ),
            ))
        }
    }
}

pub async fn stack_trace(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let levels = args::range("levels", p.levels.unwrap_or(DEFAULT_LEVELS), 1, MAX_LEVELS)?;
    let start = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0);
    let thread = thread_of(&core, p.thread_id).await?;
    let (list, total) = frames(&core, thread, start, levels as i64)
        .await
        .map_err(|e| thread_field(e, p))?;
    let frames: Vec<Frame> = list
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = location_of(policy, f);
            Frame {
                id: start + i as i64,
                name: at.function,
                path: at.path,
                line: at.line,
                column: at.column,
                adapter_frame_id: f["id"].as_i64().unwrap_or(0),
                instruction_pointer: f["instructionPointerReference"].as_str().map(String::from),
            }
        })
        .collect();
    let listed = frames.len() as i64;
    let total = total.unwrap_or(start + listed).max(start + listed);
    let mut r = DebugResult::new(p.action, "stopped");
    r.total_frames = Some(total);
    // Held to the result budget: the page ends at the last frame that fits.
    let (frames, cut) = super::within_budget(&r, frames);
    let end = start + frames.len() as i64;
    let mut text = frames
        .iter()
        .map(|f| format!("#{} {} {}:{}", f.id, f.name, f.path, f.line))
        .collect::<Vec<_>>()
        .join("\n");
    if cut {
        r.truncated = Some(true);
        r.next_offset = Some(end as u64);
        text.push_str(&format!(
            "\n[frames {start}–{} of {total}; more: offset {end}]",
            end - 1
        ));
    } else if total > end {
        text.push_str(&format!(
            "\n[{} of {total} frames; raise levels for more]",
            frames.len()
        ));
    }
    r.frames = Some(frames);
    Ok(Reply::new(r, text))
}

/// An adapter refusing a `thread_id` is a bad argument.
fn thread_field(e: ToolError, p: &DebugParams) -> ToolError {
    match p.thread_id {
        Some(t) if e.code == ErrorCode::AdapterError => {
            ToolError::invalid_field("thread_id", format!("thread {t}: {}", e.message))
        }
        _ => e,
    }
}

/// What kind of scope an adapter's scope is: local, closure, global or other.
pub fn scope_kind(scope: &Value) -> &'static str {
    let hint = scope["presentationHint"].as_str().unwrap_or("");
    let name = scope["name"].as_str().unwrap_or("").to_lowercase();
    if hint == "locals"
        || hint == "arguments"
        || name.starts_with("local")
        || name == "block"
        || name.starts_with("argument")
    {
        "local"
    } else if name.starts_with("closure") {
        "closure"
    } else if name.starts_with("global") || name == "script" || name == "module" {
        "global"
    } else {
        "other"
    }
}

async fn scope_list(core: &Core, p: &DebugParams) -> ToolResult<Vec<Value>> {
    let frame = frame_ref(core, p).await?;
    let body = core
        .client
        .request("scopes", json!({"frameId": frame}), REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(&core.client, m))?;
    Ok(body["scopes"].as_array().cloned().unwrap_or_default())
}

pub async fn scopes(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let list: Vec<Scope> = scope_list(&core, p)
        .await?
        .iter()
        .map(|s| Scope {
            name: s["name"].as_str().unwrap_or("").to_string(),
            kind: scope_kind(s).to_string(),
            variables_reference: s["variablesReference"].as_i64().unwrap_or(0),
        })
        .collect();
    let text = list
        .iter()
        .map(|s| format!("{} ({}, expand {})", s.name, s.kind, s.variables_reference))
        .collect::<Vec<_>>()
        .join("\n");
    let mut r = DebugResult::new(p.action, "stopped");
    r.scopes = Some(list);
    Ok(Reply::new(r, text))
}

/// The scopes a `scope` argument picks (local may be several: V8's block scopes).
fn pick_scopes(list: &[Value], wanted: &ScopeWanted, asked: Option<&str>) -> ToolResult<Vec<i64>> {
    let refs = |kind: &str| -> Vec<i64> {
        list.iter()
            .filter(|s| scope_kind(s) == kind)
            .filter_map(|s| s["variablesReference"].as_i64())
            .collect()
    };
    let chosen = match wanted {
        ScopeWanted::Local => {
            let local = refs("local");
            if local.is_empty() {
                // An adapter with unnamed scopes: its first one is the innermost.
                list.first()
                    .and_then(|s| s["variablesReference"].as_i64())
                    .into_iter()
                    .collect()
            } else {
                local
            }
        }
        ScopeWanted::Closure => refs("closure"),
        ScopeWanted::Global => refs("global").into_iter().take(1).collect(),
        ScopeWanted::Named(n) => {
            let name = |s: &Value| s["name"].as_str().unwrap_or("").to_lowercase();
            list.iter()
                .find(|s| name(s) == *n)
                .or_else(|| list.iter().find(|s| name(s).starts_with(n.as_str())))
                .and_then(|s| s["variablesReference"].as_i64())
                .into_iter()
                .collect()
        }
    };
    // Seed 004: a frame without closure variables has an empty closure scope, not an error.
    if chosen.is_empty() && !matches!(wanted, ScopeWanted::Closure) {
        let names: Vec<String> = list
            .iter()
            .map(|s| format!("{} ({})", s["name"].as_str().unwrap_or(""), scope_kind(s)))
            .collect();
        return Err(ToolError::invalid_field(
            "scope",
            format!(
                "no `{}` scope in this frame; its scopes: {}",
                asked.unwrap_or("local"),
                names.join(", ")
            ),
        ));
    }
    Ok(chosen)
}

/// The visible variables of some containers, in order, first name wins.
async fn children(core: &Core, refs: &[i64]) -> ToolResult<Vec<Value>> {
    let mut out: Vec<Value> = Vec::new();
    for &r in refs {
        let body = core
            .client
            .request(
                "variables",
                json!({"variablesReference": r}),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|m| adapter_failure(&core.client, m))?;
        for v in body["variables"].as_array().into_iter().flatten() {
            if shown(v) && !out.iter().any(|o| o["name"] == v["name"]) {
                out.push(v.clone());
            }
        }
    }
    Ok(out)
}

/// Follow a name path from a scope's variables: the container's reference and its full path.
async fn follow(core: &Core, start: Vec<Value>, path: &str) -> ToolResult<(i64, String)> {
    let segments =
        expand::parse_path(path).map_err(|e| ToolError::invalid_field("expand", e.to_string()))?;
    let mut level = start;
    let mut shown_path = String::new();
    let mut reference = 0;
    for (i, seg) in segments.iter().enumerate() {
        let Some(found) = level
            .iter()
            .find(|v| expand::matches(v["name"].as_str().unwrap_or(""), seg))
        else {
            let names: Vec<&str> = level
                .iter()
                .filter_map(|v| v["name"].as_str())
                .take(30)
                .collect();
            let at = if shown_path.is_empty() {
                "in this scope".to_string()
            } else {
                format!("in `{shown_path}`")
            };
            return Err(ToolError::invalid_field(
                "expand",
                format!("no `{seg}` {at}; names there: {}", names.join(", ")),
            ));
        };
        let name = found["name"].as_str().unwrap_or(seg);
        shown_path = if i == 0 {
            expand::bare(name).to_string()
        } else {
            expand::child_path(&shown_path, name)
        };
        reference = found["variablesReference"].as_i64().unwrap_or(0);
        if reference <= 0 {
            return Err(ToolError::invalid_field(
                "expand",
                format!(
                    "`{shown_path}` has no children (a {} = {})",
                    found["type"].as_str().unwrap_or("value"),
                    cap(found["value"].as_str().unwrap_or(""))
                ),
            ));
        }
        if i + 1 < segments.len() {
            level = children(core, &[reference]).await?;
        }
    }
    Ok((reference, shown_path))
}

pub async fn variables(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let depth = args::range("depth", p.depth.unwrap_or(1), 1, MAX_DEPTH)?;
    let offset = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let limit = p.limit.unwrap_or(100).clamp(1, 1000) as usize;
    let core = state.live().await?;
    // What to list, and the path its children are named under (none: their own names).
    let (all, parent): (Vec<Value>, Option<String>) = match &p.expand {
        Some(Expand::Reference(r)) => (children(&core, &[*r]).await?, None),
        other => {
            let list = scope_list(&core, p).await?;
            let wanted = ScopeWanted::parse(p.scope.as_deref());
            let refs = pick_scopes(&list, &wanted, p.scope.as_deref())?;
            let vars = children(&core, &refs).await?;
            match other {
                Some(Expand::Path(path)) => {
                    // A name not in the chosen scope may be in another (a global read
                    // from a function).
                    let (reference, full) = match follow(&core, vars, path).await {
                        Ok(found) => found,
                        Err(e) => {
                            let every: Vec<i64> = list
                                .iter()
                                .filter_map(|s| s["variablesReference"].as_i64())
                                .filter(|r| !refs.contains(r))
                                .collect();
                            let wider = children(&core, &every).await?;
                            follow(&core, wider, path).await.map_err(|_| e)?
                        }
                    };
                    (children(&core, &[reference]).await?, Some(full))
                }
                _ => (vars, None),
            }
        }
    };
    let all: Vec<Value> = all
        .into_iter()
        .filter(|v| {
            let name = v["name"].as_str().unwrap_or("");
            p.filter.as_deref().is_none_or(|f| name.contains(f))
        })
        .collect();
    let name_of = |raw: &str| match &parent {
        Some(parent) => expand::child_path(parent, raw),
        None => raw.to_string(),
    };
    let top = all
        .iter()
        .skip(offset)
        .take(limit)
        .map(|v| variable(v, name_of(v["name"].as_str().unwrap_or(""))))
        .collect();
    let mut tree = Tree::new(top);
    if depth > 1 {
        tree.expand(&core.client, depth, expand::child_path).await?;
    }
    let mut r = DebugResult::new(p.action, "stopped");
    r.total = Some(all.len() as u64);
    // Held to the result budget: the page ends at the last value that fits.
    let (page, _) = super::within_budget(&r, tree.render());
    let next = (offset + page.len() < all.len()).then_some((offset + page.len()) as u64);
    let mut text = tree.text(page.len());
    if tree.truncated {
        text.push_str(&format!(
            "\n[nested values stopped at {}; expand a value by name for more]",
            super::tree::MAX_NESTED_VALUES
        ));
    }
    if let Some(n) = next {
        text.push_str(&format!("\n[more: offset {n}]"));
    }
    if text.is_empty() {
        text = "no variables".into();
    }
    r.variables = Some(page);
    r.next_offset = next;
    if depth > 1 {
        r.nested_truncated = Some(tree.truncated);
    }
    Ok(Reply::new(r, text))
}

pub async fn evaluate(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let expr = need(&p.expression, "expression", "the expression to evaluate")?;
    let configured = state.config.adapters.contains_key(core.runtime.name());
    let repl = p.context == Some(EvalContext::Repl);
    let guards = match core.runtime.watch_syntax(configured).filter(|_| !repl) {
        Some(syntax) => super::watch::guarded_reads(expr, syntax).map_err(|why| {
            ToolError::invalid_field(
                "expression",
                format!(
                    "context \"watch\" (the default) must not change the program, and on {} it takes only reads (names, member and index reads, literals, operators{}); this has {why}. Use context \"repl\" to run it",
                    core.runtime.name(),
                    if syntax == super::watch::Syntax::JavaScript {
                        ", and the built-in string and array reads such as includes, indexOf, startsWith"
                    } else {
                        ""
                    }
                ),
            )
        })?,
        None => Vec::new(),
    };
    let running = !core.client.events().is_stopped();
    let frame = if running && p.frame_id.is_none() {
        // Running and no frame asked for: the adapter's global context, where it has one.
        None
    } else {
        Some(frame_ref(&core, p).await?)
    };
    if !guards.is_empty() {
        check_guards(&core, &guards, frame).await?;
    }
    let body = ask_evaluate(&core, expr, if repl { "repl" } else { "watch" }, frame).await?;
    let value = cap(body["result"].as_str().unwrap_or(""));
    let mut r = DebugResult::new(p.action, if running { "running" } else { "stopped" });
    r.result = Some(value.clone());
    r.value_type = body["type"].as_str().map(String::from);
    r.variables_reference = body["variablesReference"].as_i64().filter(|r| *r > 0);
    Ok(Reply::new(r, format!("{expr} = {value}")))
}

async fn ask_evaluate(
    core: &Core,
    expr: &str,
    context: &str,
    frame: Option<i64>,
) -> ToolResult<Value> {
    let mut args = json!({"expression": expr, "context": context});
    if let Some(f) = frame {
        args["frameId"] = json!(f);
    }
    core.client
        .request("evaluate", args, REQUEST_TIMEOUT)
        .await
        .map_err(|m| adapter_failure(&core.client, m).with_detail(json!({"field": "expression"})))
}

/// The built-in reads a `watch` expression calls are built-in reads in this program (see
/// [`super::watch::Guard`]): else nothing of the expression runs.
async fn check_guards(
    core: &Core,
    guards: &[super::watch::Guard],
    frame: Option<i64>,
) -> ToolResult<()> {
    let all: Vec<String> = guards
        .iter()
        .map(|g| format!("({})", g.condition))
        .collect();
    let body = ask_evaluate(core, &all.join(" && "), "watch", frame).await?;
    if body["result"].as_str() == Some("true") {
        return Ok(());
    }
    let calls: Vec<&str> = guards.iter().map(|g| g.call.as_str()).collect();
    Err(ToolError::invalid_field(
        "expression",
        format!(
            "context \"watch\" runs {} only as the built-in string or array read, and here the receiver is not a string or an array, its method is not the built-in one, or an argument is not of the type the method reads without converting it. Use context \"repl\" to run it",
            calls.join(", ")
        ),
    ))
}

/// The `dataBreakpointInfo` arguments for a variable `name` (inside the `expand` path's
/// value, or in the frame's local scope), and how to name it.
pub async fn data_info_target(
    core: &Core,
    p: &DebugParams,
    name: &str,
) -> ToolResult<(Value, String)> {
    let list = scope_list(core, p).await?;
    let wanted = ScopeWanted::parse(p.scope.as_deref());
    let refs = pick_scopes(&list, &wanted, p.scope.as_deref())?;
    let frame = frame_ref(core, p).await?;
    match &p.expand {
        Some(Expand::Path(path)) => {
            let vars = children(core, &refs).await?;
            let (reference, full) = follow(core, vars, path).await?;
            Ok((
                json!({"variablesReference": reference, "name": name, "frameId": frame}),
                expand::child_path(&full, name),
            ))
        }
        Some(Expand::Reference(r)) => Ok((
            json!({"variablesReference": r, "name": name, "frameId": frame}),
            name.to_string(),
        )),
        None => {
            // The scope that holds the name.
            for r in &refs {
                let vars = children(core, &[*r]).await?;
                if vars.iter().any(|v| v["name"] == name) {
                    return Ok((
                        json!({"variablesReference": r, "name": name, "frameId": frame}),
                        name.to_string(),
                    ));
                }
            }
            Err(ToolError::invalid_field(
                "name",
                format!("no variable `{name}` in this frame's scope"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn scope_kinds_across_adapters() {
        assert_eq!(
            scope_kind(&json!({"name": "Locals", "presentationHint": "locals"})),
            "local"
        );
        assert_eq!(scope_kind(&json!({"name": "Locals"})), "local");
        assert_eq!(scope_kind(&json!({"name": "Block"})), "local");
        assert_eq!(scope_kind(&json!({"name": "Closure"})), "closure");
        assert_eq!(scope_kind(&json!({"name": "Globals"})), "global");
        assert_eq!(scope_kind(&json!({"name": "Global"})), "global");
        assert_eq!(scope_kind(&json!({"name": "Registers"})), "other");
    }

    #[test]
    fn scope_picking_merges_locals_and_names_the_choices() {
        let list = vec![
            json!({"name": "Block", "variablesReference": 3}),
            json!({"name": "Local", "variablesReference": 4}),
            json!({"name": "Closure", "variablesReference": 5}),
            json!({"name": "Global", "variablesReference": 6}),
        ];
        assert_eq!(
            pick_scopes(&list, &ScopeWanted::Local, None).unwrap(),
            [3, 4]
        );
        assert_eq!(
            pick_scopes(&list, &ScopeWanted::Closure, None).unwrap(),
            [5]
        );
        assert_eq!(pick_scopes(&list, &ScopeWanted::Global, None).unwrap(), [6]);
        let py = vec![
            json!({"name": "Locals", "variablesReference": 1}),
            json!({"name": "Globals", "variablesReference": 2}),
        ];
        assert!(
            pick_scopes(&py, &ScopeWanted::Closure, Some("closure"))
                .unwrap()
                .is_empty()
        );
        let e = pick_scopes(
            &py,
            &ScopeWanted::Named("registers".into()),
            Some("registers"),
        )
        .unwrap_err();
        assert_eq!(e.detail["field"], "scope");
        assert!(
            e.message.contains("Locals (local), Globals (global)"),
            "{}",
            e.message
        );
        assert_eq!(
            pick_scopes(&py, &ScopeWanted::Named("glob".into()), Some("glob")).unwrap(),
            [2]
        );
    }
}
