//! The host with real kitbag servers behind it (its own embedded families).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    d
}

fn write_config(dir: &Path, name: &str, cfg: Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&cfg).expect("json")).expect("w");
    p
}

fn files_entry(root: &Path) -> Value {
    json!({"command": bin(), "args": ["server", "files", "--root", root]})
}

fn names(c: &mut McpClient) -> Vec<String> {
    c.list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn embedded_default_offers_one_sorted_list_in_both_eras() {
    let d = project();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), era);
        let list = names(&mut c);
        let mut sorted = list.clone();
        sorted.sort();
        assert_eq!(list, sorted, "deterministic, sorted");
        for t in [
            "file_read",
            "edit_text",
            "search_grep",
            "search_ast",
            "shell_bash",
            "web_fetch",
            "memory_store",
            "debug",
            "code_lsp",
            "issue_list",
            "todo",
            "cron_list",
            "host_status",
        ] {
            assert!(list.contains(&t.to_string()), "{t} missing from {list:?}");
        }
        let r = c.call("file_read", json!({"path": "a.txt"}));
        assert!(!r.is_error, "{}", r.text);
        assert_eq!(r.text, "1: alpha\n2: beta");
        assert!(c.stdout_garbage().is_empty());
    }
}

/// An agent.json without a server list (one that only sets the model and declares an agent)
/// serves the embedded default, as no agent.json does; `"mcp": {}` serves no server; its
/// settings and agents apply either way (issue #39 §3).
#[test]
fn an_agent_json_without_servers_serves_the_embedded_default() {
    let d = project();
    let default_names = {
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Handshake);
        names(&mut c)
    };
    write_config(
        d.path(),
        "agent.json",
        json!({"model": "anthropic/claude-test", "agents": {"main": {"root": true}}}),
    );
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Handshake);
    // The same servers; with a file to re-read, `host_reload` joins the host's own tools.
    let mut want = default_names.clone();
    want.push("host_reload".into());
    want.sort();
    assert_eq!(names(&mut c), want);
    let r = c.call("file_read", json!({"path": "a.txt"}));
    assert_eq!(r.text, "1: alpha\n2: beta", "{}", r.text);
    let empty = write_config(d.path(), "none.json", json!({"mcp": {}}));
    let mut c = McpClient::spawn(
        bin(),
        &["--config", &empty.to_string_lossy(), "serve"],
        d.path(),
        Era::Handshake,
    );
    // The host's own tools.
    assert_eq!(
        names(&mut c),
        ["agent_delegate", "host_reload", "host_status"]
    );
}

/// The embedded families start on their first call: `kitbag serve` lists every tool with no
/// server running (cron has no entry to fire yet); `file_read` starts the files server (that call answers
/// right); a prompt list starts the servers that declare prompts; `kitbag doctor` starts them
/// all. Nothing outlives the host.
#[test]
fn waiting_families_start_on_their_first_call() {
    let d = project();
    let root = d.path().to_str().expect("utf8").to_string();
    let running = |family: &str| {
        !kitbag_testkit::pids_with_cmdline(&format!("server\0{family}\0--root\0{root}\0"))
            .is_empty()
    };
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Modern);
    let list = names(&mut c);
    assert!(list.contains(&"file_read".to_string()), "{list:?}");
    assert!(list.contains(&"instance_spawn".to_string()), "{list:?}");
    for family in [
        "files", "search", "shell", "web", "lsp", "dap", "vm", "memory", "issues", "cron",
    ] {
        assert!(!running(family), "{family} waits for its first call");
    }
    // Its handshake declared what the waiting servers serve besides tools.
    let caps = &c.opened["capabilities"];
    assert!(
        caps.get("prompts").is_some() && caps.get("resources").is_some(),
        "{caps}"
    );
    let s = status(&mut c);
    let state = |s: &Value, name: &str| {
        s["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .find(|x| x["name"] == name)
            .map(|x| x["state"].clone())
            .unwrap_or_default()
    };
    assert_eq!(state(&s, "files"), "idle", "{s:#}");
    let r = c.call("file_read", json!({"path": "a.txt"}));
    assert_eq!(r.text, "1: alpha\n2: beta", "{:?}", r.raw);
    assert!(running("files"));
    let s = status(&mut c);
    assert_eq!(state(&s, "files"), "ready", "{s:#}");
    // The first call paid the start: host_status reports how long it took.
    let files = s["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|x| x["name"] == "files")
        .expect("files");
    assert!(files["ready_ms"].is_u64(), "{files}");
    // The first call started only its own server; the list never changed.
    assert!(!running("search") && !running("memory"));
    let prompts = c.request("prompts/list", json!({}));
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(!names.is_empty(), "{prompts}");
    assert!(running("memory") && running("issues"));
    assert!(
        !c.take_notifications()
            .iter()
            .any(|n| n["method"] == "notifications/tools/list_changed"),
        "the started server listed what the host already offered"
    );
    c.shutdown();
    kitbag_testkit::wait_until("no server of the host left", 10, || {
        kitbag_testkit::pids_with_cmdline(&root).is_empty()
    });
    // doctor checks every server: it starts them all.
    let out = Command::new(bin())
        .arg("doctor")
        .current_dir(d.path())
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    for family in [
        "files", "search", "shell", "web", "lsp", "dap", "vm", "memory", "issues", "cron",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!(" {family} ")) && l.contains("ready")),
            "{family}: {text}"
        );
    }
}

