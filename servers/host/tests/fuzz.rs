//! A bounded, deterministic fuzz run through `kitbag serve` (every embedded server behind it):
//! malformed JSON, wrong types for every parameter of every tool, lone surrogates, numbers
//! beyond f64, deep nesting, forbidden ids and an over-long line — with a canary call every
//! 50 messages. Nothing may die, stdout must stay JSON-RPC, every valid id gets exactly one
//! answer, and the host's peak RSS stays bounded.

use std::path::Path;
use std::process::Command;

use kitbag_testkit::Era;
use kitbag_testkit::fuzz::{Fuzz, run};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// The host's tool list, from the CLI (the same servers the session runs).
fn host_tools(dir: &Path) -> Vec<Value> {
    let listed = Command::new(bin())
        .args(["tools", "--json"])
        .current_dir(dir)
        .env_remove("KITBAG_CONFIG")
        .output()
        .expect("tools");
    let tools: Value = serde_json::from_slice(&listed.stdout).expect("json");
    let tools = tools["tools"].as_array().expect("tools").clone();
    assert!(
        tools.len() >= 38,
        "{} tools: {}",
        tools.len(),
        String::from_utf8_lossy(&listed.stderr)
    );
    tools
}

fn serve(dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .current_dir(dir)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG");
    cmd
}

#[test]
fn the_host_survives_malformed_and_mistyped_input_and_answers_every_id() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    let tools = host_tools(d.path());
    for (era, huge_line) in [(Era::Handshake, true), (Era::Modern, false)] {
        let report = run(Fuzz {
            command: serve(d.path()),
            era,
            tools: tools.clone(),
            skip: vec!["host_reload"],
            canary: ("file_read", json!({"path": "a.txt"})),
            canary_succeeds: true,
            huge_line,
            max_rss_mb: 400,
            seed: 0x5eed_1234_abcd_0001,
        });
        eprintln!(
            "fuzz through kitbag serve ({era:?}): {} requests answered, host peak RSS {} MB",
            report.requests, report.peak_rss_mb
        );
    }
}
