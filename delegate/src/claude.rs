//! `claude -p --output-format stream-json --verbose`: `system` (`init`: session, model,
//! tools), `assistant` (a message: text, thinking, `tool_use` blocks), `user` (the
//! `tool_result` of each tool use), and a last `result` (its summary, `is_error`,
//! `duration_ms`, `num_turns`, `usage`, `total_cost_usd`, `permission_denials`).
//!
//! A tool use counts once its result came back without `is_error`: a refused write is an
//! error, not a file written.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::digest::{Digest, progress, relative};

pub struct ClaudeReader {
    pub cwd: PathBuf,
    /// Tool uses waiting for their result: id → (tool, input).
    pending: HashMap<String, (String, Value)>,
}

impl ClaudeReader {
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            pending: HashMap::new(),
        }
    }
}

/// The file a file tool's input names.
fn file_of(input: &Value) -> Option<&str> {
    ["file_path", "notebook_path", "path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
}

impl crate::Reader for ClaudeReader {
    fn event(&mut self, e: &Value, d: &mut Digest) -> Option<String> {
        match e.get("type").and_then(Value::as_str)? {
            "system" => match e.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    d.session_id = e.get("session_id").and_then(Value::as_str).map(Into::into);
                    d.model = e.get("model").and_then(Value::as_str).map(Into::into);
                    None
                }
                // The model refused a call and Claude Code tries again (a 401 for minutes):
                // the caller hears of each attempt.
                Some("api_retry") => {
                    let n = |k: &str| e.get(k).and_then(Value::as_u64).unwrap_or(0);
                    let why = e.get("error").and_then(Value::as_str).unwrap_or("error");
                    Some(format!(
                        "model call failed ({} {why}); retry {} of {}",
                        n("error_status"),
                        n("attempt"),
                        n("max_retries")
                    ))
                }
                _ => None,
            },
            "assistant" => {
                let blocks = e.pointer("/message/content").and_then(Value::as_array)?;
                let mut note = None;
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            if let Some(t) = b.get("text").and_then(Value::as_str) {
                                d.summary = Some(t.to_string());
                            }
                        }
                        Some("tool_use") => note = self.tool_use(b),
                        _ => {}
                    }
                }
                note
            }
            "user" => {
                let blocks = e.pointer("/message/content").and_then(Value::as_array)?;
                for b in blocks {
                    if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                        self.tool_result(b, d);
                    }
                }
                None
            }
            "result" => {
                self.result(e, d);
                None
            }
            _ => None,
        }
    }
}

impl ClaudeReader {
    fn tool_use(&mut self, b: &Value) -> Option<String> {
        let id = b.get("id").and_then(Value::as_str)?.to_string();
        let name = b.get("name").and_then(Value::as_str)?.to_string();
        let input = b.get("input").cloned().unwrap_or(Value::Null);
        let note = match name.as_str() {
            "Bash" => progress(
                "$",
                input.get("command").and_then(Value::as_str).unwrap_or(""),
            ),
            _ => match file_of(&input) {
                Some(f) => progress(&name, &relative(f, &self.cwd)),
                None => name.clone(),
            },
        };
        self.pending.insert(id, (name, input));
        Some(note)
    }

    fn tool_result(&mut self, b: &Value, d: &mut Digest) {
        let Some((name, input)) = b
            .get("tool_use_id")
            .and_then(Value::as_str)
            .and_then(|id| self.pending.remove(id))
        else {
            return;
        };
        let ok = b.get("is_error").and_then(Value::as_bool) != Some(true);
        let file = file_of(&input).map(|f| relative(f, &self.cwd));
        match (name.as_str(), file) {
            ("Bash", _) => {
                let command = input.get("command").and_then(Value::as_str).unwrap_or("");
                d.command(command, None, Some(ok));
            }
            ("Read", Some(f)) if ok => d.files_read.add(f),
            ("Write" | "Edit" | "MultiEdit" | "NotebookEdit", Some(f)) => {
                if ok {
                    d.files_written.add(f);
                } else {
                    d.error(&format!("{name} {f} failed: {}", result_text(b)));
                }
            }
            ("Read", Some(_)) => {}
            _ => d.other_tools.add(name),
        }
    }

    fn result(&mut self, e: &Value, d: &mut Digest) {
        let n = |p: &str| e.pointer(p).and_then(Value::as_u64);
        if let Some(t) = e.get("result").and_then(Value::as_str) {
            d.summary = Some(t.to_string());
        }
        let is_error = e.get("is_error").and_then(Value::as_bool) == Some(true);
        let subtype = e.get("subtype").and_then(Value::as_str).unwrap_or("");
        d.succeeded = Some(!is_error && subtype == "success");
        if is_error {
            // Its result is then the error (`API Error: 400 …`).
            let said = e.get("result").and_then(Value::as_str).unwrap_or("");
            let reason = e.get("terminal_reason").and_then(Value::as_str);
            match (said.is_empty(), reason) {
                (false, _) => d.error(said),
                (true, Some(r)) => d.error(&format!("the run ended with {r}")),
                (true, None) => d.error(&format!("the run ended with {subtype}")),
            }
        } else if subtype != "success" {
            d.error(&format!("the run ended with {subtype}"));
        }
        d.duration_ms = n("/duration_ms");
        d.turns = n("/num_turns");
        let input = n("/usage/input_tokens").unwrap_or(0);
        let cache_read = n("/usage/cache_read_input_tokens").unwrap_or(0);
        let cache_write = n("/usage/cache_creation_input_tokens").unwrap_or(0);
        d.tokens.input = input + cache_read + cache_write;
        d.tokens.cached_input = cache_read;
        d.tokens.output = n("/usage/output_tokens").unwrap_or(0);
        d.cost_usd = e.get("total_cost_usd").and_then(Value::as_f64);
        d.session_id = e
            .get("session_id")
            .and_then(Value::as_str)
            .map(Into::into)
            .or(d.session_id.take());
        for denial in e
            .get("permission_denials")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let tool = denial
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("a tool");
            let what = denial
                .get("tool_input")
                .and_then(|i| file_of(i).or_else(|| i.get("command").and_then(Value::as_str)))
                .map(|w| format!(" ({})", relative(w, &self.cwd)))
                .unwrap_or_default();
            d.error(&format!("permission denied: {tool}{what}"));
        }
    }
}

