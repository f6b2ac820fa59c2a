//! Prompts and resources through the host: the real memory and issues servers behind
//! `kitbag serve`, in both protocol eras (catalog.rs).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn server(family: &str, root: &Path) -> Value {
    let mut args = vec![json!("server"), json!(family), json!("--root"), json!(root)];
    if family == "issues" {
        args.extend([json!("--project"), json!("test")]);
    }
    json!({"command": bin(), "args": args})
}

fn write_config(dir: &Path, cfg: Value) -> PathBuf {
    let p = dir.join("agent.json");
    std::fs::write(&p, serde_json::to_string_pretty(&cfg).expect("json")).expect("w");
    p
}

fn serve(dir: &Path, cfg: &Path, extra: &[&str], era: Era) -> McpClient {
    let mut args = vec!["--config", cfg.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    args.push("serve");
    McpClient::spawn(bin(), &args, dir, era)
}

fn ok(r: &Value) -> &Value {
    assert!(r.get("error").is_none(), "unexpected error: {r}");
    &r["result"]
}

fn err_code(r: &Value) -> i64 {
    r["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {r}"))
}

fn names<'a>(list: &'a Value, key: &str, field: &str) -> Vec<&'a str> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {list}"))
        .iter()
        .filter_map(|p| p[field].as_str())
        .collect()
}

fn wait_notification(c: &McpClient, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        seen.extend(c.take_notifications());
        if let Some(n) = seen.iter().find(|n| pred(n)) {
            return n.clone();
        }
        assert!(Instant::now() < deadline, "no {what}: {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Resource not found: -32002, which rmcp turns into -32602 for 2026-07-28 (SEP-2164).
fn not_found(era: Era) -> i64 {
    if era == Era::Modern { -32602 } else { -32002 }
}

fn updated(uri: &'static str) -> impl Fn(&Value) -> bool {
    move |n: &Value| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri
}

/// memory's prompt, issues' prompt, resources and templates, listed, fetched and read
/// through the host in both eras; unknown names and URIs are protocol errors.
#[test]
fn prompts_and_resources_are_served_in_both_eras() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"memory": server("memory", d.path()), "issues": server("issues", d.path())}}),
    );
    for era in [Era::Handshake, Era::Modern] {
        let mut c = serve(d.path(), &cfg, &[], era);
        let caps = &c.opened["capabilities"];
        assert_eq!(caps["prompts"], json!({"listChanged": true}), "{caps}");
        assert_eq!(
            caps["resources"],
            json!({"subscribe": true, "listChanged": true}),
            "{caps}"
        );
        if era == Era::Handshake {
            c.call_ok(
                "memory_store",
                json!({"content": "the deploy key lives in the vault named orchid"}),
            );
            c.call_ok(
                "issue_create",
                json!({"title": "Fix login", "body": "crash on submit"}),
            );
        }

        let prompts = c.request("prompts/list", json!({}));
        assert_eq!(
            names(ok(&prompts), "prompts", "name"),
            ["memory_context", "todo_reminder"],
            "sorted, from both servers"
        );
        let got = c.request(
            "prompts/get",
            json!({"name": "memory_context", "arguments": {"query": "where is the deploy key vault"}}),
        );
        let text = ok(&got)["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{got}"));
        assert!(text.contains("orchid"), "{text}");
        if era == Era::Modern {
            assert_eq!(ok(&got)["resultType"], "complete", "{got}");
        }
        let bad = c.request("prompts/get", json!({"name": "no_such_prompt"}));
        assert_eq!(err_code(&bad), -32602, "{bad}");

        let resources = c.request("resources/list", json!({}));
        assert_eq!(
            names(ok(&resources), "resources", "uri"),
            ["issues://open", "issues://1"]
        );
        let templates = c.request("resources/templates/list", json!({}));
        assert_eq!(
            names(ok(&templates), "resourceTemplates", "uriTemplate"),
            ["issues://{number}"]
        );
        let read = c.request("resources/read", json!({"uri": "issues://1"}));
        let text = ok(&read)["contents"][0]["text"].as_str().expect("text");
        assert!(text.contains("Fix login"), "{text}");
        if era == Era::Modern {
            assert_eq!(ok(&read)["resultType"], "complete", "{read}");
        }
        let open = c.request("resources/read", json!({"uri": "issues://open"}));
        assert!(
            ok(&open)["contents"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("#1 [open] Fix login")),
            "{open}"
        );
        // Routed by template to issues, which says it has no such issue.
        let missing = c.request("resources/read", json!({"uri": "issues://99"}));
        assert_eq!(err_code(&missing), not_found(era), "{missing}");
        assert!(
            missing["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("#99")),
            "the server's own message: {missing}"
        );
        // No server's scheme: the host answers without asking any child.
        let foreign = c.request("resources/read", json!({"uri": "nothing://here"}));
        assert_eq!(err_code(&foreign), not_found(era), "{foreign}");
        assert!(c.stdout_garbage().is_empty());
    }
}

