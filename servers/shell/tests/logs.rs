//! Capped command logs (head + rolling tail) and the logs directory's total, against the
//! real binary.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_shell::ansi::render;
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn client(dir: &Path, args: &[&str]) -> McpClient {
    McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-shell")),
        args,
        dir,
        Era::Handshake,
    )
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// What `seq 1 n` prints through the terminal (`\n` becomes `\r\n`).
fn seq_stream(n: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 1..=n {
        v.extend_from_slice(format!("{i}\r\n").as_bytes());
    }
    v
}

fn shown(bytes: &[u8]) -> String {
    render(&String::from_utf8_lossy(bytes))
}

#[test]
fn a_flood_keeps_head_and_tail_within_the_cap() {
    let d = tempfile::tempdir().expect("tmp");
    let cap: u64 = 1_000_000;
    let head = cap / 5;
    let mut c = client(d.path(), &["--log-max-bytes", &cap.to_string()]);
    let n = 6_000_000; // about 53 MB of output
    let expected = seq_stream(n);
    let total = expected.len() as u64;
    let r = c.call_ok(
        "shell_bash",
        json!({"command": format!("seq 1 {n}"), "background": true, "timeout": 600000}),
    );
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    let logs = d.path().join(".kitbag/shell/logs");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut largest = 0;
    loop {
        largest = largest.max(dir_bytes(&logs));
        let r = c.call_ok("shell_output", json!({"job_id": job, "since": 1i64 << 50}));
        let done = r.structured["running"] == false
            && std::fs::read_dir(&logs)
                .expect("ls")
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().contains(".tail"));
        if done {
            assert_eq!(r.structured["exit_code"], 0);
            assert_eq!(r.structured["next_since"], total);
            break;
        }
        assert!(Instant::now() < deadline, "the flood never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let on_disk = dir_bytes(&logs);
    eprintln!("{total} bytes of output; largest log dir seen {largest}; finished log {on_disk}");
    assert!(largest <= cap, "{largest}");
    assert!(on_disk <= cap, "{on_disk}");

    // The head, page by page, up to the dropped middle.
    let mut since = 0u64;
    let mut seen = String::new();
    let (from, to) = loop {
        let r = c.call_ok("shell_output", json!({"job_id": job, "since": since}));
        let s = &r.structured;
        assert!(s["log_dropped_bytes"].as_u64().expect("dropped") > 0);
        let next = s["next_since"].as_u64().expect("next");
        if !s["dropped"].is_null() {
            let from = s["dropped"]["from"].as_u64().expect("from");
            let to = s["dropped"]["to"].as_u64().expect("to");
            assert_eq!(s["output"], shown(&expected[to as usize..next as usize]));
            assert!(r.text.contains("were dropped"), "{}", r.text);
            break (from, to);
        }
        assert!(next > since && next <= head, "{since} → {next}");
        assert_eq!(s["output"], shown(&expected[since as usize..next as usize]));
        seen.push_str(s["output"].as_str().expect("o"));
        since = next;
    };
    assert_eq!(from, head);
    assert_eq!(seen, shown(&expected[..head as usize]));
    assert!(to > total - cap && to < total, "{to}");
    assert_eq!(
        c.call_ok("shell_jobs", json!({})).structured["jobs"][0]["output_bytes"],
        total
    );

    // Anywhere in the kept tail, in stream coordinates; the end is exact.
    for at in [to, to + 12_345, total - 100] {
        let r = c.call_ok("shell_output", json!({"job_id": job, "since": at}));
        let next = r.structured["next_since"].as_u64().expect("next");
        assert!(r.structured["dropped"].is_null());
        assert_eq!(
            r.structured["output"],
            shown(&expected[at as usize..next as usize])
        );
    }
    let r = c.call_ok("shell_output", json!({"job_id": job, "since": total - 100}));
    assert!(
        r.structured["output"]
            .as_str()
            .expect("o")
            .ends_with("5999999\n6000000\n")
    );
    assert_eq!(r.structured["more"], false);

    // The file itself: head, a marker, the tail.
    let log = d
        .path()
        .join(r.structured["log_path"].as_str().expect("log"));
    let file = std::fs::read(&log).expect("log");
    assert!(file.starts_with(&expected[..head as usize]));
    assert!(file.ends_with(&expected[to as usize..]));
    let marker = String::from_utf8_lossy(&file[head as usize..file.len() - (total - to) as usize])
        .into_owned();
    assert!(
        marker.contains(&format!("{} bytes of output dropped here", to - from)),
        "{marker}"
    );

    // In the foreground too: the answer says the log was capped.
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo END"}),
    );
    assert!(r.structured["log_dropped_bytes"].as_u64().expect("d") > 3_000_000);
    assert!(
        r.structured["stdout"]
            .as_str()
            .expect("s")
            .ends_with("xx\nEND\n")
    );
    assert!(r.text.contains("bytes dropped"), "{}", r.text);
    assert!(dir_bytes(&logs) <= 2 * cap);
}

