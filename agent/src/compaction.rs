//! Context compaction (seed 000 phase 3). When more than 5 turns fall out of the window and
//! no summary covers them, one model call summarizes them; the summary is appended to the
//! session as a `compaction` record (the raw records are never rewritten) and goes into the
//! system prompt as `[Context summary from earlier in this conversation: …]`.
//!
//! A summary is reused while it is valid: the record it ends at still carries its
//! `covers_through_ts` and the records it covers still hash to its `source_hash` — a changed
//! history is never summarized by a stale text. When a new summary is needed it covers the
//! history down to half the window, so the next turns reuse it instead of summarizing again
//! at every turn; it is built from the previous summary plus the turns after it.

use sha2::{Digest, Sha256};

use super::record::Record;
use super::window::{Window, blocks_weight, fit, fits, messages, turn_starts};
use kitbag_llm::{Message, ToolSpec};

/// Summaries are made only when more than this many turns would be dropped.
pub const MAX_DROPPED_WITHOUT_SUMMARY: usize = 5;

pub const SUMMARY_PROMPT: &str = "Summarize the key points from this conversation so far in 2-3 paragraphs. Focus on decisions made, files modified, and current task state.";

/// What an old tool result's text becomes under token pressure (opencode's wording).
pub const CLEARED: &str = "[Old tool result content cleared]";

/// Tool-result messages kept whole under pressure: the most recent ones.
pub const KEEP_RECENT_RESULTS: usize = 2;

/// Bytes of text per token, roughly: how kitbag turns sizes it measures into tokens.
pub const BYTES_PER_TOKEN: u64 = 4;

/// The tokens a request will cost, estimated from its size: the system prompt, the tools'
/// names, descriptions and schemas, and the messages as the window weighs them. The model's
/// own count comes only after the call, and a model (or a proxy) may report none or too few:
/// token pressure follows the larger of the two.
pub fn measured_tokens(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let tools: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
        .sum();
    let messages: usize = messages.iter().map(|m| blocks_weight(&m.content)).sum();
    (system.len() + tools + messages) as u64 / BYTES_PER_TOKEN
}

/// Under token pressure, the first tier: clear the text of every tool result except those in
/// the most recent `KEEP_RECENT_RESULTS` messages carrying results. Returns the characters
/// removed. The session file keeps everything; only this call's context is pruned.
pub fn prune_tool_outputs(messages: &mut [Message]) -> usize {
    let carrying: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.content
                .iter()
                .any(|b| matches!(b, kitbag_llm::Block::ToolResult { .. }))
        })
        .map(|(i, _)| i)
        .collect();
    let old = carrying.len().saturating_sub(KEEP_RECENT_RESULTS);
    let mut saved = 0;
    for &i in &carrying[..old] {
        for b in &mut messages[i].content {
            if let kitbag_llm::Block::ToolResult { content, .. } = b {
                for part in content.iter_mut() {
                    if let kitbag_llm::ResultPart::Text { text } = part
                        && text.len() > CLEARED.len()
                    {
                        saved += text.len() - CLEARED.len();
                        *text = CLEARED.to_owned();
                    }
                }
                let before = content.len();
                content.retain(|p| !matches!(p, kitbag_llm::ResultPart::Image { .. }));
                saved += (before - content.len()) * 1000;
            }
        }
    }
    saved
}

/// Under token pressure that pruning did not relieve, the second tier: a summary of every turn
/// before the current one (`None` when there is no earlier turn).
pub fn plan_pressed(records: &[Record]) -> Option<Plan> {
    let starts = turn_starts(records);
    let &boundary = starts.last().filter(|&&b| b > 0)?;
    let valid = latest_valid(records);
    // Already summarized up to the current turn: nothing more to summarize.
    if valid.as_ref().is_some_and(|v| v.boundary == boundary) {
        return None;
    }
    let previous = valid
        .filter(|v| v.boundary < boundary)
        .map(|v| (v.boundary, v.content));
    Some(Plan::Summarize { boundary, previous })
}

/// The longest transcript a summary call is given (its tail is kept).
const MAX_TRANSCRIPT_CHARS: usize = 120_000;

/// What the next model call sees, or the summary that must be made first.
#[derive(Debug, PartialEq)]
pub enum Plan {
    Ready {
        messages: Vec<Message>,
        summary: Option<String>,
    },
    Summarize {
        /// Summarize `records[..boundary]` (a turn start).
        boundary: usize,
        /// A valid earlier summary of `records[..end]`, `end <= boundary`, to build on.
        previous: Option<(usize, String)>,
    },
}

/// A compaction record that still describes the session, and where its coverage ends.
struct Valid {
    boundary: usize,
    content: String,
}

