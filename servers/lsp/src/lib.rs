//! kitbag-lsp: one `code_lsp` tool over a pool of real language servers.
//!
//! - [`tool`]: the tool's definition and per-root state; its parameters (`tool::params`), their
//!   validation (`tool::validate`) and the steps every action shares (`tool::open`);
//! - [`dispatch`]: a call handed to its action;
//! - [`actions`], [`rename`]: what each action asks the server and how answers are shown;
//! - [`result`]: the one typed result every action fills.
//!
//! The language servers themselves — registry, pool, JSON-RPC, document sync, fresh
//! diagnostics — are kitbag-lsp-client's, shared with kitbag-files' edit feedback.

pub mod actions;
pub mod dispatch;
pub mod rename;
pub mod result;
pub mod tool;

use std::sync::Arc;

use clap::Parser;
use kitbag_lsp_client::config;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter};

pub use tool::LspState;

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-lsp",
    version,
    about = "MCP server: code intelligence from real language servers"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// TOML file with `[lsp.servers.<language>]` tables (command, extensions,
    /// initialization_options, settings) and `[lsp]` idle_timeout_secs / request_timeout_secs.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Use this command for a language: `--server python="basedpyright-langserver --stdio"`.
    /// Repeatable; beats the config file.
    #[arg(long = "server", value_name = "LANG=COMMAND")]
    pub servers: Vec<String>,

    /// Stop a language server after this long without calls (e.g. 600, 90s, 10m).
    #[arg(long, value_name = "DURATION", value_parser = config::parse_duration)]
    pub idle_timeout: Option<std::time::Duration>,

    /// Kill and restart a language server that does not answer a request within this long.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_duration)]
    pub request_timeout: Option<std::time::Duration>,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-lsp",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Code intelligence with the `code_lsp` tool: diagnostics, definition, references, hover, symbols, rename, code actions — answered by real language servers that see the files as they are on disk. Lines are 1-based; give `symbol` instead of counting columns.",
};

pub fn router() -> ToolRouter<LspState> {
    ToolRouter::new().tool(tool::DEF, |s: Arc<LspState>, p, ctx: CallCtx| async move {
        dispatch::run(&s, ctx.policy().clone(), p).await
    })
}

/// The pool configuration from flags and the config file.
pub fn config_from(args: &Args) -> anyhow::Result<config::Config> {
    let mut cfg = config::Config::load(args.config.as_deref(), &args.servers)?;
    if let Some(d) = args.idle_timeout {
        cfg.idle_timeout = d;
    }
    if let Some(d) = args.request_timeout {
        cfg.request_timeout = d;
    }
    Ok(cfg)
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<LspState>> {
    let policy = args.common.policy()?;
    let audit = match &args.common.audit_log {
        Some(p) => Some(kitbag_shared::audit::AuditLog::open(p)?),
        None => None,
    };
    let state = LspState::new(config_from(args)?, audit);
    McpServer::new(IDENTITY, state, router(), policy).with_common_args(&args.common)
}

/// The runtime this server runs on (its own binary and `kitbag server lsp` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    let state = server.state().clone();
    let served = kitbag_shared::serve(server, &args.common).await;
    // Language servers get a clean shutdown rather than a kill when we can.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), state.shutdown_all()).await;
    served
}
