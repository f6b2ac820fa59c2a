//! `agent_delegate` against its reference, side by side in one run: the same Claude Code task
//! (read a file, write one, run a command, answer) run directly — `claude -p --output-format
//! stream-json` from a shell, what a caller without kitbag reads — and through `kitbag
//! serve`'s `agent_delegate`, both against the loopback model stand-in. Reported: wall time per
//! task (the delegation's overhead: spawning, reading the stream, the log, the result), and
//! what the caller gets to read — the whole stream, or the compact result (its text, and its
//! structuredContent).
//!
//! Run: `cargo bench -p kitbag --bench delegate` (needs testkit/claude, installed by
//! scripts/test). Nothing here asserts on time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kitbag_testkit::bench::{Summary, median, ms, summary};
use kitbag_testkit::llm_mock::{
    MockLlm, Reply, anthropic_text, anthropic_tool_call, claude_code_side_calls,
};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const ROUNDS: usize = 7;

fn claude_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testkit/claude/node_modules/.bin")
        .canonicalize()
        .ok()?;
    dir.join("claude").exists().then_some(dir)
}

/// One task's four model turns.
fn script(root: &Path) -> Vec<Reply> {
    let abs = |rel: &str| root.join(rel).to_string_lossy().into_owned();
    vec![
        Reply::sse(anthropic_tool_call(
            "b1",
            "Read",
            &json!({"file_path": abs("notes.txt")}),
        )),
        Reply::sse(anthropic_tool_call(
            "b2",
            "Write",
            &json!({"file_path": abs("out.txt"), "content": "hello\n"}),
        )),
        Reply::sse(anthropic_tool_call(
            "b3",
            "Bash",
            &json!({"command": "ls", "description": "list"}),
        )),
        Reply::sse(anthropic_text("Created out.txt after reading notes.txt.")),
    ]
}

fn main() {
    let Some(claude) = claude_dir() else {
        eprintln!("SKIPPED: testkit/claude is not installed (scripts/test installs it)");
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path().canonicalize().expect("root");
    std::fs::write(root.join("notes.txt"), "some notes\n").expect("notes");
    let home = tempfile::tempdir().expect("home");
    let mock = MockLlm::start(Vec::new());
    mock.side_replies(claude_code_side_calls);
    let path = format!(
        "{}:{}",
        claude.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let url = mock.url();
    let env = [
        ("PATH", path.as_str()),
        ("HOME", home.path().to_str().expect("utf8")),
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "sk-bench"),
        ("DISABLE_AUTOUPDATER", "1"),
    ];

    // Directly: the stream is what the caller reads.
    let mut direct = Vec::new();
    let mut stream_bytes = 0;
    for _ in 0..ROUNDS {
        let _ = std::fs::remove_file(root.join("out.txt"));
        for r in script(&root) {
            mock.push(r);
        }
        let t = Instant::now();
        let out = Command::new(claude.join("claude"))
            .args(["-p", "--output-format", "stream-json", "--verbose"])
            .args(["--permission-mode", "acceptEdits"])
            .args([
                "--allowedTools",
                "Bash Read Glob Grep TodoWrite",
                "--",
                "task",
            ])
            .current_dir(&root)
            .envs(env)
            .output()
            .expect("claude");
        direct.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stream_bytes = out.stdout.len();
    }

    // Through agent_delegate: the compact result is.
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    let mut c = McpClient::spawn_with_env(bin, &["serve"], &root, Era::Handshake, &env);
    let mut delegated = Vec::new();
    let (mut text_bytes, mut structured_bytes) = (0, 0);
    for _ in 0..ROUNDS {
        let _ = std::fs::remove_file(root.join("out.txt"));
        for r in script(&root) {
            mock.push(r);
        }
        let t = Instant::now();
        let r = c.call_ok("agent_delegate", json!({"agent": "claude", "task": "task"}));
        delegated.push(t.elapsed());
        assert_eq!(r.structured["outcome"], "succeeded", "{:#}", r.structured);
        text_bytes = r.text.len();
        structured_bytes = r.structured.to_string().len();
    }
    let (direct, delegated) = (median(direct), median(delegated));
    println!(
        "claude -p stream-json, directly:   {} per task, {stream_bytes} bytes to read",
        ms(direct)
    );
    println!(
        "agent_delegate (claude):           {} per task, {text_bytes} bytes of text ({structured_bytes} structured)",
        ms(delegated)
    );
    let overhead_ms = (delegated.as_secs_f64() - direct.as_secs_f64()) * 1000.0;
    summary(Summary {
        area: "delegate",
        measure: "a Claude Code task, wall time",
        kitbag: ms(delegated),
        reference: format!("claude -p directly {}", ms(direct)),
        compared: format!("{overhead_ms:+.2} ms"),
        target: "",
        met: None,
    });
    summary(Summary {
        area: "delegate",
        measure: "what the caller reads",
        kitbag: format!("{text_bytes} B text ({structured_bytes} B structured)"),
        reference: format!("stream {stream_bytes} B"),
        compared: format!(
            "{:.1}%",
            100.0 * text_bytes as f64 / stream_bytes.max(1) as f64
        ),
        target: "~1–2 KB (seed 003)",
        met: Some(text_bytes <= 2048),
    });
}
