//! kitbag as an OAuth 2.1 resource server (issue #19), end to end on loopback: a fake
//! authorization server publishes its metadata and keys, `openssl` signs the tokens (RS256,
//! ES256, EdDSA), and `kitbag serve --http` / `kitbag server files --http` decide from each
//! request's token who may list and call what.

use std::path::Path;
use std::sync::atomic::Ordering;

use kitbag_testkit::http::{HttpConn, HttpResponse, HttpServer};
use kitbag_testkit::oauth::{Alg, Issuer, Key};
use serde_json::{Value, json};

const RESOURCE: &str = "https://kitbag.test/mcp";
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn legacy(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize() -> Value {
    legacy(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "oauth-test", "version": "1"}}),
    )
}

const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

struct Caller<'a> {
    conn: HttpConn,
    bearer: String,
    _server: &'a HttpServer,
}

impl<'a> Caller<'a> {
    fn new(server: &'a HttpServer, token: &str) -> Self {
        Self {
            conn: server.connect(),
            bearer: format!("Bearer {token}"),
            _server: server,
        }
    }

    fn post(&mut self, message: &Value) -> HttpResponse {
        let auth = ("authorization", self.bearer.as_str());
        self.conn.post_mcp(message, &[auth, LEGACY])
    }

    fn tools(&mut self) -> Vec<String> {
        let r = self.post(&legacy(2, "tools/list", json!({})));
        assert_eq!(r.status, 200, "{}", r.text());
        let list = r.response_to(&json!(2));
        list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {list}"))
            .iter()
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect()
    }

    fn call(&mut self, name: &str, arguments: Value) -> HttpResponse {
        self.post(&legacy(
            3,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        ))
    }
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hello with a token\n").expect("write");
    let bin = kitbag().to_str().expect("utf-8");
    let root = dir.path().to_str().expect("utf-8");
    let config = json!({
        "mcp": {
            "files": {"command": bin, "args": ["server", "files", "--root", root]},
            "shell": {"command": bin, "args": ["server", "shell", "--root", root]},
        },
        "agents": {
            "reviewer": {"allow": ["file_read", "file_list", "host_status"]},
        },
    });
    std::fs::write(dir.path().join("agent.json"), config.to_string()).expect("config");
    dir
}

fn challenge(r: &HttpResponse) -> String {
    r.header("www-authenticate").unwrap_or_default().to_string()
}

