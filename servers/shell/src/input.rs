//! `shell_input`: type into a background job's terminal — text, named keys — or resize it,
//! and see the screen once the program has answered.

use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::lock::LockExt;
use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ShellState;
use crate::screen::{COLS, ROWS};

pub const DEF: ToolDef = ToolDef::write(
    "shell_input",
    "Type into a job",
    "Type into a background job's terminal (`text`, then `keys` like Enter or Ctrl-C) or \
     resize it; returns its screen.",
)
.destructive();

pub const MAX_TEXT_BYTES: usize = 64 * 1024;
pub const MAX_KEYS: usize = 100;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputParams {
    pub job_id: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    #[serde(default)]
    pub rows: Option<i64>,
    #[serde(default)]
    pub cols: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct InputResult {
    pub job_id: String,
    /// Bytes typed into the terminal.
    pub bytes_written: u64,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// It reads its terminal again (the next prompt).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// The terminal's screen after the input (see shell_output).
    pub screen: String,
}

/// What a key name types, in the given cursor-key mode.
pub fn key_bytes(name: &str, application_cursor: bool) -> Option<Vec<u8>> {
    let lower = name.trim().to_ascii_lowercase();
    let arrow = |c: u8| {
        if application_cursor {
            vec![0x1b, b'O', c]
        } else {
            vec![0x1b, b'[', c]
        }
    };
    let fixed: Option<&[u8]> = match lower.as_str() {
        "enter" | "return" => Some(b"\r"),
        "tab" => Some(b"\t"),
        "escape" | "esc" => Some(b"\x1b"),
        "backspace" => Some(b"\x7f"),
        "space" => Some(b" "),
        "home" => Some(b"\x1b[H"),
        "end" => Some(b"\x1b[F"),
        "pageup" => Some(b"\x1b[5~"),
        "pagedown" => Some(b"\x1b[6~"),
        "delete" => Some(b"\x1b[3~"),
        _ => None,
    };
    if let Some(b) = fixed {
        return Some(b.to_vec());
    }
    match lower.as_str() {
        "up" => return Some(arrow(b'A')),
        "down" => return Some(arrow(b'B')),
        "right" => return Some(arrow(b'C')),
        "left" => return Some(arrow(b'D')),
        _ => {}
    }
    let letter = lower
        .strip_prefix("ctrl-")
        .or_else(|| lower.strip_prefix("ctrl+"))?;
    match letter.as_bytes() {
        [c @ b'a'..=b'z'] => Some(vec![c - b'a' + 1]),
        _ => None,
    }
}

/// The bytes to type: `text`, then each key — or the field and why not.
fn bytes_to_type(p: &InputParams, application_cursor: bool) -> ToolResult<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(text) = &p.text {
        kitbag_shared::args::max_bytes("text", text, MAX_TEXT_BYTES)?;
        if text.contains('\0') {
            return Err(ToolError::invalid_field(
                "text",
                "must not contain NUL bytes",
            ));
        }
        out.extend_from_slice(text.as_bytes());
    }
    if let Some(keys) = &p.keys {
        kitbag_shared::args::max_count("keys", keys.len(), MAX_KEYS, "keys")?;
        for (i, k) in keys.iter().enumerate() {
            let b = key_bytes(k, application_cursor).ok_or_else(|| {
                ToolError::invalid_field(
                    &format!("keys[{i}]"),
                    format!(
                        "{k:?} is not a key name; accepted: Enter, Tab, Escape, Backspace, Space, \
                         Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, Ctrl-A … Ctrl-Z"
                    ),
                )
            })?;
            out.extend(b);
        }
    }
    Ok(out)
}

/// The new size, when asked for: both numbers, each in range.
fn size(p: &InputParams) -> ToolResult<Option<(u16, u16)>> {
    let check = |field: &str, v: i64, range: &std::ops::RangeInclusive<u16>| {
        u16::try_from(v)
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                ToolError::invalid_field(
                    field,
                    format!(
                        "{v} is out of range; {}–{} is accepted",
                        range.start(),
                        range.end()
                    ),
                )
            })
    };
    match (p.rows, p.cols) {
        (None, None) => Ok(None),
        (Some(r), Some(c)) => Ok(Some((check("rows", r, &ROWS)?, check("cols", c, &COLS)?))),
        (Some(_), None) => Err(ToolError::invalid_field("cols", "is required with rows")),
        (None, Some(_)) => Err(ToolError::invalid_field("rows", "is required with cols")),
    }
}

pub async fn run(
    state: Arc<ShellState>,
    p: InputParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<InputResult>> {
    let job = state.jobs.get(&p.job_id)?;
    let resize = size(&p)?;
    let application_cursor = job.running.capture.locked().screen.application_cursor();
    let bytes = bytes_to_type(&p, application_cursor)?;
    if bytes.is_empty() && resize.is_none() {
        return Err(ToolError::invalid_field(
            "text",
            "nothing to do: give `text`, `keys`, or `rows` and `cols`",
        ));
    }
    if let Some(exit) = job.exit() {
        return Err(ToolError::new(
            ErrorCode::JobNotRunning,
            format!(
                "job_id: {} has ended (exit code {}); nothing reads its terminal",
                p.job_id, exit.code
            ),
        )
        .with_detail(json!({ "field": "job_id", "exit_code": exit.code })));
    }
    let job2 = job.clone();
    let typed = bytes.len();
    kitbag_shared::blocking(move || {
        let io = |e: std::io::Error| {
            ToolError::new(ErrorCode::IoError, format!("the job's terminal: {e}"))
        };
        if let Some((rows, cols)) = resize {
            job2.running.resize(rows, cols).map_err(io)?;
        }
        job2.running
            .type_in(&bytes, Duration::from_secs(2))
            .map_err(io)?;
        // The program's answer: until its output is quiet for a moment (or it ends).
        job2.running
            .settle(Duration::from_millis(150), Duration::from_millis(1500));
        Ok(())
    })
    .await?;
    let exit = job.exit();
    let running = exit.is_none();
    let waiting_for_input = running && job.running.waiting_for_input();
    let screen = job.running.capture.locked().screen.text();
    let status = match &exit {
        Some(e) => format!("ended with exit code {}", e.code),
        None if waiting_for_input => "waiting for input again".into(),
        None => "running".into(),
    };
    let text = format!(
        "{screen}\n[typed {typed} bytes into {}; {status}]",
        p.job_id
    );
    Ok(Reply::new(
        InputResult {
            job_id: p.job_id,
            bytes_written: typed as u64,
            running,
            exit_code: exit.map(|e| e.code),
            waiting_for_input,
            screen,
        },
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_type_what_a_terminal_sends() {
        assert_eq!(key_bytes("Enter", false), Some(b"\r".to_vec()));
        assert_eq!(key_bytes("ctrl-c", false), Some(vec![3]));
        assert_eq!(key_bytes("Ctrl+Z", false), Some(vec![26]));
        assert_eq!(key_bytes("Up", false), Some(b"\x1b[A".to_vec()));
        assert_eq!(key_bytes("Up", true), Some(b"\x1bOA".to_vec()));
        assert_eq!(key_bytes("Ctrl-1", false), None);
        assert_eq!(key_bytes("F13", false), None);
    }
}