/// Handshake era: `resources/subscribe` is held at the issues server and its
/// `notifications/resources/updated` comes back through the host.
#[test]
fn resource_subscriptions_relay_updates_handshake_era() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"issues": server("issues", d.path()), "memory": server("memory", d.path())}}),
    );
    let mut c = serve(d.path(), &cfg, &[], Era::Handshake);
    c.call_ok("issue_create", json!({"title": "one", "body": ""}));
    ok(&c.request("resources/subscribe", json!({"uri": "issues://1"})));
    c.take_notifications();
    c.call_ok("issue_comment", json!({"number": 1, "body": "looking"}));
    wait_notification(&c, "resources/updated", updated("issues://1"));
    ok(&c.request("resources/unsubscribe", json!({"uri": "issues://1"})));
    ok(&c.request("resources/unsubscribe", json!({"uri": "issues://1"})));
    std::thread::sleep(Duration::from_millis(400));
    c.take_notifications();
    c.call_ok("issue_comment", json!({"number": 1, "body": "again"}));
    std::thread::sleep(Duration::from_millis(800));
    let after: Vec<Value> = c
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/resources/updated")
        .collect();
    assert!(after.is_empty(), "unsubscribed: {after:?}");
    // A URI no server offers, or one whose server takes no subscriptions.
    let bad = c.request("resources/subscribe", json!({"uri": "file:///etc/passwd"}));
    assert_eq!(err_code(&bad), -32002, "{bad}");
}

/// 2026-07-28: resource subscriptions and prompt/resource list changes on a
/// `subscriptions/listen` stream.
#[test]
fn listen_streams_carry_resource_updates_and_list_changes() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg_path = d.path().join("agent.json");
    let write = |servers: Value| {
        std::fs::write(&cfg_path, json!({"mcp": servers}).to_string()).expect("w");
    };
    write(json!({"issues": server("issues", d.path())}));
    let mut c = serve(d.path(), &cfg_path, &[], Era::Modern);
    c.call_ok("issue_create", json!({"title": "one", "body": ""}));
    let listen = c.send_request(
        "subscriptions/listen",
        json!({"notifications": {
            "promptsListChanged": true,
            "resourcesListChanged": true,
            "resourceSubscriptions": ["issues://1", "nothing://x"]
        }}),
    );
    let ack = wait_notification(&c, "acknowledgment", |n| {
        n["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack["params"]["notifications"],
        json!({"promptsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": ["issues://1"]}),
        "a URI no server offers is not accepted: {ack}"
    );
    c.call_ok("issue_comment", json!({"number": 1, "body": "looking"}));
    let n = wait_notification(&c, "resources/updated on the stream", updated("issues://1"));
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen,
        "{n}"
    );
    // A reload adds memory: its prompt is announced on the stream.
    write(json!({"issues": server("issues", d.path()), "memory": server("memory", d.path())}));
    assert!(!c.call("host_reload", json!({})).is_error);
    // On the stream itself (the unscoped notification the calls' peer also gets has no id).
    wait_notification(&c, "prompts/list_changed on the stream", |n| {
        n["method"] == "notifications/prompts/list_changed"
            && n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == listen
    });
    let prompts = c.request("prompts/list", json!({}));
    assert_eq!(
        names(ok(&prompts), "prompts", "name"),
        ["memory_context", "todo_reminder"]
    );
    c.notify(
        "notifications/cancelled",
        json!({"requestId": listen, "reason": "done"}),
    );
}

