//! Issue #22 §1 for the issues database: `.kitbag` swapped for a link to another tracker (one
//! holding a sentinel issue) over and over while servers start, list, create and exit. No
//! answer may carry the other tracker's issue and it must not change.

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{seeded_state, sentinel, state_dir_race};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-issues"))
}

#[test]
fn a_swapped_state_directory_is_never_read_or_written() {
    let mark = sentinel();
    let seed = seeded_state(
        bin(),
        &[],
        &[("issue_create", json!({"title": mark, "body": mark}))],
    );
    let root = tempfile::tempdir().expect("tmp");
    let race = state_dir_race(
        bin(),
        &[],
        root.path(),
        &seed.path().join(".kitbag"),
        &mark,
        Duration::from_secs(4),
        &|i| {
            vec![
                ("issue_list", json!({"status": "all"})),
                ("issue_get", json!({"number": 1})),
                (
                    "issue_create",
                    json!({"title": format!("inside {i}"), "body": "b"}),
                ),
            ]
        },
    );
    race.assert_clean("kitbag-issues");
}
