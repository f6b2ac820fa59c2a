//! Issue #22 §1 for the cron store: `.kitbag` swapped for a link to another store (one holding
//! a sentinel entry, its run history and lock) over and over while servers start, list,
//! create and exit. No answer may carry the other store's entry and it must not change.

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{seeded_state, sentinel, state_dir_race};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-cron"))
}

#[test]
fn a_swapped_state_directory_is_never_read_or_written() {
    let mark = sentinel();
    let seed = seeded_state(
        bin(),
        &[],
        &[(
            "cron_create",
            json!({"schedule": "0 9 * * *", "message": mark}),
        )],
    );
    // A hand-written cron.json waiting to be imported: importing it would move it.
    let outside = seed.path().join(".kitbag");
    let legacy = json!({"next_id": 7, "entries": [{"id": "cron-6", "schedule": "0 10 * * *",
        "message": mark, "enabled": true}]});
    std::fs::write(outside.join("cron.json"), legacy.to_string()).expect("w");
    let root = tempfile::tempdir().expect("tmp");
    let race = state_dir_race(
        bin(),
        &[],
        root.path(),
        &outside,
        &mark,
        Duration::from_secs(4),
        &|i| {
            vec![
                ("cron_list", json!({})),
                ("cron_runs", json!({})),
                (
                    "cron_create",
                    json!({"schedule": "0 9 * * *", "message": format!("inside {i}")}),
                ),
            ]
        },
    );
    race.assert_clean("kitbag-cron");
}
