//! `agent_delegate` (issue #39 §4) through `kitbag serve`, handing tasks to the real coding
//! CLIs — OpenAI Codex (`codex exec --json`, pinned in testkit/codex) and Claude Code
//! (`claude -p --output-format stream-json`, pinned in testkit/claude) — and to `kitbag run
//! --json`, each pointed at the loopback model stand-in (testkit's `llm_mock`), so the CLIs'
//! real NDJSON is what gets compacted. Every result is checked against the tool's
//! outputSchema by the client; the process table is checked after timeouts, cancellations and
//! a client that leaves mid-task.
//!
//! Needs testkit/codex and testkit/claude's node_modules (installed by `scripts/test` where
//! npm has their native binaries: Linux and macOS on x86_64 and arm64). Under `CI=true` on
//! those platforms their absence fails the tests; elsewhere they skip loudly.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::clients::{require, testkit_dir};
use kitbag_testkit::llm_mock::{
    MockLlm, Reply, anthropic_text, anthropic_tool_call, claude_code_side_calls, responses_call,
    responses_message, responses_stream,
};
use kitbag_testkit::{Era, McpClient, pids_with_cmdline, wait_until};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// Where npm installs the CLIs' native binaries.
const CLI_PLATFORM: bool = cfg!(all(
    any(target_os = "linux", target_os = "macos"),
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// The `.bin` directory of testkit/<dir> when its CLI runs; else skip (or fail under CI).
fn cli_bin_dir(dir: &str, program: &str) -> Option<PathBuf> {
    let bin_dir = testkit_dir(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join("node_modules/.bin");
    let works = std::process::Command::new(bin_dir.join(program))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(bin_dir);
    }
    let why =
        format!("{program} is not installed in testkit/{dir} (run scripts/test, or npm ci there)");
    if CLI_PLATFORM {
        require(false, &why);
    } else {
        eprintln!("\n*** SKIPPED: {why}; npm has no {program} binary for this platform ***\n");
    }
    None
}

fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A project with a file to read.
fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("notes.txt"), "some notes\n").expect("notes");
    d
}

/// `CODEX_HOME` with a config whose model provider is the stand-in.
fn codex_home(d: &Path, mock: &MockLlm) -> PathBuf {
    let home = d.join("codex-home");
    std::fs::create_dir_all(&home).expect("codex home");
    let config = format!(
        "model = \"gpt-5.1-codex\"\nmodel_provider = \"standin\"\n\n\
         [model_providers.standin]\nname = \"stand-in\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n",
        mock.url()
    );
    std::fs::write(home.join("config.toml"), config).expect("config.toml");
    home
}

/// `kitbag serve` in `root`, with `env`.
fn serve(root: &Path, era: Era, env: &[(&str, &str)]) -> McpClient {
    McpClient::spawn_with_env(bin(), &["serve"], root, era, env)
}

/// The progress messages the client received.
fn progress_messages(c: &McpClient) -> Vec<String> {
    c.take_notifications()
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .filter_map(|n| n["params"]["message"].as_str().map(str::to_string))
        .collect()
}

/// The delegation's log, as the result names it.
fn log_of(root: &Path, r: &Value) -> String {
    let rel = r["log_path"].as_str().expect("log_path");
    assert!(rel.starts_with(".kitbag/delegate/"), "{rel}");
    let text = std::fs::read_to_string(root.join(rel)).expect("log");
    assert_eq!(text.len() as u64, r["log_bytes"].as_u64().expect("bytes"));
    text
}

