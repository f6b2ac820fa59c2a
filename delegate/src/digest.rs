//! What a coding agent's stream is reduced to: its own final summary, the files it read and
//! wrote, the commands it ran, its token use — everything else (thinking, streamed fragments,
//! file contents echoed back) is dropped. Each CLI's reader (codex.rs, claude.rs, kitbag.rs)
//! feeds one of these line by line.

use std::collections::HashSet;
use std::hash::Hash;
use std::path::Path;

use schemars::JsonSchema;
use serde::Serialize;

/// At most this many entries of each list are kept (the totals count every one).
pub const MAX_LISTED: usize = 40;
/// A command line is cut to this many characters.
pub const MAX_COMMAND_CHARS: usize = 200;
/// An error or note is cut to this many characters.
pub const MAX_NOTE_CHARS: usize = 300;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Tokens {
    /// Input tokens, cached ones included.
    pub input: u64,
    /// Of `input`, read from the provider's cache.
    pub cached_input: u64,
    pub output: u64,
}

/// A command the agent ran.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, JsonSchema)]
pub struct CommandRun {
    pub command: String,
    /// Its exit code, when the CLI reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether it succeeded (false: it failed or was refused); absent when never reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
}

/// A list kept short: the first [`MAX_LISTED`] distinct entries and how many there were.
#[derive(Debug, Clone)]
pub struct Listed<T> {
    pub items: Vec<T>,
    /// Distinct entries seen, listed or not.
    pub total: usize,
    seen: HashSet<T>,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            total: 0,
            seen: HashSet::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Listed<T> {
    /// Add `item` unless it was seen before.
    pub fn add(&mut self, item: T) {
        if !self.seen.insert(item.clone()) {
            return;
        }
        self.total += 1;
        if self.items.len() < MAX_LISTED {
            self.items.push(item);
        }
    }

    pub fn add_some(&mut self, item: Option<T>) {
        if let Some(item) = item {
            self.add(item);
        }
    }
}

/// The reduced stream.
#[derive(Debug, Clone, Default)]
pub struct Digest {
    /// The CLI's own session or thread id.
    pub session_id: Option<String>,
    pub model: Option<String>,
    /// The last message the agent addressed to its user: its summary of the work.
    pub summary: Option<String>,
    /// The CLI's own verdict, when it gives one (`Some(false)`: it reported a failure).
    pub succeeded: Option<bool>,
    /// The CLI's own duration, when it reports one.
    pub duration_ms: Option<u64>,
    pub turns: Option<u64>,
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
    /// Root-relative where they are beneath the working directory, else as reported.
    pub files_read: Listed<String>,
    pub files_written: Listed<String>,
    pub files_deleted: Listed<String>,
    pub commands: Listed<CommandRun>,
    /// Other tools it called (web search, MCP tools, subagents), by name.
    pub other_tools: Listed<String>,
    /// Errors the stream reported (a failed turn, a refused edit, a denied permission).
    pub errors: Listed<String>,
    /// Lines of the stream that were not JSON (kept to explain a CLI that failed early).
    pub stray_lines: Vec<String>,
    /// The JSON its answer ended with, checked against its pack's `output_schema` (kitbag).
    pub output: Option<serde_json::Value>,
}

/// How many stray lines are kept (the last ones).
const STRAY_KEPT: usize = 8;

impl Digest {
    /// A line that is not one of the stream's JSON events.
    pub fn stray(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if self.stray_lines.len() == STRAY_KEPT {
            self.stray_lines.remove(0);
        }
        self.stray_lines.push(cut(line, MAX_NOTE_CHARS));
    }

    pub fn error(&mut self, message: &str) {
        self.errors.add(cut(message.trim(), MAX_NOTE_CHARS));
    }

    pub fn command(&mut self, command: &str, exit_code: Option<i32>, ok: Option<bool>) {
        self.commands.add(CommandRun {
            command: cut(command.trim(), MAX_COMMAND_CHARS),
            exit_code,
            ok,
        });
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `path` relative to `cwd` when it lies beneath it (how the result names files).
pub fn relative(path: &str, cwd: &Path) -> String {
    let p = Path::new(path);
    match p.strip_prefix(cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

/// One stream event's message for the caller's progress notifications, short.
pub fn progress(kind: &str, what: &str) -> String {
    format!("{kind} {}", cut(what, 120))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_distinct_entries_and_count_past_the_cap() {
        let mut l = Listed::default();
        for i in 0..(MAX_LISTED + 5) {
            l.add(format!("f{i}"));
            l.add(format!("f{i}"));
        }
        assert_eq!(l.items.len(), MAX_LISTED);
        assert_eq!(l.total, MAX_LISTED + 5);
    }

    #[test]
    fn paths_beneath_the_working_directory_are_relative() {
        let cwd = Path::new("/p/root");
        assert_eq!(relative("/p/root/src/a.rs", cwd), "src/a.rs");
        assert_eq!(relative("/etc/hosts", cwd), "/etc/hosts");
        assert_eq!(relative("/p/root", cwd), "/p/root");
    }

    #[test]
    fn cutting_counts_characters_not_bytes() {
        assert_eq!(cut("ééééé", 3), "éé…");
        assert_eq!(cut("abc", 3), "abc");
    }

    #[test]
    fn only_the_last_stray_lines_are_kept() {
        let mut d = Digest::default();
        for i in 0..20 {
            d.stray(&format!("line {i}"));
        }
        d.stray("   ");
        assert_eq!(d.stray_lines.len(), STRAY_KEPT);
        assert_eq!(d.stray_lines.last().unwrap(), "line 19");
    }
}