/// A tool result's text (a string, or the text blocks of an array).
fn result_text(b: &Value) -> String {
    match b.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Reader;
    use serde_json::json;

    fn tool_use(id: &str, name: &str, input: Value) -> Value {
        json!({"type":"assistant","message":{"content":[{"type":"tool_use","id":id,"name":name,"input":input}]}})
    }

    fn tool_result(id: &str, is_error: bool, text: &str) -> Value {
        json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":id,"is_error":is_error,"content":text}]}})
    }

    #[test]
    fn a_stream_reduces_to_its_result_and_what_the_tools_did() {
        let mut r = ClaudeReader::new("/p".into());
        let mut d = Digest::default();
        let events = [
            json!({"type":"system","subtype":"init","session_id":"s1","model":"m"}),
            tool_use("1", "Read", json!({"file_path":"/p/notes.txt"})),
            tool_result("1", false, "1\tsome notes"),
            tool_use(
                "2",
                "Write",
                json!({"file_path":"/p/out.txt","content":"x"}),
            ),
            tool_result("2", false, "File created"),
            tool_use("3", "Edit", json!({"file_path":"/etc/hosts"})),
            tool_result("3", true, "refused"),
            tool_use("4", "Bash", json!({"command":"ls"})),
            tool_result("4", false, "out.txt"),
            tool_use("5", "WebFetch", json!({"url":"https://x"})),
            tool_result("5", false, "page"),
            json!({"type":"assistant","message":{"content":[{"type":"text","text":"interim"}]}}),
            json!({"type":"result","subtype":"success","is_error":false,"duration_ms":290,"num_turns":4,
                   "result":"Created out.txt.","total_cost_usd":0.01,
                   "usage":{"input_tokens":480,"cache_read_input_tokens":20,"cache_creation_input_tokens":0,"output_tokens":168},
                   "permission_denials":[{"tool_name":"Write","tool_input":{"file_path":"/p/../x"}}]}),
        ];
        let notes: Vec<String> = events.iter().filter_map(|e| r.event(e, &mut d)).collect();
        assert_eq!(
            notes,
            vec![
                "Read notes.txt",
                "Write out.txt",
                "Edit /etc/hosts",
                "$ ls",
                "WebFetch"
            ]
        );
        assert_eq!(d.summary.as_deref(), Some("Created out.txt."));
        assert_eq!(d.succeeded, Some(true));
        assert_eq!(d.files_read.items, vec!["notes.txt"]);
        assert_eq!(d.files_written.items, vec!["out.txt"]);
        assert_eq!(d.commands.items[0].ok, Some(true));
        assert_eq!(d.other_tools.items, vec!["WebFetch"]);
        assert_eq!(d.tokens.input, 500);
        assert_eq!(d.tokens.cached_input, 20);
        assert_eq!(d.tokens.output, 168);
        assert_eq!((d.duration_ms, d.turns), (Some(290), Some(4)));
        assert_eq!(d.errors.total, 2, "{:?}", d.errors);
        assert!(d.errors.items[0].starts_with("Edit /etc/hosts failed: refused"));
        assert!(d.errors.items[1].starts_with("permission denied: Write"));
    }

    #[test]
    fn an_error_result_is_a_failure_that_says_why() {
        let mut r = ClaudeReader::new("/p".into());
        let mut d = Digest::default();
        r.event(
            &json!({"type":"result","subtype":"error_max_turns","is_error":true}),
            &mut d,
        );
        assert_eq!(d.succeeded, Some(false));
        assert_eq!(d.errors.items, vec!["the run ended with error_max_turns"]);
        let mut d = Digest::default();
        r.event(
            &json!({"type":"result","subtype":"success","is_error":true,
                    "result":"API Error: 400 unknown model","terminal_reason":"api_error"}),
            &mut d,
        );
        assert_eq!(d.succeeded, Some(false));
        assert_eq!(d.errors.items, vec!["API Error: 400 unknown model"]);
    }

    #[test]
    fn retries_are_told_as_progress() {
        let mut r = ClaudeReader::new("/p".into());
        let note = r.event(
            &json!({"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,
                    "error_status":401,"error":"authentication_failed"}),
            &mut Digest::default(),
        );
        assert_eq!(
            note.as_deref(),
            Some("model call failed (401 authentication_failed); retry 2 of 10")
        );
    }
}
