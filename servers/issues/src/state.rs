//! What every tool call shares: the database, who acts, which project, the bound issue.

use kitbag_shared::lock::LockExt;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::db::Store;
use crate::notifier::Notifier;

pub struct IssuesState {
    pub conn: Mutex<Store>,
    /// The SQLite file (for the watcher's own connection); `None` on PostgreSQL.
    pub db_path: Option<PathBuf>,
    /// Issues are numbered per project.
    pub project: String,
    /// The author of every change (`--principal`).
    pub principal: String,
    /// Workflows an issue may be assigned to (`--workflow`).
    pub workflows: Vec<String>,
    bound: Mutex<Option<i64>>,
    pub notifier: Notifier,
}

impl IssuesState {
    pub fn new(
        conn: Store,
        db_path: Option<PathBuf>,
        project: String,
        principal: String,
        workflows: Vec<String>,
        bound: Option<i64>,
    ) -> Self {
        Self {
            conn: Mutex::new(conn),
            db_path,
            project,
            principal,
            workflows,
            bound: Mutex::new(bound),
            notifier: Notifier::default(),
        }
    }

    pub fn bound(&self) -> Option<i64> {
        *self.bound.locked()
    }

    /// Set the bound issue; returns the previous one.
    pub fn set_bound(&self, n: Option<i64>) -> Option<i64> {
        std::mem::replace(&mut *self.bound.locked(), n)
    }
}
