//! Servers that start on their first call and stop when unused: cron waits while it has
//! nothing to fire, an unused server stops and its next call starts it again, and an external
//! server marked `"lazy": true` waits too once the host has kept its catalog.

use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    d
}

fn write_config(dir: &Path, cfg: Value) -> PathBuf {
    let p = dir.join("agent.json");
    std::fs::write(&p, serde_json::to_string_pretty(&cfg).expect("json")).expect("w");
    p
}

fn names(c: &mut McpClient) -> Vec<String> {
    c.list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect()
}

/// `server` as `host_status` reports it.
fn server_status(c: &mut McpClient, server: &str) -> Value {
    let s = c.call("host_status", json!({}));
    s.structured["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|x| x["name"] == server)
        .cloned()
        .unwrap_or_else(|| panic!("{server} not in {:#}", s.structured))
}

/// The client was told of no change to the tool list.
fn no_list_change(c: &mut McpClient, why: &str) {
    let told = c
        .take_notifications()
        .iter()
        .any(|n| n["method"] == "notifications/tools/list_changed");
    assert!(!told, "{why}");
}

/// Whether a `kitbag server FAMILY --root ROOT` process runs.
fn running(family: &str, root: &str) -> bool {
    !kitbag_testkit::pids_with_cmdline(&format!("server\0{family}\0--root\0{root}\0")).is_empty()
}

/// cron waits while it has nothing to fire; its first call (here the entry it makes) starts its
/// scheduler, and a host started on a root with an entry starts cron with itself, so the
/// entry fires without any call.
#[test]
fn cron_starts_with_the_host_once_it_has_an_entry() {
    let d = project();
    let root = d.path().to_str().expect("utf8").to_string();
    let running = || running("cron", &root);
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Modern);
    names(&mut c);
    assert!(!running(), "no entry: cron waits");
    let r = c.call(
        "cron_create",
        json!({"schedule": "@daily", "message": "digest"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert!(running(), "the call started cron");
    c.shutdown();
    kitbag_testkit::wait_until("no server of the host left", 10, || !running());
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Modern);
    // Listed from its catalog at once; started in the background, not waited for.
    assert!(names(&mut c).iter().any(|n| n == "cron_create"));
    kitbag_testkit::wait_until("an entry to fire: cron starts with the host", 10, running);
    kitbag_testkit::wait_until("cron ready", 10, || {
        server_status(&mut c, "cron")["state"] == "ready"
    });
    // Its own list is the catalog's: no change to announce once it is up.
    names(&mut c);
    no_list_change(&mut c, "cron's start changed nothing in the list");
    c.shutdown();
}

/// A server unused for its `idle_stop_secs` stops and waits for its next call again, which
/// starts it and is answered right; a call in flight longer than that keeps it running.
#[test]
fn an_unused_server_stops_and_its_next_call_starts_it_again() {
    let d = project();
    let root = d.path().to_str().expect("utf8").to_string();
    let entry = |family: &str| json!({"command": bin(), "args": ["server", family, "--root", root], "idle_stop_secs": 1});
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"search": entry("search"), "shell": entry("shell")}}),
    );
    let running = |family: &str| running(family, &root);
    let cfg = cfg.to_str().expect("utf8");
    let mut c = McpClient::spawn(bin(), &["--config", cfg, "serve"], d.path(), Era::Modern);
    names(&mut c);
    let grep = json!({"pattern": "beta"});
    let first = c.call("search_grep", grep.clone());
    assert!(!first.is_error, "{:?}", first.raw);
    assert!(running("search"));
    kitbag_testkit::wait_until("search stops unused", 10, || !running("search"));
    let search = server_status(&mut c, "search");
    assert_eq!(search["state"], "idle", "{search:#}");
    let again = c.call("search_grep", grep);
    assert_eq!(again.structured, first.structured, "{:?}", again.raw);
    assert!(running("search"));
    // A call of 2.5 s on a server that stops after 1 s unused: answered, not cut.
    let r = c.call("shell_bash", json!({"command": "sleep 2.5; echo done"}));
    assert!(!r.is_error && r.text.contains("done"), "{:?}", r.raw);
    kitbag_testkit::wait_until("shell stops unused", 10, || !running("shell"));
    no_list_change(&mut c, "stopping and starting again changes no list");
    c.shutdown();
    kitbag_testkit::wait_until("no server of the host left", 10, || {
        kitbag_testkit::pids_with_cmdline(&root).is_empty()
    });
}

