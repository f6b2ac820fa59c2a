//! Remote servers (issue #19): a config entry with `url` is an MCP server another kitbag
//! serves over Streamable HTTP — a team's workspace runner — reached with a bearer token from
//! the environment, offered in the same flat list, and used again after it restarts.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::http::{Endpoint, HttpServer};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const TOKEN: &str = "runner-token-0123456789abcdef";

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// A runner: `kitbag server files --http ADDR` in `root`, requiring [`TOKEN`].
fn runner(root: &Path, addr: &str) -> HttpServer {
    let token = root.join(".runner-token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    HttpServer::start(
        kitbag(),
        &[
            "server",
            "files",
            "--root",
            root.to_str().expect("utf-8"),
            "--http",
            addr,
            "--auth-token-file",
            token.to_str().expect("utf-8"),
        ],
        root,
        &[],
    )
}

fn address(server: &HttpServer) -> String {
    match &server.endpoint {
        Endpoint::Tcp(a) => a.clone(),
        other => panic!("{other:?}"),
    }
}

fn host(dir: &Path, url: &str, token_var: &str) -> McpClient {
    let config = json!({"mcp": {
        "runner": {"url": url, "headers": {"Authorization": "Bearer ${RUNNER_TOKEN}", "X-Workspace": "demo"}},
    }});
    std::fs::write(dir.join("agent.json"), config.to_string()).expect("config");
    McpClient::spawn_with_env(
        kitbag(),
        &["serve"],
        dir,
        Era::Handshake,
        &[("RUNNER_TOKEN", token_var)],
    )
}

fn runner_status(client: &mut McpClient) -> Value {
    let status = client.call_ok("host_status", json!({}));
    status.structured["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "runner").cloned())
        .unwrap_or_else(|| panic!("no runner in {}", status.text))
}

#[test]
fn a_remote_runner_joins_the_flat_list_and_survives_its_restart() {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "from the runner\n").expect("write");
    let server = runner(workspace.path(), "127.0.0.1:0");
    let addr = address(&server);
    let laptop = tempfile::tempdir().expect("laptop");
    let mut client = host(laptop.path(), &format!("http://{addr}/mcp"), TOKEN);

    let names: Vec<String> = client
        .list_tools()
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    assert!(names.contains(&"file_read".to_string()), "{names:?}");
    let status = runner_status(&mut client);
    assert_eq!(status["state"], "ready", "{status}");
    assert!(
        status.get("pid").is_none(),
        "a remote server has no local process: {status}"
    );

    // Calls go to the runner's root, not the laptop's.
    let read = client.call_ok("file_read", json!({"path": "notes.txt"}));
    assert!(read.text.contains("from the runner"), "{}", read.text);
    client.call_ok(
        "file_write",
        json!({"path": "made-remotely.txt", "content": "hi"}),
    );
    assert!(workspace.path().join("made-remotely.txt").exists());
    assert!(!laptop.path().join("made-remotely.txt").exists());

    // The runner goes away: calls fail with a typed error, the host stays up.
    server.stop();
    let failed = client.call("file_read", json!({"path": "notes.txt"}));
    assert!(failed.is_error, "{}", failed.text);

    // Back on the same address: calls work again without touching the host.
    let again = runner(workspace.path(), &addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client.call("file_read", json!({"path": "notes.txt"}));
        if !r.is_error {
            assert!(r.text.contains("from the runner"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still failing after the runner restarted: {}",
            r.text
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(again);
}

#[test]
fn a_refused_token_and_a_bad_entry_are_reported_not_fatal() {
    let workspace = tempfile::tempdir().expect("workspace");
    let server = runner(workspace.path(), "127.0.0.1:0");
    let laptop = tempfile::tempdir().expect("laptop");
    let mut client = host(
        laptop.path(),
        &format!("http://{}/mcp", address(&server)),
        "wrong-token-0123456789",
    );
    let status = runner_status(&mut client);
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("401") || error.to_lowercase().contains("auth"),
        "{status}"
    );
    assert!(
        !error.contains("wrong-token"),
        "the token is not repeated: {error}"
    );

    // Entries that cannot work: the config is refused whole, naming the entry and why; a bad
    // URL fails that server only (it may come from a variable).
    let cases = [
        (
            json!({"both": {"command": "kitbag-files", "url": "http://127.0.0.1:1/mcp"}}),
            "both given",
        ),
        (json!({"neither": {"args": ["x"]}}), "give `command`"),
        (
            json!({"argv": {"url": "http://127.0.0.1:1/mcp", "args": ["x"]}}),
            "apply to a command",
        ),
        (
            json!({"ftp": {"url": "ftp://example.com/mcp"}}),
            "expected http:// or https://",
        ),
    ];
    for (servers, why) in cases {
        std::fs::write(
            laptop.path().join("agent.json"),
            json!({"mcp": servers}).to_string(),
        )
        .expect("config");
        let doctor = std::process::Command::new(kitbag())
            .arg("doctor")
            .current_dir(laptop.path())
            .env_remove("KITBAG_CONFIG")
            .output()
            .expect("doctor");
        let said = String::from_utf8_lossy(&doctor.stdout).to_string()
            + &String::from_utf8_lossy(&doctor.stderr);
        assert!(!doctor.status.success(), "{why}: {said}");
        assert!(said.contains(why), "doctor should say `{why}`: {said}");
    }
}
