//! One user turn: call the model with the host's tools, run the tools it asks for (in
//! parallel when it asks for several) through the in-process hub — the same routes, policy
//! and audit as served calls — and repeat until it answers. Every step is appended to the
//! session as it happens, so a crash leaves a session the next run resumes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_llm::{Block, Client, Request, ResultPart, StopReason, StreamEvent, ToolSpec, Usage};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::compaction::{
    BYTES_PER_TOKEN, Plan, SUMMARY_PROMPT, inject, last_ts, measured_tokens, plan, plan_pressed,
    prune_tool_outputs, source_hash, transcript,
};
use super::convert::{result_parts, tool_spec};
use super::overflow::Cut;
use super::packs::Pack;
use super::pause::{self, PauseOperator};
use super::record::{Record, now};
use super::session::Session;
use super::skills::{self, Skill};
use super::todo_reminder;
use super::window::Window;
use crate::host::{Question, ToolHost};

mod resume;
pub use resume::resume_turn;
use resume::{Resume, record_step};

/// The settings a turn runs with.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub system: String,
    pub max_tokens: u64,
    pub window: Window,
    /// Model calls per turn before the loop gives up (a model that never stops calling tools).
    pub max_steps: u32,
    /// Text bytes of one tool result passed to the model and the session (the rest is kept in
    /// the session's results directory).
    pub max_result_bytes: usize,
    pub memory: MemoryInjection,
    /// The model's context window in tokens: when the last call used, or the next one measures,
    /// more than the window less `max_tokens`, old tool outputs are cleared, then earlier turns
    /// summarized.
    pub context_window: Option<u64>,
    /// The agent pack in force (`--agent`), if any.
    pub pack: Option<Pack>,
    /// `.kitbag/prompt.md`: the workspace's own instructions.
    pub workspace_prompt: Option<String>,
    pub skills: Vec<Skill>,
    /// `kitbag run` and `daemon`: a server's question to the operator pauses the session
    /// (`pause.rs`); `None` in a chat, which asks on the terminal.
    pub pause: Option<Arc<PauseOperator>>,
    /// Only tools that change nothing (tier `read`) are offered and run (`kitbag run
    /// --read-only`: subagent jobs).
    pub read_only: bool,
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
    /// Token pressure: old tool outputs were cleared from this call's context.
    Pruned {
        saved_tokens: u64,
        /// The pressure: the last call's reported tokens, or this call's measured estimate
        /// (`measured`), whichever was larger.
        tokens: u64,
        measured: bool,
    },
    /// A tool result was too long for the model: cut, and kept whole in a file.
    ResultCut(&'a Cut),
    /// The session's issue could not be bound this turn (the turn goes on without it).
    IssueNotBound {
        issue: i64,
        why: &'a str,
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
    /// The turn stopped at this question to the operator (the session waits for
    /// `kitbag sessions answer`).
    pub waiting: Option<Question>,
}

/// Run one turn for `user` (a prompt, or a synthetic message with its `origin`).
#[allow(clippy::too_many_arguments)] // each is a distinct input of a turn; a struct would only rename them
pub async fn run_turn(
    host: &dyn ToolHost,
    llm: &Client,
    cfg: &TurnConfig,
    session: &mut Session,
    user: Vec<Block>,
    origin: Option<String>,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<TurnOutcome> {
    // A session stopped for the operator goes on first, once answered.
    if let Some(w) = pause::waiting(&session.records) {
        if w.answer.is_none() {
            anyhow::bail!("{}", pause::how_to_answer(&session.name, &w.question));
        }
        let resumed = resume_turn(host, llm, cfg, session, cancel, note).await?;
        if resumed.waiting.is_some() {
            return Ok(resumed);
        }
    }
    let prompt = kitbag_llm::types::blocks_text(&user);
    session.append(Record::User {
        content: user,
        ts: now(),
        origin,
    })?;
    let turn = Turn {
        host,
        llm,
        cfg,
        cancel,
    };
    steps(&turn, session, &prompt, None, note).await
}

/// What a turn's steps run with.
struct Turn<'a> {
    host: &'a dyn ToolHost,
    llm: &'a Client,
    cfg: &'a TurnConfig,
    cancel: &'a CancellationToken,
}

/// The steps of a turn whose user message (`prompt`) is recorded: model calls and their
/// tool calls until an answer, the step budget, or a question to the operator.
async fn steps(
    turn: &Turn<'_>,
    session: &mut Session,
    prompt: &str,
    resume: Option<Resume>,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<TurnOutcome> {
    let Turn {
        host,
        llm,
        cfg,
        cancel,
    } = *turn;
    let turn_started = Instant::now();
    // The session's issue, bound in kitbag-issues for this turn's `todo` calls (its servers
    // may have restarted since the last turn).
    if let Some(issue) = session.issue()
        && let Err(why) = todo_reminder::bind(host, &session.name, issue).await
    {
        note(Note::IssueNotBound {
            issue,
            why: &why.to_string(),
        });
    }
    // Made once per turn, not per step: a system prompt that changed between the steps of a
    // tool loop would void the provider's prompt cache.
    let mut system = cfg.system.clone();
    for part in [
        cfg.pack.as_ref().map(|p| p.prompt.clone()),
        cfg.pack
            .as_ref()
            .and_then(|p| p.output_schema.as_ref())
            .map(crate::output::instruction),
        cfg.workspace_prompt.clone(),
        session.prompt().map(str::to_owned),
        (!cfg.skills.is_empty()).then(|| {
            let injected = skills::relevant(&cfg.skills, prompt);
            skills::block(&cfg.skills, &injected)
        }),
        memory_block(host, cfg, session).await,
    ]
    .into_iter()
    .flatten()
    .filter(|p| !p.trim().is_empty())
    {
        system.push_str("\n\n");
        system.push_str(&part);
    }
    let mut out = TurnOutcome {
        text: String::new(),
        stop: StopReason::Other,
        model_calls: 0,
        tool_calls: 0,
        usage: Usage::default(),
        waiting: None,
    };
    if let Some(r) = resume {
        let calls: Vec<&Block> = r
            .step
            .iter()
            .filter(|b| matches!(b, Block::ToolUse { id, .. } if r.pending.contains(id)))
            .collect();
        out.tool_calls += calls.len() as u32;
        let results = run_calls(host, cfg, &session.name, &calls, cancel, note).await;
        let order: Vec<&Block> = r.step.iter().collect();
        if let Some(q) = record_step(turn, session, &order, &calls, results, r.done, note)? {
            out.waiting = Some(q);
            return Ok(out);
        }
    }
    let budget = cfg.pack.as_ref().and_then(|p| p.max_tool_calls);
    let mut last_tokens = last_call_tokens(&session.records);
    for _ in 0..cfg.max_steps {
        let spent = budget.is_some_and(|b| out.tool_calls >= b);
        let step = Step {
            system: &system,
            budget_spent: spent,
            last_tokens,
        };
        let request = build_request(host, llm, cfg, session, step, &mut out, cancel, note).await?;
        let response = call_model(host, llm, cfg, &request, cancel, note).await?;
        out.model_calls += 1;
        out.usage.add(&response.usage);
        last_tokens = response.usage.prompt_tokens() + response.usage.output_tokens;
        note(Note::Usage(&response.usage));
        record_response(session, &request, &response)?;
        out.stop = response.stop;
        out.text = kitbag_llm::types::blocks_text(&response.content);
        let calls: Vec<&Block> = response.tool_uses().collect();
        // With the budget spent the model was told not to call tools; if it still did, its
        // text is the best answer there is.
        if calls.is_empty() || spent {
            audit(
                host,
                "perf.complete",
                json!({
                    "session": session.name,
                    "duration_ms": turn_started.elapsed().as_secs_f64() * 1000.0,
                    "model_calls": out.model_calls,
                    "tool_calls": out.tool_calls,
                    "input_tokens": out.usage.input_tokens,
                    "output_tokens": out.usage.output_tokens,
                    "cache_read": out.usage.cache_read,
                    "cache_creation": out.usage.cache_creation,
                }),
            );
            return Ok(out);
        }
        out.tool_calls += calls.len() as u32;
        let results = run_calls(host, cfg, &session.name, &calls, cancel, note).await;
        if let Some(q) = record_step(turn, session, &calls, &calls, results, Vec::new(), note)? {
            out.waiting = Some(q);
            return Ok(out);
        }
        if cancel.is_cancelled() {
            anyhow::bail!("cancelled");
        }
    }
    anyhow::bail!(
        "the model was still calling tools after {} model calls; the turn was stopped (the session keeps every step)",
        cfg.max_steps
    )
}

/// What one step of the loop carries into its request.
struct Step<'a> {
    system: &'a str,
    budget_spent: bool,
    /// Prompt + output tokens of the last model call in this session (0: none yet).
    last_tokens: u64,
}

/// Prompt + output tokens of the session's last turn-step call.
fn last_call_tokens(records: &[Record]) -> u64 {
    records
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::Usage {
                input_tokens,
                output_tokens,
                cache_read,
                cache_creation,
                purpose: None,
                ..
            } => Some(input_tokens + output_tokens + cache_read + cache_creation),
            _ => None,
        })
        .unwrap_or(0)
}