#[test]
fn agent_json_expansion_prefix_and_collisions() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {
            "a": {"command": bin(), "args": ["server", "files", "--root", "${KITBAG_TEST_NEVER_SET:-.}"], "cwd": d.path()},
            "b": {"command": bin(), "args": ["server", "files", "--root", "."], "cwd": d.path()},
            "c": {"command": bin(), "args": ["server", "files", "--root", "."], "cwd": d.path(), "prefix": "c_", "enabled_tools": ["file_read"]}
        }}),
    );
    let out = Command::new(bin())
        .args(["--config", cfg.to_str().expect("u"), "doctor"])
        .current_dir(d.path())
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "unresolved collisions are a problem:\n{text}"
    );
    assert!(
        text.contains("collision: b.file_read → file_read: already offered by a"),
        "{text}"
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let list = names(&mut c);
    assert!(list.contains(&"c_file_read".to_string()), "{list:?}");
    assert!(
        !list.contains(&"c_file_write".to_string()),
        "enabled_tools filters: {list:?}"
    );
    let r = c.call("c_file_read", json!({"path": "a.txt"}));
    assert!(!r.is_error, "{}", r.text);
}

#[test]
fn claude_code_mcp_json_is_imported() {
    let d = project();
    write_config(
        d.path(),
        ".mcp.json",
        json!({"mcpServers": {"files": {"type": "stdio", "command": bin(), "args": ["server", "files"], "description": "ignored"}}}),
    );
    // A client's file is read only when named: it usually lists this very host.
    let out = Command::new(bin())
        .args(["--config", ".mcp.json", "tools", "--json"])
        .current_dir(d.path())
        .output()
        .expect("tools");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let list: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("n"))
        .collect();
    assert_eq!(
        list,
        [
            "agent_delegate",
            "checkpoint",
            "checkpoint_list",
            "checkpoint_restore",
            "edit_patch",
            "edit_text",
            "file_create",
            "file_delete",
            "file_list",
            "file_move",
            "file_read",
            "file_write",
            "host_reload",
            "host_status"
        ]
    );
}

#[test]
fn doctor_reports_a_missing_binary_and_an_unset_variable() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {
            "files": files_entry(d.path()),
            "ghost": {"command": "/nonexistent/kitbag-ghost"},
            "needs_var": {"command": "${KITBAG_TEST_NEVER_SET_2}"}
        },
        // Seed 004's map with a glob that names no kitbag tool: said, not dropped.
        "agents": {"coder": {"tools": {"file.*": {"enabled": true}, "lsp.*": {"enabled": true}}}}}),
    );
    let out = Command::new(bin())
        .args(["--config", cfg.to_str().expect("u"), "doctor"])
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("ok   files"), "{text}");
    assert!(
        text.contains("note: agents.coder: `lsp.*` matches no tool this host offers"),
        "{text}"
    );
    assert!(!text.contains("`file.*` matches no tool"), "{text}");
    assert!(
        text.contains("FAIL ghost") && text.contains("cannot start `/nonexistent/kitbag-ghost`"),
        "{text}"
    );
    assert!(
        text.contains("FAIL needs_var") && text.contains("KITBAG_TEST_NEVER_SET_2"),
        "{text}"
    );
    // A syntax error names line and column.
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "{\n  \"mcp\": {,}\n}").expect("w");
    let out = Command::new(bin())
        .args(["--config", bad.to_str().expect("u"), "doctor"])
        .output()
        .expect("doctor");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.json:2:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn status(c: &mut McpClient) -> Value {
    let r = c.call("host_status", json!({}));
    assert!(!r.is_error, "{}", r.text);
    r.structured
}

/// host_status listed every agent session of the project whole: 600 sessions were ~80 KB. The
/// list now takes what the rest of the answer leaves of the 40,000-byte budget and says how
/// many there are.
#[test]
fn host_status_holds_the_result_budget_with_many_sessions() {
    let d = project();
    let sessions = d.path().join(".kitbag/sessions");
    std::fs::create_dir_all(&sessions).expect("mkdir");
    for i in 0..600 {
        std::fs::write(sessions.join(format!("session-{i:04}.jsonl")), "").expect("w");
    }
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"files": files_entry(d.path())}}),
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let s = status(&mut c);
    let size = serde_json::to_vec(&s).expect("json").len();
    assert!(size < 40_000, "{size}");
    assert_eq!(s["sessions_total"], 600);
    assert_eq!(s["sessions_truncated"], true);
    let shown = s["sessions"].as_array().expect("sessions").len();
    assert!(shown > 100 && shown < 600, "{shown}");
    assert_eq!(s["sessions"][0]["name"], "session-0000");
}

