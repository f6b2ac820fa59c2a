//! Shutdown signals reach every binary even when the client starts it with them blocked, as
//! Claude Code (through Bun) does: SIGINT, SIGTERM and SIGCHLD in the inherited mask. Claude
//! sends SIGINT, SIGTERM 100 ms later, then SIGKILL; a server must be gone after the first,
//! and the host's children with it.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, child_pids, process_alive, sibling_binary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// Start `program args` with SIGINT, SIGTERM and SIGCHLD blocked (the mask survives exec).
fn spawn_masked(program: &Path, args: &[&str], cwd: &Path) -> McpClient {
    let mut wrapper_args = vec![
        "-c",
        "import os, signal, sys\n\
         signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM, signal.SIGCHLD])\n\
         os.execv(sys.argv[1], sys.argv[1:])",
    ];
    let program = program.to_str().expect("utf8 path");
    wrapper_args.push(program);
    wrapper_args.extend_from_slice(args);
    McpClient::spawn(Path::new("python3"), &wrapper_args, cwd, Era::Handshake)
}

/// The blocked-signal mask of a process's main thread, from /proc.
fn blocked_mask(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !process_alive(pid)
}

fn sigint(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
}

const SIGINT_BIT: u64 = 1 << (2 - 1);
const SIGTERM_BIT: u64 = 1 << (15 - 1);

#[test]
fn servers_started_with_blocked_signals_still_stop_on_sigint() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 missing"
        );
        eprintln!("SKIPPED: python3 is needed to start a server with a blocked mask");
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let mut cases: Vec<(std::path::PathBuf, Vec<&str>)> = vec![
        (bin().to_path_buf(), vec!["server", "files"]),
        (bin().to_path_buf(), vec!["serve"]),
    ];
    for single in ["kitbag-files", "kitbag-shell", "kitbag-lsp"] {
        let p = sibling_binary(single);
        if p.exists() {
            cases.push((p, vec![]));
        } else {
            eprintln!("SKIPPED {single}: not built (cargo test --workspace builds it)");
        }
    }
    for (program, args) in cases {
        let what = format!("{} {}", program.display(), args.join(" "));
        let mut c = spawn_masked(&program, &args, d.path());
        assert!(!c.list_tools().is_empty(), "{what}");
        let pid = c.pid();
        let mask = blocked_mask(pid);
        assert_eq!(
            mask & (SIGINT_BIT | SIGTERM_BIT),
            0,
            "{what}: still blocks SIGINT/SIGTERM (SigBlk {mask:x})"
        );
        let children = child_pids(pid);
        sigint(pid);
        assert!(
            wait_gone(pid, Duration::from_secs(3)),
            "{what}: ignored SIGINT"
        );
        for child in children {
            assert!(
                wait_gone(child, Duration::from_secs(3)),
                "{what}: child {child} outlived the host"
            );
        }
    }
}