/// The hash of the records before `boundary` (compaction and session-prompt records left out:
/// they are not part of the conversation).
pub fn source_hash(records: &[Record]) -> String {
    let mut h = Sha256::new();
    for r in records {
        if matches!(
            r,
            Record::Compaction { .. }
                | Record::SessionPrompt { .. }
                | Record::IssueBound { .. }
                | Record::Waiting { .. }
                | Record::Answer { .. }
        ) {
            continue;
        }
        if let Ok(line) = serde_json::to_string(r) {
            h.update(line.as_bytes());
            h.update(b"\n");
        }
    }
    hex::encode(h.finalize())
}

/// The `ts` of the last conversation record before `boundary`.
pub fn last_ts(records: &[Record]) -> Option<&str> {
    records.iter().rev().find_map(|r| match r {
        Record::User { ts, .. }
        | Record::Assistant { ts, .. }
        | Record::ToolResult { ts, .. }
        | Record::Usage { ts, .. } => Some(ts.as_str()),
        Record::Compaction { .. }
        | Record::SessionPrompt { .. }
        | Record::IssueBound { .. }
        | Record::Waiting { .. }
        | Record::Answer { .. } => None,
    })
}

/// The newest compaction record whose coverage still matches the records.
fn latest_valid(records: &[Record]) -> Option<Valid> {
    let starts = turn_starts(records);
    for r in records.iter().rev() {
        let Record::Compaction {
            content,
            covers_through_ts,
            source_hash: hash,
            ..
        } = r
        else {
            continue;
        };
        let hit = starts.iter().find(|&&b| {
            last_ts(&records[..b]) == Some(covers_through_ts.as_str())
                && source_hash(&records[..b]) == *hash
        });
        if let Some(&boundary) = hit {
            return Some(Valid {
                boundary,
                content: content.clone(),
            });
        }
        // A stale summary is skipped; an older one may still be valid.
    }
    None
}

/// Decide what the next call sees. `may_summarize` is false right after a summary was made
/// in this step (never loop on summaries).
pub fn plan(records: &[Record], window: Window, may_summarize: bool) -> Plan {
    let valid = latest_valid(records);
    if let Some(v) = &valid
        && fits(&records[v.boundary..], window)
    {
        return Plan::Ready {
            messages: messages(&records[v.boundary..]),
            summary: Some(v.content.clone()),
        };
    }
    let from = fit(records, window);
    let dropped = turn_starts(&records[..from]).len();
    let covered = valid.as_ref().filter(|v| v.boundary <= from);
    if dropped <= MAX_DROPPED_WITHOUT_SUMMARY || !may_summarize {
        // Drop without a new summary; an earlier valid summary still says what it covers.
        let start = covered.map_or(from, |v| v.boundary.max(from));
        return Plan::Ready {
            messages: messages(&records[start..]),
            summary: covered.map(|v| v.content.clone()),
        };
    }
    let headroom = Window {
        turns: (window.turns / 2).max(1),
        chars: window.chars / 2,
    };
    let boundary = fit(records, headroom).max(from);
    Plan::Summarize {
        boundary,
        previous: valid
            .filter(|v| v.boundary <= boundary)
            .map(|v| (v.boundary, v.content)),
    }
}

/// The text a summary call is given: the previous summary, then the turns after it.
pub fn transcript(
    records: &[Record],
    boundary: usize,
    previous: Option<&(usize, String)>,
) -> String {
    let (start, mut out) = match previous {
        Some((end, text)) => (
            *end,
            format!("Summary of the conversation before this part:\n{text}\n"),
        ),
        None => (0, String::new()),
    };
    out.push_str(&super::show(&records[start..boundary]));
    if out.len() > MAX_TRANSCRIPT_CHARS {
        let mut cut = out.len() - MAX_TRANSCRIPT_CHARS;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("[… earlier part omitted …]\n{}", &out[cut..]);
    }
    out
}

