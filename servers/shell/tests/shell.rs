//! `shell_bash` and background jobs against the real binary over stdio.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, assert_catalog_matches, process_alive, workspace_root};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-shell"))
}

fn client(dir: &Path, args: &[&str]) -> McpClient {
    McpClient::spawn(bin(), args, dir, Era::Handshake)
}

fn pid_in(dir: &Path, name: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join(name))
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "{name} never written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn both_eras_and_catalog() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = McpClient::spawn(bin(), &[], d.path(), era);
        let r = c.call_ok("shell_bash", json!({"command": "echo hello"}));
        assert_eq!(r.structured["stdout"], "hello\n");
        assert!(c.stdout_garbage().is_empty());
        if era == Era::Handshake {
            assert_catalog_matches(
                &mut c,
                &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/shell/tools.json"),
            );
        }
    }
}

#[test]
fn happy_path_exit_codes_cwd_env() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(d.path().join("packages/daemon")).expect("mkdir");
    let mut c = client(d.path(), &[]);
    let r = c.call_ok("shell_bash", json!({"command": "echo hello"}));
    assert_eq!(r.structured["exit_code"], 0);
    assert_eq!(r.structured["timed_out"], false);
    assert_eq!(r.structured["stderr"], "");
    assert!(r.text.starts_with("hello\n[exit code 0"), "{}", r.text);
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "echo to-stderr >&2; exit 42"}),
    );
    assert_eq!(
        r.structured["exit_code"], 42,
        "a non-zero exit is data, not an error"
    );
    assert_eq!(
        r.structured["stdout"], "to-stderr\n",
        "the terminal merges stderr"
    );
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "pwd", "cwd": "./packages/daemon"}),
    );
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("s")
            .trim_end()
            .ends_with("packages/daemon")
    );
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "echo $FOO-$HOME_SET", "env": {"FOO": "bar", "HOME_SET": "x"}}),
    );
    assert_eq!(r.structured["stdout"], "bar-x\n");
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "[ -t 1 ] && [ -t 2 ] && [ ! -t 0 ] && echo tty"}),
    );
    assert_eq!(r.structured["stdout"], "tty\n", "runs in a terminal");
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "printf 'bad \\377\\376 bytes\\n'"}),
    );
    assert_eq!(
        r.structured["stdout"], "bad \u{fffd}\u{fffd} bytes\n",
        "invalid UTF-8 is shown, not fatal"
    );
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "printf '\\033[31mred\\033[0m 10%%\\r 100%%\\n'"}),
    );
    assert_eq!(
        r.structured["stdout"], " 100%0%\n",
        "colours stripped, \\r overwrites like a terminal"
    );
}

/// What the spawn sets up before the command runs (issue #43: `posix_spawn` instead of a
/// fork with a `pre_exec` hook): the shell is the server's child, leads its own session and
/// process group, has the terminal as its controlling terminal, no blocked and no ignored
/// signals (the server ignores `SIGPIPE`), no descriptor but the terminal and `/dev/null`, the
/// checked working directory, and the server's environment with the terminal's variables and
/// the job tag.
#[test]
fn the_shell_starts_as_a_terminal_session_of_its_own() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(d.path().join("sub")).expect("mkdir");
    let mut c = McpClient::spawn_with_env(
        bin(),
        &[],
        d.path(),
        Era::Handshake,
        &[
            ("KITBAG_SPAWN_PROBE", "from-server"),
            ("KITBAG_HOST_DEPTH", "1"),
        ],
    );
    let server = c.pid();
    let cmd = r#"set -- $(sed 's/.*) //' /proc/$$/stat)
