//! A step stopped for the operator, and the turn that goes on once it is answered: the step's
//! results are recorded in the order the model asked for them — or, when a call asked the
//! operator and this loop pauses (`kitbag run`, `daemon`), the `waiting` record instead —
//! and `resume_turn` finishes the stopped step and goes on with the turn (`pause.rs` holds
//! the plain parts).

use kitbag_llm::{Block, Client};
use tokio_util::sync::CancellationToken;

use super::{Note, Turn, TurnConfig, TurnOutcome, steps};
use crate::host::{Question, ToolHost};
use crate::overflow::bound;
use crate::pause;
use crate::record::{Record, now};
use crate::session::Session;

/// Go on with the turn a session stopped at for the operator, now that the answer is
/// recorded: the step's pending calls run again (the question they ask again is answered
/// from the record), then the turn goes on as usual.
pub async fn resume_turn(
    host: &dyn ToolHost,
    llm: &Client,
    cfg: &TurnConfig,
    session: &mut Session,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<TurnOutcome> {
    let Some(w) = pause::waiting(&session.records) else {
        anyhow::bail!("session {} is not waiting for the operator", session.name);
    };
    let Some(answer) = w.answer.clone() else {
        anyhow::bail!("{}", pause::how_to_answer(&session.name, &w.question));
    };
    let Some(pause) = &cfg.pause else {
        anyhow::bail!("this command cannot resume a session waiting for the operator");
    };
    pause.give(answer);
    let (prompt, step) = pause::stopped_step(&session.records);
    let turn = Turn {
        host,
        llm,
        cfg,
        cancel,
    };
    let resume = Resume {
        step,
        pending: w.pending,
        done: w.done,
    };
    steps(&turn, session, &prompt, Some(resume), note).await
}

/// The step a resumed turn finishes first: the assistant message's calls, those to run
/// again, and the results of the others.
pub(super) struct Resume {
    pub(super) step: Vec<Block>,
    pub(super) pending: Vec<String>,
    pub(super) done: Vec<Block>,
}

/// Record a step's results — `results` of the calls `ran`, with `done` (results kept from
/// before a pause), in the order of the step's calls `order` — or, when a call asked the
/// operator and this loop pauses, the `waiting` record instead; then the question is
/// returned.
pub(super) fn record_step(
    turn: &Turn<'_>,
    session: &mut Session,
    order: &[&Block],
    ran: &[&Block],
    results: Vec<Block>,
    done: Vec<Block>,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<Option<Question>> {
    let (results, cuts) = bound(results, turn.cfg.max_result_bytes, session);
    for cut in &cuts {
        note(Note::ResultCut(cut));
    }
    let mut all: Vec<Block> = done.into_iter().chain(results).collect();
    let position = |b: &Block| {
        order.iter().position(|c| {
            matches!((c, b), (Block::ToolUse { id, .. }, Block::ToolResult { tool_use_id, .. }) if id == tool_use_id)
        })
    };
    all.sort_by_key(|b| position(b).unwrap_or(usize::MAX));
    if let Some(question) = turn.cfg.pause.as_ref().and_then(|p| p.take_asked()) {
        let calls: Vec<(String, Option<String>)> = ran
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, name, .. } => Some((id.clone(), turn.host.server_of(name))),
                _ => None,
            })
            .collect();
        session.append(pause::record(question.clone(), &calls, all))?;
        return Ok(Some(question));
    }
    session.append(Record::ToolResult {
        content: all,
        ts: now(),
    })?;
    Ok(None)
}