/// The next request: the window of the session (summarizing first when the window needs it,
/// and under token pressure clearing old tool outputs, then summarizing the earlier turns),
/// the tools the policy and the pack allow, and — with the tool budget spent — tools offered
/// but not callable, with a note to answer.
#[allow(clippy::too_many_arguments)]
async fn build_request(
    host: &dyn ToolHost,
    llm: &Client,
    cfg: &TurnConfig,
    session: &mut Session,
    step: Step<'_>,
    out: &mut TurnOutcome,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<Request> {
    // The tool list is read at every step: a host_reload during the turn is seen by the next
    // step.
    let mut tools: Vec<ToolSpec> = host
        .tools()
        .iter()
        .filter(|t| cfg.pack.as_ref().is_none_or(|p| p.allows(&t.name)))
        .filter(|t| !cfg.read_only || reads_only(t))
        .map(tool_spec)
        .collect();
    if !cfg.skills.is_empty() {
        tools.push(skills::tool(&cfg.skills));
    }
    let mut summarized = false;
    let (mut messages, mut summary) = loop {
        match plan(&session.records, cfg.window, !summarized) {
            Plan::Ready { messages, summary } => break (messages, summary),
            Plan::Summarize { boundary, previous } => {
                summarize(llm, session, boundary, previous.as_ref(), out, cancel, note).await?;
                summarized = true;
            }
        }
    };
    let system_with = |summary: &Option<String>| match summary {
        Some(s) => inject(step.system, s),
        None => step.system.to_owned(),
    };
    // The pressure: what the last call reported, or what this one measures — larger when
    // results were added since, or when the model reports too few tokens.
    let measured = measured_tokens(&system_with(&summary), &messages, &tools);
    let tokens = measured.max(step.last_tokens);
    let limit = cfg.context_window.map(|w| w.saturating_sub(cfg.max_tokens));
    if let Some(limit) = limit.filter(|l| tokens > *l) {
        // An estimate, enough to decide whether pruning was enough.
        let saved_tokens = prune_tool_outputs(&mut messages) as u64 / BYTES_PER_TOKEN;
        note(Note::Pruned {
            saved_tokens,
            tokens,
            measured: measured > step.last_tokens,
        });
        if tokens.saturating_sub(saved_tokens) > limit
            && !summarized
            && let Some(Plan::Summarize { boundary, previous }) = plan_pressed(&session.records)
        {
            summarize(llm, session, boundary, previous.as_ref(), out, cancel, note).await?;
            if let Plan::Ready {
                messages: m,
                summary: s,
            } = plan(&session.records, cfg.window, false)
            {
                messages = m;
                summary = s;
                prune_tool_outputs(&mut messages);
            }
        }
    }
    // The open todos ride at the tail, made fresh each step (not kept in the session).
    if let Some(reminder) = todo_reminder::for_step(host, &session.name, &tools, &messages).await {
        todo_reminder::attach(&mut messages, reminder);
    }
    let mut system = system_with(&summary);
    if step.budget_spent {
        system.push_str(&format!(
            "\n\nThe tool-call budget of this agent ({} calls) is spent: answer now with what you have, without calling tools.",
            out.tool_calls
        ));
    }
    Ok(Request {
        model: llm.endpoint().spec.model.clone(),
        system,
        messages,
        tools,
        max_tokens: cfg.max_tokens,
        temperature: cfg.pack.as_ref().and_then(|p| p.temperature),
        no_tool_calls: step.budget_spent,
    })
}

/// One streamed model call, cancellable, logged as `llm.request` and `perf.first_token`.
async fn call_model(
    host: &dyn ToolHost,
    llm: &Client,
    cfg: &TurnConfig,
    request: &Request,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> anyhow::Result<kitbag_llm::Response> {
    let asked = Instant::now();
    let mut first = None;
    let mut on_event = |e: StreamEvent<'_>| {
        if first.is_none()
            && matches!(
                e,
                StreamEvent::TextDelta(_) | StreamEvent::ToolUseStart { .. }
            )
        {
            first = Some(asked.elapsed());
            note(Note::FirstToken(asked.elapsed()));
        }
        note(Note::Model(e));
    };
    let streamed = llm.stream(request, &mut on_event);
    let result = tokio::select! {
        r = streamed => r,
        _ = cancel.cancelled() => anyhow::bail!("cancelled"),
    };
    let agent = cfg.pack.as_ref().map(|p| p.name.clone());
    if let Some(t) = first {
        audit(
            host,
            "perf.first_token",
            json!({"agent": agent, "model": request.model, "ms": t.as_secs_f64() * 1000.0}),
        );
    }
    let chars: usize = request.messages.iter().map(|m| m.text().len()).sum();
    let mut fields = json!({
        "agent": agent,
        "model": request.model,
        "messages": request.messages.len(),
        "message_chars": chars,
        "system_chars": request.system.len(),
        "tools": request.tools.len(),
        "duration_ms": asked.elapsed().as_secs_f64() * 1000.0,
    });
    match &result {
        Ok(r) => {
            fields["ok"] = json!(true);
            fields["stop"] = json!(r.stop);
            fields["usage"] = json!(r.usage);
        }
        Err(e) => {
            fields["ok"] = json!(false);
            fields["error_code"] = json!(e.code());
            fields["error"] = json!(e.to_string());
        }
    }
    audit(host, "llm.request", fields);
    Ok(result?)
}

fn record_response(
    session: &mut Session,
    request: &Request,
    response: &kitbag_llm::Response,
) -> anyhow::Result<()> {
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
    session.append(usage_record(&response.usage, model, None))
}

/// A model call's `usage` record (`purpose` for calls that were not turn steps).
pub(super) fn usage_record(u: &Usage, model: String, purpose: Option<&str>) -> Record {
    Record::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read: u.cache_read,
        cache_creation: u.cache_creation,
        model,
        ts: now(),
        purpose: purpose.map(str::to_owned),
    }
}

