//! Helpers the agent-loop tests share: a project with a real kitbag-files child, `kitbag` run
//! against a loopback model, the session and audit files read back, recorded streams.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};

use kitbag_testkit::llm_mock::{MockLlm, Received};
use serde_json::{Value, json};

pub const A_TOOL_USE: &str = include_str!("../../../../llm/tests/fixtures/anthropic/tool_use.sse");
pub const A_PARALLEL: &str =
    include_str!("../../../../llm/tests/fixtures/anthropic/parallel_tools.sse");
pub const A_TEXT: &str = include_str!("../../../../llm/tests/fixtures/anthropic/text.sse");
pub const O_TOOL_CALLS: &str = include_str!("../../../../llm/tests/fixtures/openai/tool_calls.sse");
pub const O_TEXT: &str = include_str!("../../../../llm/tests/fixtures/openai/text.sse");

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// A project with a.txt and an agent.json running kitbag-files on it.
pub fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    let cfg = json!({"mcp": {"files": {"command": bin(), "args": ["server", "files", "--root", d.path()]}}});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    d
}

pub fn kitbag(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .args(args)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .env_remove("KITBAG_MODEL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run kitbag")
}

pub fn anthropic_env(mock: &MockLlm) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_API_KEY", "test-key".into()),
        ("ANTHROPIC_BASE_URL", mock.url()),
        ("KITBAG_MODEL", "anthropic/claude-test".into()),
    ]
}

pub fn openai_env(mock: &MockLlm) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_API_KEY", "test-key".into()),
        ("OPENAI_BASE_URL", format!("{}/v1", mock.url())),
        ("KITBAG_MODEL", "openai/gpt-test".into()),
    ]
}

pub fn session(dir: &Path, name: &str) -> Vec<Value> {
    let p: PathBuf = dir.join(".kitbag/sessions").join(format!("{name}.jsonl"));
    std::fs::read_to_string(&p)
        .expect("session file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

pub fn roles(records: &[Value]) -> Vec<&str> {
    records
        .iter()
        .map(|r| r["role"].as_str().expect("role"))
        .collect()
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn tool_names(r: &Received) -> Vec<String> {
    r.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            t.get("name")
                .or_else(|| t["function"].get("name"))
                .and_then(Value::as_str)
                .expect("name")
                .to_owned()
        })
        .collect()
}

/// A session of `turns` question/answer turns written as a crashed-free history would be.
pub fn write_history(dir: &Path, name: &str, turns: usize) {
    let d = dir.join(".kitbag/sessions");
    std::fs::create_dir_all(&d).expect("mkdir");
    let mut body = String::new();
    for i in 0..turns {
        body.push_str(&format!(
            "{}\n{}\n",
            json!({"role": "user", "content": [{"type": "text", "text": format!("question {i}")}], "ts": format!("2026-11-25T00:{i:02}:00.000Z")}),
            json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}], "stop": "end_turn", "model": "m", "ts": format!("2026-11-25T00:{i:02}:30.000Z")})
        ));
    }
    std::fs::write(d.join(format!("{name}.jsonl")), body).expect("w");
}

pub fn system_text(r: &Received) -> String {
    r.body["system"].as_str().unwrap_or_default().to_owned()
}

pub fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("w");
}

pub fn audit_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// Processes whose command line mentions `needle` (this test's temporary directory).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
    {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    found
}

#[allow(unused_imports)]
pub use kitbag_testkit::llm_mock::{
    anthropic_stream, anthropic_text as text_sse, anthropic_tool_call as tool_call_sse,
};

/// The first audit-log event called `name`.
pub fn audit_event(path: &Path, name: &str) -> Value {
    audit_events(path)
        .into_iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {}", path.display()))
}

/// An agent.json entry running this binary's `server FAMILY --root DIR EXTRA…`.
pub fn family_server(dir: &Path, family: &str, extra: &[&str]) -> Value {
    let mut args = vec![json!("server"), json!(family), json!("--root"), json!(dir)];
    args.extend(extra.iter().map(|a| json!(a)));
    json!({"command": bin(), "args": args})
}

/// `kitbag daemon` in `dir` with `env` (the model's), its stderr kept for [`stop_daemon`].
pub fn spawn_daemon(dir: &Path, env: &[(&'static str, String)]) -> Child {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .arg("daemon")
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("daemon")
}

/// SIGTERM to the daemon, then how it exited and what it said on stderr.
pub fn stop_daemon(mut daemon: Child) -> (ExitStatus, String) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = daemon.wait().expect("wait");
    let mut stderr = String::new();
    std::io::Read::read_to_string(daemon.stderr.as_mut().expect("stderr"), &mut stderr)
        .expect("read");
    (status, stderr)
}