#[test]
fn crashed_child_restarts_keeps_its_tools_and_nothing_is_left_behind() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"files": {"command": bin(), "args": ["server", "files", "--root", d.path()], "lazy": false}}}),
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let s = status(&mut c);
    let pid = s["servers"][0]["pid"].as_u64().expect("pid") as u32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    // Meanwhile the tools stay listed and a call gets a clear answer, never a hang.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        names(&mut c).contains(&"file_read".to_string())
            || status(&mut c)["servers"][0]["state"] == "restarting"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = c.call("file_read", json!({"path": "a.txt"}));
        if !r.is_error {
            break;
        }
        assert!(
            r.text.contains("restarting") || r.text.contains("exited"),
            "{}",
            r.text
        );
        assert!(Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = status(&mut c);
    assert_eq!(s["servers"][0]["restarts"], 1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !c.take_notifications()
            .iter()
            .any(|n| n["method"] == "notifications/tools/list_changed"),
        "a restart with the same tools is not a list change"
    );
    assert_eq!(s["servers"][0]["state"], "ready");
    let new_pid = s["servers"][0]["pid"].as_u64().expect("pid") as u32;
    assert_ne!(new_pid, pid);
    c.shutdown();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(new_pid) {
        assert!(
            Instant::now() < deadline,
            "child {new_pid} outlived the host"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn progress_passes_through_with_the_callers_token() {
    let d = project();
    for i in 0..1500 {
        std::fs::write(
            d.path().join(format!("f{i}.txt")),
            "alpha beta gamma delta\n".repeat(300),
        )
        .expect("w");
    }
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"search": {"command": bin(), "args": ["server", "search", "--root", d.path(), "--progress-interval-ms", "5"]}}}),
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let r = c.call_with_progress(
        "search_grep",
        json!({"pattern": "(?i)(\\w+\\s+){6}zzz", "output_mode": "count"}),
        "caller-token-7",
    );
    assert!(!r.is_error, "{}", r.text);
    let progress: Vec<Value> = c
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "progress forwarded");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "caller-token-7"),
        "{progress:?}"
    );
}

#[test]
fn unknown_tool_and_bad_arguments() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"files": files_entry(d.path())}}),
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let r = c.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert!(r.get("error").is_some(), "{r}");
    let r = c.call("file_read", json!({"path": ""}));
    assert_eq!(
        r.error_code(),
        Some("invalid_params"),
        "the child's typed error passes through"
    );
    let out = Command::new(bin())
        .args([
            "--config",
            cfg.to_str().expect("u"),
            "call",
            "file_read",
            "[1,2]",
        ])
        .output()
        .expect("call");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be a JSON object"));
}

#[test]
fn agent_profiles_hide_and_refuse_tools() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({
            "mcp": {"files": files_entry(d.path())},
            "tool_privileges": {"writers": ["file_write", "file_create", "edit_text", "file_delete", "file_move"]},
            "agents": {
                "reviewer": {},
                "editor": {"privilege_groups": ["writers"]},
                "narrow": {"allow": ["file_read"]}
            }
        }),
    );
    let c_path = cfg.to_str().expect("u");
    let mut reviewer = McpClient::spawn(
        bin(),
        &["--config", c_path, "--agent", "reviewer", "serve"],
        d.path(),
        Era::Handshake,
    );
    let list = names(&mut reviewer);
    assert!(
        list.contains(&"file_read".to_string()) && list.contains(&"file_list".to_string()),
        "{list:?}"
    );
    assert!(
        !list.contains(&"file_write".to_string()),
        "privileged tools hidden: {list:?}"
    );
    let r = reviewer.call("file_create", json!({"path": "new.txt", "content": "x"}));
    assert_eq!(r.error_code(), Some("capability_denied"), "{}", r.text);
    assert!(r.text.contains("writers"), "{}", r.text);
    // A seed's name for a privileged tool is that tool to the policy.
    for alias in ["write_file", "file.write"] {
        let r = reviewer.call(alias, json!({"path": "new.txt", "content": "x"}));
        assert_eq!(
            r.error_code(),
            Some("capability_denied"),
            "{alias}: {}",
            r.text
        );
    }
    assert!(!d.path().join("new.txt").exists(), "nothing written");
    let mut editor = McpClient::spawn(
        bin(),
        &["--config", c_path, "--agent", "editor", "serve"],
        d.path(),
        Era::Handshake,
    );
    let r = editor.call("file_create", json!({"path": "new.txt", "content": "x"}));
    assert!(!r.is_error, "{}", r.text);
    let mut narrow = McpClient::spawn(
        bin(),
        &["--config", c_path, "--agent", "narrow", "serve"],
        d.path(),
        Era::Handshake,
    );
    assert_eq!(names(&mut narrow), ["file_read", "host_status"]);
    assert_eq!(
        narrow.call("file_list", json!({})).error_code(),
        Some("capability_denied")
    );
    let out = Command::new(bin())
        .args(["--config", c_path, "--agent", "nobody", "tools"])
        .output()
        .expect("tools");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such agent"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn audit_log_has_one_line_per_call() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({
            "mcp": {"files": files_entry(d.path())},
            "agents": {"narrow": {"allow": ["file_read"]}}
        }),
    );
    let log = d.path().join("logs/audit.jsonl");
    let mut c = McpClient::spawn(
        bin(),
        &[
            "--config",
            cfg.to_str().expect("u"),
            "--agent",
            "narrow",
            "--audit-log",
            log.to_str().expect("u"),
            "serve",
        ],
        d.path(),
        Era::Handshake,
    );
    assert!(!c.call("file_read", json!({"path": "a.txt"})).is_error);
    assert_eq!(
        c.call("file_read", json!({"path": ""})).error_code(),
        Some("invalid_params")
    );
    assert_eq!(
        c.call("file_list", json!({})).error_code(),
        Some("capability_denied")
    );
    c.shutdown();
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .expect("audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let calls: Vec<&Value> = lines.iter().filter(|l| l["event"] == "tool.call").collect();
    assert_eq!(calls.len(), 3, "{lines:#?}");
    assert_eq!(calls[0]["ok"], true);
    assert_eq!(calls[0]["server"], "files");
    assert_eq!(calls[0]["agent"], "narrow");
    assert!(calls[0]["duration_ms"].as_f64().is_some());
    assert_eq!(calls[1]["error_code"], "invalid_params");
    assert_eq!(calls[2]["error_code"], "capability_denied");
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "tool.denied" && l["tool"] == "file_list")
    );
}

