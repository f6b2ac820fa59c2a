//! Issue #22 §1 for the shell's logs: `.kitbag` swapped for a link to another directory (one
//! holding old logs of a dead server, with a sentinel) over and over while servers start,
//! run commands (each writes a log, then prunes to one kept log) and exit. Nothing may be
//! written, pruned or read there.

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{sentinel, state_dir_race};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-shell"))
}

#[test]
fn a_swapped_state_directory_is_never_read_or_written() {
    let mark = sentinel();
    let outside = tempfile::tempdir().expect("tmp");
    let logs = outside.path().join("shell/logs");
    std::fs::create_dir_all(&logs).expect("mkdir");
    // PID 4194305 is above Linux's pid_max: a server that is surely gone, so its logs are
    // prunable — by a server looking at the right directory only.
    for n in 0..5 {
        std::fs::write(logs.join(format!("4194305-1-{n}.log")), format!("{mark}\n")).expect("w");
    }
    std::fs::write(
        outside.path().join(".a.kitbag-tmp-4194305-0"),
        "a stale temp file of a dead writer",
    )
    .expect("w");
    let root = tempfile::tempdir().expect("tmp");
    let race = state_dir_race(
        bin(),
        &["--keep-logs", "1"],
        root.path(),
        outside.path(),
        &mark,
        Duration::from_secs(4),
        &|i| vec![("shell_bash", json!({"command": format!("echo inside {i}")}))],
    );
    race.assert_clean("kitbag-shell");
}
