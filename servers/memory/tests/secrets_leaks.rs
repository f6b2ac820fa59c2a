//! A refused secret leaves no trace (issue #21): not in the answer, not in the server's log
//! (at debug level) or audit log, not in any file under the root — the database, its WAL and
//! shared-memory files included.

mod corpus;

use std::path::Path;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-memory"))
}

/// Every regular file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn refused_secrets_appear_nowhere() {
    let root = tempfile::tempdir().expect("tmp");
    let logs = tempfile::tempdir().expect("tmp");
    let log = logs.path().join("server.log");
    let audit = logs.path().join("audit.jsonl");
    let mut c = McpClient::spawn(
        bin(),
        &[
            "--log-level",
            "debug",
            "--log-file",
            log.to_str().expect("utf-8"),
            "--audit-log",
            audit.to_str().expect("utf-8"),
        ],
        root.path(),
        Era::Handshake,
    );
    // One note per provider, then a benign one so the database and its WAL exist.
    let secrets = corpus::secrets();
    let mut tokens = Vec::new();
    for s in secrets.iter().step_by(3) {
        let r = c.call_err(
            "memory_store",
            json!({"content": s.text, "tags": ["ops"]}),
            "secret_detected",
        );
        let answer = r.raw.to_string();
        assert!(
            !answer.contains(&s.token),
            "{}: the answer repeats the secret",
            s.provider
        );
        tokens.push(s.token.clone());
    }
    // In a tag too.
    let s = &secrets[0];
    c.call_err(
        "memory_store",
        json!({"content": "deploy notes", "tags": [s.token]}),
        "secret_detected",
    );
    c.call_ok(
        "memory_store",
        json!({"content": "the deploy runs at 02:00 UTC"}),
    );
    let r = c.call_ok("memory_search", json!({"query": "deploy"}));
    assert_eq!(r.structured["count"], 1);
    // Checked while the server still runs (its WAL is there) and after it exited.
    for moment in ["running", "after exit"] {
        let mut all = Vec::new();
        files(root.path(), &mut all);
        files(logs.path(), &mut all);
        assert!(
            all.iter()
                .any(|p| p.to_string_lossy().ends_with("memory.db-wal"))
                || moment != "running",
            "the WAL exists while the server runs: {all:?}"
        );
        for f in &all {
            let bytes = std::fs::read(f).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            for t in &tokens {
                // The longest stretch without quotes or newlines (PEM bodies are multi-line).
                let needle = t
                    .split(['\n', '"', '\\'])
                    .max_by_key(|p| p.len())
                    .unwrap_or(t);
                assert!(
                    !text.contains(needle),
                    "{} ({moment}) contains a refused secret",
                    f.display()
                );
            }
        }
        if moment == "running" {
            c.shutdown();
            c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
            c.call_ok("memory_search", json!({"query": "deploy"}));
            c.shutdown();
            break;
        }
    }
    assert!(log.exists() && audit.exists());
}