#[test]
fn reload_by_tool_and_by_sighup_keeps_the_connection() {
    let d = project();
    let cfg_path = d.path().join("agent.json");
    let write =
        |servers: Value| std::fs::write(&cfg_path, json!({"mcp": servers}).to_string()).expect("w");
    write(json!({"files": files_entry(d.path())}));
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg_path.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let before = status(&mut c);
    let files_pid = before["servers"][0]["pid"].clone();
    // Add a second, prefixed files server and reload through the tool.
    let mut second = files_entry(d.path());
    second["prefix"] = json!("b_");
    write(json!({"files": files_entry(d.path()), "second": second}));
    let r = c.call("host_reload", json!({}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["started"], json!(["second"]));
    assert_eq!(r.structured["unchanged"], json!(["files"]));
    assert!(names(&mut c).contains(&"b_file_read".to_string()));
    assert!(!c.call("b_file_read", json!({"path": "a.txt"})).is_error);
    assert_eq!(
        status(&mut c)["servers"][0]["pid"],
        files_pid,
        "an unchanged server keeps running"
    );
    std::thread::sleep(Duration::from_millis(300)); // the notification is debounced
    assert!(
        c.take_notifications()
            .iter()
            .any(|n| n["method"] == "notifications/tools/list_changed"),
        "the client is told the list changed"
    );
    // Remove it again, this time with SIGHUP.
    let second_pid = status(&mut c)["servers"][1]["pid"].as_u64().expect("pid") as u32;
    write(json!({"files": files_entry(d.path())}));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("hup");
    let deadline = Instant::now() + Duration::from_secs(10);
    while names(&mut c).contains(&"b_file_read".to_string()) {
        assert!(Instant::now() < deadline, "SIGHUP reload never applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(second_pid) {
        assert!(Instant::now() < deadline, "the removed server kept running");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A broken config changes nothing.
    std::fs::write(&cfg_path, "{ not json").expect("w");
    let r = c.call("host_reload", json!({}));
    assert!(r.is_error);
    assert!(r.text.contains("nothing changed"), "{}", r.text);
    assert!(!c.call("file_read", json!({"path": "a.txt"})).is_error);
}

#[test]
fn cancellation_passes_through_to_the_child() {
    let d = project();
    for i in 0..1500 {
        std::fs::write(
            d.path().join(format!("f{i}.txt")),
            "alpha beta gamma delta\n".repeat(300),
        )
        .expect("w");
    }
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"search": {"command": bin(), "args": ["server", "search", "--root", d.path()]}}}),
    );
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        d.path(),
        Era::Handshake,
    );
    let slow = json!({"name": "search_grep", "arguments": {"pattern": "(?i)(\\w+\\s+){8}zzz", "output_mode": "count"}});
    let started = Instant::now();
    let id = c.send_request("tools/call", slow);
    std::thread::sleep(Duration::from_millis(30));
    c.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    // The host and the child keep serving; the cancelled call ends promptly.
    let r = c.call(
        "search_grep",
        json!({"pattern": "alpha", "path": "f0.txt", "output_mode": "count"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["counts"][0]["count"], 300);
    assert!(started.elapsed() < Duration::from_secs(20));
    let s = c.call("host_status", json!({}));
    assert_eq!(
        s.structured["servers"][0]["restarts"], 0,
        "cancellation is not a crash"
    );
}

#[test]
fn cli_call_draws_progress_on_stderr() {
    let d = project();
    for i in 0..1500 {
        std::fs::write(
            d.path().join(format!("f{i}.txt")),
            "alpha beta gamma delta\n".repeat(300),
        )
        .expect("w");
    }
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"search": {"command": bin(), "args": ["server", "search", "--root", d.path(), "--progress-interval-ms", "5"]}}}),
    );
    let out = Command::new(bin())
        .args([
            "--config",
            cfg.to_str().expect("u"),
            "call",
            "search_grep",
            r#"{"pattern": "(?i)(\\w+\\s+){6}zzz", "output_mode": "count"}"#,
        ])
        .output()
        .expect("call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[progress") && stderr.contains("files searched"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no matches"),
        "the result goes to stdout"
    );
}

