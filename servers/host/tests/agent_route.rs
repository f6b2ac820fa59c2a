//! `--agent auto` with the router model, the session prompt layer, and `kitbag chat`'s
//! commands and history recall (on a real pseudo-terminal), end to end against a loopback
//! model and a real kitbag-files child.

mod agent_common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Received, Reply};
use serde_json::{Value, json};

const LONG_PROMPT: &str =
    "Look through the repository and tell me which crates depend on rusqlite and why";

fn user_texts(r: &Received) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"][0]["text"].as_str().map(str::to_owned))
        .collect()
}

fn packs(dir: &Path) {
    write(
        dir,
        ".kitbag/agents/review.md",
        "---\ndescription: reads code and explains it\ntools: [file_*, host_status]\n---\nExplain what you read.\n",
    );
    write(
        dir,
        ".kitbag/agents/debug.triage.md",
        "---\ntools: [host_status]\n---\nFind the cause.\n",
    );
}

#[test]
fn auto_asks_the_router_model_only_when_no_rule_decides_and_follows_its_checked_answer() {
    let d = project();
    packs(d.path());
    let router_answer = json!({"agent": "review", "depth": "med", "tools_allowed": ["file_read"], "intent": "question", "confidence": 0.85, "reason": "reading code", "questions": []});
    let mock = MockLlm::start(vec![
        Reply::sse(text_sse(&router_answer.to_string())),
        Reply::sse(A_TOOL_USE),
        Reply::sse(A_TEXT),
    ]);
    let audit = d.path().join("audit.jsonl");
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "--audit-log",
            audit.to_str().expect("utf-8"),
            "--agent",
            "auto",
            "run",
            "--session",
            "r",
            LONG_PROMPT,
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello — wörld! 👋\n");
    assert!(
        stderr.contains("[router] review (reading code)"),
        "{stderr}"
    );
    let sent = mock.received();
    assert_eq!(sent.len(), 3);
    // The router call: the contract, the agents, the message, no tools.
    let router_system = sent[0].body["system"].to_string();
    assert!(
        router_system.contains("You are a router"),
        "{router_system}"
    );
    assert!(
        router_system.contains("- review: reads code and explains it (tools: file_*, host_status)"),
        "{router_system}"
    );
    assert!(router_system.contains("- code.change: small, concrete edits"));
    assert!(sent[0].body.get("tools").is_none_or(|t| t == &json!([])));
    assert_eq!(user_texts(&sent[0]), [LONG_PROMPT]);
    // The turn runs with the pack, narrowed to the router's tools_allowed.
    assert_eq!(tool_names(&sent[1]), ["file_read"]);
    assert!(system_text(&sent[1]).contains("Explain what you read."));
    let records = session(d.path(), "r");
    assert_eq!(records[0]["role"], "usage");
    assert_eq!(records[0]["purpose"], "router");
    assert_eq!(
        (&records[0]["input_tokens"], &records[0]["output_tokens"]),
        (&json!(12), &json!(7))
    );
    assert_eq!(
        roles(&records[1..]),
        [
            "user",
            "assistant",
            "usage",
            "tool_result",
            "assistant",
            "usage"
        ]
    );
    let decision = audit_event(&audit, "router.decision");
    assert_eq!(decision["source"], "model");
    assert_eq!(decision["agent"], "review");
    assert_eq!(decision["tools_allowed"], json!(["file_read"]));
    assert_eq!(decision["confidence"], 0.85);
    assert_eq!(decision["intent"], "question");
    assert!(decision["duration_ms"].as_f64().expect("ms") > 0.0);
    assert_eq!(
        decision["input"].as_str().expect("input"),
        &LONG_PROMPT[..LONG_PROMPT.len().min(80)]
    );

    // A rule decides without a router call: the error message goes to debug.triage.
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "--agent",
            "auto",
            "run",
            "why does the build hang after the third crate compiles?",
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("[router] debug.triage"), "{stderr}");
    let sent = mock.received();
    assert_eq!(sent.len(), 1, "no router call");
    assert_eq!(tool_names(&sent[0]), ["host_status"]);
}

#[test]
fn an_answer_outside_the_contract_falls_back_and_off_asks_no_router_model() {
    let d = project();
    packs(d.path());
    for (answer, why) in [
        ("I would pick review.".to_owned(), "not one JSON object"),
        (
            json!({"agent": "review", "confidence": 0.9, "tools_allowed": ["shell_bash"]})
                .to_string(),
            "`tools_allowed` \"shell_bash\" is not among review's tools",
        ),
        (
            json!({"agent": "writer", "confidence": 0.9}).to_string(),
            "`agent` \"writer\" is not one of",
        ),
    ] {
        let mock = MockLlm::start(vec![Reply::sse(text_sse(&answer)), Reply::sse(A_TEXT)]);
        let out = kitbag(
            d.path(),
            &anthropic_env(&mock),
            &["--agent", "auto", "run", LONG_PROMPT],
        );
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(
                "[router] tool.use (no rule matched; the router model's answer does not conform"
            ),
            "{stderr}"
        );
        assert!(stderr.contains(why), "{why}: {stderr}");
        // The plain agent runs (no tool.use pack here): every tool, the file tools among them.
        let sent = mock.received();
        assert_eq!(sent.len(), 2);
        assert!(tool_names(&sent[1]).iter().any(|t| t == "file_write"));
    }
    // `off`: no router call at all.
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.push(("KITBAG_ROUTER_MODEL", "off".into()));
    let out = kitbag(d.path(), &env, &["--agent", "auto", "run", LONG_PROMPT]);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("the router model is off"), "{stderr}");
    assert_eq!(mock.received().len(), 1);
}

