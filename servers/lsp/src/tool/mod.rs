//! The `code_lsp` tool: its definition, the per-root state, and the dispatch of a call to
//! its action. The parameters are in [`params`], their validation in [`validate`], and the
//! steps every action shares (open a file in its server, map RPC failures) in [`open`].

pub mod open;
pub mod params;
pub mod validate;

use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{PathPolicy, Reply, ToolDef, ToolResult};

use crate::pool::Pool;
pub use crate::result::LspResult;
pub use open::{Opened, language_for, language_named, open, rpc_error};
pub use params::{Action, LspParams, Scope, Severity};
pub use validate::{need, position};

pub const DEF: ToolDef = ToolDef {
    name: "code_lsp",
    title: "Code intelligence",
    description: "Code intelligence from real language servers (rust-analyzer, pyright, typescript-language-server, \
        gopls, clangd), started on first use and kept in sync with the files on disk. A position is `path` + \
        `line` + `character` or `symbol`. rename edits every file atomically; rename_file moves the file and \
        lets the server update imports; request sends a raw LSP request. A parameter prefixed with actions \
        applies to those only. Results carry root-relative paths, 1-based lines and a preview.",
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
        let mut pools = match self.pools.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        pools
            .entry(root.to_path_buf())
            .or_insert_with(|| {
                Pool::with_audit(self.config.clone(), root.to_path_buf(), self.audit.clone())
            })
            .clone()
    }

    /// Shut every language server down (server exit).
    pub async fn shutdown_all(&self) {
        let pools: Vec<Arc<Pool>> = match self.pools.lock() {
            Ok(p) => p.values().cloned().collect(),
            Err(_) => return,
        };
        for pool in pools {
            pool.shutdown_all().await;
        }
    }
}

pub async fn run(
    state: &LspState,
    policy: Arc<PathPolicy>,
    p: LspParams,
) -> ToolResult<Reply<LspResult>> {
    validate::validate(&p)?;
    let pool = &state.pool_for(policy.root());
    validate::preflight(pool, &policy, &p)?;
    let (data, text) = match p.action {
        Action::Status => crate::actions::status(pool).await?,
        Action::Reload => crate::actions::reload(pool, &policy, &p).await?,
        Action::Capabilities => crate::actions::capabilities(pool, &policy, &p).await?,
        Action::Request => crate::actions::raw_request(pool, &policy, &p).await?,
        Action::Diagnostics => crate::actions::diagnostics(pool, &policy, &p).await?,
        Action::Definition | Action::TypeDefinition | Action::Implementation => {
            crate::actions::goto(pool, &policy, &p).await?
        }
        Action::References => crate::actions::references(pool, &policy, &p).await?,
        Action::Hover => crate::actions::hover(pool, &policy, &p).await?,
        Action::Symbols => crate::actions::symbols(pool, &policy, &p).await?,
        Action::CodeActions => crate::actions::code_actions(pool, &policy, &p).await?,
        Action::Rename => crate::rename::rename(pool, &policy, &p).await?,
        Action::RenameFile => crate::rename::rename_file(pool, &policy, &p).await?,
    };
    Ok(Reply::new(data, text))
}