#[test]
fn bare_kitbag_on_a_terminal_shows_status_and_on_a_pipe_serves() {
    let d = project();
    let cmd = format!("{} ", bin().display());
    match Command::new("script")
        .args(["-qc", &cmd, "/dev/null"])
        .current_dir(d.path())
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("ok   files") && text.contains("claude mcp add kitbag"),
                "{text}"
            );
        }
        Err(e) => {
            assert!(
                std::env::var("CI").is_err(),
                "`script` (util-linux) is needed under CI: {e}"
            );
            eprintln!("SKIP terminal half: no `script` here ({e})");
        }
    }
    // On a pipe it speaks MCP.
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    assert!(names(&mut c).contains(&"file_read".to_string()));
}

#[test]
fn kitbag_env_overrides_beat_the_file_which_beats_defaults() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({
            "model": "anthropic/claude-sonnet",
            "max_tokens": 8192,
            "tool_timeout_sec": 600,
            "mcp": {"shell": {"command": bin(), "args": ["server", "shell", "--root", d.path()]}}
        }),
    );
    let cfg = cfg.to_str().expect("utf8");
    let mut c = McpClient::spawn_with_env(
        bin(),
        &["--config", cfg, "serve"],
        d.path(),
        Era::Modern,
        &[
            ("KITBAG_MAX_TOKENS", "1000"),
            ("KITBAG_TOOL_TIMEOUT_SEC", "1"),
        ],
    );
    let s = c.call("host_status", json!({}));
    let setting = |k: &str| {
        s.structured["settings"]
            .as_array()
            .expect("settings")
            .iter()
            .find(|x| x["key"] == k)
            .cloned()
            .expect("setting")
    };
    assert_eq!(setting("max_tokens")["value"], 1000);
    assert_eq!(setting("max_tokens")["source"], "env");
    assert_eq!(setting("model")["value"], "anthropic/claude-sonnet");
    assert_eq!(setting("model")["source"], "file");
    assert_eq!(setting("context_turns")["source"], "default");
    assert_eq!(setting("tool_timeout_sec")["value"], 1);
    // The override is in force: a 5 s command is cut off after the 1 s tool timeout.
    let t = Instant::now();
    let r = c.call("shell_bash", json!({"command": "sleep 5"}));
    assert!(r.is_error, "{}", r.text);
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // A malformed override stops the host with a message naming the variable.
    let out = Command::new(bin())
        .args(["--config", cfg, "doctor"])
        .env("KITBAG_CONTEXT_CHARS", "many")
        .current_dir(d.path())
        .output()
        .expect("doctor");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KITBAG_CONTEXT_CHARS=many"), "{err}");
    // doctor lists the settings that are not defaults, with their source.
    let out = Command::new(bin())
        .args(["--config", cfg, "doctor"])
        .env("KITBAG_MODEL", "openai/gpt")
        .current_dir(d.path())
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("model = \"openai/gpt\" (from KITBAG_MODEL)"),
        "{text}"
    );
    assert!(text.contains("max_tokens = 8192 (from config)"), "{text}");
}

#[test]
fn host_catalog_of_its_own_tools() {
    // With no servers configured the list is the host's own tools, checked against
    // manifests/host/tools.json — with a model reachable, so the subagent job tools are in it.
    let d = project();
    let cfg = write_config(d.path(), "agent.json", json!({"mcp": {}}));
    let mut c = McpClient::spawn_with_env(
        bin(),
        &["--config", cfg.to_str().expect("utf8"), "serve"],
        d.path(),
        Era::Handshake,
        &[("ANTHROPIC_API_KEY", "sk-catalog")],
    );
    let path = kitbag_testkit::workspace_root(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/host/tools.json");
    kitbag_testkit::assert_catalog_matches(&mut c, &path);
    assert_eq!(
        names(&mut c),
        vec![
            "agent_delegate",
            "agent_job_result",
            "agent_job_start",
            "agent_job_status",
            "host_reload",
            "host_status"
        ]
    );
}

#[test]
fn reload_rereads_the_agent_profile() {
    let d = project();
    let write = |allow: Value| {
        write_config(
            d.path(),
            "agent.json",
            json!({"mcp": {"files": files_entry(d.path())},
                "agents": {"a": {"allow": allow}}}),
        )
    };
    let cfg = write(json!(["file_read", "host_*"]));
    let mut c = McpClient::spawn(
        bin(),
        &[
            "--config",
            cfg.to_str().expect("utf8"),
            "--agent",
            "a",
            "serve",
        ],
        d.path(),
        Era::Handshake,
    );
    let list = names(&mut c);
    assert!(list.contains(&"file_read".to_string()), "{list:?}");
    assert!(!list.contains(&"file_list".to_string()), "{list:?}");
    let r = c.call("file_list", json!({"path": "."}));
    assert_eq!(r.error_code(), Some("capability_denied"), "{}", r.text);
    c.take_notifications();

    write(json!(["file_read", "file_list", "host_*"]));
    let r = c.call("host_reload", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let list = names(&mut c);
    assert!(list.contains(&"file_list".to_string()), "{list:?}");
    let r = c.call("file_list", json!({"path": "."}));
    assert!(!r.is_error, "{}", r.text);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline
        && !c
            .take_notifications()
            .iter()
            .any(|n| n["method"] == "notifications/tools/list_changed")
    {
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            Instant::now() < deadline,
            "no list_changed after the profile changed"
        );
    }

    // The agent disappears from the file: the reload is refused and nothing changes.
    write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {"files": files_entry(d.path())}, "agents": {}}),
    );
    let r = c.call("host_reload", json!({}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("--agent a"), "{}", r.text);
    let r = c.call("file_list", json!({"path": "."}));
    assert!(!r.is_error, "{}", r.text);
}