#[test]
fn the_logs_directory_total_is_capped() {
    let d = tempfile::tempdir().expect("tmp");
    let logs = d.path().join(".kitbag/shell/logs");
    std::fs::create_dir_all(&logs).expect("mkdir");
    // Logs of earlier servers: a dead one (pid above pid_max) and a live one (this test).
    let live = logs.join(format!("{}-1-0.log", std::process::id()));
    let dead_old = logs.join("4194305-2-0.log");
    let dead_new = logs.join("4194305-3-1.log");
    let dead_seg = logs.join("4194305-2-0.log.tail1");
    std::fs::write(&live, vec![b'l'; 50_000]).expect("w");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&dead_old, vec![b'a'; 150_000]).expect("w");
    std::fs::write(&dead_seg, vec![b'a'; 50_000]).expect("w");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&dead_new, vec![b'b'; 150_000]).expect("w");
    // Temp files of writes a kill -9 cut short, under .kitbag: swept at start when their
    // process is gone.
    let stale_tmp = d.path().join(".kitbag/.cron.json.kitbag-tmp-4194305-0");
    let live_tmp = d.path().join(format!(
        ".kitbag/.cron.json.kitbag-tmp-{}-0",
        std::process::id()
    ));
    std::fs::write(&stale_tmp, "x").expect("w");
    std::fs::write(&live_tmp, "x").expect("w");
    let cap: u64 = 300_000;
    let mut c = client(
        d.path(),
        &[
            "--logs-max-total-bytes",
            &cap.to_string(),
            "--log-max-bytes",
            "100000",
        ],
    );
    // At start: over the cap (400 000), so the oldest finished log (and its segment) went.
    c.call_ok("shell_jobs", json!({}));
    assert!(live.exists(), "another live server's log is never deleted");
    assert!(!dead_old.exists() && !dead_seg.exists());
    assert!(dead_new.exists());
    assert!(dir_bytes(&logs) <= cap);
    assert!(
        !stale_tmp.exists(),
        "a dead writer's temp file is swept at start"
    );
    assert!(live_tmp.exists(), "a live writer's temp file is left alone");

    // A running job's log is kept whatever its age.
    let r = c.call_ok(
        "shell_bash",
        json!({"command": "head -c 90000 /dev/zero | tr '\\0' j; sleep 100", "background": true}),
    );
    let job_log = d
        .path()
        .join(r.structured["log_path"].as_str().expect("log"));
    let job = r.structured["job_id"].as_str().expect("job").to_string();
    for _ in 0..5 {
        let r = c.call_ok(
            "shell_bash",
            json!({"command": "head -c 90000 /dev/zero | tr '\\0' y"}),
        );
        assert_eq!(r.structured["output_bytes"], 90_000);
        let total = dir_bytes(&logs);
        assert!(total <= cap, "{total}");
        let log = d
            .path()
            .join(r.structured["log_path"].as_str().expect("log"));
        assert!(log.exists(), "the newest log is kept");
    }
    assert!(!dead_new.exists());
    assert!(job_log.exists(), "a running command's log is never deleted");
    assert!(live.exists());
    c.call_ok("shell_kill", json!({"job_id": job}));
}

/// `--keep-logs` holds after every command, with the directory read only now and then
/// (issue #43: the prune decides from what the server wrote, not from a `stat` of every log).
#[test]
fn the_log_count_is_capped_after_every_command() {
    let d = tempfile::tempdir().expect("tmp");
    let logs = d.path().join(".kitbag/shell/logs");
    let mut c = client(d.path(), &["--keep-logs", "5"]);
    let mut kept = Vec::new();
    for i in 0..12 {
        let r = c.call_ok("shell_bash", json!({"command": format!("echo run-{i}")}));
        kept.push(
            d.path()
                .join(r.structured["log_path"].as_str().expect("log")),
        );
        let n = std::fs::read_dir(&logs).expect("ls").count();
        assert!(n <= 5, "after command {i}: {n} logs");
        assert!(
            kept.last().is_some_and(|l| l.exists()),
            "the newest log is kept"
        );
    }
    assert!(
        kept[..7].iter().all(|l| !l.exists()),
        "the oldest went first"
    );
    assert!(kept[7..].iter().all(|l| l.exists()));
}
