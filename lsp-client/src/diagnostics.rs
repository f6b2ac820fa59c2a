//! Diagnostics that are current: pulled where the server supports it, merged with what
//! it pushed for the document's *current* version, after the server has gone quiet
//! (no work-done progress running, no event for a short while), within a bounded wait.

use kitbag_shared::lock::LockExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::pool::Server;
use crate::rpc::Published;
use crate::text::{Encoding, Lines, path_to_uri};
use kitbag_shared::PathPolicy;
use schemars::JsonSchema;
use serde::Serialize;

/// A server counts as quiet after this long without any notification.
pub const QUIET: Duration = Duration::from_millis(300);

/// Raw LSP diagnostics per file, and whether the wait ended with the server quiet.
pub struct Collected {
    pub by_file: Vec<(PathBuf, Arc<Lines>, Vec<Value>)>,
    pub settled: bool,
    pub waited_ms: u64,
    /// Files of which the server had said nothing about the current text when the wait
    /// ended (neither pulled nor pushed for it): their lists say nothing, not "none".
    pub stale: Vec<PathBuf>,
}

/// Collect diagnostics for `files` (already synced and open in `server`): pull them where
/// the server offers it, wait (within `wait`) until every file's pushed diagnostics describe
/// its current text and the server is quiet, then merge the two.
pub async fn collect(
    server: &Server,
    files: &[(PathBuf, Arc<Lines>)],
    wait: Duration,
) -> Collected {
    collect_within(server, files, wait, QUIET).await
}

/// [`collect`] with the server counted as quiet after `quiet` without a notification.
pub async fn collect_within(
    server: &Server,
    files: &[(PathBuf, Arc<Lines>)],
    wait: Duration,
    quiet: Duration,
) -> Collected {
    let start = Instant::now();
    let mut pulled = pull(server, files).await;
    // What each document looked like when we last changed it.
    let marks: HashMap<PathBuf, Mark> = {
        let docs = server.docs.lock().await;
        files
            .iter()
            .filter_map(|(p, _)| {
                docs.get(p).map(|d| {
                    let mark = Mark {
                        version: d.version,
                        changed_at: d.changed_at,
                    };
                    (p.clone(), mark)
                })
            })
            .collect()
    };
    let settled = wait_until_settled(server, files, &pulled, &marks, start + wait, quiet).await;
    let ev = server.rpc.events.locked();
    let mut by_file = Vec::new();
    let mut stale = Vec::new();
    for (path, lines) in files {
        let was_pulled = pulled.contains_key(path);
        let mut items = pulled.remove(path).unwrap_or_default();
        let pushed = ev
            .diagnostics
            .get(&path_to_uri(path))
            .filter(|pubd| is_current(pubd, marks.get(path)));
        if !was_pulled && pushed.is_none() {
            stale.push(path.clone());
        }
        if let Some(pubd) = pushed {
            for d in &pubd.items {
                let dup = items
                    .iter()
                    .any(|x| x["range"] == d["range"] && x["message"] == d["message"]);
                if !dup {
                    items.push(d.clone());
                }
            }
        }
        by_file.push((path.clone(), lines.clone(), items));
    }
    Collected {
        by_file,
        settled,
        waited_ms: start.elapsed().as_millis() as u64,
        stale,
    }
}

/// A document's version and the event counter when we last opened or changed it.
struct Mark {
    version: i64,
    changed_at: u64,
}

/// Whether pushed diagnostics describe the document's current text: by version when the
/// server gives one, else by arriving after our last change.
fn is_current(pubd: &Published, mark: Option<&Mark>) -> bool {
    match (pubd.version, mark) {
        (Some(v), Some(m)) => v == m.version,
        (None, Some(m)) => pubd.seq > m.changed_at,
        (_, None) => true,
    }
}

/// Pulled diagnostics (`textDocument/diagnostic`, full reports) per file, where the
/// server supports pulling.
async fn pull(server: &Server, files: &[(PathBuf, Arc<Lines>)]) -> HashMap<PathBuf, Vec<Value>> {
    let mut pulled = HashMap::new();
    if !server.has("diagnosticProvider") {
        return pulled;
    }
    for (path, _) in files {
        let r = server
            .request(
                "textDocument/diagnostic",
                json!({"textDocument": {"uri": path_to_uri(path)}}),
            )
            .await;
        if let Ok(v) = r
            && v["kind"] == "full"
        {
            pulled.insert(
                path.clone(),
                v["items"].as_array().cloned().unwrap_or_default(),
            );
        }
    }
    pulled
}

