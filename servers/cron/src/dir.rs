//! `<root>/.kitbag`, where the SQLite store keeps its files: the database, the `cron.json` it
//! imports, the run history and the lock.
//!
//! Every file is reached through `.kitbag` opened beneath the root's descriptor without
//! following links, afresh for each operation (the SQLite connection keeps the directory it
//! was opened through): a program renaming `.kitbag` and planting a link cannot make the store
//! read or write outside the root (issue #22). Paths are for messages only.

use std::path::{Path, PathBuf};

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::StateDir;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};

// The store's files.
pub const DB: &str = "cron.db";
pub const LEGACY: &str = "cron.json";
pub const IMPORTING: &str = "cron.json.importing";
pub const LOCK: &str = "cron.lock";
pub const RUNS: &str = "cron-runs.jsonl";

/// The state directory of one root.
#[derive(Clone)]
pub struct StoreDir {
    policy: PathPolicy,
    /// `<root>/.kitbag`, for messages.
    pub path: PathBuf,
}

/// An I/O failure on `path`, as a tool error.
pub fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::IoError,
        format!("{what} {}: {e}", path.display()),
    )
}

impl StoreDir {
    pub fn new(policy: &PathPolicy) -> StoreDir {
        StoreDir {
            policy: policy.clone(),
            path: policy.root().join(".kitbag"),
        }
    }

    /// A file's path, for messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// `.kitbag`, opened beneath the root for one operation (made when `create`); `None` when
    /// it does not exist and `create` is false.
    pub fn open(&self, create: bool) -> ToolResult<Option<StateDir>> {
        match StateDir::open(&self.policy, &self.path, create) {
            Ok(d) => Ok(Some(d)),
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot open", &self.path, &e)),
        }
    }

    /// `.kitbag`, made when missing.
    pub fn made(&self) -> ToolResult<StateDir> {
        self.open(true)?
            .ok_or_else(|| ToolError::internal("the state directory could not be made"))
    }
}
