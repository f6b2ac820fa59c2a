//! A shell that says why it waits: commands reading their terminal are found from the kernel
//! and answered with `shell_input`; `shell_output` shows the screen; background jobs keep
//! their `timeout` and tell the client when they end. Real binary, real terminal, over stdio.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, ToolCall, child_pids};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-shell"))
}

fn client(dir: &Path) -> McpClient {
    McpClient::spawn(bin(), &[], dir, Era::Handshake)
}

/// shell_output until `cond` holds on its result (10 s at most).
fn output_until(c: &mut McpClient, job: &str, cond: impl Fn(&Value) -> bool) -> ToolCall {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = c.call_ok("shell_output", json!({"job_id": job}));
        if cond(&r.structured) {
            return r;
        }
        assert!(Instant::now() < deadline, "never: {}", r.structured);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// No process of the server's is left but the ones it started for itself.
fn nothing_left(c: &McpClient) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !child_pids(c.pid()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left running: {:?}",
            child_pids(c.pid())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A password prompt on /dev/tty does not hold the call until its timeout: the command goes
/// on as a job waiting for input, and shell_input answers it.
#[test]
fn a_foreground_prompt_returns_at_once_and_is_answered() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path());
    let started = Instant::now();
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "echo before; printf 'Password: '; read -r pw </dev/tty; echo \"got:$pw\"", "timeout": 60000}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "returned after {:?}",
        started.elapsed()
    );
    assert_eq!(r.structured["waiting_for_input"], true, "{}", r.structured);
    assert_eq!(r.structured["running"], true);
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("stdout")
            .contains("before")
    );
    assert!(r.text.contains("\"Password:\""), "{}", r.text);
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let out = c.call_ok("shell_output", json!({"job_id": job}));
    assert_eq!(out.structured["waiting_for_input"], true);
    assert!(
        out.structured["screen"]
            .as_str()
            .expect("screen")
            .ends_with("Password:"),
        "{}",
        out.structured
    );
    let r = c.call_ok(
        "shell_input",
        json!({"job_id": job, "text": "hunter2", "keys": ["Enter"]}),
    );
    assert_eq!(r.structured["bytes_written"], 8);
    let done = output_until(&mut c, &job, |o| o["running"] == false);
    assert_eq!(done.structured["exit_code"], 0);
    assert!(
        done.structured["screen"]
            .as_str()
            .expect("screen")
            .ends_with("got:hunter2"),
        "{}",
        done.structured
    );
    let r = c.call_err(
        "shell_input",
        json!({"job_id": job, "text": "late\n"}),
        "job_not_running",
    );
    assert!(r.text.contains("has ended (exit code 0)"), "{}", r.text);
    nothing_left(&c);
}

