//! `kitbag chat`: turns read from stdin, one per line, in one session; answers on stdout.
//! Ctrl-C cancels the turn in flight and its tool calls (the session goes on); Ctrl-D,
//! `/exit` or SIGTERM leaves. Lines starting with `/` are commands, never sent to the model
//! (seed 002). On a terminal the line is edited by rustyline with history recall (↑/↓),
//! seeded with the session's earlier prompts.

use std::io::IsTerminal;

use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::progress::Progress;
use super::record::Record;
use super::session::Session;
use super::turn::{Note, run_turn};
use super::{PreparedAgent, prepare_agent, router};
use crate::host::ToolHost;
use kitbag_config::Config;

mod asking;
mod input;
use asking::{Asked, ChatOperator};
use input::{Input, Lines};

/// Who answers the next line: one agent, or the router's choice per line (`--agent auto`).
pub enum Agent {
    Pinned {
        name: Option<String>,
        agent: Box<PreparedAgent>,
    },
    Auto,
}

const HELP: &str = "Commands: /agent [NAME|auto] (show or switch the agent pack), /prompt [TEXT|clear] (show, set or clear this session's prompt), /issue [N|0] (show, bind or unbind this session's issue), /help, /exit. Ctrl-C cancels a turn; Ctrl-D leaves.";

pub async fn run(
    host: &dyn ToolHost,
    mut agent: Agent,
    config: &Config,
    session_name: &str,
    session_prompt: Option<&str>,
    issue: Option<i64>,
) -> anyhow::Result<i32> {
    let root = std::env::current_dir()?;
    let mut session = Session::open(&root, session_name)?;
    if let Some(p) = session_prompt {
        session.set_prompt(p)?;
    }
    if let Some(n) = issue {
        session.set_issue(n)?;
    }
    let live = std::io::stderr().is_terminal();
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    eprintln!(
        "kitbag chat — session {session_name} ({} turns so far), agent {}. /help lists commands; Ctrl-C cancels a turn; Ctrl-D or /exit leaves.",
        session
            .records
            .iter()
            .filter(|r| matches!(r, Record::User { .. }))
            .count(),
        describe(&agent),
    );
    let mut lines = if std::io::stdin().is_terminal() {
        Lines::terminal(earlier_prompts(&session))?
    } else {
        Lines::piped(tokio::io::BufReader::new(tokio::io::stdin()).lines())
    };
    // The servers' questions to the operator are asked here, between the turn's steps.
    let (operator, mut asks) = ChatOperator::new();
    host.set_operator(Some(operator));
    loop {
        let line = tokio::select! {
            l = lines.next() => l?,
            _ = interrupt.recv() => Input::Interrupted,
            _ = terminate.recv() => break,
        };
        let line = match line {
            Input::Line(l) => l,
            Input::Interrupted => {
                eprintln!("(Ctrl-D or /exit leaves)");
                continue;
            }
            Input::Eof => break,
        };
        let prompt = line.trim();
        if prompt.is_empty() {
            continue;
        }
        if let Some(command) = prompt.strip_prefix('/') {
            match command_line(host, config, &mut agent, &mut session, command).await {
                Ok(Flow::Leave) => break,
                Ok(Flow::Next) => {}
                Err(e) => eprintln!("[error] {e:#}"),
            }
            continue;
        }
        let routed;
        let current = match &agent {
            Agent::Pinned { agent, .. } => agent,
            Agent::Auto => match route(host, config, prompt, &mut session).await {
                Ok(Routed::Agent(a)) => {
                    routed = a;
                    &routed
                }
                Ok(Routed::Asked(questions)) => {
                    println!("{questions}");
                    continue;
                }
                Err(e) => {
                    eprintln!("[error] {e:#}");
                    continue;
                }
            },
        };
        let mut io = TurnIo {
            lines: &mut lines,
            asks: &mut asks,
            interrupt: &mut interrupt,
            terminate: &mut terminate,
        };
        if turn(host, current, &mut session, prompt, live, &mut io).await {
            break;
        }
    }
    host.set_operator(None);
    Ok(0)
}

/// What a turn listens to besides its own work: the signals, and the servers' questions to
/// the operator, answered from the chat's lines.
struct TurnIo<'a> {
    lines: &'a mut Lines,
    asks: &'a mut tokio::sync::mpsc::UnboundedReceiver<Asked>,
    interrupt: &'a mut tokio::signal::unix::Signal,
    terminate: &'a mut tokio::signal::unix::Signal,
}

