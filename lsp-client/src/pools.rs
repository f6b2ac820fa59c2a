//! One [`Pool`] per project root: the root comes from `--root`, or from the client's first
//! MCP root, so a client that names its roots gets servers rooted there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kitbag_shared::lock::LockExt;

use crate::config::Config;
use crate::pool::Pool;

pub struct Pools {
    pub config: Config,
    pools: Mutex<HashMap<PathBuf, Arc<Pool>>>,
    /// Language-server lifecycle events go here (the `--audit-log` file).
    audit: Option<kitbag_shared::audit::AuditLog>,
}

impl Pools {
    pub fn new(config: Config, audit: Option<kitbag_shared::audit::AuditLog>) -> Self {
        Pools {
            config,
            pools: Mutex::default(),
            audit,
        }
    }

    /// The pool of the servers rooted at `root`, made on first use.
    pub fn pool_for(&self, root: &Path) -> Arc<Pool> {
        self.pools
            .locked()
            .entry(root.to_path_buf())
            .or_insert_with(|| {
                Pool::with_audit(self.config.clone(), root.to_path_buf(), self.audit.clone())
            })
            .clone()
    }

    /// Shut every language server down (server exit).
    pub async fn shutdown_all(&self) {
        let pools: Vec<Arc<Pool>> = self.pools.locked().values().cloned().collect();
        for pool in pools {
            pool.shutdown_all().await;
        }
    }
}
