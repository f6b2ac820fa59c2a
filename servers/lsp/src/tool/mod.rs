//! The `code_lsp` tool: its definition and the per-root state. The parameters are in
//! [`params`], their validation in [`validate`], and the steps every action shares (open a file
//! in its server, map RPC failures) in [`open`]; `dispatch.rs` hands a call to its action.

pub mod open;
pub mod params;
pub mod validate;

use kitbag_shared::lock::LockExt;
use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::ToolDef;

use crate::pool::Pool;
pub use open::{Opened, language_for, language_named, open, rpc_error};
pub use params::{Action, LspParams, Scope, Severity};
pub use validate::{need, position};

pub const DEF: ToolDef = ToolDef {
    name: "code_lsp",
    title: "Code intelligence",
    description: "Code intelligence from language servers (rust, python, typescript/JS, go, \
        c/C++). A position is `path` + 1-based `line` + 0-based `character` (code points), or \
        `symbol`. rename edits all files atomically; rename_file fixes imports; request: any LSP \
        method.",
    read_only: false,
    destructive: false,
    idempotent: false,
    open_world: false,
    exec: false,
    meta: None,
    private_args: &[],
};

/// One pool per project root: the root comes from `--root`, or from the client's first
/// MCP root, so a client that names its roots gets servers rooted there.
pub struct LspState {
    pub config: crate::config::Config,
    pools: std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<Pool>>>,
    audit: Option<kitbag_shared::audit::AuditLog>,
}

impl LspState {
    pub fn new(config: crate::config::Config) -> Self {
        Self::with_audit(config, None)
    }

    /// Language-server lifecycle events are appended to `audit` (the `--audit-log` file).
    pub fn with_audit(
        config: crate::config::Config,
        audit: Option<kitbag_shared::audit::AuditLog>,
    ) -> Self {
        LspState {
            config,
            pools: Default::default(),
            audit,
        }
    }

    pub fn pool_for(&self, root: &std::path::Path) -> Arc<Pool> {
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