/// One turn, cancelled by Ctrl-C; `true` when SIGTERM asked the chat to end. A server's
/// question to the operator is asked on the terminal meanwhile.
async fn turn(
    host: &dyn ToolHost,
    agent: &PreparedAgent,
    session: &mut Session,
    prompt: &str,
    live: bool,
    io: &mut TurnIo<'_>,
) -> bool {
    let cancel = CancellationToken::new();
    let mut progress = Progress::new(live);
    let mut note = |n: Note<'_>| progress.note(n);
    let content = vec![kitbag_llm::Block::text(prompt)];
    let mut stop = false;
    let outcome = {
        let turn = run_turn(
            host, &agent.llm, &agent.cfg, session, content, None, &cancel, &mut note,
        );
        tokio::pin!(turn);
        loop {
            tokio::select! {
                o = &mut turn => break o,
                Some((question, reply)) = io.asks.recv() => {
                    let _ = reply.send(crate::operator::ask_lines(io.lines, &question).await);
                }
                _ = io.interrupt.recv() => cancel.cancel(),
                _ = io.terminate.recv() => {
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
    stop
}

enum Routed {
    Agent(Box<PreparedAgent>),
    /// The router model's clarifying questions, already recorded as the turn.
    Asked(String),
}

/// `--agent auto`: the router's choice for this line, with its profile's policy in force.
async fn route(
    host: &dyn ToolHost,
    config: &Config,
    prompt: &str,
    session: &mut Session,
) -> anyhow::Result<Routed> {
    let agent = prepare_agent(config, Some("auto"), Some(prompt)).await?;
    set_policy(host, config, agent.policy_agent.as_deref())?;
    if let Some(d) = &agent.decision {
        router::report(host, d, &agent.cfg, prompt, session)?;
        let content = vec![kitbag_llm::Block::text(prompt)];
        if let Some(q) = router::questions_turn(session, content, None, d)? {
            return Ok(Routed::Asked(q));
        }
    }
    Ok(Routed::Agent(Box::new(agent)))
}

/// The agent profile whose policy applies to the host's tools (none: every tool).
fn set_policy(host: &dyn ToolHost, config: &Config, agent: Option<&str>) -> anyhow::Result<()> {
    host.set_policy(kitbag_config::policy::for_agent(config, agent)?);
    Ok(())
}

enum Flow {
    Next,
    Leave,
}

/// A `/command` line.
async fn command_line(
    host: &dyn ToolHost,
    config: &Config,
    agent: &mut Agent,
    session: &mut Session,
    line: &str,
) -> anyhow::Result<Flow> {
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match name {
        "exit" | "quit" => return Ok(Flow::Leave),
        "help" => eprintln!("{HELP}"),
        "agent" if rest.is_empty() => eprintln!("agent: {}", describe(agent)),
        "agent" if rest == "auto" => {
            // The packs are checked now, not at the next line.
            router::load_packs(&std::env::current_dir()?)?;
            set_policy(host, config, None)?;
            *agent = Agent::Auto;
            eprintln!("agent: auto (chosen per message)");
        }
        "agent" => {
            let prepared = prepare_agent(config, Some(rest), None).await?;
            set_policy(host, config, prepared.policy_agent.as_deref())?;
            *agent = Agent::Pinned {
                name: Some(rest.to_owned()),
                agent: Box::new(prepared),
            };
            eprintln!("agent: {rest}");
        }
        "prompt" if rest.is_empty() => match session.prompt() {
            Some(p) => eprintln!("session prompt:\n{p}"),
            None => eprintln!("no session prompt (/prompt TEXT sets one)"),
        },
        "prompt" => {
            let text = if rest == "clear" { "" } else { rest };
            let changed = session.set_prompt(text)?;
            eprintln!(
                "{}",
                match (changed, text.is_empty()) {
                    (false, _) => "session prompt unchanged",
                    (true, true) => "session prompt cleared",
                    (true, false) =>
                        "session prompt set: it joins every later turn's system prompt",
                }
            );
        }
        "issue" if rest.is_empty() => match session.issue() {
            Some(n) => eprintln!("issue: #{n}"),
            None => eprintln!("no issue (/issue N binds one)"),
        },
        "issue" => {
            let Ok(n) = rest.trim_start_matches('#').parse::<i64>() else {
                anyhow::bail!("/issue {rest}: give an issue number (0 unbinds)");
            };
            let changed = session.set_issue(n)?;
            eprintln!(
                "{}",
                match (changed, n) {
                    (false, _) => "issue unchanged".to_string(),
                    (true, 0) => "issue unbound".to_string(),
                    (true, n) => format!(
                        "issue: #{n}, bound every turn; its open todos are shown to the model"
                    ),
                }
            );
        }
        other => anyhow::bail!("/{other}: not a command. {HELP}"),
    }
    Ok(Flow::Next)
}

fn describe(agent: &Agent) -> String {
    match agent {
        Agent::Auto => "auto (chosen per message)".into(),
        Agent::Pinned { name: None, agent } => {
            format!("default, model {}", agent.llm.endpoint().spec.display())
        }
        Agent::Pinned {
            name: Some(n),
            agent,
        } => format!("{n}, model {}", agent.llm.endpoint().spec.display()),
    }
}

/// The session's earlier typed prompts, oldest first, for history recall.
fn earlier_prompts(session: &Session) -> Vec<String> {
    session
        .records
        .iter()
        .filter_map(|r| match r {
            Record::User {
                content,
                origin: None,
                ..
            } => Some(kitbag_llm::types::blocks_text(content)),
            _ => None,
        })
        .filter(|t| !t.trim().is_empty() && !t.contains('\n'))
        .collect()
}
