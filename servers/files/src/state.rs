//! Per-connection state: which files were read, and their content hash at that read.

use kitbag_shared::lock::LockExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kitbag_shared::lock::PathLocks;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::json;

pub struct FilesState {
    /// Content hash of each file as last read (or written) through this connection.
    read_hashes: Mutex<HashMap<PathBuf, u128>>,
    pub locks: PathLocks,
    pub max_content_bytes: usize,
    /// Language servers that check every write (`--lsp`); None: no edit feedback.
    pub feedback: Option<kitbag_lsp_client::feedback::Feedback>,
}

impl FilesState {
    pub fn new(max_content_bytes: usize) -> Self {
        Self {
            read_hashes: Mutex::new(HashMap::new()),
            locks: PathLocks::new(kitbag_shared::lock::DEFAULT_LOCK_WAIT),
            max_content_bytes,
            feedback: None,
        }
    }

    /// With language servers checking every write.
    pub fn with_feedback(
        mut self,
        feedback: Option<kitbag_lsp_client::feedback::Feedback>,
    ) -> Self {
        self.feedback = feedback;
        self
    }

    pub fn record(&self, path: &Path, bytes: &[u8]) {
        self.hashes().insert(path.to_path_buf(), hash(bytes));
    }

    pub fn record_hash(&self, path: &Path, digest: u128) {
        self.hashes().insert(path.to_path_buf(), digest);
    }

    pub fn recorded(&self, path: &Path) -> Option<u128> {
        self.hashes().get(path).copied()
    }

    /// The check before changing an existing file: it was read through this connection and
    /// its bytes on disk (`current`) are still those of that read — else `file_not_read` or
    /// `file_changed_since_read`, naming what to do. `doing`: "overwriting", "editing".
    pub fn check_read_and_unchanged(
        &self,
        abs: &Path,
        rel: &str,
        current: impl FnOnce() -> std::io::Result<Vec<u8>>,
        doing: &str,
    ) -> ToolResult<Vec<u8>> {
        let Some(recorded) = self.recorded(abs) else {
            return Err(ToolError::new(
                ErrorCode::FileNotRead,
                format!("{rel}: read the file with file_read before {doing} it"),
            )
            .with_detail(json!({ "field": "path", "path": rel })));
        };
        let current = current().map_err(|e| ToolError::io(rel, &e))?;
        if hash(&current) != recorded {
            return Err(ToolError::new(
                ErrorCode::FileChangedSinceRead,
                format!(
                    "{rel}: the file changed on disk since it was last read; read it again before {doing} it"
                ),
            )
            .with_detail(json!({ "field": "path", "path": rel })));
        }
        Ok(current)
    }

    /// Carry read records over a move (a file moved into place keeps its read state).
    pub fn rename(&self, from: &Path, to: &Path) {
        let mut map = self.hashes();
        let moved: Vec<(PathBuf, u128)> = map
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, h)| (p.clone(), *h))
            .collect();
        map.remove(to);
        for (p, h) in moved {
            map.remove(&p);
            if let Ok(rest) = p.strip_prefix(from) {
                map.insert(to.join(rest), h);
            }
        }
    }

    pub fn forget(&self, path: &Path) {
        self.hashes().remove(path);
    }

    fn hashes(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, u128>> {
        self.read_hashes.locked()
    }
}

/// Content hash used to notice a file changed since it was read. XXH3-128: fast enough that
/// hashing never dominates a read, and collisions need deliberately crafted content — which
/// anyone able to write the file could simply write instead.
pub fn hash(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}