/// One line in the host's audit log, when it keeps one (seed 002's logging events).
pub(crate) fn audit(host: &dyn ToolHost, event: &str, fields: serde_json::Value) {
    host.audit(event, fields);
}

/// The memories block for this turn, from kitbag-memory's `memory_context` when the host
/// offers it (and the policy allows it). Made once per turn, not per step: a system prompt
/// that changed between the steps of a tool loop would void the provider's prompt cache.
async fn memory_block(host: &dyn ToolHost, cfg: &TurnConfig, session: &Session) -> Option<String> {
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
    let request_id = format!("{}/memory_context", session.name);
    let r = host
        .call(
            TOOL,
            args.as_object().cloned(),
            request_id,
            CancellationToken::new(),
        )
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
        no_tool_calls: false,
    };
    let covers_through_ts = last_ts(&records[..boundary]).unwrap_or_default().to_owned();
    let hash = source_hash(&records[..boundary]);
    let turns = super::window::turn_starts(&records[..boundary]).len();
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
    let model = if response.model.is_empty() {
        request.model
    } else {
        response.model
    };
    session.append(usage_record(&response.usage, model, Some("compaction")))?;
    note(Note::Compacted { turns });
    Ok(())
}

/// Whether `tool` only reads (tier `read`: kitbag_shared::tier).
fn reads_only(tool: &rmcp::model::Tool) -> bool {
    kitbag_shared::tier::of_tool(tool) == kitbag_shared::tier::Tier::Read
}

