//! `python` (seed 003 `tool.python`): source without shell quoting, args, stdin, cwd, typed
//! failures; sessions whose variables persist, bounded by timeouts and shell_kill. Real
//! binary, real Python 3, over stdio.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, child_pids, process_alive};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-shell"))
}

fn client(dir: &Path) -> McpClient {
    McpClient::spawn(bin(), &[], dir, Era::Handshake)
}

fn scratch_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join(".kitbag/shell/python"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn source_runs_without_quoting_and_leaves_nothing_behind() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(d.path().join("sub")).expect("mkdir");
    let mut c = client(d.path());
    let code = "import os, sys\nprint('args:', sys.argv[1:])\nprint(\"in:\", sys.stdin.read().strip())\nprint('it\\'s \"quoted\" $HOME `x`')\nprint(os.path.basename(os.getcwd()))\n";
    let r = c.call_ok(
        "python",
        json!({"code": code, "args": ["a b", "it's"], "stdin": "fed in\n", "cwd": "sub"}),
    );
    assert_eq!(
        r.structured["stdout"],
        "args: ['a b', \"it's\"]\nin: fed in\nit's \"quoted\" $HOME `x`\nsub\n"
    );
    assert_eq!(r.structured["exit_code"], 0);
    let r = c.call_ok("python", json!({"code": "raise ValueError('boom')"}));
    assert_eq!(r.structured["exit_code"], 1);
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("stdout")
            .contains("ValueError: boom")
    );
    let r = c.call_ok(
        "python",
        json!({"code": "import time; time.sleep(30)", "timeout": 1000}),
    );
    assert_eq!(r.structured["timed_out"], true);
    assert_eq!(
        scratch_files(d.path()),
        Vec::<String>::new(),
        "snippets removed"
    );
    c.call_err("python", json!({"code": "  "}), "invalid_params");
    c.call_err(
        "python",
        json!({"code": "pass", "timeout": 10}),
        "invalid_params",
    );
    c.call_err(
        "python",
        json!({"code": "pass", "cwd": "../.."}),
        "invalid_params",
    );
    assert!(child_pids(c.pid()).is_empty());
}

#[test]
fn a_session_keeps_its_variables_until_it_is_stopped() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path());
    let r = c.call_ok(
        "python",
        json!({"code": "x = 41\nprint('set')", "session": "s1"}),
    );
    assert_eq!(r.structured["session_new"], true);
    assert_eq!(r.structured["stdout"], "set\n");
    let r = c.call_ok("python", json!({"code": "print(x + 1)", "session": "s1"}));
    assert!(
        r.structured.get("session_new").is_none(),
        "{}",
        r.structured
    );
    assert_eq!(r.structured["stdout"], "42\n");
    // An exception and sys.exit are answers; the interpreter and its variables stay.
    let r = c.call_ok("python", json!({"code": "1/0", "session": "s1"}));
    assert_eq!(r.structured["exit_code"], 1);
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("out")
            .contains("ZeroDivisionError")
    );
    let r = c.call_ok(
        "python",
        json!({"code": "import sys\nprint(sys.argv[1:], sys.stdin.read())\nsys.exit(3)", "session": "s1", "args": ["p"], "stdin": "q"}),
    );
    assert_eq!(r.structured["exit_code"], 3);
    assert_eq!(r.structured["stdout"], "['p'] q\n");
    let r = c.call_ok("python", json!({"code": "print(x)", "session": "s1"}));
    assert_eq!(r.structured["stdout"], "41\n");
    // A request larger than the FIFO's buffer goes through while the interpreter reads it.
    let big = format!("y = '{}'\nprint(len(y))", "a".repeat(300_000));
    let r = c.call_ok("python", json!({"code": big, "session": "s1"}));
    assert_eq!(r.structured["stdout"], "300000\n");
    // Another session is another interpreter.
    let r = c.call_ok(
        "python",
        json!({"code": "print('x' in dir())", "session": "s2"}),
    );
    assert_eq!(r.structured["stdout"], "False\n");
    // Listed as jobs; shell_kill stops one, and the next call starts afresh.
    let jobs = c.call_ok("shell_jobs", json!({}));
    let s1 = jobs.structured["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["command"] == "python session s1")
        .expect("s1 listed")
        .clone();
    let pid = s1["pid"].as_u64().expect("pid") as u32;
    c.call_ok("shell_kill", json!({"job_id": s1["job_id"]}));
    assert!(!process_alive(pid));
    let r = c.call_ok("python", json!({"code": "print(x)", "session": "s1"}));
    assert_eq!(r.structured["session_new"], true);
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("out")
            .contains("NameError")
    );
    // A timeout stops the session.
    let started = Instant::now();
    let r = c.call_ok(
        "python",
        json!({"code": "import time; time.sleep(60)", "session": "s1", "timeout": 1000}),
    );
    assert_eq!(r.structured["timed_out"], true);
    assert!(started.elapsed() < Duration::from_secs(10));
    let r = c.call_ok("python", json!({"code": "print(1)", "session": "s1"}));
    assert_eq!(r.structured["session_new"], true);
    c.call_err(
        "python",
        json!({"code": "pass", "session": "bad name!"}),
        "invalid_params",
    );
    // Code that waits on the terminal (getpass) answers at once with the session's job; the
    // session takes no other code until shell_input has answered it.
    let r = c.call_ok(
        "python",
        json!({"code": "import getpass\nsecret = getpass.getpass('Secret: ')\nprint('got', len(secret))", "session": "w"}),
    );
    let job = r.structured["job_id"].as_str().expect("job_id").to_string();
    assert!(r.text.contains("waiting for input"), "{}", r.text);
    c.call_err(
        "python",
        json!({"code": "print(1)", "session": "w"}),
        "session_active",
    );
    c.call_ok("shell_input", json!({"job_id": job, "text": "hunter2\n"}));
    let r = c.call_ok("python", json!({"code": "print(secret)", "session": "w"}));
    assert_eq!(r.structured["stdout"], "hunter2\n", "{}", r.structured);
    // The server's end takes every interpreter with it.
    let pids = child_pids(c.pid());
    assert!(!pids.is_empty());
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| process_alive(p)) {
        assert!(
            Instant::now() < deadline,
            "interpreters outlived the server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Killed with SIGKILL, the server left its sessions' FIFOs: the next server removes them.
    assert!(!scratch_files(d.path()).is_empty());
    let c = client(d.path());
    assert!(
        scratch_files(d.path()).is_empty(),
        "{:?}",
        scratch_files(d.path())
    );
    drop(c);
}

#[test]
fn no_python_on_path_is_a_typed_error() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn_with_env(
        bin(),
        &[],
        d.path(),
        Era::Handshake,
        &[("PATH", "/nonexistent")],
    );
    let r = c.call_err("python", json!({"code": "print(1)"}), "runtime_not_found");
    assert!(r.text.contains("install Python 3"), "{}", r.text);
}
