//! The host as an agent (issue #18): `kitbag run` sends a prompt to a model with every tool of
//! the hub, runs the tools it asks for in process, and prints its answer; `kitbag sessions`
//! shows what sessions hold.

pub mod chat;
pub mod compaction;
pub mod convert;
pub mod daemon;
pub mod frontmatter;
pub mod host;
pub mod includes;
pub mod json_events;
pub mod operator;
pub mod output;
pub mod overflow;
pub mod packs;
pub mod pause;
pub mod progress;
pub mod record;
pub mod router;
pub mod session;
pub mod session_pg;
pub mod skills;
pub mod todo_reminder;
pub mod turn;
pub mod window;
pub mod workflow;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use base64::Engine;
use kitbag_llm::{Block, Client, Endpoint, Limits};
use tokio_util::sync::CancellationToken;

use crate::host::ToolHost;
use kitbag_config::settings::{Setting, get};
use record::Record;
use session::Session;
use turn::{Note, TurnConfig, TurnOutcome, run_turn};
use window::Window;

/// The system prompt when `system_prompt` is not set.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a capable software agent working in the user's project through the tools you are given. Use the tools to look before you answer; keep changes minimal and say what you changed. The project root is the current directory.";

/// Safety stop: model calls in one turn.
pub const MAX_STEPS: u32 = 100;

fn count(settings: &[Setting], key: &str, default: u64) -> u64 {
    get(settings, key)
        .and_then(|s| s.value.as_u64())
        .unwrap_or(default)
}

pub fn turn_config(settings: &[Setting], pack: Option<packs::Pack>, root: &Path) -> TurnConfig {
    let (mut skills, problems) = skills::load_all(root);
    for p in problems {
        eprintln!("[skills] skipped: {p}");
    }
    // `{file:…}` / `{cmd:…}` made once per run, in every text the prompt is built from.
    let includes = includes::Includes::new(settings, root);
    for s in &mut skills {
        s.body = includes.expand(&s.body, &format!(".kitbag/skills/{}", s.name));
    }
    let mut pack = pack;
    if let Some(p) = &mut pack {
        p.prompt = includes.expand(&p.prompt, &format!(".kitbag/agents/{}.md", p.name));
    }
    let workspace_prompt = std::fs::read_to_string(root.join(".kitbag").join("prompt.md"))
        .ok()
        .filter(|p| !p.trim().is_empty())
        .map(|p| includes.expand(&p, ".kitbag/prompt.md"));
    let history_turns = pack.as_ref().and_then(|p| p.max_history_turns);
    TurnConfig {
        system: get(settings, "system_prompt")
            .and_then(|s| s.value.as_str())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or(DEFAULT_SYSTEM_PROMPT)
            .to_owned(),
        max_tokens: count(settings, "max_tokens", 4096),
        window: Window {
            turns: history_turns.unwrap_or_else(|| count(settings, "context_turns", 50)) as usize,
            chars: count(settings, "context_chars", 24_000) as usize,
        },
        max_steps: MAX_STEPS,
        max_result_bytes: count(
            settings,
            "max_tool_result_bytes",
            kitbag_config::settings::DEFAULT_MAX_TOOL_RESULT_BYTES,
        ) as usize,
        memory: turn::MemoryInjection {
            mode: get(settings, "memory.inject_mode")
                .and_then(|s| s.value.as_str())
                .unwrap_or("relevant")
                .to_owned(),
            max_chars: count(settings, "memory.max_inject_chars", 2048),
            max_count: count(settings, "memory.max_inject_count", 10),
        },
        context_window: get(settings, "context_window").and_then(|s| s.value.as_u64()),
        pack,
        workspace_prompt,
        skills,
        pause: None,
        read_only: false,
    }
}