/// The same server twice under two names: its prompts and resources collide; the first
/// configured keeps them, the other is reported; a prefix resolves a prompt collision.
#[test]
fn collisions_keep_the_first_server_and_are_reported() {
    let d = tempfile::tempdir().expect("tmp");
    let mut prefixed = server("memory", d.path());
    prefixed["prefix"] = json!("m3_");
    let cfg = write_config(
        d.path(),
        json!({"mcp": {
            "memory": server("memory", d.path()),
            "memory2": server("memory", d.path()),
            "memory3": prefixed,
            "issues": server("issues", d.path()),
            "issues2": server("issues", d.path()),
        }}),
    );
    let mut c = serve(d.path(), &cfg, &[], Era::Handshake);
    c.call_ok(
        "m3_memory_store",
        json!({"content": "tulips bloom in april"}),
    );
    c.call_ok("issue_create", json!({"title": "one", "body": ""}));
    let prompts = c.request("prompts/list", json!({}));
    assert_eq!(
        names(ok(&prompts), "prompts", "name"),
        ["m3_memory_context", "memory_context", "todo_reminder"]
    );
    let got = c.request(
        "prompts/get",
        json!({"name": "m3_memory_context", "arguments": {"query": "when do tulips bloom"}}),
    );
    assert!(
        ok(&got)["messages"][0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("april")),
        "routed to memory3 under its own name: {got}"
    );
    let resources = c.request("resources/list", json!({}));
    assert_eq!(
        names(ok(&resources), "resources", "uri"),
        ["issues://open", "issues://1"],
        "each URI once"
    );
    let status = c.call_ok("host_status", json!({})).structured;
    let collisions: Vec<&str> = status["collisions"]
        .as_array()
        .expect("collisions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        collisions.contains(
            &"prompt memory2.memory_context → memory_context: already offered by memory; set `prefix` for memory2"
        ),
        "{collisions:?}"
    );
    assert!(
        collisions
            .iter()
            .any(|c| c.starts_with("resources of issues2: 3 URIs already offered by issues")),
        "{collisions:?}"
    );
    assert!(
        collisions
            .iter()
            .any(|c| c.starts_with("prompt issues2.todo_reminder")),
        "{collisions:?}"
    );
    let servers = status["servers"].as_array().expect("servers");
    let of = |name: &str| {
        servers
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))
            .clone()
    };
    assert_eq!(of("memory")["prompts"], 1);
    assert_eq!(of("memory2")["prompts"], 0);
    assert_eq!(of("issues")["resources"], 2);
    assert_eq!(of("issues")["resource_templates"], 1);
    assert_eq!(of("issues2")["resources"], 0);
}

