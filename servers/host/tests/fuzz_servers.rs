//! The fuzz of `tests/fuzz.rs`, against every single server directly (`kitbag server
//! <family>`, the same code as the `kitbag-<family>` binaries) and in both protocol eras:
//! wrong types for every parameter of its tools, undecodable lines, forbidden ids, an
//! over-long line (handshake era), canaries — nothing dies, stdout stays JSON-RPC, every id is
//! answered once, peak RSS stays under 200 MB.

use std::path::Path;
use std::process::Command;

use kitbag_testkit::fuzz::{Fuzz, run};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// Each family, its canary call, and whether the canary succeeds without outside help (the
/// web canary is refused — loopback — which is still an answer).
fn families() -> Vec<(&'static str, &'static str, Value, bool)> {
    vec![
        ("files", "file_read", json!({"path": "a.txt"}), true),
        ("search", "search_glob", json!({"pattern": "*.txt"}), true),
        ("shell", "shell_jobs", json!({}), true),
        (
            "web",
            "web_fetch",
            json!({"url": "http://127.0.0.1:9/"}),
            false,
        ),
        ("memory", "memory_search", json!({}), true),
        ("cron", "cron_status", json!({}), true),
        ("issues", "issue_list", json!({}), true),
        ("lsp", "code_lsp", json!({"action": "status"}), true),
        ("dap", "debug", json!({"action": "list_breakpoints"}), true),
        ("vm", "instance_list", json!({}), true),
    ]
}

fn server(family: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["server", family, "--root"])
        .arg(dir)
        .current_dir(dir)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG");
    cmd
}

#[test]
fn every_single_server_survives_the_fuzz_in_both_eras() {
    for (family, tool, args, succeeds) in families() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
        let tools = {
            let mut c = McpClient::spawn(
                bin(),
                &[
                    "server",
                    family,
                    "--root",
                    d.path().to_str().expect("utf-8"),
                ],
                d.path(),
                Era::Handshake,
            );
            let tools = c.list_tools();
            c.shutdown();
            tools
        };
        assert!(!tools.is_empty(), "{family}: no tools");
        for (era, huge_line) in [(Era::Handshake, true), (Era::Modern, false)] {
            let report = run(Fuzz {
                command: server(family, d.path()),
                era,
                tools: tools.clone(),
                // Acting without arguments would start a sandbox or restart the server.
                skip: vec!["instance_spawn", "self_restart", "keepalive_acquire"],
                canary: (tool, args.clone()),
                canary_succeeds: succeeds,
                huge_line,
                max_rss_mb: 200,
                seed: 0x5eed_0000_0000_0001 ^ family.len() as u64,
            });
            eprintln!(
                "fuzz {family} ({era:?}): {} requests answered, peak RSS {} MB",
                report.requests, report.peak_rss_mb
            );
        }
    }
}
