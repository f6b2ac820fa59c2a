//! `kitbag daemon`: the hub and the loop kept running; every kitbag-cron firing
//! (`notifications/kitbag/cron_fired`) becomes a synthetic user message in the entry's session
//! and runs a turn there, whose answer is appended to that session (seed 001 §4). Firings are
//! taken one at a time, in order. SIGTERM or SIGINT cancels the turn in flight and stops.
//!
//! Inside a kitbag-vm instance kitbag-cron itself holds the keepalive lease while enabled
//! entries exist, so the daemon needs no lease of its own.

use futures::StreamExt;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::PreparedAgent;
use super::record::check_name;
use super::session::Session;
use super::turn::{Note, TurnOutcome, audit, run_turn};
use crate::host::{Heard, ToolHost};

pub const CRON_FIRED: &str = "notifications/kitbag/cron_fired";

/// The part of a `cron_fired` notification the daemon uses.
#[derive(Debug, Deserialize)]
pub struct Firing {
    pub id: String,
    pub session: String,
    pub message: String,
    #[serde(default)]
    pub command: Option<CommandOutcome>,
}

#[derive(Debug, Deserialize)]
pub struct CommandOutcome {
    pub status: String,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub output_tail: String,
}

/// The user message a firing becomes: the entry's message, and its command's outcome when it
/// ran one.
pub fn message(f: &Firing) -> String {
    let mut text = f.message.clone();
    if let Some(c) = &f.command {
        text.push_str(&format!(
            "\n\n[the scheduled command finished: {}{}]",
            c.status,
            c.exit_code
                .map(|e| format!(", exit code {e}"))
                .unwrap_or_default()
        ));
        if !c.output_tail.trim().is_empty() {
            text.push_str(&format!(
                "\nOutput (tail):\n```\n{}\n```",
                c.output_tail.trim_end()
            ));
        }
    }
    text
}

/// The firing a child's notification carries: `None` for other notifications, and for a
/// firing that cannot run (said on stderr).
fn firing_of(server: &str, method: &str, params: serde_json::Value) -> Option<Firing> {
    if method != CRON_FIRED {
        return None;
    }
    let firing: Firing = match serde_json::from_value(params) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("[daemon] a cron_fired notification from {server} was not understood: {e}");
            return None;
        }
    };
    if let Err(e) = check_name(&firing.session) {
        eprintln!("[daemon] cron entry {}: {e}; skipped", firing.id);
        return None;
    }
    Some(firing)
}

/// `queue`: the workflow runs clients trigger while the daemon runs are queued for it (it
/// outlives them) and taken here, every half second between turns.
pub async fn run(
    host: &dyn ToolHost,
    agent: PreparedAgent,
    queue: Option<crate::workflow::Queue>,
) -> anyhow::Result<i32> {
    let PreparedAgent { llm, mut cfg, .. } = agent;
    let root = std::env::current_dir()?;
    // Nobody to ask: a question to the operator pauses that firing's session until
    // `kitbag sessions answer`; the next firing into it resumes the answered turn first.
    let pause = super::pause::PauseOperator::new();
    cfg.pause = Some(pause.clone());
    host.set_operator(Some(pause));
    let mut events = host.notifications();
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        super::wait_for_stop_signal().await;
        on_signal.cancel();
    });
    eprintln!(
        "[daemon] waiting for cron firings (model {}); SIGTERM or Ctrl-C stops",
        llm.endpoint().spec.display()
    );
    // Held while the daemon lives: clients' workflow runs are queued for it meanwhile.
    let (queue, _lease) = match queue.map(|q| (q.runner.store.claim_daemon(), q)) {
        Some((Ok(Some(lease)), q)) => {
            eprintln!("[daemon] takes the workflow runs clients trigger");
            (Some(q), Some(lease))
        }
        Some((Ok(None), _)) => {
            eprintln!("[daemon] another daemon takes this project's workflow runs");
            (None, None)
        }
        Some((Err(e), _)) => {
            eprintln!("[daemon] workflow runs: {}", e.message);
            (None, None)
        }
        None => (None, None),
    };
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = tick.tick(), if queue.is_some() => {
                if let Some(q) = &queue {
                    let n = crate::workflow::take_queued(&q.runner, &(q.declared)());
                    if n > 0 {
                        eprintln!("[daemon] started {n} queued workflow run(s)");
                    }
                }
                continue;
            }
            _ = stop.cancelled() => break,
        };
        let (server, method, params) = match event {
            Some(Heard::Notification {
                server,
                method,
                params,
            }) => (server, method, params),
            Some(Heard::Missed(n)) => {
                eprintln!("[daemon] {n} notifications were missed while a turn ran");
                continue;
            }
            None => break,
        };
        let Some(firing) = firing_of(&server, &method, params) else {
            continue;
        };
        eprintln!(
            "[daemon] {} fired into session {}",
            firing.id, firing.session
        );
        audit(
            host,
            "cron.turn",
            serde_json::json!({"cron_id": firing.id, "session": firing.session}),
        );
        let mut session = match Session::open(&root, &firing.session) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("[daemon] session {}: {e:#}", firing.session);
                continue;
            }
        };
        let started = std::time::Instant::now();
        let mut note = |n: Note<'_>| {
            if let Note::ToolDone { name, ok, elapsed } = n {
                eprintln!(
                    "[daemon] {name} {} in {} ms",
                    if ok { "ok" } else { "failed" },
                    elapsed.as_millis()
                );
            }
        };
        let content = vec![kitbag_llm::Block::text(message(&firing))];
        let origin = Some(format!("cron:{}", firing.id));
        match run_turn(
            host,
            &llm,
            &cfg,
            &mut session,
            content,
            origin,
            &stop,
            &mut note,
        )
        .await
        {
            Ok(TurnOutcome {
                waiting: Some(q), ..
            }) => eprintln!(
                "[daemon] {}: {}",
                firing.id,
                super::pause::how_to_answer(&session.name, &q)
            ),
            Ok(o) => eprintln!(
                "[daemon] {} answered in {:.1} s ({} model calls, {} tool calls): {}",
                firing.id,
                started.elapsed().as_secs_f64(),
                o.model_calls,
                o.tool_calls,
                o.text.lines().next().unwrap_or("")
            ),
            Err(e) if stop.is_cancelled() => {
                eprintln!("[daemon] {}: stopped mid-turn ({e:#})", firing.id);
                break;
            }
            Err(e) => eprintln!("[daemon] {}: {e:#}", firing.id),
        }
    }
    eprintln!("[daemon] stopping");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firing_with_a_command_carries_its_outcome() {
        let f: Firing = serde_json::from_value(serde_json::json!({
            "id": "cron-1", "session": "nightly", "message": "Check the build.",
            "command": {"status": "exited", "exit_code": 2, "output_tail": "error: 3 tests failed\n"},
            "fired_at": "2026-11-25T00:00:00Z"
        }))
        .expect("firing");
        let m = message(&f);
        assert!(
            m.starts_with(
                "Check the build.\n\n[the scheduled command finished: exited, exit code 2]"
            ),
            "{m}"
        );
        assert!(m.ends_with("```\nerror: 3 tests failed\n```"), "{m}");
    }
}