/// Whether a model can be reached: the `model` setting with its key, or a key that is set
/// (what `kitbag run` would use).
pub fn model_available(settings: &[Setting]) -> bool {
    let model = get(settings, "model").and_then(|s| s.value.as_str());
    Endpoint::resolve(model, &|k| std::env::var(k).ok()).is_ok()
}

/// The model client for the pack's model, else the `model` setting, else the key that is set.
pub fn client(settings: &[Setting], pack: Option<&packs::Pack>) -> anyhow::Result<Client> {
    let model = pack
        .and_then(|p| p.model.as_deref())
        .or_else(|| get(settings, "model").and_then(|s| s.value.as_str()));
    let endpoint = Endpoint::resolve(model, &|k| std::env::var(k).ok())?;
    Ok(Client::new(endpoint, Limits::default())?)
}

/// An image given with `--image`, as a content block.
pub fn image_block(path: &Path) -> anyhow::Result<Block> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let media_type = match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => anyhow::bail!(
            "--image {}: not an image this host sends; accepted: .png, .jpg, .jpeg, .gif, .webp",
            path.display()
        ),
    };
    let bytes =
        std::fs::read(path).map_err(|e| anyhow::anyhow!("--image {}: {e}", path.display()))?;
    // The providers' own limit is about 5 MB per image.
    if bytes.len() > 5 << 20 {
        anyhow::bail!(
            "--image {}: {} bytes; at most 5 MiB",
            path.display(),
            bytes.len()
        );
    }
    Ok(Block::Image {
        media_type: media_type.into(),
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

/// The model client and turn settings, checked before any server starts: a bad pack or model
/// setting must not cost a fleet of children.
pub struct PreparedAgent {
    llm: Client,
    cfg: TurnConfig,
    /// The agent profile of agent.json whose policy applies (the pack's name when the config
    /// has a profile of that name).
    pub policy_agent: Option<String>,
    decision: Option<router::Decision>,
}

/// A `kitbag run`: the agent, the first message and the session.
pub struct PreparedRun {
    pub agent: PreparedAgent,
    content: Vec<Block>,
    session: String,
    session_prompt: Option<String>,
    /// `--issue`: the issue the session works on from now on (0 unbinds).
    issue: Option<i64>,
    /// `--json`: the turn as JSON lines on stdout (json_events.rs).
    json: bool,
}

impl PreparedRun {
    /// Print the turn as JSON lines (`kitbag run --json`).
    pub fn with_json(mut self, json: bool) -> Self {
        self.json = json;
        self
    }

    /// `--max-steps N`: at most N model calls; `--read-only`: only tools that change nothing.
    pub fn with_bounds(mut self, max_steps: Option<u32>, read_only: bool) -> Self {
        if let Some(n) = max_steps {
            self.agent.cfg.max_steps = n;
        }
        self.agent.cfg.read_only = read_only;
        self
    }

    /// Bind the session to `issue` before the turn (`kitbag run --issue N`; 0 unbinds).
    pub fn with_issue(mut self, issue: Option<i64>) -> Self {
        self.issue = issue;
        self
    }
}

/// `--agent NAME`: the pack `.kitbag/agents/NAME.md` and/or the config's agent profile NAME
/// (its policy); `--agent auto`: a pack chosen for `prompt` by the router (seed 002's rules,
/// else the router model).
pub async fn prepare_agent(
    config: &kitbag_config::Config,
    agent: Option<&str>,
    prompt: Option<&str>,
) -> anyhow::Result<PreparedAgent> {
    let root = std::env::current_dir()?;
    let (pack, decision) = match (agent, prompt) {
        (Some("auto"), Some(prompt)) => {
            let packs = router::load_packs(&root)?;
            let d = router::decide(&packs, &config.settings, prompt).await;
            let mut pack = packs
                .into_iter()
                .find(|p| Some(&p.name) == d.agent.as_ref());
            // The router model's narrowing, checked to be within the pack's tools.
            if let (Some(p), Some(t)) = (&mut pack, &d.tools_allowed) {
                p.tools = Some(t.clone());
            }
            (pack, Some(d))
        }
        (Some("auto"), None) => anyhow::bail!(
            "--agent auto picks a pack per message (kitbag run, kitbag chat); name a pack for the daemon (--agent NAME)"
        ),
        (Some(n), _) => {
            let pack = packs::load(&root, n)?;
            if pack.is_none() && !config.agents.contains_key(n) {
                anyhow::bail!(
                    "--agent {n}: no pack {} and no such agent in the config",
                    packs::dir(&root).join(format!("{n}.md")).display()
                );
            }
            (pack, None)
        }
        (None, _) => (None, None),
    };
    // A pack alone is enough; a profile of the same name adds its policy. Without a pack the
    // profile is the agent.
    let chosen = match &decision {
        Some(d) => d.agent.clone(),
        None => agent.map(str::to_owned),
    };
    let policy_agent = chosen.filter(|n| config.agents.contains_key(n));
    let settings = &config.settings;
    let llm = client(settings, pack.as_ref())?;
    let mut cfg = turn_config(settings, pack, &root);
    // Without a setting, the model's own window.
    cfg.context_window
        .get_or_insert(llm.endpoint().spec.context_window());
    Ok(PreparedAgent {
        llm,
        cfg,
        policy_agent,
        decision,
    })
}

pub async fn prepare_run(
    config: &kitbag_config::Config,
    agent: Option<&str>,
    session_name: &str,
    prompt: &str,
    images: &[PathBuf],
    session_prompt: Option<&str>,
) -> anyhow::Result<PreparedRun> {
    record::check_name(session_name)?;
    if prompt.trim().is_empty() && images.is_empty() {
        anyhow::bail!("PROMPT: empty; say what the agent should do");
    }
    if let Some(p) = session_prompt
        && p.len() > record::MAX_SESSION_PROMPT
    {
        anyhow::bail!(
            "--session-prompt: {} bytes; at most {}",
            p.len(),
            record::MAX_SESSION_PROMPT
        );
    }
    let mut content = Vec::new();
    for p in images {
        content.push(image_block(p)?);
    }
    if !prompt.trim().is_empty() {
        content.push(Block::text(prompt));
    }
    Ok(PreparedRun {
        agent: prepare_agent(config, agent, Some(prompt)).await?,
        content,
        session: session_name.to_owned(),
        session_prompt: session_prompt.map(str::to_owned),
        issue: None,
        json: false,
    })
}

/// `kitbag sessions answer NAME …`: the operator's answer to the question the session stopped
/// at, checked against its form and recorded before any server starts; the run then resumes
/// the turn. `refusal`: `decline` or `cancel` instead of answers.
pub async fn prepare_answer(
    config: &kitbag_config::Config,
    agent: Option<&str>,
    session_name: &str,
    pairs: &[String],
    refusal: Option<&str>,
) -> anyhow::Result<PreparedRun> {
    record::check_name(session_name)?;
    let root = std::env::current_dir()?;
    if !session::exists(&root, session_name)? {
        anyhow::bail!("session {session_name}: no such session");
    }
    let mut session = Session::open(&root, session_name)?;
    let Some(w) = pause::waiting(&session.records) else {
        anyhow::bail!("session {session_name} is not waiting for the operator");
    };
    let answer = pause::answer_of(&w.question, pairs, refusal)
        .map_err(|e| anyhow::anyhow!("{e}\n{}", pause::how_to_answer(session_name, &w.question)))?;
    let agent = prepare_agent(config, agent, None).await?;
    session.append(Record::Answer {
        answer,
        ts: record::now(),
    })?;
    Ok(PreparedRun {
        agent,
        content: Vec::new(),
        session: session_name.to_owned(),
        session_prompt: None,
        issue: None,
        json: false,
    })
}

/// SIGTERM or SIGINT (Ctrl-C), whichever comes first.
pub async fn wait_for_stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Exit code of a `kitbag run` (or `sessions answer`) that stopped at a question to the
/// operator: the session waits for `kitbag sessions answer`.
pub const EXIT_WAITING: i32 = 3;

/// `kitbag run`: one turn, the answer on stdout, progress on stderr. The exit code is 0 for
/// an answer, 1 for an error, 3 ([`EXIT_WAITING`]) when a tool asked the operator: the
/// question and how to answer it are on stdout. Without content (`sessions answer`) the
/// waiting turn resumes.
pub async fn run_command(host: &dyn ToolHost, run: PreparedRun) -> anyhow::Result<i32> {
    let PreparedRun {
        agent:
            PreparedAgent {
                llm,
                mut cfg,
                decision,
                ..
            },
        content,
        session: session_name,
        session_prompt,
        issue,
        json,
    } = run;
    let root = std::env::current_dir()?;
    let mut session = Session::open(&root, &session_name)?;
    if let Some(p) = &session_prompt {
        session.set_prompt(p)?;
    }
    if let Some(n) = issue {
        session.set_issue(n)?;
    }
    if let Some(d) = &decision {
        let prompt = kitbag_llm::types::blocks_text(&content);
        router::report(host, d, &cfg, &prompt, &mut session)?;
        if let Some(questions) = router::questions_turn(&mut session, content.clone(), None, d)? {
            println!("{questions}");
            return Ok(0);
        }
    }
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    // Ctrl-C or SIGTERM cancels the turn and its tool calls; the host then stops its servers.
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        on_signal.cancel();
    });
    let started = std::time::Instant::now();
    let mut progress = progress::Progress::new(std::io::stderr().is_terminal());
    if json {
        json_events::emit(serde_json::json!({
            "type": "start",
            "session": session.name,
            "model": llm.endpoint().spec.model,
        }));
    }
    let mut note = |n: Note<'_>| {
        if json && let Some(event) = json_events::of_note(&n) {
            json_events::emit(event);
        }
        progress.note(n)
    };
    // Nobody to ask here: a question to the operator pauses the session.
    let pause = pause::PauseOperator::new();
    cfg.pause = Some(pause.clone());
    host.set_operator(Some(pause));
    let outcome = if content.is_empty() {
        turn::resume_turn(host, &llm, &cfg, &mut session, &cancel, &mut note).await
    } else {
        run_turn(
            host,
            &llm,
            &cfg,
            &mut session,
            content,
            None,
            &cancel,
            &mut note,
        )
        .await
    };
    // A pack with an output schema: the answer's JSON is checked, and a wrong one corrected
    // once.
    let schema = cfg.pack.as_ref().and_then(|p| p.output_schema.clone());
    let (outcome, output) = match (outcome, schema) {
        (Ok(o), Some(schema)) if o.waiting.is_none() => {
            let (o, checked) = typed_output(
                host,
                &llm,
                &cfg,
                &mut session,
                o,
                &schema,
                &cancel,
                &mut note,
            )
            .await;
            (o, Some(checked))
        }
        (outcome, _) => (outcome, None),
    };
    host.set_operator(None);
    progress.end_line();
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match outcome {
        Ok(TurnOutcome {
            waiting: Some(q), ..
        }) => {
            let how = pause::how_to_answer(&session.name, &q);
            if json {
                json_events::emit(serde_json::json!({
                    "type": "result", "ok": false, "waiting": true, "error": how,
                    "duration_ms": duration_ms,
                }));
            } else {
                println!("{how}");
            }
            Ok(EXIT_WAITING)
        }
        Ok(o) => {
            let output_error = match &output {
                Some(Err(why)) => Some(format!(
                    "the answer does not match the pack's output_schema: {why}"
                )),
                _ => None,
            };
            if json {
                let mut event = serde_json::json!({
                    "type": "result", "ok": output_error.is_none(), "text": o.text,
                    "duration_ms": duration_ms, "steps": o.model_calls, "tool_calls": o.tool_calls,
                });
                if let Some(Ok(v)) = &output {
                    event["output"] = v.clone();
                }
                if let Some(e) = &output_error {
                    event["error"] = serde_json::json!(e);
                }
                json_events::emit(event);
            } else {
                println!("{}", o.text);
            }
            if let Some(e) = &output_error {
                eprintln!("kitbag run: {e}");
            }
            let (total, calls) = session.totals();
            eprintln!(
                "[done] {} model calls, {} tool calls, {:.1} s; tokens in {} (+{} cache read, +{} cache write) out {}; session {} ({} calls, {} tokens in all)",
                o.model_calls,
                o.tool_calls,
                started.elapsed().as_secs_f64(),
                o.usage.input_tokens,
                o.usage.cache_read,
                o.usage.cache_creation,
                o.usage.output_tokens,
                session.name,
                calls,
                total.prompt_tokens() + total.output_tokens
            );
            Ok(if output_error.is_some() { 1 } else { 0 })
        }
        Err(e) => {
            eprintln!("kitbag run: {e:#}");
            if json {
                json_events::emit(serde_json::json!({
                    "type": "result", "ok": false, "error": format!("{e:#}"),
                    "duration_ms": duration_ms,
                }));
            }
            Ok(1)
        }
    }
}