/// A background job reads its terminal: a [y/N] question is seen in shell_output and answered;
/// arrow keys and a resize reach the program; a quick command is not taken for a prompt.
#[test]
fn background_questions_are_seen_answered_and_resized() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path());
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "printf 'Continue? [y/N] '; read a; echo \"answer $a\"; read b; stty size", "background": true}),
    );
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let waiting = output_until(&mut c, &job, |o| o["waiting_for_input"] == true);
    assert_eq!(
        waiting.structured["screen"], "Continue? [y/N]",
        "{}",
        waiting.structured
    );
    let r = c.call_ok("shell_input", json!({"job_id": job, "text": "y\n"}));
    assert!(
        r.structured["screen"]
            .as_str()
            .expect("screen")
            .contains("answer y"),
        "{}",
        r.structured
    );
    assert_eq!(r.structured["running"], true);
    let r = c.call_ok(
        "shell_input",
        json!({"job_id": job, "rows": 33, "cols": 120, "keys": ["Enter"]}),
    );
    let done = output_until(&mut c, &job, |o| o["running"] == false);
    let screen = done.structured["screen"].as_str().expect("screen");
    assert!(screen.ends_with("33 120"), "{screen} / {}", r.structured);
    // Wrong input is refused, naming the field; nothing is typed.
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "read a; echo \"[$a]\"", "background": true}),
    );
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let e = c.call_err(
        "shell_input",
        json!({"job_id": job, "keys": ["Enter", "Hyper-Q"]}),
        "invalid_params",
    );
    assert_eq!(e.structured["error"]["detail"]["field"], "keys[1]");
    c.call_err(
        "shell_input",
        json!({"job_id": job, "rows": 30}),
        "invalid_params",
    );
    c.call_err(
        "shell_input",
        json!({"job_id": job, "rows": 1, "cols": 80}),
        "invalid_params",
    );
    c.call_err("shell_input", json!({"job_id": job}), "invalid_params");
    c.call_err(
        "shell_input",
        json!({"job_id": "job-999", "text": "x"}),
        "job_not_found",
    );
    c.call_ok("shell_input", json!({"job_id": job, "text": "ok\n"}));
    let done = output_until(&mut c, &job, |o| o["running"] == false);
    assert_eq!(done.structured["screen"], "ok\n[ok]", "{}", done.structured);
    // A command that never reads its terminal is never reported waiting.
    let r = c.call_ok("shell_bash", json!({"command": "sleep 1; echo slept"}));
    assert!(r.structured.get("waiting_for_input").is_none());
    assert_eq!(r.structured["stdout"], "slept\n");
    nothing_left(&c);
}

/// The screen is what a terminal shows: a progress bar redrawn in place is its last state.
#[test]
fn the_screen_collapses_redraws() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path());
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "printf 'fetch  10%%\\rfetch  60%%\\rfetch 100%%\\n'; printf 'noise\\033[2K\\rdone\\n'", "background": true}),
    );
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let done = output_until(&mut c, &job, |o| o["running"] == false);
    assert_eq!(done.structured["screen"], "fetch 100%\ndone");
}