/// An external server marked `"lazy": true` starts with the host the first time, which keeps
/// its catalog; the next host lists its tools without starting it, and the first call starts
/// it. A changed entry is another server: it starts with the host again.
#[test]
fn a_lazy_external_server_waits_once_its_catalog_is_kept() {
    let d = project();
    let cache = tempfile::tempdir().expect("tmp");
    let root = d.path().to_str().expect("utf8").to_string();
    // Through `sh`: for the host, a server of another program.
    let entry = |extra: &[&str]| {
        let mut args = vec![
            "-c",
            "exec \"$0\" \"$@\"",
            bin().to_str().expect("utf8"),
            "server",
            "files",
            "--root",
            &root,
        ];
        args.extend_from_slice(extra);
        json!({"command": "sh", "args": args, "lazy": true})
    };
    let env = [("KITBAG_CACHE_DIR", cache.path().to_str().expect("utf8"))];
    let start = |entry: Value| {
        let cfg = write_config(d.path(), json!({"mcp": {"ext": entry}}));
        let cfg = cfg.to_str().expect("utf8").to_string();
        let mut c = McpClient::spawn_with_env(
            bin(),
            &["--config", &cfg, "serve"],
            d.path(),
            Era::Modern,
            &env,
        );
        let list = names(&mut c);
        assert!(list.contains(&"file_read".to_string()), "{list:?}");
        c
    };
    let c = start(entry(&[]));
    assert!(
        running("files", &root),
        "no catalog kept yet: it starts with the host"
    );
    c.shutdown();
    kitbag_testkit::wait_until("the server stops with its host", 10, || {
        !running("files", &root)
    });
    let kept = std::fs::read_dir(cache.path()).expect("cache").count();
    assert_eq!(kept, 1, "one catalog kept");

    let mut c = start(entry(&[]));
    assert!(!running("files", &root), "its catalog is kept: it waits");
    assert_eq!(server_status(&mut c, "ext")["state"], "idle");
    let r = c.call("file_read", json!({"path": "a.txt"}));
    assert_eq!(r.text, "1: alpha\n2: beta", "{:?}", r.raw);
    assert!(running("files", &root));
    no_list_change(&mut c, "the kept catalog was the server's list");
    c.shutdown();
    kitbag_testkit::wait_until("the server stops with its host", 10, || {
        !running("files", &root)
    });

    let c = start(entry(&["--read-only"]));
    assert!(
        running("files", &root),
        "another entry: started with the host"
    );
    c.shutdown();
}

/// The tools sorted by name, as JSON values.
fn by_name(mut tools: Vec<Value>) -> Vec<Value> {
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    tools
}

/// A handshake client's `tools/list` is answered from the compiled-in catalogs' text, a
/// 2026-07-28 client's through rmcp from parsed tools: the two are the same list — with
/// renames, filters and the host's own tools, before and after a family starts.
#[test]
fn the_list_spliced_from_compiled_catalogs_is_the_parsed_list() {
    let d = project();
    let root = d.path().to_str().expect("utf8").to_string();
    let entry =
        |family: &str| json!({"command": bin(), "args": ["server", family, "--root", root]});
    let mut files = entry("files");
    files["prefix"] = json!("fs_");
    let mut search = entry("search");
    search["disabled_tools"] = json!(["search_glob"]);
    search["aliases"] = json!({"search_grep": "grep"});
    let cfg = write_config(
        d.path(),
        json!({"mcp": {"files": files, "search": search, "shell": entry("shell"), "vm": entry("vm")}}),
    );
    let cfg = cfg.to_str().expect("utf8");
    let mut spliced =
        McpClient::spawn(bin(), &["--config", cfg, "serve"], d.path(), Era::Handshake);
    let mut parsed = McpClient::spawn(bin(), &["--config", cfg, "serve"], d.path(), Era::Modern);
    let list = by_name(spliced.list_tools());
    assert_eq!(list, by_name(parsed.list_tools()));
    let names: Vec<&str> = list.iter().filter_map(|t| t["name"].as_str()).collect();
    for offered in [
        "fs_file_read",
        "grep",
        "shell_bash",
        "instance_spawn",
        "host_status",
    ] {
        assert!(names.contains(&offered), "{offered} in {names:?}");
    }
    for gone in ["file_read", "search_glob", "search_grep"] {
        assert!(!names.contains(&gone), "{gone} in {names:?}");
    }
    // Started, files lists what its catalog said: the list stays the same, byte for byte.
    let r = spliced.call("fs_file_read", json!({"path": "a.txt"}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert!(running("files", &root));
    assert_eq!(by_name(spliced.list_tools()), list);
    spliced.shutdown();
    parsed.shutdown();
    // And the handshake client's list did come from the text, not through rmcp — also when
    // the client sent it right behind `initialize`, whose answer still comes first.
    let args = ["--config", cfg, "--log-level", "debug", "serve"];
    for pipelined in [false, true] {
        assert!(
            listed_from_text(&args, d.path(), pipelined),
            "the stdio front answered tools/list itself (pipelined: {pipelined})"
        );
    }
}

/// Whether a host run with `args` says it answered a handshake client's `tools/list` from
/// the catalogs' text. `pipelined`: the client sends `initialize`, `initialized` and
/// `tools/list` at once instead of waiting for the handshake's answer.
fn listed_from_text(args: &[&str], dir: &Path, pipelined: bool) -> bool {
    use std::io::{BufRead, Read, Write};
    let mut host = std::process::Command::new(bin())
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("host starts");
    let mut stdin = host.stdin.take().expect("piped");
    let mut stdout = std::io::BufReader::new(host.stdout.take().expect("piped"));
    let mut line = String::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": kitbag_testkit::HANDSHAKE_VERSION, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let rest = concat!(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        "\n"
    );
    if pipelined {
        write!(stdin, "{init}\n{rest}").expect("write");
    } else {
        writeln!(stdin, "{init}").expect("write");
    }
    stdout.read_line(&mut line).expect("initialize answered");
    assert!(
        line.contains(r#""id":1,"result""#),
        "the handshake first: {line}"
    );
    if !pipelined {
        write!(stdin, "{rest}").expect("w");
    }
    line.clear();
    stdout.read_line(&mut line).expect("tools/list answered");
    assert!(line.contains(r#""id":2,"result":{"tools":["#), "{line}");
    drop(stdin);
    let mut said = String::new();
    host.stderr
        .take()
        .expect("piped")
        .read_to_string(&mut said)
        .expect("stderr");
    let _ = host.wait();
    said.contains("tools/list answered from the catalogs' text")
}