echo "ppid=$2 pgrp=$(($3 - $$)) sid=$(($4 - $$)) tty=$5 fg=$(($6 - $$))"
grep -E '^Sig(Blk|Ign)' /proc/$$/status | tr -d ' \t'
ls -l /proc/$$/fd >fds.txt; echo "fds=$(sed -n 's|.* -> ||p' fds.txt | grep -v /fds.txt | sed 's|/dev/pts/[0-9]*|tty|' | sort -u | tr '\n' ' ')"
echo "cwd=$(readlink /proc/$$/cwd)"
{ : </dev/tty; } 2>/dev/null && echo ctty=yes
echo "env=$KITBAG_SPAWN_PROBE ${KITBAG_HOST_DEPTH-unset} $TERM ${KITBAG_JOB:+tagged} ${SHELL:+shell}""#;
    let r = c.call_ok("shell_bash", json!({"command": cmd, "cwd": "sub"}));
    let out = r.structured["stdout"].as_str().expect("stdout");
    assert!(
        out.contains(&format!("ppid={server} pgrp=0 sid=0 ")),
        "the server's child, leading its own session and group: {out}"
    );
    assert!(!out.contains(" tty=0 "), "a controlling terminal: {out}");
    assert!(
        out.contains(" fg=0\n"),
        "its group in the foreground: {out}"
    );
    assert!(out.contains("SigBlk:0000000000000000\n"), "{out}");
    // glibc's spawn leaves its two internal signals (32, 33) ignored, as for every process
    // it spawns (the standard library's too); glibc programs set their own handlers for them.
    let ignored = out
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .expect("SigIgn");
    assert_eq!(
        ignored & 0x7fff_ffff,
        0,
        "no signal below 32 ignored: {out}"
    );
    // dash keeps a copy of stdin (fd 10) after `exec </dev/null`, and holds `fds.txt` open
    // while `ls` writes it.
    assert!(
        out.contains("fds=/dev/null tty \n"),
        "nothing inherited: {out}"
    );
    let sub = d.path().join("sub").canonicalize().expect("canon");
    assert!(out.contains(&format!("cwd={}\n", sub.display())), "{out}");
    assert!(out.contains("ctty=yes\n"), "/dev/tty opens: {out}");
    assert!(
        out.contains("env=from-server unset dumb tagged shell\n"),
        "{out}"
    );
}

#[test]
fn timeouts_out_of_range_are_refused_and_a_timeout_kills_the_whole_tree() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &["--kill-grace-ms", "1000"]);
    for bad in [500, 999999, -1] {
        let r = c.call_err(
            "shell_bash",
            json!({"command": "touch ran", "timeout": bad}),
            "invalid_params",
        );
        assert!(r.text.contains("1000–600000 ms is accepted"), "{}", r.text);
        assert_eq!(r.structured["error"]["detail"]["field"], "timeout");
    }
    assert!(
        !d.path().join("ran").exists(),
        "a refused call runs nothing"
    );
    let r = c.call_ok("shell_bash", json!({"command": "true", "timeout": 1000}));
    assert_eq!(r.structured["timeout_ms"], 1000);
    let started = Instant::now();
    let r = c.call_ok("shell_bash", json!({
            "command": "sleep 100 & echo $! > bg.pid; nohup sleep 100 >/dev/null 2>&1 & echo $! > nohup.pid; trap '' TERM; sleep 60",
            "timeout": 2000
        }));
    assert_eq!(r.structured["timed_out"], true);
    assert_eq!(r.structured["exit_code"], 137);
    assert!(started.elapsed() < Duration::from_secs(15));
    for f in ["bg.pid", "nohup.pid"] {
        let pid = pid_in(d.path(), f);
        assert!(gone(pid), "{f} ({pid}) survived the timeout");
    }
    // A normal exit also stops what the command left running.
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "sleep 100 & echo $! > left.pid; echo done"}),
    );
    assert_eq!(r.structured["stdout"], "done\n");
    assert!(gone(pid_in(d.path(), "left.pid")));
}

#[test]
fn interactive_programs_see_eof() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &[]);
    let started = Instant::now();
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "read line; echo \"read exit $?\"", "timeout": 20000}),
    );
    assert_eq!(r.structured["stdout"], "read exit 1\n");
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "cat; echo after-cat", "timeout": 20000}),
    );
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("s")
            .contains("after-cat")
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no hang waiting for input"
    );
}