#[test]
fn tokens_decide_who_lists_and_calls_what() {
    let keys = tempfile::tempdir().expect("keys");
    let rsa = Key::generate(keys.path(), Alg::Rs256, "rsa-1");
    let ec = Key::generate(keys.path(), Alg::Es256, "ec-1");
    let ed = Key::generate(keys.path(), Alg::EdDsa, "ed-1");
    let stranger = Key::generate(keys.path(), Alg::Rs256, "rsa-1-forged");
    let issuer = Issuer::start(&[&rsa, &ec, &ed]);
    let dir = project();
    let server = HttpServer::start(
        kitbag(),
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--oauth-issuer",
            &issuer.url,
            "--oauth-resource",
            RESOURCE,
            "--oauth-required-scope",
            "mcp",
            "--oauth-key-refresh-secs",
            "1",
        ],
        dir.path(),
        &[],
    );
    let mut anon = server.connect();

    // The protected-resource metadata tells a client where to get a token.
    let r = anon.send("GET", METADATA_PATH, &[], b"").expect("metadata");
    assert_eq!(r.status, 200, "{}", r.text());
    let doc: Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(doc["resource"], RESOURCE);
    assert_eq!(doc["authorization_servers"], json!([issuer.url]));
    assert!(
        doc["scopes_supported"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("exec")) && s.contains(&json!("mcp")))
    );

    // No token: 401 pointing at the metadata.
    let r = anon.post_mcp(&initialize(), &[]);
    assert_eq!(r.status, 401);
    assert!(
        challenge(&r).contains(
            "resource_metadata=\"https://kitbag.test/.well-known/oauth-protected-resource/mcp\""
        ),
        "{}",
        challenge(&r)
    );

    // Tokens that must not pass, each 401 invalid_token.
    let good = issuer.claims(RESOURCE, "mcp read");
    let mut bad = Vec::new();
    let mut c = good.clone();
    c["aud"] = json!("https://elsewhere.test/mcp");
    bad.push(("wrong audience", rsa.sign(&c)));
    let mut c = good.clone();
    c["iss"] = json!("https://other-issuer.test");
    bad.push(("wrong issuer", rsa.sign(&c)));
    let mut c = good.clone();
    c["exp"] = json!(1_000_000_000);
    bad.push(("expired", ec.sign(&c)));
    // Same kid as a published key, another private key.
    let forged = stranger.sign(&good);
    let forged = {
        let rsa_good = rsa.sign(&good);
        let head = rsa_good.split('.').next().expect("head").to_string();
        let mut parts: Vec<String> = forged.split('.').map(String::from).collect();
        parts[0] = head;
        parts.join(".")
    };
    bad.push(("forged signature", forged));
    bad.push(("not a JWT", "not-a-jwt-at-all-0123456789".into()));
    for (why, token) in &bad {
        let r = Caller::new(&server, token).post(&initialize());
        assert_eq!(r.status, 401, "{why}: {}", r.text());
        assert!(
            challenge(&r).contains("error=\"invalid_token\""),
            "{why}: {}",
            challenge(&r)
        );
    }

    // Valid, but without the scope every request needs: 403 insufficient_scope.
    let r = Caller::new(&server, &rsa.sign(&issuer.claims(RESOURCE, "read"))).post(&initialize());
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        challenge(&r).contains("error=\"insufficient_scope\""),
        "{}",
        challenge(&r)
    );
    assert!(challenge(&r).contains("scope=\"mcp\""), "{}", challenge(&r));

    // A reader: lists read-tier tools only, reads through the byte path, and a write is
    // refused with a step-up challenge naming the scope it needs.
    let mut reader = Caller::new(&server, &rsa.sign(&good));
    assert_eq!(reader.post(&initialize()).status, 200);
    let tools = reader.tools();
    assert!(tools.contains(&"file_read".to_string()), "{tools:?}");
    for hidden in ["file_write", "edit_text", "shell_bash", "host_reload"] {
        assert!(
            !tools.contains(&hidden.to_string()),
            "{hidden} listed: {tools:?}"
        );
    }
    let r = reader.call("file_read", json!({"path": "hello.txt"}));
    assert!(r.text().contains("hello with a token"), "{}", r.text());
    let r = reader.call("file_write", json!({"path": "w.txt", "content": "x"}));
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        challenge(&r).contains("scope=\"write\""),
        "{}",
        challenge(&r)
    );
    assert!(!dir.path().join("w.txt").exists());

    // A token naming the reviewer agent (ES256): its allowlist applies on top of the tiers.
    let mut c = issuer.claims(RESOURCE, "mcp read write exec");
    c["kitbag_agent"] = json!("reviewer");
    let mut reviewer = Caller::new(&server, &ec.sign(&c));
    let mut tools = reviewer.tools();
    tools.sort();
    assert_eq!(tools, ["file_list", "file_read", "host_status"]);
    let r = reviewer.call("file_write", json!({"path": "w.txt", "content": "x"}));
    let answer = r.response_to(&json!(3));
    assert_eq!(
        answer["result"]["structuredContent"]["error"]["code"], "capability_denied",
        "{answer}"
    );
    assert!(!dir.path().join("w.txt").exists());

    // A token naming an agent the config lacks (EdDSA): nothing listed, nothing callable.
    let mut c = issuer.claims(RESOURCE, "mcp read");
    c["kitbag_agent"] = json!("ghost");
    let mut ghost = Caller::new(&server, &ed.sign(&c));
    assert!(ghost.tools().is_empty());
    let r = ghost.call("file_read", json!({"path": "hello.txt"}));
    let answer = r.response_to(&json!(3));
    let message = answer["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("`ghost`"), "{answer}");

    // Full grant: writes and runs commands; the token never reaches a child.
    let admin_token = rsa.sign(&issuer.claims(RESOURCE, "mcp read write exec external"));
    let mut admin = Caller::new(&server, &admin_token);
    let r = admin.call("file_write", json!({"path": "w.txt", "content": "written"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("w.txt")).expect("w"),
        "written"
    );
    let r = admin.call(
        "shell_bash",
        json!({"command": "env; cat /proc/$PPID/environ | tr '\\0' '\\n'"}),
    );
    let out = r.text();
    assert!(out.contains("exit_code"), "{out}");
    let signature = admin_token.rsplit('.').next().expect("signature");
    assert!(
        !out.contains(signature),
        "the token reached a child's environment"
    );
    assert!(issuer.seen_authorization.lock().expect("lock").is_empty());

    // Key rotation: a token signed by a key published after start is accepted once the
    // host fetches the set again; made-up key ids do not make it fetch on every request.
    let rotated = Key::generate(keys.path(), Alg::EdDsa, "ed-2");
    issuer.jwks.lock().expect("lock")["keys"]
        .as_array_mut()
        .expect("keys")
        .push(rotated.jwk.clone());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = issuer.jwks_fetches.load(Ordering::SeqCst);
    let mut fresh = Caller::new(&server, &rotated.sign(&good));
    assert_eq!(fresh.post(&initialize()).status, 200);
    assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), before + 1);
    let unknown = Key::generate(keys.path(), Alg::EdDsa, "never-published");
    for _ in 0..20 {
        let r = Caller::new(&server, &unknown.sign(&good)).post(&initialize());
        assert_eq!(r.status, 401);
    }
    assert!(
        issuer.jwks_fetches.load(Ordering::SeqCst) <= before + 2,
        "{} fetches for 20 unknown-key tokens",
        issuer.jwks_fetches.load(Ordering::SeqCst) - before - 1
    );
}