#[test]
fn plain_calls_are_forwarded_as_bytes_and_keep_every_behaviour() {
    let d = project();
    let cfg = write_config(
        d.path(),
        "agent.json",
        json!({"mcp": {
            "files": files_entry(d.path()),
            "shell": {"command": bin(), "args": ["server", "shell", "--root", d.path()], "tool_timeout_sec": 1}
        }}),
    );
    let cfg = cfg.to_str().expect("utf8");
    let audit = d.path().join("audit.jsonl");
    let audit_arg = audit.to_str().expect("utf8");
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg, "--audit-log", audit_arg, "serve"],
        d.path(),
        Era::Handshake,
    );
    for _ in 0..3 {
        let r = c.call("file_read", json!({"path": "a.txt"}));
        assert_eq!(r.text, "1: alpha\n2: beta");
        assert_eq!(r.structured["total_lines"], 2);
    }
    // A tool error comes back as the child wrote it.
    let r = c.call("file_read", json!({"path": "missing.txt"}));
    assert_eq!(r.error_code(), Some("file_not_found"), "{}", r.text);
    // The tool timeout still applies.
    let t = Instant::now();
    let r = c.call("shell_bash", json!({"command": "sleep 5"}));
    assert_eq!(r.error_code(), Some("timeout"), "{}", r.text);
    assert!(t.elapsed() < Duration::from_secs(4));
    let s = c.call("host_status", json!({}));
    assert!(
        s.structured["byte_level_calls"].as_u64().expect("count") >= 5,
        "{}",
        s.structured
    );
    // Each call is in the audit log with its outcome.
    std::thread::sleep(Duration::from_millis(100));
    let log = std::fs::read_to_string(&audit).expect("audit");
    let calls: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .filter(|e| e["event"] == "tool.call")
        .collect();
    assert!(
        calls
            .iter()
            .any(|e| e["tool"] == "file_read" && e["ok"] == true && e["server"] == "files")
    );
    assert!(calls.iter().any(|e| e["error_code"] == "file_not_found"));
    assert!(
        calls
            .iter()
            .any(|e| e["tool"] == "shell_bash" && e["error_code"] == "timeout")
    );

    // 2026-07-28 calls take the byte path too, their results given `resultType`; a call
    // with a progress token still goes through rmcp, with the same shape.
    let mut m = McpClient::spawn(bin(), &["--config", cfg, "serve"], d.path(), Era::Modern);
    let r = m.call("file_read", json!({"path": "a.txt"}));
    assert_eq!(r.text, "1: alpha\n2: beta");
    assert_eq!(r.raw["resultType"], "complete", "{}", r.raw);
    let missing = m.call("file_read", json!({"path": "nope.txt"}));
    assert!(missing.is_error);
    assert_eq!(missing.raw["resultType"], "complete", "{}", missing.raw);
    let s = m.call("host_status", json!({}));
    assert_eq!(s.structured["byte_level_calls"], 2, "{}", s.structured);
    let p = m.call_with_progress("file_read", json!({"path": "a.txt"}), "tok-1");
    assert_eq!(p.text, "1: alpha\n2: beta");
    assert_eq!(p.raw["resultType"], "complete", "{}", p.raw);
    let s = m.call("host_status", json!({}));
    assert_eq!(s.structured["byte_level_calls"], 2, "{}", s.structured);
}