#[test]
fn codex_exec_does_the_task_and_its_stream_is_compacted() {
    let Some(codex) = cli_bin_dir("codex", "codex") else {
        return;
    };
    let d = project();
    let root = d.path().canonicalize().expect("root");
    let patch = "*** Begin Patch\n*** Add File: out.txt\n+hello from codex\n*** End Patch";
    let mock = MockLlm::start(vec![
        Reply::sse(responses_stream(
            &[responses_call(
                "c1",
                "exec_command",
                &json!({"cmd": "cat notes.txt"}),
            )],
            (300, 100, 50),
        )),
        Reply::sse(responses_stream(
            &[responses_call(
                "c2",
                "exec_command",
                &json!({"cmd": format!("apply_patch <<'EOF'\n{patch}\nEOF")}),
            )],
            (300, 100, 50),
        )),
        Reply::sse(responses_stream(
            &[responses_message(
                "Created out.txt after reading notes.txt.",
            )],
            (300, 100, 50),
        )),
    ]);
    let scratch = tempfile::tempdir().expect("scratch");
    let home = codex_home(scratch.path(), &mock);
    let path = path_with(&codex);
    let mut c = serve(
        &root,
        Era::Handshake,
        &[
            ("PATH", &path),
            ("CODEX_HOME", home.to_str().expect("utf8")),
            ("OPENAI_API_KEY", "sk-test"),
        ],
    );
    let task = "Read notes.txt, then write out.txt (codex-delegation-test)";
    let r = c.call_with_progress(
        "agent_delegate",
        json!({"agent": "codex", "task": task}),
        "p1",
    );
    assert!(!r.is_error, "{}", r.text);
    let s = &r.structured;
    assert_eq!(s["outcome"], "succeeded", "{s:#}");
    assert_eq!(s["agent"], "codex");
    assert_eq!(s["exit_code"], 0);
    assert_eq!(s["summary"], "Created out.txt after reading notes.txt.");
    assert_eq!(s["files_read"], json!(["notes.txt"]));
    assert_eq!(s["files_written"], json!(["out.txt"]));
    assert_eq!(
        s["commands"],
        json!([{"command": "cat notes.txt", "exit_code": 0, "ok": true}])
    );
    // Codex reports the turn's whole use once, at its end.
    assert_eq!(
        s["tokens"],
        json!({"input": 900, "cached_input": 300, "output": 150})
    );
    assert_eq!(s["turns"], 1);
    assert!(s["session_id"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).expect("out.txt"),
        "hello from codex\n"
    );
    // The model got the task as the user's message.
    let first = &mock.received()[0];
    assert!(first.path.ends_with("/responses"), "{}", first.path);
    assert!(
        first.body["input"]
            .to_string()
            .contains("codex-delegation-test")
    );
    // The compact text, and the whole stream in the log.
    assert!(
        r.text.starts_with("Codex completed successfully in "),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("Files read: notes.txt\nFiles written: out.txt\nCommands: cat notes.txt"),
        "{}",
        r.text
    );
    let log = log_of(&root, s);
    assert!(log.contains("\"command_execution\"") && log.contains("\"file_change\""));
    let progress = progress_messages(&c);
    assert!(
        progress.contains(&"$ cat notes.txt".to_string()),
        "{progress:?}"
    );
    assert!(
        progress.contains(&"edited out.txt".to_string()),
        "{progress:?}"
    );
    assert!(pids_with_cmdline("codex-delegation-test").is_empty());
}

