//! The window: which of a session's records a model call sees, as messages (seed 000:
//! `context_turns`, `context_chars`). compaction.rs decides with it when earlier turns are
//! summarized; session.rs only stores the records.

use kitbag_llm::{Block, Message, Role};

use super::record::Record;

/// How much of the history a model call sees (seed 000: `context_turns`, `context_chars`).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub turns: usize,
    pub chars: usize,
}

/// The conversation a model call sees without compaction (compaction.rs's `plan` is what the
/// loop uses): the most recent whole turns (a turn runs from one user record to the next, so an
/// assistant → tool_use → tool_result chain is never split) within the window; the current
/// turn always. Tool calls that never got a result (a crash while they ran) are answered with
/// an error result so that the history stays valid.
#[cfg(test)]
pub fn context(records: &[Record], window: Window) -> Vec<Message> {
    messages(&records[fit(records, window)..])
}

/// Where the turns a model call sees begin: the index of the earliest user record whose turn
/// and every later one fit the window (the current turn always fits). 0 for no records.
pub fn fit(records: &[Record], window: Window) -> usize {
    let starts = turn_starts(records);
    let Some(&last) = starts.last() else {
        return 0;
    };
    let mut from = last;
    let mut chars = weight(&records[last..]);
    // The current turn counts as the first; each earlier one is taken whole or not at all.
    for (turns, &start) in (2..).zip(starts.iter().rev().skip(1)) {
        let w = weight(&records[start..from]);
        if turns > window.turns || chars + w > window.chars {
            break;
        }
        chars += w;
        from = start;
    }
    from
}

/// Whether `records` (a suffix of a session) fit the window as they are.
pub fn fits(records: &[Record], window: Window) -> bool {
    turn_starts(records).len() <= window.turns && weight(records) <= window.chars
}

/// The index of every user record: where turns begin.
pub fn turn_starts(records: &[Record]) -> Vec<usize> {
    records
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::User { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// The characters a stretch of records costs in the context (text and arguments).
fn weight(records: &[Record]) -> usize {
    records
        .iter()
        .map(|r| match r {
            Record::User { content, .. }
            | Record::Assistant { content, .. }
            | Record::ToolResult { content, .. } => blocks_weight(content),
            _ => 0,
        })
        .sum()
}

/// The characters content blocks cost in the context (text and arguments; an image counts as
/// 1,000).
pub fn blocks_weight(blocks: &[Block]) -> usize {
    blocks.iter().map(block_weight).sum()
}

fn block_weight(b: &Block) -> usize {
    match b {
        Block::Text { text } => text.len(),
        Block::ToolUse { input, .. } => input.to_string().len(),
        Block::ToolResult { content, .. } => content
            .iter()
            .map(|p| match p {
                kitbag_llm::ResultPart::Text { text } => text.len(),
                kitbag_llm::ResultPart::Image { .. } => 1000,
            })
            .sum(),
        Block::Thinking { thinking, .. } => thinking.len(),
        Block::Image { .. } => 1000,
        Block::RedactedThinking { .. } => 100,
    }
}

/// Records to messages, repairing unanswered tool calls.
pub fn messages(records: &[Record]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let close_pending = |pending: &mut Vec<String>, out: &mut Vec<Message>| {
        if pending.is_empty() {
            return;
        }
        let content = pending
            .drain(..)
            .map(|id| Block::ToolResult {
                tool_use_id: id,
                content: vec![kitbag_llm::ResultPart::Text {
                    text: "error [interrupted]: this call did not finish (the agent stopped while it ran); its effects are unknown".into(),
                }],
                is_error: true,
            })
            .collect();
        out.push(Message {
            role: Role::User,
            content,
        });
    };
    for r in records {
        match r {
            Record::User { content, .. } => {
                close_pending(&mut pending, &mut out);
                out.push(Message {
                    role: Role::User,
                    content: content.clone(),
                });
            }
            Record::Assistant { content, .. } => {
                close_pending(&mut pending, &mut out);
                pending = content
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolUse { id, .. } => Some(id.clone()),
                        _ => None,
                    })
                    .collect();
                out.push(Message {
                    role: Role::Assistant,
                    content: content.clone(),
                });
            }
            Record::ToolResult { content, .. } => {
                let mut content = content.clone();
                // Results for calls that were not asked for are dropped (the API refuses them).
                content.retain(|b| match b {
                    Block::ToolResult { tool_use_id, .. } => pending.contains(tool_use_id),
                    _ => true,
                });
                pending.retain(|id| {
                    !content.iter().any(
                        |b| matches!(b, Block::ToolResult { tool_use_id, .. } if tool_use_id == id),
                    )
                });
                close_pending_into(&mut pending, &mut content);
                out.push(Message {
                    role: Role::User,
                    content,
                });
            }
            Record::Usage { .. }
            | Record::Compaction { .. }
            | Record::SessionPrompt { .. }
            | Record::IssueBound { .. }
            | Record::Waiting { .. }
            | Record::Answer { .. } => {}
        }
    }
    close_pending(&mut pending, &mut out);
    out
}

/// Calls still unanswered after a result record get their error result in the same message.
fn close_pending_into(pending: &mut Vec<String>, content: &mut Vec<Block>) {
    for id in pending.drain(..) {
        content.push(Block::ToolResult {
            tool_use_id: id,
            content: vec![kitbag_llm::ResultPart::Text {
                text: "error [interrupted]: this call did not finish; its effects are unknown"
                    .into(),
            }],
            is_error: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::tests::{answer, call, result, user};

    const WIDE: Window = Window {
        turns: 100,
        chars: 1_000_000,
    };

    #[test]
    fn the_window_keeps_whole_recent_turns() {
        let records = vec![
            user("first"),
            call("t1"),
            result("t1", &"x".repeat(500)),
            answer("one"),
            user("second"),
            answer("two"),
            user("third"),
        ];
        let all = context(&records, WIDE);
        assert_eq!(all.len(), 7);
        let two = context(
            &records,
            Window {
                turns: 2,
                chars: 1_000_000,
            },
        );
        assert_eq!(two[0].text(), "second");
        assert_eq!(two.len(), 3);
        // The first turn's 500-char tool result does not fit 100 chars: it goes whole.
        let small = context(
            &records,
            Window {
                turns: 100,
                chars: 100,
            },
        );
        assert_eq!(small[0].text(), "second");
        // The current turn stays even when it alone is over the limit.
        let tiny = context(&records, Window { turns: 1, chars: 1 });
        assert_eq!(tiny.len(), 1);
        assert_eq!(tiny[0].text(), "third");
    }

    #[test]
    fn calls_cut_off_by_a_crash_get_an_error_result() {
        let records = vec![user("go"), call("t1"), user("again")];
        let m = context(&records, WIDE);
        assert_eq!(m.len(), 4);
        match &m[2].content[0] {
            Block::ToolResult {
                tool_use_id,
                is_error,
                ..
            } => {
                assert_eq!(tool_use_id, "t1");
                assert!(*is_error);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m[3].text(), "again");
    }
}