/// The answer's JSON checked against `schema`; when it is missing or wrong, one more turn
/// tells the model why and its new answer is checked again. The outcome counts both turns.
#[allow(clippy::too_many_arguments)] // the turn's own inputs, passed on to the correction
async fn typed_output(
    host: &dyn ToolHost,
    llm: &Client,
    cfg: &TurnConfig,
    session: &mut Session,
    first: TurnOutcome,
    schema: &serde_json::Value,
    cancel: &CancellationToken,
    note: &mut (dyn FnMut(Note<'_>) + Send),
) -> (
    anyhow::Result<TurnOutcome>,
    Result<serde_json::Value, output::OutputError>,
) {
    let why = match output::check(&first.text, schema) {
        Ok(v) => return (Ok(first), Ok(v)),
        Err(why) => why,
    };
    let fix = vec![Block::text(output::correction(&why))];
    match run_turn(host, llm, cfg, session, fix, None, cancel, note).await {
        Ok(mut second) => {
            let checked = output::check(&second.text, schema);
            second.model_calls += first.model_calls;
            second.tool_calls += first.tool_calls;
            second.usage.add(&first.usage);
            (Ok(second), checked)
        }
        Err(e) => (Err(e), Err(why)),
    }
}

/// `kitbag sessions [NAME]`: every session with its turns and tokens, or one as text.
pub fn sessions_command(name: Option<&str>) -> anyhow::Result<i32> {
    let root = std::env::current_dir()?;
    match name {
        None => {
            let all = session::all_totals(&root);
            if all.is_empty() {
                match session_pg::database_url() {
                    Some(_) => println!(
                        "no sessions of workspace {} in the sessions database",
                        session_pg::workspace(&root)
                    ),
                    None => {
                        println!("no sessions in {}", root.join(".kitbag/sessions").display())
                    }
                }
            }
            for s in all {
                println!(
                    "{:<24} {:<10} {:>4} turns {:>5} model calls  in {:>9} (cache read {:>9}, write {:>8})  out {:>8}",
                    s.name,
                    state(&root, &s.name),
                    s.turns,
                    s.model_calls,
                    s.input_tokens,
                    s.cache_read,
                    s.cache_creation,
                    s.output_tokens
                );
            }
            Ok(0)
        }
        Some(n) => {
            if !session::exists(&root, n)? {
                anyhow::bail!("session {n}: no such session");
            }
            let s = Session::open(&root, n)?;
            print!("{}", show(&s.records));
            Ok(0)
        }
    }
}

/// Where a session stands for `kitbag sessions`: `checkpoint` (stopped for the operator's
/// sign-off of a checkpoint), `waiting` (stopped at another question), `answered` (goes on
/// at the next run), else `idle`.
fn state(root: &std::path::Path, name: &str) -> &'static str {
    let waiting = Session::open(root, name)
        .ok()
        .and_then(|s| pause::waiting(&s.records));
    match waiting {
        None => "idle",
        Some(w) if w.answer.is_some() => "answered",
        Some(w) if w.question.checkpoint().is_some() => "checkpoint",
        Some(_) => "waiting",
    }
}

/// A session as readable text.
pub fn show(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records {
        match r {
            Record::User {
                content,
                ts,
                origin,
            } => {
                let from = origin
                    .as_deref()
                    .map(|o| format!(" ({o})"))
                    .unwrap_or_default();
                out.push_str(&format!("\n## user{from} · {ts}\n"));
                push_blocks(&mut out, content);
            }
            Record::Assistant {
                content, model, ts, ..
            } => {
                out.push_str(&format!("\n## assistant · {model} · {ts}\n"));
                push_blocks(&mut out, content);
            }
            Record::ToolResult { content, .. } => push_blocks(&mut out, content),
            Record::Usage {
                input_tokens,
                output_tokens,
                cache_read,
                cache_creation,
                ..
            } => out.push_str(&format!(
                "  (tokens: in {input_tokens}, cache read {cache_read}, cache write {cache_creation}, out {output_tokens})\n"
            )),
            Record::Compaction {
                content,
                covers_through_ts,
                ..
            } => out.push_str(&format!(
                "\n## summary of the conversation through {covers_through_ts}\n{content}\n"
            )),
            Record::SessionPrompt { text, ts } if text.is_empty() => {
                out.push_str(&format!("\n## session prompt cleared · {ts}\n"));
            }
            Record::SessionPrompt { text, ts } => {
                out.push_str(&format!("\n## session prompt · {ts}\n{text}\n"));
            }
            Record::IssueBound { number: 0, ts } => {
                out.push_str(&format!("\n## issue unbound · {ts}\n"));
            }
            Record::IssueBound { number, ts } => {
                out.push_str(&format!("\n## bound to issue #{number} · {ts}\n"));
            }
            Record::Waiting {
                server,
                message,
                key,
                ts,
                ..
            } => {
                let head = match key.as_deref().and_then(|k| k.strip_prefix("checkpoint-")) {
                    Some(id) => format!("stopped at checkpoint {id} for the operator's sign-off"),
                    None => format!("waiting for the operator · {server} asks"),
                };
                out.push_str(&format!("\n## {head} · {ts}\n{message}\n"));
            }
            Record::Answer { answer, ts } => {
                out.push_str(&format!("\n## the operator answered · {ts}\n{answer}\n"));
            }
        }
    }
    out
}

fn push_blocks(out: &mut String, blocks: &[Block]) {
    for b in blocks {
        match b {
            Block::Text { text } => {
                out.push_str(text);
                out.push('\n');
            }
            Block::Image { media_type, .. } => out.push_str(&format!("[image {media_type}]\n")),
            Block::ToolUse { name, input, .. } => {
                out.push_str(&format!("→ {name} {input}\n"));
            }
            Block::ToolResult {
                content, is_error, ..
            } => {
                let text: String = content
                    .iter()
                    .map(|p| match p {
                        kitbag_llm::ResultPart::Text { text } => text.clone(),
                        kitbag_llm::ResultPart::Image { media_type, .. } => {
                            format!("[image {media_type}]")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let shown: String = text.chars().take(400).collect();
                let more = if text.chars().count() > 400 {
                    " …"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "← {}{shown}{more}\n",
                    if *is_error { "error: " } else { "" }
                ));
            }
            Block::Thinking { .. } | Block::RedactedThinking { .. } => {
                out.push_str("[thinking]\n");
            }
        }
    }
}