/// `initialize` and `server/discover` declare prompts and resources exactly when a server
/// behind the host serves them (and the agent may see it); what is declared answers.
#[test]
fn capabilities_declare_exactly_what_is_served() {
    let d = tempfile::tempdir().expect("tmp");
    let files = json!({"command": bin(), "args": ["server", "files", "--root", d.path()]});
    let cases = [
        (json!({"files": files}), None, None),
        (
            json!({"files": files, "memory": server("memory", d.path())}),
            Some(json!({"listChanged": true})),
            None,
        ),
        (
            json!({"issues": server("issues", d.path())}),
            Some(json!({"listChanged": true})),
            Some(json!({"subscribe": true, "listChanged": true})),
        ),
    ];
    for (servers, prompts, resources) in cases {
        let cfg = write_config(d.path(), json!({"mcp": servers}));
        for era in [Era::Handshake, Era::Modern] {
            let mut c = serve(d.path(), &cfg, &[], era);
            let mut declared = vec![c.opened["capabilities"].clone()];
            if era == Era::Modern {
                let again = c.request("server/discover", json!({}));
                declared.push(ok(&again)["capabilities"].clone());
            }
            for caps in declared {
                assert_eq!(caps["tools"], json!({"listChanged": true}), "{caps}");
                assert_eq!(caps.get("prompts"), prompts.as_ref(), "{servers}: {caps}");
                assert_eq!(
                    caps.get("resources"),
                    resources.as_ref(),
                    "{servers}: {caps}"
                );
            }
            // Every declared family answers.
            if prompts.is_some() {
                ok(&c.request("prompts/list", json!({})));
            }
            if resources.is_some() {
                ok(&c.request("resources/list", json!({})));
                ok(&c.request("resources/templates/list", json!({})));
            }
        }
    }
}

/// An agent sees the prompts and resources of the servers it may use a tool of: issues'
/// tools are root-only, so a non-root agent gets neither its resources nor its prompt.
#[test]
fn agent_profiles_hide_prompts_and_resources_of_servers_they_cannot_use() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = write_config(
        d.path(),
        json!({
            "mcp": {"memory": server("memory", d.path()), "issues": server("issues", d.path())},
            "agents": {"helper": {}, "boss": {"root": true}, "searcher": {"allow": ["memory_search"]}}
        }),
    );
    let mut boss = serve(d.path(), &cfg, &["--agent", "boss"], Era::Handshake);
    boss.call_ok("issue_create", json!({"title": "secret plan", "body": ""}));
    let prompts = boss.request("prompts/list", json!({}));
    assert_eq!(
        names(ok(&prompts), "prompts", "name"),
        ["memory_context", "todo_reminder"]
    );
    assert!(boss.opened["capabilities"].get("resources").is_some());

    for era in [Era::Handshake, Era::Modern] {
        let mut helper = serve(d.path(), &cfg, &["--agent", "helper"], era);
        let caps = &helper.opened["capabilities"];
        assert!(caps.get("resources").is_none(), "{caps}");
        assert_eq!(caps["prompts"], json!({"listChanged": true}), "{caps}");
        let prompts = helper.request("prompts/list", json!({}));
        assert_eq!(names(ok(&prompts), "prompts", "name"), ["memory_context"]);
        let hidden = helper.request("prompts/get", json!({"name": "todo_reminder"}));
        assert_eq!(err_code(&hidden), -32602, "{hidden}");
        let list = helper.request("resources/list", json!({}));
        assert_eq!(ok(&list)["resources"], json!([]), "{list}");
        let read = helper.request("resources/read", json!({"uri": "issues://1"}));
        assert_eq!(err_code(&read), not_found(era), "{read}");
    }
    // An allowlist naming one memory tool still shows memory's prompt.
    let mut searcher = serve(d.path(), &cfg, &["--agent", "searcher"], Era::Handshake);
    let prompts = searcher.request("prompts/list", json!({}));
    assert_eq!(names(ok(&prompts), "prompts", "name"), ["memory_context"]);
}

/// Handshake era: a reload that adds a server with prompts sends prompts/list_changed.
#[test]
fn reload_announces_prompt_and_resource_list_changes() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"memory": server("memory", d.path())}}),
    );
    let mut c = serve(d.path(), &cfg, &[], Era::Handshake);
    c.take_notifications();
    write_config(
        d.path(),
        json!({"mcp": {"memory": server("memory", d.path()), "issues": server("issues", d.path())}}),
    );
    assert!(!c.call("host_reload", json!({})).is_error);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let has = |seen: &[Value], m: &str| seen.iter().any(|n| n["method"] == m);
    while !(has(&seen, "notifications/prompts/list_changed")
        && has(&seen, "notifications/resources/list_changed"))
    {
        assert!(
            Instant::now() < deadline,
            "list changes not announced: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
        seen.extend(c.take_notifications());
    }
    let prompts = c.request("prompts/list", json!({}));
    assert_eq!(
        names(ok(&prompts), "prompts", "name"),
        ["memory_context", "todo_reminder"]
    );
}