#[test]
fn claude_code_does_the_task_and_a_denied_write_is_reported() {
    let Some(claude) = cli_bin_dir("claude", "claude") else {
        return;
    };
    let d = project();
    let root = d.path().canonicalize().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    let outside_file = outside.path().join("escape.txt");
    let abs = |rel: &str| root.join(rel).to_string_lossy().into_owned();
    let mock = MockLlm::start(vec![
        Reply::sse(anthropic_tool_call(
            "t1",
            "Read",
            &json!({"file_path": abs("notes.txt")}),
        )),
        Reply::sse(anthropic_tool_call(
            "t2",
            "Write",
            &json!({"file_path": abs("out.txt"), "content": "hello from claude\n"}),
        )),
        Reply::sse(anthropic_tool_call(
            "t3",
            "Bash",
            &json!({"command": "ls", "description": "list"}),
        )),
        Reply::sse(anthropic_tool_call(
            "t4",
            "Write",
            &json!({"file_path": outside_file, "content": "no\n"}),
        )),
        Reply::sse(anthropic_text("Created out.txt after reading notes.txt.")),
    ]);
    mock.side_replies(claude_code_side_calls);
    let home = tempfile::tempdir().expect("home");
    let path = path_with(&claude);
    let url = mock.url();
    let mut c = serve(
        &root,
        Era::Modern,
        &[
            ("PATH", &path),
            ("HOME", home.path().to_str().expect("utf8")),
            ("ANTHROPIC_BASE_URL", &url),
            ("ANTHROPIC_API_KEY", "sk-test"),
            ("DISABLE_AUTOUPDATER", "1"),
        ],
    );
    let r = c.call_with_progress(
        "agent_delegate",
        json!({"agent": "claude", "task": "Read notes.txt and write out.txt (claude-delegation-test)"}),
        "p2",
    );
    assert!(!r.is_error, "{}", r.text);
    let s = &r.structured;
    let log = log_of(&root, s);
    assert_eq!(s["outcome"], "succeeded", "{s:#}");
    assert_eq!(s["summary"], "Created out.txt after reading notes.txt.");
    assert_eq!(s["files_read"], json!(["notes.txt"]), "{log}");
    assert_eq!(s["files_written"], json!(["out.txt"]));
    assert_eq!(s["commands"], json!([{"command": "ls", "ok": true}]));
    assert_eq!(s["turns"], 5);
    assert!(s["cost_usd"].as_f64().is_some(), "{s:#}");
    assert!(s["tokens"]["output"].as_u64() > Some(0), "{s:#}");
    // Claude Code asks before writing outside its directory; nobody answers in -p mode.
    let errors = s["errors"].to_string();
    assert!(errors.contains("escape.txt"), "{errors}");
    assert!(!outside_file.exists());
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).expect("out.txt"),
        "hello from claude\n"
    );
    let turns: Vec<_> = mock
        .received()
        .into_iter()
        .filter(|r| claude_code_side_calls(&r.body).is_none())
        .collect();
    assert_eq!(turns.len(), 5);
    assert!(
        turns[0].body["messages"]
            .to_string()
            .contains("claude-delegation-test")
    );
    assert!(log.lines().count() >= 10, "{log}");
    // The compact text stays small whatever the stream's size.
    assert!(r.text.len() < 2048, "{} bytes: {}", r.text.len(), r.text);
    let progress = progress_messages(&c);
    assert!(
        progress.contains(&"Read notes.txt".to_string()),
        "{progress:?}"
    );
    assert!(progress.contains(&"$ ls".to_string()), "{progress:?}");
    assert!(pids_with_cmdline("claude-delegation-test").is_empty());
}

#[test]
fn a_kitbag_run_does_the_task_in_a_session_of_its_own() {
    let d = project();
    let root = d.path().canonicalize().expect("root");
    let mock = MockLlm::start(vec![
        Reply::sse(anthropic_tool_call(
            "k1",
            "file_read",
            &json!({"path": "notes.txt"}),
        )),
        Reply::sse(anthropic_tool_call(
            "k2",
            "file_write",
            &json!({"path": "out.txt", "content": "hello from kitbag\n"}),
        )),
        Reply::sse(anthropic_text("Wrote out.txt from the notes.")),
    ]);
    let url = mock.url();
    let mut c = serve(
        &root,
        Era::Modern,
        &[
            ("ANTHROPIC_BASE_URL", &url),
            ("ANTHROPIC_API_KEY", "test-key"),
            ("KITBAG_MODEL", "anthropic/claude-test"),
        ],
    );
    let r = c.call_ok(
        "agent_delegate",
        json!({"agent": "kitbag", "task": "Copy the notes' gist into out.txt",
               "model": "anthropic/claude-delegated"}),
    );
    // `model` reached the delegated run.
    assert_eq!(mock.received()[0].body["model"], "claude-delegated");
    let s = &r.structured;
    assert_eq!(s["outcome"], "succeeded", "{s:#}");
    assert_eq!(s["files_read"], json!(["notes.txt"]));
    assert_eq!(s["files_written"], json!(["out.txt"]));
    assert_eq!(s["turns"], 3);
    let session = s["session_id"].as_str().expect("session");
    assert!(session.starts_with("delegate-"), "{session}");
    assert!(
        root.join(format!(".kitbag/sessions/{session}.jsonl"))
            .exists()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).expect("out.txt"),
        "hello from kitbag\n"
    );
    let log = log_of(&root, s);
    assert!(log.starts_with("{\"type\":\"start\""), "{log}");
}

