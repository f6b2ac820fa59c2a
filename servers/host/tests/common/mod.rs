//! Helpers the host's raw-pipe tests share.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `kitbag serve` (the embedded default) in `dir`, stdin and stdout piped for raw lines,
/// stderr dropped, with no inherited host depth or config.
pub fn serve_piped(dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kitbag"))
        .args(["serve"])
        .current_dir(dir)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kitbag serve")
}
