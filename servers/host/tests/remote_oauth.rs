//! Remote servers with OAuth (issue #19): a runner (`kitbag server files --http`) accepts
//! only tokens of a loopback authorization server for its canonical resource; the laptop's
//! `kitbag serve` reaches it with the user's own tokens. `kitbag auth login` runs the
//! authorization-code flow with PKCE (the test plays the browser), registering itself
//! (RFC 7591); the tokens land in the user's store (0600); the host renews them with the
//! refresh token (rotated) and asks for a new login once they are revoked; a service entry
//! uses client credentials with no login at all.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use kitbag_testkit::clients::{require, testkit_dir};
use kitbag_testkit::http::{Endpoint, HttpServer};
use kitbag_testkit::oauth::{Alg, Key};
use kitbag_testkit::oauth_as::AuthServer;
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

/// The runner's canonical URL (what tokens are for); it is reached at 127.0.0.1.
const RESOURCE: &str = "https://runner.kitbag.test/mcp";

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn runner(root: &Path, issuer: &str) -> HttpServer {
    runner_at(root, issuer, "127.0.0.1:0", RESOURCE)
}

/// A runner on `addr` whose canonical resource is `resource`.
fn runner_at(root: &Path, issuer: &str, addr: &str, resource: &str) -> HttpServer {
    HttpServer::start(
        kitbag(),
        &[
            "server",
            "files",
            "--root",
            root.to_str().expect("utf-8"),
            "--http",
            addr,
            "--oauth-issuer",
            issuer,
            "--oauth-resource",
            resource,
        ],
        root,
        &[],
    )
}

fn runner_url(server: &HttpServer) -> String {
    match &server.endpoint {
        Endpoint::Tcp(a) => format!("http://{a}/mcp"),
        other => panic!("{other:?}"),
    }
}

/// A plain HTTP/1.1 GET of an absolute `http://` URL: (status, Location).
fn get(url: &str) -> (u16, Option<String>) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = TcpStream::connect(host).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let location = text
        .lines()
        .find_map(|l| l.strip_prefix("location: ").map(str::to_string));
    (status, location)
}

/// `kitbag auth login NAME --no-browser`, the browser played here: open the printed URL,
/// follow the authorization server's redirect to the loopback listener.
fn login(laptop: &Path, store: &Path, server: &str) -> (bool, String) {
    let mut child = Command::new(kitbag())
        .args(["auth", "login", server, "--no-browser"])
        .current_dir(laptop)
        .env("KITBAG_OAUTH_DIR", store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kitbag auth login");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    let mut link = None;
    for _ in 0..20 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(&line);
        if line.starts_with("http://") {
            link = Some(line.trim().to_string());
            break;
        }
    }
    if let Some(link) = link {
        let (status, location) = get(&link);
        assert_eq!(status, 302, "the authorization server approves: {link}");
        let callback = location.expect("redirect");
        assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
        let (status, _) = get(&callback);
        assert_eq!(status, 200, "the loopback listener takes the code");
    }
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    said.push_str(&rest);
    let ok = child.wait().expect("wait").success();
    (ok, said)
}

fn runner_status(client: &mut McpClient, name: &str) -> Value {
    let status = client.call_ok("host_status", json!({}));
    status.structured["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no {name} in {}", status.text))
}