/// One OpenAI Chat Completions stream answering `text`.
fn openai_text_sse(text: &str) -> String {
    let chunks = [
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-router","choices":[{"index":0,"delta":{"role":"assistant","content":text},"finish_reason":null}]}),
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-router","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-router","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9,"total_tokens":39}}),
    ];
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

#[test]
fn the_router_model_setting_picks_another_model_and_questions_are_the_answer() {
    let d = project();
    packs(d.path());
    let answer = json!({"agent": "review", "confidence": 0.3, "questions": ["Which workspace: main or the worktree?"]});
    let router = MockLlm::start(vec![Reply::sse(openai_text_sse(&answer.to_string()))]);
    let model = MockLlm::start(vec![]);
    let mut env = anthropic_env(&model);
    env.push(("KITBAG_ROUTER_MODEL", "openai/gpt-router".into()));
    env.push(("OPENAI_API_KEY", "router-key".into()));
    env.push(("OPENAI_BASE_URL", format!("{}/v1", router.url())));
    let out = kitbag(
        d.path(),
        &env,
        &["--agent", "auto", "run", "--session", "q", LONG_PROMPT],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The questions are the answer; nothing else ran.
    assert_eq!(stdout, "Which workspace: main or the worktree?\n");
    assert_eq!(model.received().len(), 0);
    let sent = router.received();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], "gpt-router");
    let records = session(d.path(), "q");
    assert_eq!(roles(&records), ["usage", "user", "assistant"]);
    assert_eq!(records[0]["model"], "gpt-router");
    assert_eq!(records[0]["input_tokens"], 30);
    assert_eq!(
        records[2]["content"][0]["text"],
        "Which workspace: main or the worktree?"
    );
}