/// Run the calls concurrently; results come back in the order the model asked.
async fn run_calls(
    host: &dyn ToolHost,
    cfg: &TurnConfig,
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
        let denied = cfg.pack.as_ref().filter(|p| !p.allows(name) && name != skills::LOAD_TOOL);
        let writes = cfg.read_only
            && name != skills::LOAD_TOOL
            && host.tools().iter().any(|t| t.name == name.as_str() && !reads_only(t));
        let (parts, is_error) = match invalid_input {
            _ if name == skills::LOAD_TOOL && invalid_input.is_none() && !cfg.skills.is_empty() => {
                let (text, is_error) = skills::load(&cfg.skills, input);
                (vec![ResultPart::Text { text }], is_error)
            }
            _ if writes => (
                vec![ResultPart::Text {
                    text: format!(
                        "error [capability_denied]: {name} is not read-only, and this run may only read"
                    ),
                }],
                true,
            ),
            _ if denied.is_some() => (
                vec![ResultPart::Text {
                    text: format!(
                        "error [capability_denied]: {name} is not in agent pack `{}`'s tools",
                        denied.map(|p| p.name.as_str()).unwrap_or_default()
                    ),
                }],
                true,
            ),
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
            if let Block::ToolResult { content, .. } = &block {
                let summary: String = content
                    .iter()
                    .map(|p| match p {
                        ResultPart::Text { text } => text.as_str(),
                        ResultPart::Image { .. } => "[image]",
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
                    .chars()
                    .take(200)
                    .collect();
                audit(
                    host,
                    "tool.result",
                    json!({
                        "session": session,
                        "tool": name,
                        "ok": !is_error,
                        "duration_ms": elapsed.as_secs_f64() * 1000.0,
                        "summary": summary,
                    }),
                );
            }
            block
        })
        .collect()
}

async fn call_one(
    host: &dyn ToolHost,
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
    let request_id = format!("{session}/{id}");
    match host
        .call(name, arguments, request_id, cancel.child_token())
        .await
    {
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