#[test]
fn big_output_previewed_and_logged_completely() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &[]);
    let r = c.call_ok("shell_bash", json!({"command": "seq 1 300000"}));
    assert_eq!(r.structured["truncated"], true);
    let out = r.structured["stdout"].as_str().expect("s");
    assert!(out.len() < 32 * 1024, "{}", out.len());
    assert!(out.starts_with("1\n2\n3\n"));
    assert!(out.trim_end().ends_with("299999\n300000"));
    assert!(out.contains("bytes elided"));
    let log = d
        .path()
        .join(r.structured["log_path"].as_str().expect("log"));
    let full = std::fs::read_to_string(log)
        .expect("log file")
        .replace("\r\n", "\n");
    let expected: String = (1..=300000).map(|i| format!("{i}\n")).collect();
    assert_eq!(full, expected, "the log holds every byte");
}

#[test]
fn background_jobs() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &["--kill-grace-ms", "500"]);
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done", "background": true}),
    );
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = c.call_ok("shell_output", json!({"job_id": job}));
        seen.push_str(r.structured["output"].as_str().expect("o"));
        if r.structured["running"] == false && r.structured["more"] == false {
            assert_eq!(r.structured["exit_code"], 0);
            break;
        }
        assert!(Instant::now() < deadline, "job never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(seen, "tick 1\ntick 2\ntick 3\n");
    let again = c.call_ok("shell_output", json!({"job_id": job, "since": 0}));
    assert_eq!(again.structured["output"], "tick 1\ntick 2\ntick 3\n");
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "sleep 100 & echo $! > child.pid; sleep 100", "background": true}),
    );
    let long = r.structured["job_id"].as_str().expect("job").to_string();
    let child = pid_in(d.path(), "child.pid");
    let jobs = c.call_ok("shell_jobs", json!({}));
    assert_eq!(jobs.structured["jobs"].as_array().expect("j").len(), 2);
    let r = c.call_ok("shell_kill", json!({"job_id": long}));
    assert_eq!(r.structured["killed"], true);
    assert!(gone(child));
    let r = c.call("shell_output", json!({"job_id": "job-99"}));
    assert_eq!(r.error_code(), Some("job_not_found"));
    // Jobs do not outlive the server.
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "sleep 100 & echo $! > orphan.pid; sleep 100", "background": true}),
    );
    assert!(r.structured["job_id"].is_string());
    let orphan = pid_in(d.path(), "orphan.pid");
    c.shutdown();
    assert!(gone(orphan), "a job's process survived the server");
}

#[test]
fn bad_input_and_read_only() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &[]);
    c.call_err("shell_bash", json!({"command": ""}), "invalid_params")
        .expect_field("command");
    c.call_err("shell_bash", json!({"command": "   "}), "invalid_params")
        .expect_field("command");
    c.call_err(
        "shell_bash",
        json!({"command": "x".repeat(64 * 1024 + 1)}),
        "invalid_params",
    )
    .expect_field("command");
    c.call_err(
        "shell_bash",
        json!({"command": "pwd", "cwd": "../../"}),
        "invalid_params",
    )
    .expect_field("cwd");
    c.call_err(
        "shell_bash",
        json!({"command": "pwd", "cwd": "missing-dir"}),
        "invalid_params",
    )
    .expect_field("cwd");
    c.call_err(
        "shell_bash",
        json!({"command": "true", "env": {"": "val"}}),
        "invalid_params",
    )
    .expect_field("env");
    c.call_err(
        "shell_bash",
        json!({"command": "true", "env": {"A=B": "val"}}),
        "invalid_params",
    )
    .expect_field("env");
    c.call_err(
        "shell_bash",
        json!({"command": "true", "env": {"A": 5}}),
        "invalid_params",
    )
    .expect_field("env.A");
    c.call_err(
        "shell_bash",
        json!({"command": "true", "timeout": "soon"}),
        "invalid_params",
    )
    .expect_field("timeout");
    let marker: PathBuf = d.path().join("should-not-exist");
    let mut ro = client(d.path(), &["--read-only"]);
    let r = ro.call(
        "shell_bash",
        json!({"command": format!("touch {}", marker.display())}),
    );
    assert_eq!(r.error_code(), Some("capability_denied"));
    assert!(!marker.exists(), "nothing ran");
    std::fs::create_dir_all(d.path().join("src")).expect("mkdir");
    let mut caged = client(d.path(), &["--allow", "ro:src", "--allow", "rw:out"]);
    let r = caged.call("shell_bash", json!({"command": "pwd", "cwd": "src"}));
    assert_eq!(
        r.error_code(),
        Some("capability_denied"),
        "cwd must be in an rw mount"
    );
}

