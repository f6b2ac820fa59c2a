//! Edit feedback for a server whose tools write files (kitbag-files, kitbag-search's
//! `edit_ast`): the flags that turn it on (`--lsp`, `--lsp-config`, `--lsp-server`,
//! `--check-wait-ms`), the language servers they configure, and the two steps around a
//! write — the state before it, and after it what it introduced and fixed ([`crate::check`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args as ClapArgs;
use kitbag_shared::PathPolicy;

use crate::check::{Before, Checker, EditDiagnostics};
use crate::config::Config;
use crate::pools::Pools;

/// The flags that turn edit feedback on.
#[derive(Debug, Clone, ClapArgs)]
pub struct LspFlags {
    /// Report the diagnostics each write introduced and fixed, from the built-in language
    /// servers (kitbag-lsp's: rust-analyzer, pyright, typescript-language-server, gopls,
    /// clangd).
    #[arg(long)]
    pub lsp: bool,

    /// kitbag-lsp's TOML configuration (`[lsp.servers.<language>]`); implies --lsp.
    #[arg(long, value_name = "FILE")]
    pub lsp_config: Option<PathBuf>,

    /// A language's server command, as kitbag-lsp's `--server`:
    /// `--lsp-server python="basedpyright-langserver --stdio"`. Repeatable; implies --lsp.
    #[arg(long = "lsp-server", value_name = "LANG=COMMAND")]
    pub lsp_servers: Vec<String>,

    /// How long a write waits for the language server's diagnostics, before the write and
    /// again after it, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1500,
        value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub check_wait_ms: u64,

    /// How long a language server must stay quiet (nothing heard from it, nothing told to
    /// it) before its diagnostics count as final, in milliseconds. Raise it on a loaded
    /// machine, where a server's answers for other files can come in pieces.
    #[arg(long, value_name = "MS", default_value_t = 150,
        value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub check_quiet_ms: u64,
}

impl Default for LspFlags {
    fn default() -> Self {
        LspFlags {
            lsp: false,
            lsp_config: None,
            lsp_servers: Vec::new(),
            check_wait_ms: crate::check::DEFAULT_WAIT.as_millis() as u64,
            check_quiet_ms: crate::check::QUIET.as_millis() as u64,
        }
    }
}

/// The language servers a files server checks its writes with.
pub struct Feedback {
    pools: Pools,
    wait: Duration,
    quiet: Duration,
}

impl Feedback {
    /// None when the flags leave edit feedback off.
    pub fn from_flags(f: &LspFlags) -> anyhow::Result<Option<Feedback>> {
        if !f.lsp && f.lsp_config.is_none() && f.lsp_servers.is_empty() {
            return Ok(None);
        }
        let config = Config::load(f.lsp_config.as_deref(), &f.lsp_servers)
            .map_err(|e| anyhow::anyhow!("--lsp-config/--lsp-server: {e}"))?;
        Ok(Some(Feedback {
            pools: Pools::new(config, None),
            wait: Duration::from_millis(f.check_wait_ms),
            quiet: Duration::from_millis(f.check_quiet_ms),
        }))
    }

    fn checker(&self, policy: &PathPolicy) -> Checker {
        Checker::new(self.pools.pool_for(policy.root())).with_quiet(self.quiet)
    }

    /// After a read: open the file in its server in the background, so the state before
    /// the edit that usually follows is ready when the edit comes.
    pub fn warm(&self, policy: &PathPolicy, path: &Path) {
        let checker = self.checker(policy);
        if checker.covers(path) {
            checker.warm(path);
        }
    }

    /// Stop every language server (server exit).
    pub async fn shutdown(&self) {
        self.pools.shutdown_all().await;
    }
}

/// A write's check in progress: the state before it.
pub struct Pending {
    checker: Checker,
    before: Before,
    wait: Duration,
}

/// The state before a write of `paths` (absolute), unless the call said `check: false`,
/// feedback is off, or no server is configured for any of them.
pub async fn before(
    feedback: Option<&Feedback>,
    policy: &PathPolicy,
    paths: &[PathBuf],
    check: Option<bool>,
) -> Option<Pending> {
    let f = feedback?;
    if check == Some(false) {
        return None;
    }
    let checker = f.checker(policy);
    if !paths.iter().any(|p| checker.covers(p)) {
        return None;
    }
    let before = checker.before(paths, f.wait).await;
    Some(Pending {
        checker,
        before,
        wait: f.wait,
    })
}

/// After the write: what it introduced and fixed. `moved`: (path before, path after) of
/// each file the write moved.
pub async fn after(
    pending: Option<Pending>,
    policy: &PathPolicy,
    moved: &[(PathBuf, PathBuf)],
) -> Option<EditDiagnostics> {
    let p = pending?;
    Some(p.checker.after(p.before, moved, policy, p.wait).await)
}

/// The answer's text with the check's lines after it.
pub fn append(text: &mut String, d: Option<&EditDiagnostics>) {
    if let Some(d) = d {
        text.push('\n');
        text.push_str(&d.text());
    }
}
