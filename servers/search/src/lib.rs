//! kitbag-search: grep, glob, AST search and AST rewrite over MCP, confined to a root.

pub mod ast;
pub mod dirwalk;
pub mod glob;
pub mod grep;
pub mod languages;
pub mod prefilter;
pub mod walk;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter};

pub use grep::GrepLimits;

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-search",
    version,
    about = "MCP server: grep, glob, AST search and rewrite"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Time budget of one search, in milliseconds; past it the answer is partial.
    #[arg(long, default_value_t = 60_000)]
    pub search_timeout_ms: u64,

    /// Largest answer of one search, in bytes, measured as its structured result (JSON);
    /// past it the answer is truncated. The default is the suite's result budget (issue #37).
    #[arg(long, default_value_t = kitbag_shared::limits::RESULT_BUDGET_BYTES)]
    pub max_output_bytes: usize,

    /// Interval between progress notifications of a long search, in milliseconds.
    #[arg(long, default_value_t = 250)]
    pub progress_interval_ms: u64,

    /// Edit feedback for `edit_ast` from language servers.
    #[command(flatten)]
    pub lsp: kitbag_lsp_client::feedback::LspFlags,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-search",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Code search confined to the server's root: search_grep (regex over contents, ripgrep engine), search_glob (file names), search_ast (structural patterns with meta-variables) and edit_ast (structural rewrite, dry run by default).",
};

/// Server state: the bounds every search runs under, and the language servers that check
/// `edit_ast`'s writes (`--lsp`).
pub struct SearchState {
    pub limits: GrepLimits,
    pub feedback: Option<kitbag_lsp_client::feedback::Feedback>,
}

pub fn router() -> ToolRouter<SearchState> {
    ToolRouter::new()
        .tool(
            grep::DEF,
            |s: Arc<SearchState>, p, ctx: CallCtx| async move {
                grep::run(ctx.policy().clone(), s.limits, p, ctx).await
            },
        )
        .tool(
            glob::DEF,
            |s: Arc<SearchState>, p, ctx: CallCtx| async move {
                glob::run(ctx.policy().clone(), s.limits, p, ctx).await
            },
        )
        .tool(
            ast::SEARCH_DEF,
            |_s: Arc<SearchState>, p, ctx: CallCtx| async move {
                ast::search(ctx.policy().clone(), p, ctx).await
            },
        )
        .tool(
            ast::EDIT_DEF,
            |s: Arc<SearchState>, p, ctx: CallCtx| async move {
                ast::edit(s.feedback.as_ref(), ctx.policy().clone(), p, ctx).await
            },
        )
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<SearchState>> {
    let policy = args.common.policy()?;
    let state = SearchState {
        limits: GrepLimits {
            budget: Duration::from_millis(args.search_timeout_ms.max(1)),
            max_output_bytes: args.max_output_bytes.max(1024),
            progress_interval: Duration::from_millis(args.progress_interval_ms.max(1)),
        },
        feedback: kitbag_lsp_client::feedback::Feedback::from_flags(&args.lsp)?,
    };
    McpServer::new(IDENTITY, state, router(), policy).with_common_args(&args.common)
}

/// The runtime this server runs on (its own binary and `kitbag server search` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    let state = server.state().clone();
    let served = kitbag_shared::serve(server, &args.common).await;
    if let Some(f) = &state.feedback {
        // Language servers get a clean shutdown rather than a kill when we can.
        let _ = tokio::time::timeout(Duration::from_secs(5), f.shutdown()).await;
    }
    served
}
