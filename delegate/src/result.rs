//! The compact result (seed 003's "coding agent output compaction"): what the caller's model
//! reads instead of the stream — ~1–2 KB where the stream is tens of KB.

use schemars::JsonSchema;
use serde::Serialize;

use crate::digest::{CommandRun, Digest, Listed, MAX_NOTE_CHARS, Tokens, cut};
use crate::params::AgentKind;
use crate::stream::Ended;

/// The summary kept in the result (the whole one is in the log).
pub const MAX_SUMMARY_CHARS: usize = 4000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The CLI finished and said it succeeded.
    Succeeded,
    /// It said it failed, or exited with an error.
    Failed,
    /// Stopped at `timeout_seconds`.
    TimedOut,
    /// The caller cancelled the call.
    Cancelled,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DelegateResult {
    pub agent: AgentKind,
    pub outcome: Outcome,
    /// Wall time of the whole delegation.
    pub duration_ms: u64,
    /// The CLI's exit code (absent when a signal ended it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The agent's own final summary of its work (cut to 4,000 characters).
    pub summary: String,
    pub summary_truncated: bool,
    pub tokens: Tokens,
    /// Model turns, when the CLI counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    /// What it cost, when the CLI reports it (Claude Code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Relative to the working directory where beneath it. Each list keeps 40 entries;
    /// `*_total` counts them all.
    pub files_read: Vec<String>,
    pub files_read_total: usize,
    pub files_written: Vec<String>,
    pub files_written_total: usize,
    pub files_deleted: Vec<String>,
    pub commands: Vec<CommandRun>,
    pub commands_total: usize,
    /// Other tools it called (web search, MCP tools, subagents).
    pub other_tools: Vec<String>,
    /// Failures the stream reported, and why the run failed when it did.
    pub errors: Vec<String>,
    /// The whole stream, as the CLI wrote it.
    pub log_path: String,
    pub log_bytes: u64,
    /// The CLI's own session or thread id (to resume it by hand).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Where it ran: the working directory, and the instance when inside one.
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

fn listed<T: Clone>(l: &Listed<T>) -> Vec<T> {
    l.items.clone()
}

/// The result of a run that ended as `ended`, its stream reduced to `d`.
pub fn build(
    agent: AgentKind,
    d: Digest,
    ended: &Ended,
    log: (String, u64),
    cwd: String,
    instance: Option<String>,
) -> DelegateResult {
    let mut errors = listed(&d.errors);
    let outcome = if ended.cancelled {
        Outcome::Cancelled
    } else if ended.timed_out {
        errors.push(format!(
            "stopped after {} s (timeout_seconds)",
            ended.elapsed.as_secs()
        ));
        Outcome::TimedOut
    } else if ended.exit_code == Some(0) && d.succeeded != Some(false) && d.summary.is_some() {
        Outcome::Succeeded
    } else {
        errors.push(failure_reason(agent, &d, ended));
        Outcome::Failed
    };
    let summary = d.summary.clone().unwrap_or_default();
    let truncated = summary.chars().count() > MAX_SUMMARY_CHARS;
    DelegateResult {
        agent,
        outcome,
        duration_ms: u64::try_from(ended.elapsed.as_millis()).unwrap_or(u64::MAX),
        exit_code: ended.exit_code,
        summary: cut(&summary, MAX_SUMMARY_CHARS),
        summary_truncated: truncated,
        tokens: d.tokens.clone(),
        turns: d.turns,
        cost_usd: d.cost_usd,
        files_read: listed(&d.files_read),
        files_read_total: d.files_read.total,
        files_written: listed(&d.files_written),
        files_written_total: d.files_written.total,
        files_deleted: listed(&d.files_deleted),
        commands: listed(&d.commands),
        commands_total: d.commands.total,
        other_tools: listed(&d.other_tools),
        errors,
        log_path: log.0,
        log_bytes: log.1,
        session_id: d.session_id.clone(),
        cwd,
        instance,
    }
}

/// Why a run counts as failed, from what there is: its own report, its exit, its stderr.
fn failure_reason(agent: AgentKind, d: &Digest, ended: &Ended) -> String {
    let exit = match (ended.exit_code, ended.signal) {
        (Some(c), _) => format!("exited with {c}"),
        (None, Some(s)) => format!("was ended by signal {s}"),
        _ => "ended".into(),
    };
    let said = if d.succeeded == Some(false) {
        "reported a failure and "
    } else if d.summary.is_none() && ended.exit_code == Some(0) {
        "gave no final answer and "
    } else {
        ""
    };
    let why = if !ended.stderr_tail.is_empty() {
        ended.stderr_tail.clone()
    } else {
        d.stray_lines.join("\n")
    };
    let mut s = format!("{} {said}{exit}", agent.label());
    if !why.is_empty() {
        s.push_str(": ");
        // The end of stderr says most: the error that stopped it.
        let chars: Vec<char> = why.chars().collect();
        let keep = chars.len().min(MAX_NOTE_CHARS);
        s.extend(&chars[chars.len() - keep..]);
    }
    s
}

/// The text block: the seed's compact form.
pub fn text(r: &DelegateResult) -> String {
    let verdict = match r.outcome {
        Outcome::Succeeded => "completed successfully",
        Outcome::Failed => "failed",
        Outcome::TimedOut => "timed out",
        Outcome::Cancelled => "was cancelled",
    };
    let mut s = format!(
        "{} {verdict} in {:.1}s ({} output tokens).\n",
        r.agent.label(),
        r.duration_ms as f64 / 1000.0,
        r.tokens.output
    );
    let list = |s: &mut String, label: &str, items: &[String], total: usize| {
        if !items.is_empty() {
            let more = total.saturating_sub(items.len());
            s.push_str(&format!("\n{label}: {}", items.join(", ")));
            if more > 0 {
                s.push_str(&format!(" (+{more} more)"));
            }
        }
    };
    list(&mut s, "Files read", &r.files_read, r.files_read_total);
    list(
        &mut s,
        "Files written",
        &r.files_written,
        r.files_written_total,
    );
    list(
        &mut s,
        "Files deleted",
        &r.files_deleted,
        r.files_deleted.len(),
    );
    let commands: Vec<String> = r
        .commands
        .iter()
        .map(|c| match (c.exit_code, c.ok) {
            (Some(code), _) if code != 0 => format!("{} (exit {code})", c.command),
            (_, Some(false)) => format!("{} (failed)", c.command),
            _ => c.command.clone(),
        })
        .collect();
    list(&mut s, "Commands", &commands, r.commands_total);
    list(&mut s, "Other tools", &r.other_tools, r.other_tools.len());
    if !r.errors.is_empty() {
        s.push_str(&format!("\nErrors: {}", r.errors.join("; ")));
    }
    if !r.summary.is_empty() {
        s.push_str(&format!("\n\nResult:\n{}", r.summary));
    }
    s.push_str(&format!(
        "\n\nFull stream: {} ({} bytes)",
        r.log_path, r.log_bytes
    ));
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ended(code: i32) -> Ended {
        Ended {
            exit_code: Some(code),
            elapsed: Duration::from_millis(13_400),
            ..Default::default()
        }
    }

    #[test]
    fn the_text_is_the_seeds_compact_form() {
        let mut d = Digest {
            summary: Some("Created technologies.html.".into()),
            succeeded: Some(true),
            ..Default::default()
        };
        d.tokens.output = 1028;
        d.files_read.add("site/index.html".into());
        d.files_written.add("site/technologies.html".into());
        let r = build(
            AgentKind::Claude,
            d,
            &ended(0),
            ("log".into(), 9),
            ".".into(),
            None,
        );
        assert_eq!(r.outcome, Outcome::Succeeded);
        let t = text(&r);
        assert!(
            t.starts_with("Claude Code completed successfully in 13.4s (1028 output tokens).\n"),
            "{t}"
        );
        assert!(t.contains("\nFiles read: site/index.html\nFiles written: site/technologies.html\n\nResult:\nCreated technologies.html."));
    }

    #[test]
    fn a_clean_exit_without_an_answer_or_with_a_reported_failure_is_a_failure() {
        let r = build(
            AgentKind::Codex,
            Digest::default(),
            &ended(0),
            ("l".into(), 0),
            ".".into(),
            None,
        );
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(
            r.errors[0].contains("gave no final answer"),
            "{:?}",
            r.errors
        );
        let d = Digest {
            summary: Some("x".into()),
            succeeded: Some(false),
            ..Default::default()
        };
        let mut e = ended(1);
        e.stderr_tail = "Error: 401 Unauthorized".into();
        let r = build(AgentKind::Codex, d, &e, ("l".into(), 0), ".".into(), None);
        assert_eq!(
            r.errors.last().unwrap(),
            "Codex reported a failure and exited with 1: Error: 401 Unauthorized"
        );
    }

    #[test]
    fn a_deadline_outranks_the_exit() {
        let mut e = ended(0);
        e.timed_out = true;
        e.exit_code = None;
        e.signal = Some(15);
        let r = build(
            AgentKind::Kitbag,
            Digest::default(),
            &e,
            ("l".into(), 0),
            ".".into(),
            None,
        );
        assert_eq!(r.outcome, Outcome::TimedOut);
    }
}
