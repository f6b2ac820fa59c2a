//! `codex exec --json`: one JSON event per line — `thread.started`, `turn.started`,
//! `item.started` / `item.updated` / `item.completed` (items: `agent_message`, `reasoning`,
//! `command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`, `error`),
//! `turn.completed` (with `usage`), `turn.failed`, `error`.
//!
//! Codex reads files through commands (`cat`, `sed -n`, `head`…); the files such a command
//! names, when they exist beneath the working directory, are listed as read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::digest::{Digest, progress, relative};

pub struct CodexReader {
    pub cwd: PathBuf,
}

impl crate::Reader for CodexReader {
    fn event(&mut self, e: &Value, d: &mut Digest) -> Option<String> {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        match e.get("type").and_then(Value::as_str)? {
            "thread.started" => {
                d.session_id = text(e, "thread_id");
                None
            }
            "turn.started" => Some("turn started".into()),
            "turn.completed" => {
                d.turns = Some(d.turns.unwrap_or(0) + 1);
                if let Some(u) = e.get("usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                    d.tokens.input += n("input_tokens");
                    d.tokens.cached_input += n("cached_input_tokens");
                    d.tokens.output += n("output_tokens");
                }
                d.succeeded.get_or_insert(true);
                None
            }
            "turn.failed" => {
                let message = e
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the turn failed");
                d.error(message);
                d.succeeded = Some(false);
                Some(progress("failed:", message))
            }
            "error" => {
                let message = text(e, "message").unwrap_or_else(|| "error".into());
                d.error(&message);
                Some(progress("error:", &message))
            }
            kind @ ("item.started" | "item.completed") => {
                self.item(e.get("item")?, kind == "item.completed", d)
            }
            _ => None,
        }
    }
}

impl CodexReader {
    fn item(&self, item: &Value, done: bool, d: &mut Digest) -> Option<String> {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        match s("type") {
            "agent_message" if done => {
                d.summary = Some(s("text").to_string());
                None
            }
            "command_execution" => {
                let command = unwrap_shell(s("command"));
                if !done {
                    return Some(progress("$", &command));
                }
                let exit = item
                    .get("exit_code")
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok());
                let ok = match s("status") {
                    "completed" => Some(exit.is_none_or(|c| c == 0)),
                    "failed" | "declined" => Some(false),
                    _ => None,
                };
                for f in files_read_by(&command, &self.cwd) {
                    d.files_read.add(f);
                }
                d.command(&command, exit, ok);
                None
            }
            "file_change" if done => {
                let ok = s("status") == "completed";
                let changes = item.get("changes").and_then(Value::as_array)?;
                let mut shown = Vec::new();
                for c in changes {
                    let path = c.get("path").and_then(Value::as_str).unwrap_or_default();
                    let rel = relative(path, &self.cwd);
                    if !ok {
                        d.error(&format!("a change to {rel} failed"));
                        continue;
                    }
                    match c.get("kind").and_then(Value::as_str) {
                        Some("delete") => d.files_deleted.add(rel.clone()),
                        _ => d.files_written.add(rel.clone()),
                    }
                    shown.push(rel);
                }
                (!shown.is_empty()).then(|| progress("edited", &shown.join(", ")))
            }
            "mcp_tool_call" if done => {
                let name = format!("{}.{}", s("server"), s("tool"));
                d.other_tools.add(name.clone());
                Some(progress("tool", &name))
            }
            "web_search" if done => {
                d.other_tools.add("web_search".into());
                Some(progress("searched", s("query")))
            }
            // Codex reports some warnings as items of type `error` (an unknown model's
            // metadata): noted, but not a failure of the run.
            "error" if done => {
                d.error(s("message"));
                None
            }
            _ => None,
        }
    }
}

/// The script of `/bin/bash -lc '<script>'` (how Codex reports a command), else the line.
fn unwrap_shell(command: &str) -> String {
    for prefix in [
        "/bin/bash -lc ",
        "bash -lc ",
        "/bin/sh -c ",
        "sh -c ",
        "/bin/zsh -lc ",
    ] {
        if let Some(rest) = command.strip_prefix(prefix) {
            let rest = rest.trim();
            if let Some(inner) = rest.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
                return inner.replace("'\\''", "'");
            }
            if let Some(inner) = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
                return inner.to_string();
            }
            return rest.to_string();
        }
    }
    command.to_string()
}

/// Programs whose file arguments are files read.
const READERS: &[&str] = &[
    "cat", "head", "tail", "nl", "sed", "less", "more", "wc", "bat",
];