#[test]
fn cancellation_stops_the_process_tree() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &["--kill-grace-ms", "500"]);
    let id = c.send_request(
        "tools/call",
        json!({"name": "shell_bash", "arguments": {"command": "sleep 100 & echo $! > cancel.pid; sleep 100", "timeout": 600000}}),
    );
    let pid = pid_in(d.path(), "cancel.pid");
    c.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    assert!(gone(pid), "the cancelled command's child survived");
    // The server keeps serving.
    let r = c.call_ok("shell_bash", json!({"command": "echo still-here"}));
    assert_eq!(r.structured["stdout"], "still-here\n");
}

/// Answers stay under the result budget (issue #37) when the output escapes 6× (control
/// characters): shell_bash's preview is cut again (the log has everything), shell_output
/// pages end at the budget and the next page starts exactly there.
#[test]
fn answers_fit_the_result_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &[]);
    let cmd = "head -c 30000 /dev/zero | tr '\\0' '\\001'";
    let r = c
        .call_ok("shell_bash", json!({ "command": cmd }))
        .structured;
    assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
    assert_eq!(r["truncated"], true);
    let out = r["stdout"].as_str().expect("s");
    assert!(out.starts_with('\u{1}') && out.ends_with('\u{1}') && out.contains("log file"));
    let log = std::fs::read(d.path().join(r["log_path"].as_str().expect("log"))).expect("log");
    assert_eq!(log, vec![1u8; 30_000]);
    let j = c
        .call_ok("shell_bash", json!({ "command": cmd, "background": true }))
        .structured;
    let job = j["job_id"].as_str().expect("job").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.call_ok("shell_jobs", json!({})).structured["jobs"][0]["running"] == true {
        assert!(Instant::now() < deadline, "job never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = c
        .call_ok("shell_output", json!({ "job_id": job, "since": 0 }))
        .structured;
    assert!(
        json_len(&first) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&first)
    );
    assert_eq!(first["more"], true);
    let next = first["next_since"].as_u64().expect("next");
    let o1 = first["output"].as_str().expect("o");
    assert_eq!(o1, "\u{1}".repeat(next as usize));
    let second = c
        .call_ok("shell_output", json!({ "job_id": job }))
        .structured;
    assert!(json_len(&second) < RESULT_BUDGET_BYTES);
    let o2 = second["output"].as_str().expect("o");
    assert!(!o2.is_empty());
    assert_eq!(
        second["next_since"].as_u64(),
        Some(next + o2.len() as u64),
        "the second page starts where the first ended"
    );
    assert_eq!(o2, "\u{1}".repeat(o2.len()));
}

/// shell_jobs listed every job of the session whole: 40 jobs whose commands carry 190 control
/// characters each (~1.2 KB escaped apiece) were ~50 KB. A default list stops at the budget and
/// pages on, oldest first, nothing lost or repeated.
#[test]
fn the_job_list_pages_at_the_result_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path(), &[]);
    let comment = "\u{1}".repeat(190);
    let mut ids = Vec::new();
    for _ in 0..40 {
        let j = c
            .call_ok(
                "shell_bash",
                json!({ "command": format!("true #{comment}"), "background": true }),
            )
            .structured;
        ids.push(j["job_id"].as_str().expect("job").to_string());
    }
    let first = c.call_ok("shell_jobs", json!({})).structured;
    assert!(
        json_len(&first) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&first)
    );
    assert_eq!(first["truncated"], true, "{}", first["total"]);
    assert_eq!(first["total"], 40);
    let next = first["next_offset"].as_u64().expect("next");
    let second = c
        .call_ok("shell_jobs", json!({ "offset": next }))
        .structured;
    assert_eq!(second["truncated"], false);
    let listed: Vec<String> = [&first, &second]
        .iter()
        .flat_map(|r| r["jobs"].as_array().expect("jobs").clone())
        .map(|j| j["job_id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(listed, ids, "oldest first, each once");
}
