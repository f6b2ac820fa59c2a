//! `kitbag run --json`: the turn as JSON lines on stdout, for scripts and for
//! `agent_delegate` (kitbag-delegate's kitbag.rs reads them) —
//! `start` {session, model}, `tool_start` {name, input}, `tool_done` {name, ok, elapsed_ms},
//! `usage` {input_tokens, output_tokens, cache_read, cache_creation} after each model call,
//! and a last `result` {ok, text | error, waiting?, duration_ms, steps, tool_calls}.

use std::io::Write;

use serde_json::{Value, json};

use super::turn::Note;

/// Write one event as a line (a closed stdout only loses the event).
pub fn emit(event: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{event}");
    let _ = out.flush();
}

/// The event a progress note becomes, if any.
pub fn of_note(n: &Note<'_>) -> Option<Value> {
    match n {
        Note::ToolStart { name, input } => {
            Some(json!({"type": "tool_start", "name": name, "input": input}))
        }
        Note::ToolDone { name, ok, elapsed } => Some(json!({
            "type": "tool_done",
            "name": name,
            "ok": ok,
            "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        })),
        Note::Usage(u) => Some(json!({
            "type": "usage",
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read": u.cache_read,
            "cache_creation": u.cache_creation,
        })),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn tool_notes_and_usage_become_events() {
        let input = json!({"path": "a.txt"});
        let start = of_note(&Note::ToolStart {
            name: "file_read",
            input: &input,
        })
        .unwrap();
        assert_eq!(start["type"], "tool_start");
        assert_eq!(start["input"]["path"], "a.txt");
        let done = of_note(&Note::ToolDone {
            name: "file_read",
            ok: false,
            elapsed: Duration::from_millis(7),
        })
        .unwrap();
        assert_eq!(
            (done["ok"].clone(), done["elapsed_ms"].clone()),
            (json!(false), json!(7))
        );
        assert!(of_note(&Note::Compacted { turns: 2 }).is_none());
    }
}