#[test]
fn a_deadline_a_cancellation_and_a_client_that_leaves_stop_the_cli_and_everything_it_started() {
    let Some(codex) = cli_bin_dir("codex", "codex") else {
        return;
    };
    let d = project();
    let root = d.path().canonicalize().expect("root");
    // A model that never answers in time.
    let slow = || {
        Reply::sse(responses_stream(&[responses_message("late")], (1, 0, 1)))
            .after(Duration::from_secs(60))
    };
    let mock = MockLlm::start(vec![slow(), slow(), slow(), slow(), slow(), slow()]);
    let scratch = tempfile::tempdir().expect("scratch");
    let home = codex_home(scratch.path(), &mock);
    let path = path_with(&codex);
    let env = [
        ("PATH", path.as_str()),
        ("CODEX_HOME", home.to_str().expect("utf8")),
        ("OPENAI_API_KEY", "sk-test"),
    ];

    // The deadline.
    let mut c = serve(&root, Era::Handshake, &env);
    let started = Instant::now();
    let r = c.call_ok(
        "agent_delegate",
        json!({"agent": "codex", "task": "slow-delegation-deadline", "timeout_seconds": 2}),
    );
    assert_eq!(r.structured["outcome"], "timed_out", "{:#}", r.structured);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(r.text.contains("timed out"), "{}", r.text);
    assert!(pids_with_cmdline("slow-delegation-deadline").is_empty());

    // A cancellation: the call is dropped and the CLI stopped.
    let id = c.send_request(
        "tools/call",
        json!({"name": "agent_delegate",
               "arguments": {"agent": "codex", "task": "slow-delegation-cancelled"}}),
    );
    wait_until("codex started", 20, || {
        !pids_with_cmdline("slow-delegation-cancelled").is_empty()
    });
    c.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    wait_until("the cancelled CLI gone", 15, || {
        pids_with_cmdline("slow-delegation-cancelled").is_empty()
    });

    // A client that leaves mid-task takes the CLI with it.
    c.send_request(
        "tools/call",
        json!({"name": "agent_delegate",
               "arguments": {"agent": "codex", "task": "slow-delegation-orphan"}}),
    );
    wait_until("codex started", 20, || {
        !pids_with_cmdline("slow-delegation-orphan").is_empty()
    });
    c.shutdown();
    wait_until("the orphaned CLI gone", 15, || {
        pids_with_cmdline("slow-delegation-orphan").is_empty()
    });
}

#[test]
fn bad_input_a_missing_cli_and_a_failing_model_are_typed() {
    let d = project();
    let root = d.path().canonicalize().expect("root");
    // A PATH without any coding CLI.
    let mut c = serve(&root, Era::Handshake, &[("PATH", "/usr/bin:/bin")]);
    let e = c.call_err(
        "agent_delegate",
        json!({"agent": "claude", "task": "x"}),
        "cli_not_found",
    );
    assert!(
        e.text.contains("npm install -g @anthropic-ai/claude-code"),
        "{}",
        e.text
    );
    c.call_err(
        "agent_delegate",
        json!({"agent": "cursor", "task": "x"}),
        "invalid_params",
    );
    // Seed 003's names: the CLI is the name's.
    let e = c.call_err(
        "devtools.claude-agent",
        json!({"task": "x"}),
        "cli_not_found",
    );
    assert!(e.text.contains("Claude Code"), "{}", e.text);
    c.call_err(
        "devtools.cursor-agent",
        json!({"task": "x"}),
        "invalid_params",
    )
    .expect_field("agent");
    c.call_err(
        "agent_delegate",
        json!({"agent": "codex", "task": " "}),
        "invalid_params",
    )
    .expect_field("task");
    c.call_err(
        "agent_delegate",
        json!({"agent": "codex", "task": "x", "cwd": "../../etc"}),
        "invalid_params",
    )
    .expect_field("cwd");
    c.call_err(
        "agent_delegate",
        json!({"agent": "codex", "task": "x", "cwd": "notes.txt"}),
        "invalid_params",
    )
    .expect_field("cwd");
    c.call_err(
        "agent_delegate",
        json!({"agent": "codex", "task": "x", "pack": "reviewer"}),
        "invalid_params",
    )
    .expect_field("pack");
    // Nothing ran: no log was made.
    assert!(!root.join(".kitbag/delegate").exists());
    // An instance that is not there: the vm server's own refusal.
    let e = c.call(
        "agent_delegate",
        json!({"agent": "codex", "task": "x", "instance": "no-such-box"}),
    );
    assert_eq!(e.error_code(), Some("instance_not_found"), "{}", e.text);

    // Claude Code whose model refuses the request: a failure with the model's reason. (A 401
    // it would retry for minutes, telling the caller each retry.)
    let Some(claude) = cli_bin_dir("claude", "claude") else {
        return;
    };
    let refusal = r#"{"type":"error","error":{"type":"invalid_request_error","message":"model: unknown model kitbag-test"}}"#;
    let mock = MockLlm::start(vec![Reply::error(400, refusal); 10]);
    let home = tempfile::tempdir().expect("home");
    let path = path_with(&claude);
    let url = mock.url();
    let mut c = serve(
        &root,
        Era::Handshake,
        &[
            ("PATH", &path),
            ("HOME", home.path().to_str().expect("utf8")),
            ("ANTHROPIC_BASE_URL", &url),
            ("ANTHROPIC_API_KEY", "sk-wrong"),
            ("DISABLE_AUTOUPDATER", "1"),
        ],
    );
    let r = c.call_ok(
        "agent_delegate",
        json!({"agent": "claude", "task": "anything (claude-refused-test)"}),
    );
    let s = &r.structured;
    assert_eq!(s["outcome"], "failed", "{s:#}");
    assert!(
        s["errors"]
            .to_string()
            .contains("unknown model kitbag-test"),
        "{s:#}"
    );
    assert!(pids_with_cmdline("claude-refused-test").is_empty());
}