/// Wait until every file not pulled has current pushed diagnostics and the server has
/// been quiet (no progress running, no event) for `quiet`. False when the deadline or
/// the server's exit came first.
async fn wait_until_settled(
    server: &Server,
    files: &[(PathBuf, Arc<Lines>)],
    pulled: &HashMap<PathBuf, Vec<Value>>,
    marks: &HashMap<PathBuf, Mark>,
    deadline: Instant,
    quiet: Duration,
) -> bool {
    let uris: Vec<(&PathBuf, String)> = files.iter().map(|(p, _)| (p, path_to_uri(p))).collect();
    loop {
        let notified = server.rpc.changed.notified();
        let (fresh, quiet_for) = {
            let ev = server.rpc.events.locked();
            let fresh = uris.iter().all(|(p, uri)| {
                pulled.contains_key(*p)
                    || ev
                        .diagnostics
                        .get(uri)
                        .is_some_and(|pubd| is_current(pubd, marks.get(*p)))
            });
            // Quiet: nothing heard *and* nothing told for a while. A server that answered a
            // pull at once may still start work on the save we just sent (rust-analyzer's
            // `cargo check`), and shows it as progress only a moment later.
            let quiet_for = if ev.active_progress.is_empty() {
                let heard = ev.last_event.map(|t| t.elapsed()).unwrap_or(quiet);
                let told = server.rpc.last_told().map(|t| t.elapsed()).unwrap_or(quiet);
                heard.min(told)
            } else {
                Duration::ZERO
            };
            (fresh, quiet_for)
        };
        if fresh && quiet_for >= quiet {
            return true;
        }
        if !server.rpc.is_alive() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let nap = if fresh {
            (quiet - quiet_for).min(deadline - now)
        } else {
            deadline - now
        };
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

/// Diagnostics the server pushed for files we did not open (e.g. rust-analyzer's
/// `cargo check` covers the whole crate), under `dir`.
pub fn pushed_under(server: &Server, dir: &Path) -> Vec<(PathBuf, Vec<Value>)> {
    let ev = server.rpc.events.locked();
    let mut out: Vec<(PathBuf, Vec<Value>)> = ev
        .diagnostics
        .iter()
        .filter_map(|(uri, p)| {
            let path = crate::text::uri_to_path(uri)?;
            (path.starts_with(dir) && !p.items.is_empty()).then(|| (path, p.items.clone()))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One diagnostic as kitbag's answers show it: lines 1-based, characters counted as
/// characters.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Diagnostic {
    pub path: String,
    pub line: usize,
    pub character: usize,
    pub end_line: usize,
    pub end_character: usize,
    /// error, warning, information or hint.
    pub severity: String,
    pub message: String,
    /// The server's code for it (a number is given as text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Which tool reported it (e.g. Pyright, rustc, clang).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Diagnostic {
    /// `path:line:character: severity: message [code]`, as answers' texts list them.
    pub fn line(&self) -> String {
        let code = self
            .code
            .as_ref()
            .map(|c| format!(" [{c}]"))
            .unwrap_or_default();
        format!(
            "{}:{}:{}: {}: {}{code}",
            self.path, self.line, self.character, self.severity, self.message
        )
    }
}

/// One diagnostic in caller coordinates.
pub fn entry(
    policy: &PathPolicy,
    path: &Path,
    lines: &Lines,
    d: &Value,
    enc: Encoding,
) -> Diagnostic {
    let (sl, sc) = position(&d["range"]["start"]);
    let el = d["range"]["end"]["line"].as_u64().unwrap_or(sl as u64) as usize;
    let ec = d["range"]["end"]["character"].as_u64().unwrap_or(sc as u64) as usize;
    Diagnostic {
        path: policy.display(path),
        line: sl + 1,
        character: lines.to_chars(sl, sc, enc).1,
        end_line: el + 1,
        end_character: lines.to_chars(el, ec, enc).1,
        severity: severity_name(&d["severity"]).to_string(),
        // A message can be any length (a type error printing whole types): 8 KB of it.
        message: kitbag_shared::limits::fit_str(
            d["message"].as_str().unwrap_or(""),
            8 * 1024,
            "… [cut to fit the answer]",
        )
        .0,
        code: code_string(&d["code"]),
        source: d["source"].as_str().map(str::to_string),
    }
}

/// An LSP position's (line, units), 0 when missing.
fn position(v: &Value) -> (usize, usize) {
    (
        v["line"].as_u64().unwrap_or(0) as usize,
        v["character"].as_u64().unwrap_or(0) as usize,
    )
}

pub fn severity_name(v: &Value) -> &'static str {
    match v.as_i64() {
        Some(1) => "error",
        Some(2) => "warning",
        Some(3) => "information",
        Some(4) => "hint",
        // The spec says a missing severity is up to the client: treat as an error.
        _ => "error",
    }
}

/// Severity filter: `error` keeps errors, `warning` keeps warnings and worse, etc.
pub fn passes(filter: Option<&str>, sev: &str) -> bool {
    let rank = |s: &str| match s {
        "error" => 1,
        "warning" => 2,
        "information" => 3,
        "hint" => 4,
        _ => 5,
    };
    match filter {
        None | Some("all") => true,
        Some(f) => rank(sev) <= rank(f),
    }
}

pub fn code_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_filter_keeps_that_level_and_worse() {
        assert!(passes(Some("warning"), "error"));
        assert!(passes(Some("warning"), "warning"));
        assert!(!passes(Some("warning"), "hint"));
        assert!(!passes(Some("error"), "warning"));
        assert!(passes(None, "hint"));
        assert!(passes(Some("all"), "hint"));
        assert_eq!(severity_name(&json!(2)), "warning");
        assert_eq!(severity_name(&Value::Null), "error");
        assert_eq!(code_string(&json!(2322)).as_deref(), Some("2322"));
    }
}
