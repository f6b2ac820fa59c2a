//! `kitbag run --json`: `start` (session, model), `tool_start` (name, input), `tool_done`
//! (name, ok, elapsed_ms), `usage` (per model call), and a last `result` (ok, text or error,
//! duration_ms, steps, and `output`: the JSON a pack's `output_schema` asked for). kitbag's own
//! tools name root-relative paths.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use serde_json::Value;

use crate::digest::{Digest, progress, relative};

pub struct KitbagReader {
    pub cwd: PathBuf,
    /// Started calls waiting for their `tool_done`, per tool name, in order.
    pending: HashMap<String, VecDeque<Value>>,
}

impl KitbagReader {
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            pending: HashMap::new(),
        }
    }
}

impl crate::Reader for KitbagReader {
    fn event(&mut self, e: &Value, d: &mut Digest) -> Option<String> {
        let s = |k: &str| e.get(k).and_then(Value::as_str);
        let n = |k: &str| e.get(k).and_then(Value::as_u64).unwrap_or(0);
        match s("type")? {
            "start" => {
                d.session_id = s("session").map(Into::into);
                d.model = s("model").map(Into::into);
                None
            }
            "tool_start" => {
                let name = s("name")?.to_string();
                let input = e.get("input").cloned().unwrap_or(Value::Null);
                let shown = match input.get("command").and_then(Value::as_str) {
                    Some(c) if name == "shell_bash" => progress("$", c),
                    _ => match input.get("path").and_then(Value::as_str) {
                        Some(p) => progress(&name, p),
                        None => name.clone(),
                    },
                };
                self.pending.entry(name).or_default().push_back(input);
                Some(shown)
            }
            "tool_done" => {
                let name = s("name")?;
                let input = self.pending.get_mut(name)?.pop_front()?;
                let ok = e.get("ok").and_then(Value::as_bool) == Some(true);
                self.done(name, &input, ok, d);
                None
            }
            "usage" => {
                let read = n("cache_read");
                d.tokens.input += n("input_tokens") + read + n("cache_creation");
                d.tokens.cached_input += read;
                d.tokens.output += n("output_tokens");
                None
            }
            "result" => {
                let ok = e.get("ok").and_then(Value::as_bool) == Some(true);
                d.succeeded = Some(ok);
                if let Some(t) = s("text") {
                    d.summary = Some(t.to_string());
                }
                if let Some(err) = s("error") {
                    d.error(err);
                }
                d.duration_ms = e.get("duration_ms").and_then(Value::as_u64);
                d.turns = e.get("steps").and_then(Value::as_u64);
                d.output = e.get("output").cloned();
                None
            }
            _ => None,
        }
    }
}

impl KitbagReader {
    fn done(&self, name: &str, input: &Value, ok: bool, d: &mut Digest) {
        let path = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .map(|p| relative(p, &self.cwd))
        };
        match name {
            "shell_bash" => {
                let c = input.get("command").and_then(Value::as_str).unwrap_or("");
                d.command(c, None, Some(ok));
            }
            "python" => d.command("python (code)", None, Some(ok)),
            _ if !ok => d.error(&format!("{name} failed")),
            "file_read" => d.files_read.add_some(path("path")),
            "file_write" | "file_create" | "edit_text" => d.files_written.add_some(path("path")),
            "file_delete" => d.files_deleted.add_some(path("path")),
            "file_move" => {
                d.files_deleted.add_some(path("source"));
                d.files_written.add_some(path("destination"));
            }
            "edit_patch" => {
                let patch = input.get("patch").and_then(Value::as_str).unwrap_or("");
                for f in patched_files(patch) {
                    d.files_written.add(f);
                }
            }
            other => d.other_tools.add(other.to_string()),
        }
    }
}

/// The files a patch (unified diff or Codex's `*** Begin Patch` format) names.
fn patched_files(patch: &str) -> Vec<String> {
    patch
        .lines()
        .filter_map(|l| {
            l.strip_prefix("+++ ")
                .map(|p| p.trim().trim_start_matches("b/"))
                .filter(|p| *p != "/dev/null")
                .or_else(|| l.strip_prefix("*** Add File: "))
                .or_else(|| l.strip_prefix("*** Update File: "))
                .map(|p| p.trim().to_string())
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Reader;
    use serde_json::json;

    #[test]
    fn tool_calls_pair_with_their_outcomes_in_order() {
        let mut r = KitbagReader::new("/p".into());
        let mut d = Digest::default();
        let events = [
            json!({"type":"start","session":"delegate-1","model":"m"}),
            json!({"type":"tool_start","name":"file_read","input":{"path":"a.txt"}}),
            json!({"type":"tool_start","name":"file_read","input":{"path":"b.txt"}}),
            json!({"type":"tool_done","name":"file_read","ok":true,"elapsed_ms":1}),
            json!({"type":"tool_done","name":"file_read","ok":false,"elapsed_ms":1}),
            json!({"type":"tool_start","name":"edit_patch","input":{"patch":"--- a/x.rs\n+++ b/x.rs\n@@\n"}}),
            json!({"type":"tool_done","name":"edit_patch","ok":true,"elapsed_ms":1}),
            json!({"type":"tool_start","name":"shell_bash","input":{"command":"cargo test"}}),
            json!({"type":"tool_done","name":"shell_bash","ok":false,"elapsed_ms":9}),
            json!({"type":"usage","input_tokens":10,"output_tokens":5,"cache_read":2,"cache_creation":0}),
            json!({"type":"result","ok":true,"text":"Fixed x.rs","duration_ms":40,"steps":3}),
        ];
        let notes: Vec<String> = events.iter().filter_map(|e| r.event(e, &mut d)).collect();
        assert_eq!(
            notes,
            vec![
                "file_read a.txt",
                "file_read b.txt",
                "edit_patch",
                "$ cargo test"
            ]
        );
        assert_eq!(d.files_read.items, vec!["a.txt"]);
        assert_eq!(d.errors.items, vec!["file_read failed"]);
        assert_eq!(d.files_written.items, vec!["x.rs"]);
        assert_eq!(d.commands.items[0].ok, Some(false));
        assert_eq!(
            (d.tokens.input, d.tokens.cached_input, d.tokens.output),
            (12, 2, 5)
        );
        assert_eq!(d.summary.as_deref(), Some("Fixed x.rs"));
        assert_eq!((d.succeeded, d.turns), (Some(true), Some(3)));
    }

    #[test]
    fn patches_of_both_formats_name_their_files() {
        assert_eq!(
            patched_files("*** Begin Patch\n*** Add File: n.txt\n+x\n*** Update File: src/m.rs\n"),
            vec!["n.txt", "src/m.rs"]
        );
        assert_eq!(
            patched_files("--- /dev/null\n+++ b/new.rs\n"),
            vec!["new.rs"]
        );
    }
}