/// The existing files beneath `cwd` that a simple read command names (`cat a b`,
/// `sed -n '1,80p' f`, `nl -ba f | sed …`): each pipeline stage and `&&`/`;` part on its own.
fn files_read_by(script: &str, cwd: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for part in script.split(['|', ';', '\n']).flat_map(|p| p.split("&&")) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let Some((program, args)) = words.split_first() else {
            continue;
        };
        if !READERS.contains(program) {
            continue;
        }
        for a in args {
            let a = a.trim_matches(|c| c == '\'' || c == '"');
            if a.starts_with('-') || a.is_empty() || a.contains(['<', '>', '$', '*']) {
                continue;
            }
            let climbs = Path::new(a)
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            let p = cwd.join(a);
            if !climbs && p.starts_with(cwd) && p.is_file() {
                out.push(relative(&p.to_string_lossy(), cwd));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Reader;
    use serde_json::json;

    #[test]
    fn the_shell_wrapper_is_unwrapped() {
        assert_eq!(
            unwrap_shell("/bin/bash -lc 'cat notes.txt'"),
            "cat notes.txt"
        );
        assert_eq!(unwrap_shell("/bin/bash -lc 'echo '\\''x'\\'''"), "echo 'x'");
        assert_eq!(unwrap_shell("ls -la"), "ls -la");
    }

    #[test]
    fn read_commands_name_existing_files_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.txt"), "x").unwrap();
        std::fs::create_dir(d.path().join("src")).unwrap();
        std::fs::write(d.path().join("src/m.rs"), "x").unwrap();
        let got = files_read_by(
            "cat a.txt missing.txt && sed -n '1,80p' src/m.rs | head -5; rm a.txt",
            d.path(),
        );
        assert_eq!(got, vec!["a.txt", "src/m.rs"]);
        assert!(files_read_by("cat ../../etc/passwd", d.path()).is_empty());
    }

    #[test]
    fn a_stream_reduces_to_summary_files_commands_and_tokens() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("notes.txt"), "x").unwrap();
        let cwd = d.path().to_path_buf();
        let abs = cwd.join("out.txt").to_string_lossy().into_owned();
        let events = [
            json!({"type":"thread.started","thread_id":"t1"}),
            json!({"type":"turn.started"}),
            json!({"type":"item.started","item":{"type":"command_execution","command":"/bin/bash -lc 'cat notes.txt'","status":"in_progress"}}),
            json!({"type":"item.completed","item":{"type":"command_execution","command":"/bin/bash -lc 'cat notes.txt'","aggregated_output":"x\n","exit_code":0,"status":"completed"}}),
            json!({"type":"item.completed","item":{"type":"file_change","changes":[{"path":abs,"kind":"add"}],"status":"completed"}}),
            json!({"type":"item.completed","item":{"type":"agent_message","text":"Done."}}),
            json!({"type":"turn.completed","usage":{"input_tokens":900,"cached_input_tokens":300,"output_tokens":150}}),
        ];
        let mut r = CodexReader { cwd };
        let mut digest = Digest::default();
        let notes: Vec<String> = events
            .iter()
            .filter_map(|e| r.event(e, &mut digest))
            .collect();
        assert_eq!(
            notes,
            vec!["turn started", "$ cat notes.txt", "edited out.txt"]
        );
        assert_eq!(digest.session_id.as_deref(), Some("t1"));
        assert_eq!(digest.summary.as_deref(), Some("Done."));
        assert_eq!(digest.succeeded, Some(true));
        assert_eq!(digest.files_read.items, vec!["notes.txt"]);
        assert_eq!(digest.files_written.items, vec!["out.txt"]);
        assert_eq!(digest.commands.items[0].exit_code, Some(0));
        assert_eq!(digest.tokens.input, 900);
        assert_eq!(digest.tokens.cached_input, 300);
        assert_eq!(digest.tokens.output, 150);
    }

    #[test]
    fn a_failed_change_and_a_failed_turn_are_errors() {
        let mut r = CodexReader { cwd: "/p".into() };
        let mut d = Digest::default();
        r.event(
            &json!({"type":"item.completed","item":{"type":"file_change","changes":[{"path":"/p/x","kind":"add"}],"status":"failed"}}),
            &mut d,
        );
        r.event(
            &json!({"type":"turn.failed","error":{"message":"stream disconnected"}}),
            &mut d,
        );
        assert!(d.files_written.items.is_empty());
        assert_eq!(
            d.errors.items,
            vec!["a change to x failed", "stream disconnected"]
        );
        assert_eq!(d.succeeded, Some(false));
    }
}