/// A 2026-07-28 client learns of list changes on a `subscriptions/listen` stream (it gets no
/// unsolicited notifications); single servers accept a listen too instead of -32601.
#[test]
fn listen_streams_tell_modern_clients_the_list_changed() {
    let d = project();
    let cfg_path = d.path().join("agent.json");
    let write =
        |servers: Value| std::fs::write(&cfg_path, json!({"mcp": servers}).to_string()).expect("w");
    write(json!({"files": files_entry(d.path())}));
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg_path.to_str().expect("u"), "serve"],
        d.path(),
        Era::Modern,
    );
    let listen = c.send_request(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let acked = |c: &McpClient| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen = c.take_notifications();
            if let Some(n) = seen
                .iter()
                .find(|n| n["method"] == "notifications/subscriptions/acknowledged")
            {
                return n.clone();
            }
            assert!(Instant::now() < deadline, "no acknowledgment: {seen:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let ack = acked(&c);
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    let mut second = files_entry(d.path());
    second["prefix"] = json!("b_");
    write(json!({"files": files_entry(d.path()), "second": second}));
    assert!(!c.call("host_reload", json!({})).is_error);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = c.take_notifications();
        // On the stream itself (the handshake-era notification carries no subscription id).
        if seen.iter().any(|n| {
            n["method"] == "notifications/tools/list_changed"
                && n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == listen
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no list_changed on the stream: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.notify(
        "notifications/cancelled",
        json!({"requestId": listen, "reason": "done"}),
    );
    // A single server accepts a listen as well (nothing to deliver).
    let mut single = McpClient::spawn(
        bin(),
        &["server", "files", "--root", d.path().to_str().expect("u")],
        d.path(),
        Era::Modern,
    );
    single.send_request(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    acked(&single);
}

/// `--tools lazy`: three discovery tools instead of the whole list; they find, describe and
/// call every tool, and direct calls by name still work.
#[test]
fn lazy_mode_lists_discovery_tools_that_reach_every_tool() {
    let d = project();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = McpClient::spawn(bin(), &["--tools", "lazy", "serve"], d.path(), era);
        let listed = c.request("tools/list", json!({}));
        let bytes = listed["result"].to_string().len();
        assert_eq!(
            names(&mut c),
            ["host_status", "tool_call", "tool_schema", "tool_search"]
        );
        assert!(bytes < 8_000, "the lazy list is small: {bytes} bytes");
        let r = c.call_ok("tool_search", json!({"query": "read a file", "limit": 3}));
        assert_eq!(r.structured["tools"][0]["name"], "file_read", "{}", r.text);
        let r = c.call_ok("tool_schema", json!({"name": "search_grep"}));
        assert!(r.structured["input_schema"]["properties"]["pattern"].is_object());
        let r = c.call_ok(
            "tool_call",
            json!({"name": "file_read", "arguments": {"path": "a.txt"}}),
        );
        assert_eq!(r.text, "1: alpha\n2: beta");
        c.call_err(
            "tool_call",
            json!({"name": "file_read", "arguments": {"path": "missing.txt"}}),
            "file_not_found",
        );
        c.call_err("tool_schema", json!({"name": "nope"}), "unknown_tool");
        c.call_err(
            "tool_search",
            json!({"query": "x", "limit": 0}),
            "invalid_params",
        )
        .expect_field("limit");
        // The real names still answer.
        assert_eq!(
            c.call_ok("file_read", json!({"path": "a.txt"})).text,
            "1: alpha\n2: beta"
        );
    }
}

/// The seeds' spellings of tool names — seed 004's dotted ones (`file.read`,
/// `kaged.issue.create`, the unified `kaged.issue` with `action`) and seed 000's (`read_file`)
/// — are resolved in `tools/call`, on the byte path and through rmcp, in both eras;
/// `tools/list` keeps kitbag's names only.
#[test]
fn seed_tool_names_resolve_in_calls() {
    let d = project();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), era);
        let listed = names(&mut c);
        assert!(listed.iter().all(|n| !n.contains('.') && n != "read_file"));
        let direct = c.call_ok("file_read", json!({"path": "a.txt"}));
        for alias in ["file.read", "read_file"] {
            let r = c.call_ok(alias, json!({"path": "a.txt"}));
            assert_eq!(r.structured, direct.structured, "{alias}");
        }
        let created = c.call_ok(
            "kaged.issue.create",
            json!({"title": "Refactor auth module", "body": "Split it."}),
        );
        let number = created.structured["number"].clone();
        assert!(number.is_u64(), "{}", created.raw);
        // Results under a seed name are the tool's own (held against its outputSchema via
        // the direct call they equal).
        let got = c.call_ok("kaged.issue.get", json!({"number": number}));
        let direct = c.call_ok("issue_get", json!({"number": number}));
        assert_eq!(got.structured, direct.structured);
        // The unified form: the tool from `action`, which is no argument of issue_list.
        let listed = c.call_ok("kaged.issue", json!({"action": "list", "status": "open"}));
        let direct = c.call_ok("issue_list", json!({"status": "open"}));
        assert_eq!(listed.structured, direct.structured);
        assert!(
            listed.structured["issues"]
                .as_array()
                .expect("issues")
                .iter()
                .any(|i| i["number"] == number),
            "{}",
            listed.raw
        );
        // A name no seed uses stays unknown.
        let r = c.request(
            "tools/call",
            json!({"name": "kaged.nothing", "arguments": {}}),
        );
        assert!(r.get("error").is_some(), "{r}");
    }
}

