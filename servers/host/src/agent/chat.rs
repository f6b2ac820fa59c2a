//! `kitbag chat`: turns read from stdin, one per line, in one session; answers on stdout.
//! Ctrl-C cancels the turn in flight and its tool calls (the session goes on); Ctrl-D,
//! `/exit` or SIGTERM leaves. On a terminal the line is edited by the terminal itself
//! (backspace, Ctrl-U, Ctrl-W); there is no history recall.

use std::io::IsTerminal;

use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::PreparedAgent;
use super::progress::Progress;
use super::session::Session;
use super::turn::{Note, run_turn};
use crate::serve::HostServer;

pub async fn run(
    host: &HostServer,
    agent: PreparedAgent,
    session_name: &str,
) -> anyhow::Result<i32> {
    let PreparedAgent { llm, cfg, .. } = agent;
    let root = std::env::current_dir()?;
    let mut session = Session::open(&root, session_name)?;
    let terminal = std::io::stdin().is_terminal();
    let live = std::io::stderr().is_terminal();
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    eprintln!(
        "kitbag chat — session {session_name} ({} turns so far), model {}. Ctrl-C cancels a turn; Ctrl-D or /exit leaves.",
        session
            .records
            .iter()
            .filter(|r| matches!(r, super::session::Record::User { .. }))
            .count(),
        llm.endpoint().spec.display()
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        if terminal {
            eprint!("> ");
        }
        let line = tokio::select! {
            l = lines.next_line() => l?,
            _ = interrupt.recv() => {
                eprintln!("\n(Ctrl-D or /exit leaves)");
                continue;
            }
            _ = terminate.recv() => break,
        };
        let Some(line) = line else { break };
        let prompt = line.trim();
        if prompt.is_empty() {
            continue;
        }
        if prompt == "/exit" || prompt == "/quit" {
            break;
        }
        let cancel = CancellationToken::new();
        let mut progress = Progress::new(live);
        let mut note = |n: Note<'_>| progress.note(n);
        let content = vec![kitbag_llm::Block::text(prompt)];
        let mut stop = false;
        let outcome = {
            let turn = run_turn(
                host,
                &llm,
                &cfg,
                &mut session,
                content,
                None,
                &cancel,
                &mut note,
            );
            tokio::pin!(turn);
            loop {
                tokio::select! {
                    o = &mut turn => break o,
                    _ = interrupt.recv() => cancel.cancel(),
                    _ = terminate.recv() => {
                        cancel.cancel();
                        stop = true;
                    }
                }
            }
        };
        progress.end_line();
        match outcome {
            Ok(o) => {
                println!("{}", o.text);
                eprintln!(
                    "[{} model calls, {} tool calls; tokens in {} (+{} cached) out {}]",
                    o.model_calls,
                    o.tool_calls,
                    o.usage.input_tokens,
                    o.usage.cache_read,
                    o.usage.output_tokens
                );
            }
            Err(_) if cancel.is_cancelled() => eprintln!("[cancelled]"),
            Err(e) => eprintln!("[error] {e:#}"),
        }
        if stop {
            break;
        }
    }
    Ok(0)
}