#[test]
fn a_user_logs_in_and_the_host_keeps_their_tokens_fresh() {
    let keys = tempfile::tempdir().expect("keys");
    let auth = AuthServer::start(
        Key::generate(keys.path(), Alg::Es256, "as-1"),
        ("ci-bot", "ci-bot-secret-0123456789"),
    );
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "behind OAuth\n").expect("write");
    let server = runner(workspace.path(), &auth.url);
    let url = runner_url(&server);
    let laptop = tempfile::tempdir().expect("laptop");
    let store = laptop.path().join("token-store");
    let config = json!({"mcp": {
        "runner": {"url": url, "oauth": {"resource": RESOURCE}},
        "bot": {"url": url, "prefix": "bot_", "oauth": {"resource": RESOURCE,
            "grant": "client_credentials", "client_id": "ci-bot", "client_secret": "${BOT_SECRET}"}},
    }});
    std::fs::write(laptop.path().join("agent.json"), config.to_string()).expect("config");
    let store_env = store.to_str().expect("utf-8");
    let env = [
        ("KITBAG_OAUTH_DIR", store_env),
        ("BOT_SECRET", "ci-bot-secret-0123456789"),
    ];

    // Not logged in: the runner entry fails with what to do; the service entry needs no login.
    let mut client =
        McpClient::spawn_with_env(kitbag(), &["serve"], laptop.path(), Era::Handshake, &env);
    let status = runner_status(&mut client, "runner");
    assert_ne!(status["state"], "ready", "{status}");
    assert!(
        status["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("kitbag auth login runner"),
        "{status}"
    );
    let read = client.call_ok("bot_file_read", json!({"path": "notes.txt"}));
    assert!(read.text.contains("behind OAuth"), "{}", read.text);
    let grants: Vec<_> = auth.token_requests();
    assert!(
        grants.iter().any(|r| r.grant_type == "client_credentials"
            && r.status == 200
            && r.resource.as_deref() == Some(RESOURCE)),
        "{grants:?}"
    );

    // The login: registered on the fly, PKCE checked by the server, tokens stored privately.
    // Its tokens live 20 s, less than the 30 s the host renews ahead.
    auth.token_ttl
        .store(20, std::sync::atomic::Ordering::SeqCst);
    let (ok, said) = login(laptop.path(), &store, "runner");
    assert!(ok, "{said}");
    assert!(said.contains("logged in to runner"), "{said}");
    assert_eq!(auth.registrations(), 1);
    // The host that was waiting picks the login up by itself (no reload).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runner_status(&mut client, "runner")["state"] != "ready" {
        assert!(
            std::time::Instant::now() < deadline,
            "the login was not picked up"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let read = client.call_ok("file_read", json!({"path": "notes.txt"}));
    assert!(read.text.contains("behind OAuth"), "{}", read.text);
    drop(client);
    let files: Vec<_> = std::fs::read_dir(&store)
        .expect("store")
        .flatten()
        .collect();
    assert!(!files.is_empty());
    for f in &files {
        let mode = f.metadata().expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{:?}", f.path());
    }
    let out = Command::new(kitbag())
        .args(["auth", "status"])
        .current_dir(laptop.path())
        .env("KITBAG_OAUTH_DIR", &store)
        .output()
        .expect("status");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("runner\tlogged in"), "{listed}");

    // Short-lived tokens: the host renews them with the (rotating) refresh token.
    auth.token_ttl
        .store(20, std::sync::atomic::Ordering::SeqCst);
    let mut client =
        McpClient::spawn_with_env(kitbag(), &["serve"], laptop.path(), Era::Handshake, &env);
    for _ in 0..3 {
        let read = client.call_ok("file_read", json!({"path": "notes.txt"}));
        assert!(read.text.contains("behind OAuth"), "{}", read.text);
    }
    let refreshes = auth
        .token_requests()
        .iter()
        .filter(|r| r.grant_type == "refresh_token" && r.status == 200)
        .count();
    assert!(refreshes >= 1, "{:?}", auth.token_requests());
    assert!(
        auth.token_requests()
            .iter()
            .all(|r| r.resource.as_deref() == Some(RESOURCE)),
        "every token request names the resource"
    );

    // Revoked: the next renewal is refused and the call says to log in again.
    auth.revoke_refresh_tokens();
    let failed = client.call("file_read", json!({"path": "notes.txt"}));
    assert!(failed.is_error, "{}", failed.text);
    assert!(
        failed.text.contains("kitbag auth login runner"),
        "{}",
        failed.text
    );
    drop(client);

    // Logout forgets the tokens.
    let out = Command::new(kitbag())
        .args(["auth", "logout", "runner"])
        .current_dir(laptop.path())
        .env("KITBAG_OAUTH_DIR", &store)
        .output()
        .expect("logout");
    assert!(out.status.success());
    let out = Command::new(kitbag())
        .args(["auth", "status"])
        .current_dir(laptop.path())
        .env("KITBAG_OAUTH_DIR", &store)
        .output()
        .expect("status");
    assert!(String::from_utf8_lossy(&out.stdout).contains("runner\tnot logged in"));
}

#[test]
fn oauth_entries_are_checked() {
    let laptop = tempfile::tempdir().expect("laptop");
    for (entry, want) in [
        (
            json!({"url": "https://r.test/mcp", "oauth": {}, "headers": {"Authorization": "Bearer x"}}),
            "remove headers.Authorization",
        ),
        (
            json!({"url": "https://r.test/mcp", "oauth": {"grant": "client_credentials"}}),
            "client_id",
        ),
        (
            json!({"command": "true", "oauth": {}}),
            "apply to a remote server",
        ),
    ] {
        std::fs::write(
            laptop.path().join("agent.json"),
            json!({"mcp": {"r": entry}}).to_string(),
        )
        .expect("config");
        let out = Command::new(kitbag())
            .args(["auth", "login", "r", "--no-browser"])
            .current_dir(laptop.path())
            .env("KITBAG_OAUTH_DIR", laptop.path().join("store"))
            .output()
            .expect("run");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{entry}: {err}");
    }
}

/// The fixture checked by an independent client: the Python SDK's OAuth client gets through
/// the same authorization server and runner (discovery, registration, PKCE, resource).
#[test]
fn the_python_sdks_oauth_client_accepts_the_fixture() {
    let python = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py/.venv/bin/python");
    if !python.exists() {
        require(
            false,
            "the Python MCP SDK is not installed in testkit/py/.venv (run scripts/test)",
        );
        return;
    }
    let keys = tempfile::tempdir().expect("keys");
    let auth = AuthServer::start(
        Key::generate(keys.path(), Alg::Es256, "as-1"),
        ("unused", "unused-secret-0123456789"),
    );
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "read by the SDK\n").expect("write");
    // The SDK follows the 401's metadata link only: the canonical URL is the one it reaches
    // (a free port picked first).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let server = runner_at(
        workspace.path(),
        &auth.url,
        &format!("127.0.0.1:{port}"),
        &resource,
    );
    let out = Command::new(&python)
        .arg(testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py/oauth_check.py"))
        .args([
            runner_url(&server).as_str(),
            resource.as_str(),
            "file_read",
            r#"{"path": "notes.txt"}"#,
        ])
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(report["isError"], false, "{report}");
    assert!(
        report["text"]
            .as_str()
            .unwrap_or_default()
            .contains("read by the SDK"),
        "{report}"
    );
    assert!(report["registered"].is_string(), "{report}");
    assert_eq!(auth.registrations(), 1);
    assert!(
        auth.token_requests()
            .iter()
            .any(|r| r.grant_type == "authorization_code"
                && r.status == 200
                && r.resource.as_deref() == Some(resource.as_str())),
        "{:?}",
        auth.token_requests()
    );
}
