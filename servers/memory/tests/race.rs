//! Issue #22 §1 for the memory database: `.kitbag` swapped for a link to another store (one
//! holding a sentinel memory) over and over while servers start, search, store and exit.
//! No answer may carry the other store's memory and the other store must not change — not
//! even a `-wal` or `-shm` file beside it.

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{seeded_state, sentinel, state_dir_race};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-memory"))
}

#[test]
fn a_swapped_state_directory_is_never_read_or_written() {
    let mark = sentinel();
    let seed = seeded_state(bin(), &[], &[("memory_store", json!({"content": mark}))]);
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
                // The sentinel's words, not the sentinel: only the outside memory has them all.
                ("memory_search", json!({"query": "OUTSIDE SENTINEL"})),
                (
                    "memory_context",
                    json!({"query": "OUTSIDE SENTINEL", "mode": "relevant"}),
                ),
                (
                    "memory_store",
                    json!({"content": format!("inside note {i}")}),
                ),
            ]
        },
    );
    race.assert_clean("kitbag-memory");
}