#[test]
fn a_single_server_checks_tokens_and_tiers_too() {
    let keys = tempfile::tempdir().expect("keys");
    let key = Key::generate(keys.path(), Alg::Es256, "ec-1");
    let issuer = Issuer::start(&[&key]);
    let dir = project();
    let server = HttpServer::start(
        kitbag(),
        &[
            "server",
            "files",
            "--http",
            "127.0.0.1:0",
            "--oauth-issuer",
            &issuer.url,
            "--oauth-resource",
            RESOURCE,
            "--oauth-scope-prefix",
            "kitbag:",
        ],
        dir.path(),
        &[],
    );
    let r = server.connect().post_mcp(&initialize(), &[]);
    assert_eq!(r.status, 401);
    // `read` without the prefix grants nothing here.
    let mut none = Caller::new(&server, &key.sign(&issuer.claims(RESOURCE, "read")));
    assert!(none.tools().is_empty());
    let mut reader = Caller::new(&server, &key.sign(&issuer.claims(RESOURCE, "kitbag:read")));
    let tools = reader.tools();
    assert!(tools.contains(&"file_read".to_string()) && !tools.contains(&"file_write".to_string()));
    let r = reader.call("file_write", json!({"path": "w.txt", "content": "x"}));
    assert_eq!(r.status, 403);
    assert!(
        challenge(&r).contains("scope=\"kitbag:write\""),
        "{}",
        challenge(&r)
    );
    let r = reader.call("file_read", json!({"path": "hello.txt"}));
    assert!(r.text().contains("hello with a token"), "{}", r.text());
}

#[test]
fn a_token_file_may_hold_only_the_digest() {
    let dir = project();
    let secret = "team-token-0123456789abcdef";
    let digest = {
        let out = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin
                    .take()
                    .expect("stdin")
                    .write_all(secret.as_bytes())?;
                c.wait_with_output()
            })
            .expect("sha256sum");
        String::from_utf8(out.stdout).expect("utf-8")[..64].to_string()
    };
    let file = dir.path().join("token.sha256");
    std::fs::write(&file, format!("sha256:{digest}\n")).expect("write");
    let server = HttpServer::start(
        kitbag(),
        &[
            "server",
            "files",
            "--http",
            "127.0.0.1:0",
            "--auth-token-file",
            file.to_str().expect("utf-8"),
        ],
        dir.path(),
        &[],
    );
    let r = Caller::new(&server, secret).post(&initialize());
    assert_eq!(r.status, 200, "{}", r.text());
    let r = Caller::new(&server, &format!("sha256:{digest}")).post(&initialize());
    assert_eq!(r.status, 401, "the digest itself is not the token");
}
