//! The workspace's own library sources, as the whole-workspace checks read them
//! (`tests/code_health.rs`, `tests/module_cycles.rs`): every crate's `src/`, without tests,
//! benches, fixtures, the test kit, build output or hidden directories.

use std::path::{Path, PathBuf};

/// The workspace root (this crate sits in it).
///
/// Read when the test runs (cargo sets `CARGO_MANIFEST_DIR` for it), not when it was built:
/// a build directory shared by two checkouts may hold a library built from the other one.
pub fn root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        manifest
            .parent()
            .expect("the tests crate sits in the workspace")
            .to_path_buf()
    })
}

/// Directories that hold no library source of ours.
pub fn skipped(name: &str) -> bool {
    matches!(
        name,
        "target" | "tests" | "benches" | "testkit" | "node_modules" | "examples"
    ) || name.starts_with('.')
}

/// The workspace's crates: every directory under `root` with a `Cargo.toml` and a `src`.
pub fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            out.push(dir.clone());
        }
        for path in subdirs(&dir) {
            if path.file_name().is_some_and(|n| n != "src") {
                dirs.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !skipped(&entry.file_name().to_string_lossy()) {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every library source file of every crate.
pub fn library_files(root: &Path) -> Vec<PathBuf> {
    crate_dirs(root)
        .iter()
        .flat_map(|c| rust_files(&c.join("src")))
        .collect()
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().is_dir() && !skipped(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect()
}