/// The first notification `pred` picks, taken out of `seen` (the others arrived with it stay
/// there for the next look).
fn take_told(
    c: &McpClient,
    seen: &mut Vec<Value>,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        seen.extend(c.take_notifications());
        if let Some(i) = seen.iter().position(&pred) {
            return seen.remove(i);
        }
        assert!(Instant::now() < deadline, "no {what}: {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Background jobs of kitbag-shell through the host, in both eras: a subscription made before
/// the shell has started (it starts for it) hears the job's prompt and its end, and the
/// job's resource reads how it ended.
#[test]
fn shell_jobs_tell_subscribers_through_the_host() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"shell": server("shell", d.path())}}),
    );
    for era in [Era::Handshake, Era::Modern] {
        let mut c = serve(d.path(), &cfg, &[], era);
        assert_eq!(
            c.opened["capabilities"]["resources"]["subscribe"], true,
            "{}",
            c.opened
        );
        let uri = "shell://jobs/job-1";
        let stream = match era {
            Era::Handshake => {
                ok(&c.request("resources/subscribe", json!({"uri": uri})));
                None
            }
            Era::Modern => {
                let id = c.send_request(
                    "subscriptions/listen",
                    json!({"notifications": {"resourceSubscriptions": [uri]}}),
                );
                let ack = wait_notification(&c, "acknowledgment", |n| {
                    n["method"] == "notifications/subscriptions/acknowledged"
                });
                assert_eq!(
                    ack["params"]["notifications"]["resourceSubscriptions"],
                    json!([uri]),
                    "{ack}"
                );
                Some(id)
            }
        };
        let on_stream = |n: &Value| {
            stream.is_none_or(|id| {
                n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == id
            })
        };
        let mut seen = Vec::new();
        let r = c.call_ok(
            "shell_bash",
            json!({"command": "sleep 0.3; printf 'Continue? [y/N] '; read -r a </dev/tty; test \"$a\" = y", "background": true}),
        );
        assert_eq!(r.structured["job_id"], "job-1");
        take_told(&c, &mut seen, "the job waiting", |n| {
            updated("shell://jobs/job-1")(n) && on_stream(n)
        });
        let r = c.request("resources/read", json!({"uri": uri}));
        let text = ok(&r)["contents"][0]["text"].as_str().expect("text");
        assert!(
            text.starts_with("job-1: waiting for input on its terminal: \"Continue? [y/N]\""),
            "{text}"
        );
        // A log message says so too where the era has one outside a request.
        if era == Era::Handshake {
            let told = take_told(&c, &mut seen, "the prompt", |n| {
                n["method"] == "notifications/message"
                    && n["params"]["data"]["waiting_for_input"] == true
            });
            assert_eq!(
                told["params"]["data"]["prompt"], "Continue? [y/N]",
                "{told}"
            );
        }
        c.call_ok("shell_input", json!({"job_id": "job-1", "text": "y\n"}));
        take_told(&c, &mut seen, "the job ended", |n| {
            updated("shell://jobs/job-1")(n) && on_stream(n)
        });
        if era == Era::Handshake {
            let ended = take_told(&c, &mut seen, "the end", |n| {
                n["method"] == "notifications/message" && n["params"]["data"]["job_id"] == "job-1"
            });
            assert_eq!(ended["params"]["data"]["exit_code"], 0, "{ended}");
        }
        let r = c.request("resources/read", json!({"uri": uri}));
        let text = ok(&r)["contents"][0]["text"].as_str().expect("text");
        assert!(text.starts_with("job-1: exited with code 0\n"), "{text}");
    }
}
