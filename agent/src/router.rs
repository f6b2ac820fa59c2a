//! `--agent auto` (seed 002): heuristic-first routing. The seed's rules decide most messages
//! at once; only when none does is the router model asked, once, for the seed's JSON-only
//! contract, and its answer is checked against that contract before it is followed. An answer
//! that does not conform, or a router model that is off or fails, falls back to `tool.use`.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_llm::{Client, Endpoint, Limits, Message, Request, Usage};
use serde::Deserialize;

use super::packs::{self, Pack};
use super::record::{Record, now};
use super::session::Session;
use super::turn::{self, TurnConfig};
use crate::host::ToolHost;
use kitbag_config::settings::{Setting, get};

/// The agents seed 002 names. A pack file of the same name gives one its model, tools and
/// prompt; without one it runs as the plain agent.
pub const SEED_AGENTS: [(&str, &str); 5] = [
    (
        "chat.quick",
        "short conversational replies and quick questions",
    ),
    (
        "debug.triage",
        "errors, stack traces, crashes, hangs: find the cause",
    ),
    ("code.arch", "design, architecture and tradeoff questions"),
    ("code.change", "small, concrete edits to named files"),
    ("tool.use", "general tasks that need the tools"),
];

/// What a fallback chooses when no rule decides and the router model gives no usable answer.
pub const FALLBACK_AGENT: &str = "tool.use";

/// Words in the router model's `depth`, `intent` fields (the seed's contract).
const DEPTHS: &[&str] = &["low", "med", "high"];
const INTENTS: &[&str] = &["chat", "question", "debug", "edit", "tool"];

/// The prompt text the router model sees at most (a long paste routes by its beginning).
const ROUTER_INPUT_CHARS: usize = 4000;

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Heuristic,
    Model,
    /// No rule decided and the router model was off, failed or answered outside the contract.
    Fallback,
}

/// What `--agent auto` chose and why (logged as `router.decision`).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The pack used; `None` when the chosen agent has no pack here (the plain agent runs).
    pub agent: Option<String>,
    pub wanted: String,
    pub reason: String,
    pub source: Source,
    /// The router model's narrowing of the pack's tools (a subset; `None` = all of them).
    pub tools_allowed: Option<Vec<String>>,
    /// Clarifying questions the router model asks before anything runs (0–2).
    pub questions: Vec<String>,
    pub intent: Option<String>,
    pub depth: Option<String>,
    pub confidence: Option<f64>,
    pub elapsed: Duration,
    /// The router call's tokens and model, recorded in the session.
    pub usage: Option<(Usage, String)>,
}

impl Decision {
    fn new(wanted: &str, reason: String, source: Source, started: Instant) -> Self {
        Self {
            agent: None,
            wanted: wanted.to_owned(),
            reason,
            source,
            tools_allowed: None,
            questions: Vec::new(),
            intent: None,
            depth: None,
            confidence: None,
            elapsed: started.elapsed(),
            usage: None,
        }
    }
}

/// Seed 002's rules: the agent and why, or `None` when no rule decides.
pub fn heuristic(prompt: &str) -> Option<(&'static str, &'static str)> {
    let p = prompt.to_lowercase();
    let words = p.split_whitespace().count();
    let has = |needles: &[&str]| needles.iter().any(|n| p.contains(n));
    let mentions_file = p.split_whitespace().any(|w| {
        let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '.' && c != '/');
        w.contains('/')
            || w.rsplit_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && (1..=5).contains(&b.len())
                    && b.chars().all(|c| c.is_ascii_alphanumeric())
            })
    });
    if has(&[
        "error",
        "stack trace",
        "traceback",
        "panic",
        "hang",
        "why doesn't",
        "why does not",
        "crash",
    ]) {
        Some(("debug.triage", "mentions an error, a crash or a hang"))
    } else if has(&["design", "architecture", "tradeoff", "trade-off"]) {
        Some(("code.arch", "asks about design or architecture"))
    } else if has(&[
        "add ",
        "fix ",
        "refactor",
        "implement",
        "rename ",
        "change ",
    ]) && mentions_file
    {
        Some(("code.change", "asks for an edit and names a file"))
    } else if words <= 8 {
        Some(("chat.quick", "short and conversational"))
    } else {
        None
    }
}

/// Every pack in `.kitbag/agents/`, checked: a broken pack stops a run before anything starts,
/// whichever agent the router would choose.
pub fn load_packs(root: &Path) -> anyhow::Result<Vec<Pack>> {
    let dir = packs::dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => anyhow::bail!("{}: {e}", dir.display()),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".md"))
                .map(str::to_owned)
        })
        .filter(|n| super::record::check_name(n).is_ok())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        if let Some(mut p) = packs::load(root, &n)? {
            // Routed by file name, as `--agent NAME` is.
            p.name = n;
            out.push(p);
        }
    }
    Ok(out)
}

