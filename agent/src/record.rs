//! What a session holds: its records (one JSON line each), their token totals, and the rule
//! for session names. Plain types shared by the file store (`session.rs`) and the PostgreSQL
//! one (`session_pg.rs`).

use kitbag_llm::{Block, StopReason, Usage};
use serde::{Deserialize, Serialize};

/// One line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Record {
    /// A user turn: a person's prompt, or a synthetic one (`origin`: e.g. `cron:<id>`).
    User {
        content: Vec<Block>,
        ts: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    Assistant {
        content: Vec<Block>,
        stop: StopReason,
        model: String,
        ts: String,
    },
    /// The results of one assistant message's tool calls (`tool_result` blocks).
    ToolResult { content: Vec<Block>, ts: String },
    /// One model call's token counts (seed 000 phase 3b).
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        cache_read: u64,
        cache_creation: u64,
        model: String,
        ts: String,
        /// What the call was for when it was not a turn step (`compaction`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        purpose: Option<String>,
    },
    /// A summary of the turns before `covers_through_ts` (seed 000 phase 3).
    Compaction {
        content: String,
        covers_through_ts: String,
        source_hash: String,
        ts: String,
    },
    /// The session's own instructions (seed 002's session prompt layer, after the workspace
    /// prompt): the newest one applies to every later turn; an empty text clears it.
    SessionPrompt { text: String, ts: String },
    /// The issue the session works on (`kitbag run --issue N`): the loop binds it in
    /// kitbag-issues at every turn and keeps its open todos in view. The newest applies; 0
    /// unbinds.
    IssueBound { number: i64, ts: String },
    /// The turn stopped at a server's question to the operator (MCP elicitation in `kitbag
    /// run` or `daemon`): the form, the step's calls to run again once it is answered (those
    /// of the asking server), and the results the step's other calls gave.
    Waiting {
        server: String,
        message: String,
        schema: serde_json::Value,
        /// The question's key (`checkpoint-N` for a checkpoint's sign-off).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        pending: Vec<String>,
        done: Vec<Block>,
        ts: String,
    },
    /// The operator's answer to the question the session waits at (`kitbag sessions
    /// answer`): an `ElicitResult`.
    Answer {
        answer: serde_json::Value,
        ts: String,
    },
}

/// A session prompt joins every model call's system prompt: kept well under a context's worth.
pub const MAX_SESSION_PROMPT: usize = 16 * 1024;

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A name that cannot be a session's (see [`check_name`]); `field` is what named it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{field}: {name:?} is not a session name; use 1 to 128 letters, digits, '.', '_', '-' or ':', not starting with '.'"
)]
pub struct NameError {
    pub field: &'static str,
    pub name: String,
}

/// A session name becomes a file name: letters, digits, `.`, `_`, `-`, `:` (kitbag-cron's
/// session names), at most 128, not starting with a dot.
pub fn check_name(name: &str) -> Result<(), NameError> {
    check_name_as("session", name)
}

/// [`check_name`] for a name given as `field` (`--agent`: a pack's file name).
pub fn check_name_as(field: &'static str, name: &str) -> Result<(), NameError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        Err(NameError {
            field,
            name: name.to_owned(),
        })
    }
}

/// One session's size and token totals (`host_status`, `kitbag sessions`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SessionTotals {
    pub name: String,
    pub turns: usize,
    pub model_calls: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

/// "3 turns, 5 model calls, tokens in 1200 (cache read 800, write 0) out 310" (`host_status`).
impl std::fmt::Display for SessionTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} turns, {} model calls, tokens in {} (cache read {}, write {}) out {}",
            self.turns,
            self.model_calls,
            self.input_tokens,
            self.cache_read,
            self.cache_creation,
            self.output_tokens
        )
    }
}

impl SessionTotals {
    pub fn of(name: &str, records: &[Record]) -> Self {
        let (u, calls) = totals(records);
        Self {
            name: name.to_owned(),
            turns: records
                .iter()
                .filter(|r| matches!(r, Record::User { .. }))
                .count(),
            model_calls: calls,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read: u.cache_read,
            cache_creation: u.cache_creation,
        }
    }
}

impl SessionTotals {
    /// Add what more records say (a session only grows).
    pub(crate) fn add(&mut self, records: &[Record]) {
        let more = SessionTotals::of(&self.name, records);
        self.turns += more.turns;
        self.model_calls += more.model_calls;
        self.input_tokens += more.input_tokens;
        self.output_tokens += more.output_tokens;
        self.cache_read += more.cache_read;
        self.cache_creation += more.cache_creation;
    }
}

pub fn totals(records: &[Record]) -> (Usage, usize) {
    let mut u = Usage::default();
    let mut calls = 0;
    for r in records {
        if let Record::Usage {
            input_tokens,
            output_tokens,
            cache_read,
            cache_creation,
            ..
        } = r
        {
            u.add(&Usage {
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                cache_read: *cache_read,
                cache_creation: *cache_creation,
            });
            calls += 1;
        }
    }
    (u, calls)
}

/// Every readable line, and how many were not.
pub fn parse(text: &str) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(r) => records.push(r),
            Err(_) => skipped += 1,
        }
    }
    (records, skipped)
}
