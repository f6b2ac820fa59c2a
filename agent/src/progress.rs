//! What `kitbag run` and `kitbag chat` print on stderr while a turn runs: tool calls with their
//! arguments and outcome, retries, context changes — and on a terminal the streamed text.

use kitbag_llm::StreamEvent;

use super::turn::Note;

pub struct Progress {
    /// Stream the model's text (stderr is a terminal).
    live: bool,
    /// Text was streamed and its line is still open.
    open_line: bool,
}

impl Progress {
    pub fn new(live: bool) -> Self {
        Self {
            live,
            open_line: false,
        }
    }

    pub fn note(&mut self, n: Note<'_>) {
        match n {
            Note::Model(StreamEvent::TextDelta(t)) if self.live => {
                eprint!("{t}");
                self.open_line = true;
            }
            Note::Model(StreamEvent::Retry {
                attempt,
                wait_ms,
                reason,
            }) => {
                self.end_line();
                eprintln!("[model] attempt {attempt} failed ({reason}); retrying in {wait_ms} ms")
            }
            Note::ToolStart { name, input } => {
                self.end_line();
                let shown: String = input.to_string().chars().take(160).collect();
                eprintln!("[tool] {name} {shown}");
            }
            Note::ToolDone { name, ok, elapsed } => eprintln!(
                "[tool] {name} {} in {} ms",
                if ok { "ok" } else { "failed" },
                elapsed.as_millis()
            ),
            Note::Compacted { turns } => {
                self.end_line();
                eprintln!("[context] the {turns} earliest turns were summarized (compaction)")
            }
            Note::Pruned {
                saved_tokens,
                tokens,
                measured,
            } => {
                self.end_line();
                let what = if measured {
                    format!("this call measures ~{tokens} tokens")
                } else {
                    format!("the last call used {tokens} tokens")
                };
                eprintln!(
                    "[context] {what}, near the window: old tool outputs cleared (~{saved_tokens} tokens)"
                )
            }
            Note::IssueNotBound { issue, why } => {
                self.end_line();
                eprintln!("[issue] #{issue} not bound this turn: {why}");
            }
            Note::ResultCut(cut) => {
                self.end_line();
                let place = match &cut.kept {
                    Ok(p) => format!("kept whole in {}", p.display()),
                    Err(e) => format!("not kept: {e}"),
                };
                eprintln!(
                    "[context] a tool result of {} bytes was cut for the model; {place}",
                    cut.bytes
                )
            }
            _ => {}
        }
    }

    /// Close a line of streamed text.
    pub fn end_line(&mut self) {
        if self.open_line {
            eprintln!();
            self.open_line = false;
        }
    }
}