#[test]
fn the_session_prompt_follows_the_workspace_prompt_until_cleared() {
    let d = project();
    write(d.path(), ".kitbag/prompt.md", "WORKSPACE RULES apply.\n");
    let mock = MockLlm::start(vec![
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let env = anthropic_env(&mock);
    let run = |args: &[&str]| {
        let out = kitbag(d.path(), &env, args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    };
    run(&[
        "run",
        "--session",
        "p",
        "--session-prompt",
        "Answer in French.",
        "hello",
    ]);
    run(&["run", "--session", "p", "hello again"]);
    run(&["run", "--session", "p", "--session-prompt", "", "and now?"]);
    let sent = mock.received();
    let systems: Vec<String> = sent.iter().map(system_text).collect();
    for s in &systems[..2] {
        let workspace = s.find("WORKSPACE RULES apply.").expect("workspace prompt");
        let own = s.find("Answer in French.").expect("session prompt");
        assert!(workspace < own, "workspace prompt first: {s}");
    }
    assert!(!systems[2].contains("Answer in French."), "{}", systems[2]);
    assert!(systems[2].contains("WORKSPACE RULES apply."));
    let records = session(d.path(), "p");
    let prompts: Vec<&Value> = records
        .iter()
        .filter(|r| r["role"] == "session_prompt")
        .collect();
    assert_eq!(
        prompts.len(),
        2,
        "set once (not again when unchanged), cleared once"
    );
    assert_eq!(prompts[0]["text"], "Answer in French.");
    assert_eq!(prompts[1]["text"], "");
    let shown = kitbag(d.path(), &[], &["sessions", "p"]);
    let shown = text(&shown).0;
    assert!(
        shown.contains("## session prompt ·") && shown.contains("## session prompt cleared"),
        "{shown}"
    );
    // Too long a session prompt stops before any server starts.
    let long = "x".repeat(20_000);
    let out = kitbag(d.path(), &env, &["run", "--session-prompt", &long, "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("--session-prompt: 20000 bytes"));
}

#[test]
fn chat_commands_switch_agents_set_the_session_prompt_and_route_each_line() {
    let d = project();
    packs(d.path());
    let mock = MockLlm::start(vec![
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let mut child = Command::new(bin())
        .current_dir(d.path())
        .args(["--agent", "auto", "chat", "--session", "c"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .envs(anthropic_env(&mock))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chat");
    let lines = "/prompt Be terse.\n/prompt\nwhy does it crash on start?\n/agent review\n/agent\nwhat is in a.txt?\n/nope\n/agent nosuch\n/agent auto\nthanks\n/issue\n/issue 3\n/issue\n/issue x\n/exit\n";
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("chat");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.matches("Hello — wörld! 👋").count(), 3, "{stdout}");
    assert!(stderr.contains("session prompt set"), "{stderr}");
    assert!(stderr.contains("session prompt:\nBe terse."), "{stderr}");
    assert!(stderr.contains("[router] debug.triage"), "{stderr}");
    assert!(stderr.contains("agent: review, model"), "{stderr}");
    assert!(stderr.contains("/nope: not a command"), "{stderr}");
    assert!(stderr.contains("--agent nosuch: no pack"), "{stderr}");
    assert!(stderr.contains("[router] chat.quick"), "{stderr}");
    assert!(stderr.contains("no issue (/issue N binds one)"), "{stderr}");
    assert!(stderr.contains("issue: #3, bound every turn"), "{stderr}");
    assert!(stderr.contains("issue: #3\n"), "{stderr}");
    assert!(
        stderr.contains("/issue x: give an issue number"),
        "{stderr}"
    );
    assert!(
        session(d.path(), "c")
            .iter()
            .any(|r| r["role"] == "issue_bound" && r["number"] == 3),
        "the binding is kept in the session"
    );
    let sent = mock.received();
    assert_eq!(sent.len(), 3, "commands never reach the model");
    assert_eq!(tool_names(&sent[0]), ["host_status"]);
    assert!(system_text(&sent[0]).contains("Be terse."));
    assert!(system_text(&sent[0]).contains("Find the cause."));
    let review = tool_names(&sent[1]);
    assert!(
        review
            .iter()
            .all(|t| t.starts_with("file_") || t == "host_status"),
        "{review:?}"
    );
    assert!(system_text(&sent[1]).contains("Explain what you read."));
    // chat.quick has no pack here: the plain agent, every tool.
    assert!(tool_names(&sent[2]).iter().any(|t| t == "file_write"));
    assert_eq!(
        user_texts(&sent[2]).last().map(String::as_str),
        Some("thanks")
    );
}

/// A pseudo-terminal's output, drained on a thread (a full pty would block the child).
struct Screen {
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Screen {
    fn watch(master: std::fs::File) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().expect("screen").extend_from_slice(&buf[..n]);
            }
        });
        Self { seen }
    }

    /// Wait until the line editor's prompt is drawn after `turns` turns have ended (each
    /// ends with its "[N model calls, …]" line; the editor may redraw its prompt while
    /// editing, so prompts are not counted).
    fn wait_for_prompt(&self, turns: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shown = String::from_utf8_lossy(&self.seen.lock().expect("screen")).into_owned();
            let after = if turns == 0 {
                shown.find("leaves.")
            } else {
                shown
                    .match_indices(" model calls, ")
                    .nth(turns - 1)
                    .map(|(i, _)| i)
            };
            if after.is_some_and(|i| shown[i..].contains("> ")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no prompt after {turns} turns: {shown:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn chat_on_a_terminal_recalls_earlier_lines_and_the_sessions_prompts() {
    let d = project();
    // An earlier run left a prompt in the session: it is in the history from the start.
    write(
        d.path(),
        ".kitbag/sessions/t.jsonl",
        &format!(
            "{}\n",
            json!({"role": "user", "content": [{"type": "text", "text": "earlier question"}], "ts": "2026-11-25T00:00:00.000Z"})
        ),
    );
    let mock = MockLlm::start(vec![
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = std::fs::File::from(pty.slave);
    // A new session whose controlling terminal is the pty, as a login shell would have it.
    let mut child = Command::new("setsid");
    child
        .current_dir(d.path())
        .args(["--ctty", "--wait"])
        .arg(bin())
        .args(["chat", "--session", "t"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .env("TERM", "xterm")
        .envs(anthropic_env(&mock))
        .stdin(slave.try_clone().expect("dup"))
        .stderr(slave)
        .stdout(Stdio::piped());
    let child = child.spawn().expect("spawn chat");
    let mut master = std::fs::File::from(pty.master);
    let screen = Screen::watch(master.try_clone().expect("dup"));
    let mut typed = |keys: &str, turns: usize| {
        screen.wait_for_prompt(turns);
        master.write_all(keys.as_bytes()).expect("type");
    };
    const UP: &str = "\x1b[A";
    typed("first line\r", 0);
    typed(&format!("{UP}\r"), 1); // the line just typed
    typed(&format!("{UP}{UP}\r"), 2); // one further back: the session's earlier prompt
    typed("\x04", 3); // Ctrl-D leaves
    let out = child.wait_with_output().expect("chat");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&screen.seen.lock().expect("screen"))
    );
    let sent = mock.received();
    let last_user: Vec<String> = sent
        .iter()
        .map(|r| user_texts(r).last().cloned().unwrap_or_default())
        .collect();
    assert_eq!(last_user, ["first line", "first line", "earlier question"]);
    // Answers only on stdout; the editor drew on the terminal.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("Hello — wörld! 👋")
            .count(),
        3
    );
}