/// A hand-written `.kitbag/cron.json` kitbag-cron cannot import is kept in place and shown by
/// `kitbag doctor` (seed 001's cron entry as one object is imported; a file of another shape is
/// not, and says so), never dropped silently.
#[test]
fn doctor_reports_a_cron_store_it_cannot_import() {
    let d = project();
    let cron = json!({"command": bin(), "args": ["server", "cron", "--root", d.path()]});
    let cfg = write_config(d.path(), "agent.json", json!({"mcp": {"cron": cron}}));
    std::fs::create_dir_all(d.path().join(".kitbag")).expect("mkdir");
    let store = d.path().join(".kitbag/cron.json");
    std::fs::write(&store, r#"{"jobs": [{"every": "5m"}]}"#).expect("cron.json");
    let doctor = || {
        Command::new(bin())
            .args(["--config", cfg.to_str().expect("u"), "doctor"])
            .current_dir(d.path())
            .output()
            .expect("doctor")
    };
    let out = doctor();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("cron: ") && text.contains("cron.json"),
        "{text}"
    );
    assert!(store.exists(), "the file stays where it was");
    // Seed 001's entry, as one object, is imported: nothing to report.
    std::fs::write(
        &store,
        r#"{"id": "cron-1", "schedule": "*/5 * * * *", "message": "check the build", "session": "ops", "enabled": true}"#,
    )
    .expect("cron.json");
    let out = doctor();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("cron: "), "{text}");
}

/// Issue #41 through the host, in both eras: a patch in Codex's format lands all-or-nothing,
/// and a command waiting on its terminal comes back as a job that shell_input answers.
#[test]
fn patches_and_terminal_prompts_work_through_the_host_in_both_eras() {
    for era in [Era::Handshake, Era::Modern] {
        let d = project();
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), era);
        c.call_ok("file_read", json!({"path": "a.txt"}));
        let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n alpha\n-beta\n+BETA\n*** Add File: b.txt\n+new\n*** End Patch\n";
        let r = c.call_ok("edit_patch", json!({"patch": patch}));
        assert_eq!(r.structured["format"], "apply_patch", "{era:?}");
        assert_eq!(
            std::fs::read_to_string(d.path().join("a.txt")).expect("a"),
            "alpha\nBETA\n"
        );
        let r = c.call_ok(
            "shell_bash",
            json!({"command": "printf 'Name: '; read -r n </dev/tty; echo \"hi $n\""}),
        );
        assert_eq!(
            r.structured["waiting_for_input"], true,
            "{era:?}: {}",
            r.structured
        );
        let job = r.structured["job_id"].as_str().expect("job").to_string();
        c.call_ok(
            "shell_input",
            json!({"job_id": job, "text": "kit", "keys": ["Enter"]}),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let o = c.call_ok("shell_output", json!({"job_id": job}));
            if o.structured["running"] == false {
                assert_eq!(o.structured["screen"], "Name: kit\nhi kit", "{era:?}");
                break;
            }
            assert!(Instant::now() < deadline, "{era:?}: {}", o.structured);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Edit feedback through the host (issue #41 item 1): a files entry run with `--lsp`
/// answers `edit_text` with the diagnostics it introduced and fixed, from pyright, in both
/// protocol eras — each answer checked against the host's outputSchema by the client.
#[test]
fn edits_through_the_host_report_what_they_broke() {
    if !kitbag_testkit::clients::require(
        kitbag_testkit::clients::on_path("pyright-langserver"),
        "pyright-langserver is not installed",
    ) {
        return;
    }
    for era in [Era::Modern, Era::Handshake] {
        let d = project();
        let app =
            "def greet(name: str) -> str:\n    return \"hi \" + name\n\n\nprint(greet(\"x\"))\n";
        std::fs::write(d.path().join("app.py"), app).expect("w");
        let mut args = vec![
            json!("server"),
            json!("files"),
            json!("--root"),
            json!(d.path()),
        ];
        args.extend(kitbag_testkit::clients::PATIENT_EDIT_CHECK.map(|a| json!(a)));
        let files = json!({"command": bin(), "args": args});
        let cfg = write_config(d.path(), "agent.json", json!({"mcp": {"files": files}}));
        let mut c = McpClient::spawn(
            bin(),
            &["--config", cfg.to_str().expect("utf8"), "serve"],
            d.path(),
            era,
        );
        c.timeout = Duration::from_secs(90);
        c.call_ok("file_read", json!({"path": "app.py"}));
        let r = c.call_ok(
            "edit_text",
            json!({"path": "app.py", "old_string": "greet(\"x\")", "new_string": "greet(1)"}),
        );
        let dg = &r.structured["diagnostics"];
        assert_eq!(dg["settled"], true, "{era:?}: {dg}");
        assert_eq!(dg["introduced_count"], 1, "{era:?}: {dg}");
        assert_eq!(dg["introduced"][0]["line"], 5, "{era:?}: {dg}");
        assert!(r.text.contains("+ app.py:5:"), "{}", r.text);
        let r = c.call_ok(
            "edit_text",
            json!({"path": "app.py", "old_string": "greet(1)", "new_string": "greet(\"y\")"}),
        );
        let dg = &r.structured["diagnostics"];
        assert_eq!(
            (&dg["introduced_count"], &dg["fixed_count"]),
            (&json!(0), &json!(1)),
            "{era:?}: {dg}"
        );
        c.shutdown();
    }
}