/// How a summary goes into the system prompt (seed 000's wording).
pub fn inject(system: &str, summary: &str) -> String {
    format!("{system}\n\n[Context summary from earlier in this conversation: {summary}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kitbag_llm::{Block, StopReason};

    fn turn(records: &mut Vec<Record>, i: usize) {
        records.push(Record::User {
            content: vec![Block::text(format!("question {i}"))],
            ts: format!("2026-11-25T00:{i:02}:00.000Z"),
            origin: None,
        });
        records.push(Record::Assistant {
            content: vec![Block::text(format!("answer {i}"))],
            stop: StopReason::EndTurn,
            model: "m".into(),
            ts: format!("2026-11-25T00:{i:02}:30.000Z"),
        });
    }

    fn session(turns: usize) -> Vec<Record> {
        let mut r = Vec::new();
        for i in 0..turns {
            turn(&mut r, i);
        }
        r
    }

    const W4: Window = Window {
        turns: 4,
        chars: 1_000_000,
    };

    fn compaction(records: &[Record], boundary: usize, text: &str) -> Record {
        Record::Compaction {
            content: text.into(),
            covers_through_ts: last_ts(&records[..boundary]).expect("ts").into(),
            source_hash: source_hash(&records[..boundary]),
            ts: "2026-11-25T01:00:00.000Z".into(),
        }
    }

    #[test]
    fn five_dropped_turns_are_dropped_and_six_are_summarized() {
        let r = session(9); // 5 dropped with a window of 4
        match plan(&r, W4, true) {
            Plan::Ready { messages, summary } => {
                assert_eq!(messages.len(), 8);
                assert!(summary.is_none());
            }
            other => panic!("{other:?}"),
        }
        let r = session(10); // 6 dropped
        match plan(&r, W4, true) {
            // Down to half the window: the two newest turns stay.
            Plan::Summarize { boundary, previous } => {
                assert_eq!(boundary, 16);
                assert!(previous.is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_summary_is_reused_until_the_window_fills_then_built_on() {
        let mut r = session(10);
        let c = compaction(&r, 16, "S1");
        r.push(c);
        // Reused, with the two newest turns, then with each new turn up to four.
        for extra in 0..3 {
            match plan(&r, W4, true) {
                Plan::Ready { messages, summary } => {
                    assert_eq!(summary.as_deref(), Some("S1"));
                    assert_eq!(messages.len(), 4 + 2 * extra);
                }
                other => panic!("{extra}: {other:?}"),
            }
            turn(&mut r, 10 + extra);
        }
        // Five turns after the summary: a new one, built on S1.
        match plan(&r, W4, true) {
            Plan::Summarize { previous, .. } => {
                assert_eq!(previous, Some((16, "S1".to_string())));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_summary_of_a_changed_history_is_never_used() {
        let mut r = session(10);
        let c = compaction(&r, 16, "S1");
        r.push(c);
        // An early record changed after the summary was made.
        r[2] = Record::User {
            content: vec![Block::text("edited")],
            ts: "2026-11-25T00:01:00.000Z".into(),
            origin: None,
        };
        assert!(matches!(
            plan(&r, W4, true),
            Plan::Summarize { previous: None, .. }
        ));
        // Right after a summary no second one is asked for.
        assert!(matches!(
            plan(&r, W4, false),
            Plan::Ready { summary: None, .. }
        ));
    }

    #[test]
    fn the_transcript_starts_from_the_previous_summary() {
        let r = session(10);
        let t = transcript(&r, 16, Some(&(8, "S1".into())));
        assert!(t.starts_with("Summary of the conversation before this part:\nS1\n"));
        assert!(t.contains("question 4") && t.contains("answer 7"));
        assert!(!t.contains("question 3") && !t.contains("question 8"));
        assert!(
            inject("sys", "S").ends_with("[Context summary from earlier in this conversation: S]")
        );
    }

    /// System prompt, tool specs and messages all count, at four bytes a token.
    #[test]
    fn a_request_is_measured_from_all_it_carries() {
        let tools = vec![ToolSpec {
            name: "t".into(),
            description: "d".repeat(99),
            input_schema: serde_json::json!({}),
        }];
        let messages = vec![Message::user_text("x".repeat(4000))];
        let system = "s".repeat(298);
        assert_eq!(
            measured_tokens(&system, &messages, &tools),
            (298 + 1 + 99 + 2 + 4000) / 4
        );
    }

    #[test]
    fn pruning_clears_all_but_the_two_newest_results() {
        let mut r = Vec::new();
        for i in 0..4 {
            r.push(Record::User {
                content: vec![Block::text(format!("q{i}"))],
                ts: format!("2026-11-25T00:0{i}:00.000Z"),
                origin: None,
            });
            r.push(Record::Assistant {
                content: vec![Block::ToolUse {
                    id: format!("t{i}"),
                    name: "file_read".into(),
                    input: serde_json::json!({}),
                    invalid_input: None,
                }],
                stop: StopReason::ToolUse,
                model: "m".into(),
                ts: format!("2026-11-25T00:0{i}:01.000Z"),
            });
            r.push(Record::ToolResult {
                content: vec![Block::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: vec![kitbag_llm::ResultPart::Text {
                        text: "y".repeat(100),
                    }],
                    is_error: false,
                }],
                ts: format!("2026-11-25T00:0{i}:02.000Z"),
            });
        }
        let mut m = messages(&r);
        let saved = prune_tool_outputs(&mut m);
        assert_eq!(saved, 2 * (100 - CLEARED.len()));
        let texts: Vec<String> = m
            .iter()
            .filter_map(|m| match &m.content[0] {
                Block::ToolResult { content, .. } => match &content[0] {
                    kitbag_llm::ResultPart::Text { text } => Some(text.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(texts[..2], [CLEARED.to_string(), CLEARED.to_string()]);
        assert_eq!(texts[3].len(), 100);
        // Under pressure, everything before the current turn is summarized; with one turn
        // there is nothing to summarize.
        assert!(matches!(
            plan_pressed(&r),
            Some(Plan::Summarize {
                boundary: 9,
                previous: None
            })
        ));
        assert!(plan_pressed(&r[..3]).is_none());
    }
}