/// Choose an agent for `prompt`: the seed's rules, else one router model call.
pub async fn decide(packs: &[Pack], settings: &[Setting], prompt: &str) -> Decision {
    let started = Instant::now();
    let mut d = match heuristic(prompt) {
        Some((wanted, reason)) => Decision::new(wanted, reason.into(), Source::Heuristic, started),
        None => ask_model(packs, settings, prompt, started).await,
    };
    d.agent = packs
        .iter()
        .any(|p| p.name == d.wanted)
        .then(|| d.wanted.clone());
    d.elapsed = started.elapsed();
    d
}

/// The router model: `router_model` (`KITBAG_ROUTER_MODEL`), else the agent's own model;
/// `off` for none.
fn router_client(settings: &[Setting]) -> anyhow::Result<Option<Client>> {
    let named = get(settings, "router_model").and_then(|s| s.value.as_str());
    if named.is_some_and(|m| m.trim() == "off") {
        return Ok(None);
    }
    let model = named.or_else(|| get(settings, "model").and_then(|s| s.value.as_str()));
    let endpoint = Endpoint::resolve(model, &|k| std::env::var(k).ok())?;
    let limits = Limits {
        response_timeout: Duration::from_secs(30),
        max_attempts: 2,
        ..Limits::default()
    };
    Ok(Some(Client::new(endpoint, limits)?))
}

async fn ask_model(
    packs: &[Pack],
    settings: &[Setting],
    prompt: &str,
    started: Instant,
) -> Decision {
    let fallback = |why: String| {
        Decision::new(
            FALLBACK_AGENT,
            format!("no rule matched; {why}"),
            Source::Fallback,
            started,
        )
    };
    let client = match router_client(settings) {
        Ok(Some(c)) => c,
        Ok(None) => return fallback("the router model is off".into()),
        Err(e) => return fallback(format!("no router model: {e}")),
    };
    let input: String = prompt.chars().take(ROUTER_INPUT_CHARS).collect();
    let request = Request {
        model: client.endpoint().spec.model.clone(),
        system: router_prompt(packs),
        messages: vec![Message::user_text(input)],
        tools: Vec::new(),
        max_tokens: 400,
        temperature: Some(0.0),
        no_tool_calls: false,
    };
    let response = match client.stream(&request, &mut |_| {}).await {
        Ok(r) => r,
        Err(e) => return fallback(format!("the router model failed: {e}")),
    };
    let model = if response.model.is_empty() {
        request.model
    } else {
        response.model.clone()
    };
    let text = kitbag_llm::types::blocks_text(&response.content);
    let mut d = match parse_answer(&text, packs) {
        Ok(a) => {
            let mut d = Decision::new(
                &a.agent,
                a.reason
                    .unwrap_or_else(|| "the router model's choice".into()),
                Source::Model,
                started,
            );
            d.tools_allowed = a.tools_allowed.filter(|t| !t.is_empty());
            d.questions = a.questions.unwrap_or_default();
            d.intent = a.intent;
            d.depth = a.depth;
            d.confidence = Some(a.confidence);
            d
        }
        Err(e) => fallback(format!("the router model's answer does not conform: {e}")),
    };
    d.usage = Some((response.usage, model));
    d
}

