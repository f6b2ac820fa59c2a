//! One user turn: call the model with the host's tools, run the tools it asks for (in
//! parallel when it asks for several) through the in-process hub — the same routes, policy
//! and audit as served calls — and repeat until it answers. Every step is appended to the
//! session as it happens, so a crash leaves a session the next run resumes.

use std::time::{Duration, Instant};

use kitbag_llm::{Block, Client, Request, ResultPart, StopReason, StreamEvent, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::compaction::{Plan, SUMMARY_PROMPT, inject, last_ts, plan, source_hash, transcript};
use super::convert::{result_parts, tool_spec};
use super::session::{Record, Session, Window, now};
use crate::dispatch::CallMeta;
use crate::serve::HostServer;

/// The settings a turn runs with.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub system: String,
    pub max_tokens: u64,
    pub window: Window,
    /// Model calls per turn before the loop gives up (a model that never stops calling tools).
    pub max_steps: u32,
    pub memory: MemoryInjection,
}

/// What kitbag-memory's `memory_context` block adds to the system prompt (seed 001).
#[derive(Debug, Clone)]
pub struct MemoryInjection {
    /// relevant | recent_only | off.
    pub mode: String,
    pub max_chars: u64,
    pub max_count: u64,
}

/// What happened, for progress output.
#[derive(Debug)]
pub enum Note<'a> {
    Model(StreamEvent<'a>),
    FirstToken(Duration),
    ToolStart {
        name: &'a str,
        input: &'a Value,
    },
    ToolDone {
        name: &'a str,
        ok: bool,
        elapsed: Duration,
    },
    Usage(&'a Usage),
    /// A summary of `turns` earlier turns was made (compaction).
    Compacted {
        turns: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The final answer's text.
    pub text: String,
    pub stop: StopReason,
    pub model_calls: u32,
    pub tool_calls: u32,
    pub usage: Usage,
}

/// Run one turn for `user` (a prompt, or a synthetic message with its `origin`).
#[allow(clippy::too_many_arguments)] // each is a distinct input of a turn; a struct would only rename them
pub async fn run_turn(
    host: &HostServer,
    llm: &Client,
    cfg: &TurnConfig,
    session: &mut Session,
    user: Vec<Block>,
    origin: Option<String>,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<TurnOutcome> {
    session.append(Record::User {
        content: user,
        ts: now(),
        origin,
    })?;
    let memory = memory_block(host, cfg, session).await;
    let mut out = TurnOutcome {
        text: String::new(),
        stop: StopReason::Other,
        model_calls: 0,
        tool_calls: 0,
        usage: Usage::default(),
    };
    for _ in 0..cfg.max_steps {
        // The tool list is read at every step: a host_reload during the turn is seen by the
        // next step.
        let tools = host.tools().iter().map(tool_spec).collect();
        let mut summarized = false;
        let (messages, summary) = loop {
            match plan(&session.records, cfg.window, !summarized) {
                Plan::Ready { messages, summary } => break (messages, summary),
                Plan::Summarize { boundary, previous } => {
                    summarize(
                        llm,
                        session,
                        boundary,
                        previous.as_ref(),
                        &mut out,
                        cancel,
                        note,
                    )
                    .await?;
                    summarized = true;
                }
            }
        };
        let mut system = cfg.system.clone();
        if let Some(m) = &memory {
            system.push_str("\n\n");
            system.push_str(m);
        }
        let request = Request {
            model: llm.endpoint().spec.model.clone(),
            system: match &summary {
                Some(s) => inject(&system, s),
                None => system,
            },
            messages,
            tools,
            max_tokens: cfg.max_tokens,
            temperature: None,
        };
        let asked = Instant::now();
        let mut first = true;
        let mut on_event = |e: StreamEvent<'_>| {
            if first
                && matches!(
                    e,
                    StreamEvent::TextDelta(_) | StreamEvent::ToolUseStart { .. }
                )
            {
                first = false;
                note(Note::FirstToken(asked.elapsed()));
            }
            note(Note::Model(e));
        };
        let streamed = llm.stream(&request, &mut on_event);
        let response = tokio::select! {
            r = streamed => r?,
            _ = cancel.cancelled() => anyhow::bail!("cancelled"),
        };
        out.model_calls += 1;
        out.usage.add(&response.usage);
        note(Note::Usage(&response.usage));
        let model = if response.model.is_empty() {
            request.model.clone()
        } else {
            response.model.clone()
        };
        session.append(Record::Assistant {
            content: response.content.clone(),
            stop: response.stop,
            model: model.clone(),
            ts: now(),
        })?;
        session.append(Record::Usage {
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cache_read: response.usage.cache_read,
            cache_creation: response.usage.cache_creation,
            model,
            ts: now(),
            purpose: None,
        })?;
        out.stop = response.stop;
        out.text = kitbag_llm::types::blocks_text(&response.content);
        let calls: Vec<&Block> = response.tool_uses().collect();
        if calls.is_empty() {
            return Ok(out);
        }
        out.tool_calls += calls.len() as u32;
        let results = run_calls(host, &session.name, &calls, cancel, note).await;
        session.append(Record::ToolResult {
            content: results,
            ts: now(),
        })?;
        if cancel.is_cancelled() {
            anyhow::bail!("cancelled");
        }
    }
    anyhow::bail!(
        "the model was still calling tools after {} model calls; the turn was stopped (the session keeps every step)",
        cfg.max_steps
    )
}

/// The memories block for this turn, from kitbag-memory's `memory_context` when the host
/// offers it (and the policy allows it). Made once per turn, not per step: a system prompt
/// that changed between the steps of a tool loop would void the provider's prompt cache.
async fn memory_block(host: &HostServer, cfg: &TurnConfig, session: &Session) -> Option<String> {
    const TOOL: &str = "memory_context";
    if cfg.memory.mode == "off" || !host.tools().iter().any(|t| t.name == TOOL) {
        return None;
    }
    let query = session.records.iter().rev().find_map(|r| match r {
        Record::User { content, .. } => Some(kitbag_llm::types::blocks_text(content)),
        _ => None,
    })?;
    let mode = if query.trim().is_empty() {
        "recent_only"
    } else {
        cfg.memory.mode.as_str()
    };
    let args = serde_json::json!({
        "query": query.chars().take(1000).collect::<String>(),
        "mode": mode,
        "max_inject_chars": cfg.memory.max_chars,
        "max_inject_count": cfg.memory.max_count,
    });
    let meta = CallMeta {
        request_id: format!("{}/memory_context", session.name),
        progress: None,
        ct: CancellationToken::new(),
    };
    let r = host
        .dispatch(TOOL, args.as_object().cloned(), meta)
        .await
        .ok()?;
    if r.is_error == Some(true) {
        tracing::warn!(result = ?r.content, "memory_context failed; the turn runs without memories");
        return None;
    }
    r.structured_content?["block"]
        .as_str()
        .filter(|b| !b.is_empty())
        .map(str::to_owned)
}

/// One model call that summarizes `records[..boundary]` (from `previous` on), appended as a
/// `compaction` record with its own `usage` record.
async fn summarize(
    llm: &Client,
    session: &mut Session,
    boundary: usize,
    previous: Option<&(usize, String)>,
    out: &mut TurnOutcome,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<()> {
    let records = &session.records;
    let text = transcript(records, boundary, previous);
    let request = Request {
        model: llm.endpoint().spec.model.clone(),
        system: "You write short, faithful summaries of an agent's conversation with its user, for the agent to continue from.".into(),
        messages: vec![kitbag_llm::Message::user_text(format!(
            "{text}\n\n{SUMMARY_PROMPT}"
        ))],
        tools: Vec::new(),
        max_tokens: 1024,
        temperature: None,
    };
    let covers_through_ts = last_ts(&records[..boundary]).unwrap_or_default().to_owned();
    let hash = source_hash(&records[..boundary]);
    let turns = super::session::turn_starts(&records[..boundary]).len();
    let mut on_event = |e: StreamEvent<'_>| {
        if matches!(e, StreamEvent::Retry { .. }) {
            note(Note::Model(e));
        }
    };
    let response = tokio::select! {
        r = llm.stream(&request, &mut on_event) => r?,
        _ = cancel.cancelled() => anyhow::bail!("cancelled"),
    };
    out.model_calls += 1;
    out.usage.add(&response.usage);
    let summary = kitbag_llm::types::blocks_text(&response.content);
    if summary.trim().is_empty() {
        anyhow::bail!("the model returned an empty summary of the earlier turns");
    }
    session.append(Record::Compaction {
        content: summary,
        covers_through_ts,
        source_hash: hash,
        ts: now(),
    })?;
    session.append(Record::Usage {
        input_tokens: response.usage.input_tokens,
        output_tokens: response.usage.output_tokens,
        cache_read: response.usage.cache_read,
        cache_creation: response.usage.cache_creation,
        model: if response.model.is_empty() {
            request.model
        } else {
            response.model
        },
        ts: now(),
        purpose: Some("compaction".into()),
    })?;
    note(Note::Compacted { turns });
    Ok(())
}

/// Run the calls concurrently; results come back in the order the model asked.
async fn run_calls(
    host: &HostServer,
    session: &str,
    calls: &[&Block],
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> Vec<Block> {
    for c in calls {
        if let Block::ToolUse { name, input, .. } = c {
            note(Note::ToolStart { name, input });
        }
    }
    let futures = calls.iter().map(|c| async move {
        let started = Instant::now();
        let Block::ToolUse {
            id,
            name,
            input,
            invalid_input,
        } = c
        else {
            unreachable!("only tool_use blocks are passed")
        };
        let (parts, is_error) = match invalid_input {
            Some(raw) => (
                vec![ResultPart::Text {
                    text: format!(
                        "error [invalid_params]: the arguments were not a JSON object (cut off?), so the tool was not run: {}",
                        prefix(raw, 200)
                    ),
                }],
                true,
            ),
            None => call_one(host, session, id, name, input, cancel).await,
        };
        (
            Block::ToolResult {
                tool_use_id: id.clone(),
                content: parts,
                is_error,
            },
            name.as_str(),
            is_error,
            started.elapsed(),
        )
    });
    let done = futures::future::join_all(futures).await;
    done.into_iter()
        .map(|(block, name, is_error, elapsed)| {
            note(Note::ToolDone {
                name,
                ok: !is_error,
                elapsed,
            });
            block
        })
        .collect()
}

async fn call_one(
    host: &HostServer,
    session: &str,
    id: &str,
    name: &str,
    input: &Value,
    cancel: &CancellationToken,
) -> (Vec<ResultPart>, bool) {
    let arguments = match input {
        Value::Object(m) => Some(m.clone()),
        _ => None,
    };
    let meta = CallMeta {
        request_id: format!("{session}/{id}"),
        progress: None,
        ct: cancel.child_token(),
    };
    match host.dispatch(name, arguments, meta).await {
        Ok(r) => result_parts(&r),
        Err(e) => (
            vec![ResultPart::Text {
                text: format!("error [unknown_tool]: {}", e.message),
            }],
            true,
        ),
    }
}

fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