/// A background job's `timeout` stops it (and says so); its end reaches the client as a log
/// message without polling.
#[test]
fn background_timeouts_hold_and_ends_are_told() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = client(d.path());
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "sleep 60 & echo $! > child.pid; sleep 60", "background": true, "timeout": 1000}),
    );
    assert_eq!(r.structured["timeout_ms"], 1000);
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let started = Instant::now();
    let done = output_until(&mut c, &job, |o| o["running"] == false);
    assert!(started.elapsed() < Duration::from_secs(9));
    assert_eq!(done.structured["timed_out"], true, "{}", done.structured);
    nothing_left(&c);
    // Without a timeout a background job runs as long as it likes; its end is told.
    c.take_notifications();
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "sleep 0.3; exit 4", "background": true}),
    );
    assert_eq!(r.structured["timeout_ms"], 0);
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    let told = loop {
        let found = c.take_notifications().into_iter().find(|n| {
            n["method"] == "notifications/message" && n["params"]["data"]["job_id"] == job
        });
        if let Some(n) = found {
            break n;
        }
        assert!(Instant::now() < deadline, "no message for {job}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(told["params"]["data"]["exit_code"], 4, "{told}");
    assert_eq!(told["params"]["logger"], "kitbag-shell");
}

/// The first notification `matches` picks, waiting up to 10 s (the others seen are kept in
/// `seen`).
fn wait_told(c: &McpClient, seen: &mut Vec<Value>, what: &str, matches: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = seen.iter().position(&matches) {
            seen.remove(i);
            return;
        }
        assert!(Instant::now() < deadline, "never told {what}: {seen:#?}");
        seen.extend(c.take_notifications());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `resources/updated` of `uri`; on a `subscriptions/listen` stream, that stream's.
fn updated(uri: &str, stream: Option<u64>) -> impl Fn(&Value) -> bool + '_ {
    move |n| {
        n["method"] == "notifications/resources/updated"
            && n["params"]["uri"] == uri
            && stream.is_none_or(|id| {
                n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == id
            })
    }
}

/// Background jobs are resources (`shell://jobs`, `shell://jobs/<id>`); a subscribed client
/// hears when a job starts waiting for input and when it ends, in both eras, with no polling.
#[test]
fn jobs_are_resources_and_subscribers_hear_prompts_and_ends() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = McpClient::spawn(bin(), &[], d.path(), era);
        assert_eq!(
            c.opened["capabilities"]["resources"]["subscribe"], true,
            "{}",
            c.opened
        );
        // The first job is job-1: subscribe before it exists, so nothing can be missed.
        let job_uri = "shell://jobs/job-1";
        let listen = match era {
            Era::Handshake => {
                for uri in ["shell://jobs", job_uri] {
                    let s = c.request("resources/subscribe", json!({"uri": uri}));
                    assert!(s.get("result").is_some(), "{s}");
                }
                let bad = c.request("resources/subscribe", json!({"uri": "issues://1"}));
                assert!(bad.get("error").is_some(), "{bad}");
                None
            }
            Era::Modern => {
                let id = c.send_request(
                    "subscriptions/listen",
                    json!({"notifications": {"resourceSubscriptions": ["shell://jobs", job_uri, "issues://1"]}}),
                );
                let mut seen = Vec::new();
                wait_told(&c, &mut seen, "the acknowledgment", |n| {
                    n["method"] == "notifications/subscriptions/acknowledged"
                        && n["params"]["notifications"]["resourceSubscriptions"]
                            == json!(["shell://jobs", job_uri])
                });
                Some(id)
            }
        };
        let r = c.call_ok(
            "shell_bash",
            json!({"command": "sleep 0.3; printf 'Name: '; read -r n </dev/tty; echo \"hi $n\"; exit 3", "background": true}),
        );
        assert_eq!(r.structured["job_id"], "job-1");
        let mut seen = Vec::new();
        wait_told(
            &c,
            &mut seen,
            "the new job",
            updated("shell://jobs", listen),
        );
        wait_told(&c, &mut seen, "the prompt", |n| {
            n["method"] == "notifications/message"
                && n["params"]["data"]["job_id"] == "job-1"
                && n["params"]["data"]["waiting_for_input"] == true
                && n["params"]["data"]["prompt"] == "Name:"
        });
        wait_told(&c, &mut seen, "the job waiting", updated(job_uri, listen));
        let r = c.request("resources/read", json!({"uri": job_uri}));
        let text = r["result"]["contents"][0]["text"].as_str().expect("text");
        assert!(
            text.starts_with("job-1: waiting for input on its terminal: \"Name:\""),
            "{text}"
        );
        c.call_ok("shell_input", json!({"job_id": "job-1", "text": "kit\n"}));
        wait_told(&c, &mut seen, "the end", |n| {
            n["method"] == "notifications/message" && n["params"]["data"]["exit_code"] == 3
        });
        wait_told(&c, &mut seen, "the job ended", updated(job_uri, listen));
        let r = c.request("resources/read", json!({"uri": job_uri}));
        let text = r["result"]["contents"][0]["text"].as_str().expect("text");
        assert!(text.starts_with("job-1: exited with code 3\n"), "{text}");
        assert!(text.contains("hi kit"), "{text}");
        let list = c.request("resources/list", json!({}));
        let uris: Vec<&str> = list["result"]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["uri"].as_str())
            .collect();
        assert_eq!(uris, ["shell://jobs", job_uri], "{list}");
        let r = c.request("resources/read", json!({"uri": "shell://jobs"}));
        let text = r["result"]["contents"][0]["text"].as_str().expect("text");
        assert!(text.starts_with("job-1  exit 3  "), "{text}");
        let t = c.request("resources/templates/list", json!({}));
        assert_eq!(
            t["result"]["resourceTemplates"][0]["uriTemplate"],
            "shell://jobs/{job_id}"
        );
        let missing = c.request("resources/read", json!({"uri": "shell://jobs/job-9"}));
        assert!(
            missing["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no job job-9")),
            "{missing}"
        );
        nothing_left(&c);
    }
}