/// The seed's router contract, and the agents to choose from.
fn router_prompt(packs: &[Pack]) -> String {
    let mut agents = String::new();
    for p in packs {
        let about = p
            .description
            .clone()
            .or_else(|| {
                p.prompt
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let tools = p
            .tools
            .as_ref()
            .map(|t| t.join(", "))
            .unwrap_or_else(|| "every tool".into());
        agents.push_str(&format!("- {}: {about} (tools: {tools})\n", p.name));
    }
    for (name, about) in SEED_AGENTS {
        if !packs.iter().any(|p| p.name == name) {
            agents.push_str(&format!("- {name}: {about} (tools: every tool)\n"));
        }
    }
    format!(
        "You are a router: you classify the user's message and choose the agent that should handle it. You do not answer the message.\n\
Answer with one JSON object and nothing else, of this shape:\n\
{{\"agent\": \"<one agent name below>\", \"depth\": \"low|med|high\", \"tools_allowed\": [\"<tool names from the agent's tools>\"], \"intent\": \"chat|question|debug|edit|tool\", \"confidence\": 0.0, \"reason\": \"<short>\", \"questions\": []}}\n\
Rules: default to \"chat.quick\" if uncertain; tools_allowed must be a subset of the chosen agent's tools (empty: all of them); questions holds 0 to 2 clarifying questions, and empty means go ahead.\n\
Agents:\n{agents}"
    )
}

/// The router model's answer, as the seed's contract shapes it.
#[derive(Debug, Deserialize)]
pub struct Answer {
    pub agent: String,
    pub depth: Option<String>,
    pub tools_allowed: Option<Vec<String>>,
    pub intent: Option<String>,
    pub confidence: f64,
    pub reason: Option<String>,
    pub questions: Option<Vec<String>>,
}

/// Why an answer does not conform to the contract.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnswerError {
    #[error("not one JSON object ({0})")]
    NotJson(String),
    #[error("`agent` {got:?} is not one of {accepted}")]
    Agent { got: String, accepted: String },
    #[error("`{field}` {got:?} is not one of {accepted}")]
    Word {
        field: &'static str,
        got: String,
        accepted: String,
    },
    #[error("`confidence` {0} is not from 0 to 1")]
    Confidence(f64),
    #[error("`tools_allowed` {tool:?} is not among {agent}'s tools ({tools})")]
    Tool {
        tool: String,
        agent: String,
        tools: String,
    },
    #[error("`questions`: {0} of them; at most 2")]
    Questions(usize),
}

/// Parse and check the router model's text: one JSON object (a Markdown code fence around it is
/// tolerated), an agent that exists, the seed's words, a confidence from 0 to 1, tools within
/// the agent's, at most two questions.
pub fn parse_answer(text: &str, packs: &[Pack]) -> Result<Answer, AnswerError> {
    let body = text.trim();
    let body = body
        .strip_prefix("```json")
        .or_else(|| body.strip_prefix("```"))
        .and_then(|b| b.trim_end().strip_suffix("```"))
        .unwrap_or(body)
        .trim();
    let a: Answer = serde_json::from_str(body).map_err(|e| AnswerError::NotJson(e.to_string()))?;
    let known = |n: &str| packs.iter().any(|p| p.name == n) || SEED_AGENTS.iter().any(|s| s.0 == n);
    if !known(&a.agent) {
        let mut names: Vec<&str> = packs.iter().map(|p| p.name.as_str()).collect();
        names.extend(SEED_AGENTS.iter().map(|s| s.0));
        names.sort();
        names.dedup();
        return Err(AnswerError::Agent {
            got: a.agent,
            accepted: names.join(", "),
        });
    }
    for (field, value, words) in [("depth", &a.depth, DEPTHS), ("intent", &a.intent, INTENTS)] {
        if let Some(v) = value
            && !words.contains(&v.as_str())
        {
            return Err(AnswerError::Word {
                field,
                got: v.clone(),
                accepted: words.join(", "),
            });
        }
    }
    if !(0.0..=1.0).contains(&a.confidence) {
        return Err(AnswerError::Confidence(a.confidence));
    }
    if let (Some(tools), Some(pack)) = (&a.tools_allowed, packs.iter().find(|p| p.name == a.agent))
        && let Some(t) = tools
            .iter()
            .find(|t| !pack.allows(t) || globset::Glob::new(t).is_err())
    {
        return Err(AnswerError::Tool {
            tool: t.clone(),
            agent: a.agent.clone(),
            tools: pack.tools.clone().unwrap_or_default().join(", "),
        });
    }
    let questions = a.questions.as_ref().map_or(0, Vec::len);
    if questions > 2 {
        return Err(AnswerError::Questions(questions));
    }
    Ok(a)
}

/// Say what was chosen (stderr, and `router.decision` in the audit log, with a short summary
/// of the input and the time taken) and record the router call's tokens in the session.
pub fn report(
    host: &dyn ToolHost,
    d: &Decision,
    cfg: &TurnConfig,
    prompt: &str,
    session: &mut Session,
) -> anyhow::Result<()> {
    eprintln!(
        "[router] {} ({}){}",
        d.wanted,
        d.reason,
        if d.agent.is_none() {
            "; no such pack here, running without one"
        } else {
            ""
        }
    );
    let input: String = prompt.chars().take(80).collect();
    turn::audit(
        host,
        "router.decision",
        serde_json::json!({
            "agent": d.agent,
            "wanted": d.wanted,
            "reason": d.reason,
            "source": d.source,
            "tools_allowed": cfg.pack.as_ref().and_then(|p| p.tools.clone()),
            "intent": d.intent,
            "depth": d.depth,
            "confidence": d.confidence,
            "questions": d.questions.len(),
            "input": input,
            "input_chars": prompt.chars().count(),
            "duration_ms": d.elapsed.as_secs_f64() * 1000.0,
        }),
    );
    if let Some((usage, model)) = &d.usage {
        session.append(turn::usage_record(usage, model.clone(), Some("router")))?;
    }
    Ok(())
}

/// When the router model asked clarifying questions, they are the turn's answer: the user's
/// message and the questions are recorded, and nothing runs. `None` to go ahead.
pub fn questions_turn(
    session: &mut Session,
    content: Vec<kitbag_llm::Block>,
    origin: Option<String>,
    d: &Decision,
) -> anyhow::Result<Option<String>> {
    if d.questions.is_empty() {
        return Ok(None);
    }
    let text = d.questions.join("\n");
    session.append(Record::User {
        content,
        ts: now(),
        origin,
    })?;
    session.append(Record::Assistant {
        content: vec![kitbag_llm::Block::text(&text)],
        stop: kitbag_llm::StopReason::EndTurn,
        model: d.usage.as_ref().map(|u| u.1.clone()).unwrap_or_default(),
        ts: now(),
    })?;
    Ok(Some(text))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pack(name: &str, tools: Option<&[&str]>) -> Pack {
        Pack {
            name: name.into(),
            tools: tools.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..Pack::default()
        }
    }

    #[test]
    fn the_rules_follow_the_seed_and_leave_the_rest_undecided() {
        let r = |p: &str| heuristic(p).map(|d| d.0);
        assert_eq!(
            r("Why does the server crash with this stack trace?"),
            Some("debug.triage")
        );
        assert_eq!(
            r("What are the tradeoffs of moving cron to SQLite?"),
            Some("code.arch")
        );
        assert_eq!(
            r("Please fix the off-by-one in src/paths.rs where the root is compared"),
            Some("code.change")
        );
        assert_eq!(r("thanks, that helps"), Some("chat.quick"));
        assert_eq!(
            r("Look through the repository and tell me which crates depend on rusqlite and why"),
            None
        );
        // An edit that names no file is not code.change by rule.
        assert_eq!(
            r("please fix the thing we talked about yesterday in the meeting with the team"),
            None
        );
    }

    #[test]
    fn answers_are_checked_against_the_contract() {
        let packs = [
            pack("code.change", Some(&["file_*", "search_grep"])),
            pack("review", None),
        ];
        let ok = parse_answer(
            "```json\n{\"agent\":\"code.change\",\"depth\":\"med\",\"tools_allowed\":[\"file_read\",\"search_grep\"],\"intent\":\"edit\",\"confidence\":0.8,\"reason\":\"an edit\",\"questions\":[]}\n```",
            &packs,
        )
        .unwrap();
        assert_eq!(ok.agent, "code.change");
        assert_eq!(ok.tools_allowed.unwrap(), ["file_read", "search_grep"]);
        // A seed agent without a pack and a pack without a seed name are both choices.
        assert!(parse_answer(r#"{"agent":"debug.triage","confidence":0.5}"#, &packs).is_ok());
        assert!(parse_answer(r#"{"agent":"review","confidence":1}"#, &packs).is_ok());
        let err = |t: &str| parse_answer(t, &packs).unwrap_err();
        assert!(matches!(
            err("I think code.change"),
            AnswerError::NotJson(_)
        ));
        assert!(matches!(
            err(r#"{"agent":"code.change","confidence":0.5} and more"#),
            AnswerError::NotJson(_)
        ));
        assert!(matches!(
            err(r#"{"agent":"code.change"}"#),
            AnswerError::NotJson(_)
        ));
        assert!(
            matches!(err(r#"{"agent":"writer","confidence":0.5}"#), AnswerError::Agent { accepted, .. } if accepted.contains("review") && accepted.contains("tool.use"))
        );
        assert_eq!(
            err(r#"{"agent":"review","confidence":0.5,"depth":"deep"}"#).to_string(),
            "`depth` \"deep\" is not one of low, med, high"
        );
        assert!(matches!(
            err(r#"{"agent":"review","confidence":0.5,"intent":"sing"}"#),
            AnswerError::Word {
                field: "intent",
                ..
            }
        ));
        assert_eq!(
            err(r#"{"agent":"review","confidence":1.5}"#),
            AnswerError::Confidence(1.5)
        );
        assert!(matches!(
            err(r#"{"agent":"code.change","confidence":0.5,"tools_allowed":["shell_bash"]}"#),
            AnswerError::Tool { tool, .. } if tool == "shell_bash"
        ));
        assert_eq!(
            err(r#"{"agent":"review","confidence":0.5,"questions":["a","b","c"]}"#),
            AnswerError::Questions(3)
        );
    }

    #[test]
    fn the_router_prompt_lists_packs_and_the_seed_agents_without_one() {
        let mut p = pack("code.change", Some(&["file_*"]));
        p.description = Some("edits".into());
        let text = router_prompt(&[p]);
        assert!(
            text.contains("- code.change: edits (tools: file_*)"),
            "{text}"
        );
        assert!(
            text.contains("- chat.quick: short conversational"),
            "{text}"
        );
        assert_eq!(text.matches("code.change:").count(), 1);
        assert!(text.contains("default to \"chat.quick\" if uncertain"));
    }
}
