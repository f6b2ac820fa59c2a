//! Helpers shared by the debug-adapter tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use kitbag_testkit::child_pids;

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-dap"))
}

/// Whether debugpy is importable; under CI its absence is a failure, elsewhere a skip.
pub fn have_debugpy() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import debugpy"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "debugpy missing under CI"
        );
        eprintln!("SKIP: debugpy not installed");
    }
    ok
}

/// Every process below `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in child_pids(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}