/// The stand-in model's environment for `kitbag serve` and the `kitbag run` it starts.
fn model_env(mock: &MockLlm) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", mock.url()),
        ("ANTHROPIC_API_KEY", "test-key".into()),
        ("KITBAG_MODEL", "anthropic/claude-test".into()),
    ]
}

fn serve_with(root: &Path, era: Era, env: &[(&'static str, String)]) -> McpClient {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    serve(root, era, &env)
}

fn tool_names_sent(r: &kitbag_testkit::llm_mock::Received) -> Vec<String> {
    r.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn subagent_jobs_run_read_only_in_the_background_and_answer_typed() {
    let d = project();
    let root = d.path().canonicalize().expect("root");
    std::fs::create_dir_all(root.join(".kitbag/agents")).expect("agents");
    std::fs::write(
        root.join(".kitbag/agents/lister.md"),
        "---\nname: lister\noutput_schema: {\"type\": \"object\", \"required\": [\"files\"], \
         \"properties\": {\"files\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}}\n---\n\
         You list files.\n",
    )
    .expect("pack");
    let mock = MockLlm::start(vec![
        // A write, which a read-only job may not make.
        Reply::sse(anthropic_tool_call(
            "j1",
            "file_write",
            &json!({"path": "written.txt", "content": "no\n"}),
        )),
        Reply::sse(anthropic_tool_call(
            "j2",
            "file_read",
            &json!({"path": "notes.txt"}),
        )),
        // JSON of the wrong shape: corrected once.
        Reply::sse(anthropic_text("Read it.\n```json\n{\"files\": [1]}\n```")),
        Reply::sse(anthropic_text("```json\n{\"files\": [\"notes.txt\"]}\n```")),
    ]);
    let env = model_env(&mock);
    let mut c = serve_with(&root, Era::Modern, &env);
    let listed: Vec<String> = c
        .list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    for t in ["agent_job_start", "agent_job_status", "agent_job_result"] {
        assert!(listed.iter().any(|n| n == t), "{t} not in {listed:?}");
    }
    let started = c.call_ok(
        "agent_job_start",
        json!({"pack": "lister", "prompt": "List the files you read (job-test)"}),
    );
    let s = &started.structured;
    assert_eq!(s["state"], "running", "{s:#}");
    assert_eq!(
        (s["read_only"].clone(), s["max_steps"].clone()),
        (json!(true), json!(20))
    );
    let id = s["job_id"].as_str().expect("job_id").to_string();
    let status = c.call_ok("agent_job_status", json!({"job_id": id}));
    assert!(
        ["running", "succeeded"].contains(&status.structured["state"].as_str().unwrap_or("")),
        "{:#}",
        status.structured
    );
    let r = c.call_ok(
        "agent_job_result",
        json!({"job_id": id, "wait_seconds": 60}),
    );
    let s = &r.structured;
    assert_eq!(s["state"], "succeeded", "{s:#}");
    assert_eq!(s["output"], json!({"files": ["notes.txt"]}));
    assert_eq!(s["files_read"], json!(["notes.txt"]));
    assert_eq!(s["files_written"], json!([]));
    assert!(
        s["errors"].to_string().contains("file_write failed"),
        "{s:#}"
    );
    assert_eq!(s["steps"], 4, "{s:#}");
    assert!(!root.join("written.txt").exists());
    // Read-only: the model was offered no tool that changes anything.
    let sent = mock.received();
    let offered = tool_names_sent(&sent[0]);
    assert!(offered.iter().any(|n| n == "file_read"), "{offered:?}");
    for w in [
        "file_write",
        "edit_text",
        "shell_bash",
        "agent_delegate",
        "agent_job_start",
    ] {
        assert!(!offered.iter().any(|n| n == w), "{w} offered: {offered:?}");
    }
    // The pack's schema was in the system prompt, and the correction named the violation.
    assert!(
        sent[0].body["system"].to_string().contains("output_schema")
            || sent[0].body["system"].to_string().contains("JSON Schema")
    );
    assert!(
        sent[3].body["messages"].to_string().contains("/files/0"),
        "{}",
        sent[3].body["messages"]
    );
    // Its session and stream are kept.
    let session = s["session"].as_str().expect("session");
    assert!(
        root.join(format!(".kitbag/sessions/{session}.jsonl"))
            .exists()
    );
    assert!(root.join(s["log_path"].as_str().expect("log")).exists());
    c.call_err(
        "agent_job_status",
        json!({"job_id": "nope"}),
        "job_not_found",
    );
    c.call_err(
        "agent_job_start",
        json!({"prompt": "x", "max_steps": 0}),
        "invalid_params",
    )
    .expect_field("max_steps");
    c.call_err(
        "agent_job_start",
        json!({"prompt": "x", "pack": "missing"}),
        "invalid_params",
    )
    .expect_field("pack");
}

#[test]
fn a_job_is_bounded_in_steps_and_ends_with_its_host() {
    let d = project();
    let root = d.path().canonicalize().expect("root");
    let looping = || {
        Reply::sse(anthropic_tool_call(
            "l",
            "file_read",
            &json!({"path": "notes.txt"}),
        ))
    };
    let mock = MockLlm::start(vec![looping(), looping(), looping()]);
    let env = model_env(&mock);
    let mut c = serve_with(&root, Era::Handshake, &env);
    let s = c.call_ok(
        "agent_job_start",
        json!({"prompt": "Keep reading (job-steps-test)", "max_steps": 2}),
    );
    let id = s.structured["job_id"].as_str().expect("id").to_string();
    let r = c.call_ok(
        "agent_job_result",
        json!({"job_id": id, "wait_seconds": 60}),
    );
    assert_eq!(r.structured["state"], "failed", "{:#}", r.structured);
    assert!(
        r.structured["errors"]
            .to_string()
            .contains("after 2 model calls"),
        "{:#}",
        r.structured
    );
    assert_eq!(mock.received().len(), 2);

    // A job whose model never answers, and a host that leaves: nothing of the job stays.
    mock.push(Reply::sse(anthropic_text("late")).after(Duration::from_secs(60)));
    c.call_ok(
        "agent_job_start",
        json!({"prompt": "Wait for a slow model (job-orphan-test)"}),
    );
    wait_until("the job's kitbag run started", 20, || {
        !pids_with_cmdline("job-orphan-test").is_empty()
    });
    let job_pids: Vec<u32> = pids_with_cmdline("job-orphan-test")
        .into_iter()
        .flat_map(|p| {
            let mut all = kitbag_testkit::child_pids(p);
            all.push(p);
            all
        })
        .collect();
    assert!(!job_pids.is_empty());
    c.shutdown();
    wait_until("the job and its servers gone", 20, || {
        job_pids.iter().all(|p| !kitbag_testkit::process_alive(*p))
    });

    // Without a model the job tools are not offered.
    let mut bare = serve(&root, Era::Handshake, &[("KITBAG_MODEL", "")]);
    let listed: Vec<String> = bare
        .list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    assert!(
        !listed.iter().any(|n| n.starts_with("agent_job")),
        "{listed:?}"
    );
}

/// This machine's own address on its outbound interface (no packet is sent): what a sandbox
/// with `network: "outbound"` reaches the stand-in model at.
fn machine_ip() -> Option<std::net::Ipv4Addr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("10.255.255.255:9").ok()?;
    match s.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

#[test]
fn a_delegation_runs_inside_an_instance_and_its_stream_comes_home() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let slirp = std::process::Command::new("slirp4netns")
        .arg("--version")
        .output()
        .is_ok();
    let ip = machine_ip();
    let Some(ip) = ip.filter(|_| slirp) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "slirp4netns and an outbound interface are needed under CI=true (slirp4netns: {slirp}, address: {ip:?})"
        );
        eprintln!("SKIP: no slirp4netns or no outbound interface");
        return;
    };
    let d = project();
    let root = d.path().canonicalize().expect("root");
    // kitbag itself, mounted read-only into the instance (linked: the debug binary is large).
    std::fs::create_dir_all(root.join("kb")).expect("kb");
    if std::fs::hard_link(bin(), root.join("kb/kitbag")).is_err() {
        std::fs::copy(bin(), root.join("kb/kitbag")).expect("copy kitbag");
    }
    let mock = MockLlm::start_on(
        ip,
        vec![
            Reply::sse(anthropic_tool_call(
                "g1",
                "file_write",
                &json!({"path": "made-inside.txt", "content": "from the instance\n"}),
            )),
            Reply::sse(anthropic_text("Wrote made-inside.txt in the instance.")),
        ],
    );
    let mut c = serve(&root, Era::Handshake, &[]);
    let spawned = c.call_ok(
        "instance_spawn",
        json!({
            "name": "delegate-box",
            "network": "outbound",
            "mounts": [{"host": "kb", "guest": "/kb", "mode": "ro"}],
            "env": {
                "PATH": "/kb:/usr/local/bin:/usr/bin:/bin",
                "ANTHROPIC_BASE_URL": mock.url(),
                // The key names the provider (KITBAG_* is the instance's own namespace).
                "ANTHROPIC_API_KEY": "test-key",
            },
        }),
    );
    let id = spawned.structured["id"].as_str().expect("id").to_string();
    let r = c.call_with_progress(
        "agent_delegate",
        json!({"agent": "kitbag", "task": "Write a file (instance-delegation-test)", "instance": id,
               "model": "anthropic/claude-inside"}),
        "p3",
    );
    assert!(!r.is_error, "{}", r.text);
    let s = &r.structured;
    assert_eq!(s["outcome"], "succeeded", "{s:#}");
    assert_eq!(s["instance"], json!(id));
    assert_eq!(s["cwd"], "/work");
    assert_eq!(s["files_written"], json!(["made-inside.txt"]));
    assert_eq!(mock.received()[0].body["model"], "claude-inside");
    // The file is the instance's, not the root's; the stream is the host's.
    assert!(!root.join("made-inside.txt").exists());
    let out = c.call_ok(
        "instance_exec",
        json!({"instance": id, "command": ["cat", "/work/made-inside.txt"]}),
    );
    assert_eq!(out.structured["stdout"], "from the instance\n");
    let log = log_of(&root, s);
    assert!(log.contains("\"tool_start\""), "{log}");
    let progress = progress_messages(&c);
    assert!(
        progress.iter().any(|m| m.contains("file_write")),
        "{progress:?}"
    );
    // A CLI the instance does not have is named as such.
    let e = c.call_err(
        "agent_delegate",
        json!({"agent": "claude", "task": "x", "instance": id}),
        "cli_not_found",
    );
    assert!(e.text.contains("instance"), "{}", e.text);
    c.call_ok("instance_stop", json!({"instance": id}));
}
