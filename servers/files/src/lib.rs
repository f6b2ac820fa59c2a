//! kitbag-files: file tools over MCP, confined to a root.
//!
//! Each tool's logic is a plain function in its own module; this file only wires them. Every
//! write is journaled (kitbag-checkpoints), and `checkpoint`, `checkpoint_list`,
//! `checkpoint_restore` (`checkpoint.rs`) rewind them.

pub mod checkpoint;
pub mod edit;
pub mod list;
pub mod manage;
pub mod patch;
pub mod read;
pub mod state;
pub mod write;

use std::sync::Arc;

use clap::Parser;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter, blocking};

pub use state::FilesState;

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-files",
    version,
    about = "MCP server: file tools confined to a root"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Largest `content` accepted by file_write / file_create / edit_text, in bytes.
    #[arg(long, default_value_t = 10 * 1024 * 1024)]
    pub max_content_bytes: usize,

    #[command(flatten)]
    pub lsp: kitbag_lsp_client::feedback::LspFlags,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-files",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "File tools confined to the server's root. Paths are root-relative (absolute paths inside the root are accepted). Read a file with file_read before overwriting it with file_write; prefer edit_text for targeted changes.",
};

pub fn router() -> ToolRouter<FilesState> {
    ToolRouter::new()
        .tool(
            read::DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                let target = read::open(ctx.policy(), p)?;
                // An edit usually follows a read: its language server starts now.
                if let (Some(f), Some(path)) = (&s.feedback, target.file_path()) {
                    f.warm(ctx.policy(), path);
                }
                if target.is_quick() {
                    target.read(&s, ctx.policy())
                } else {
                    let policy = ctx.policy().clone();
                    blocking(move || target.read(&s, &policy)).await
                }
            },
        )
        .tool(
            write::WRITE_DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                write::write(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            write::CREATE_DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                write::create(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            edit::DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                edit::run(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            patch::DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                patch::run(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            list::DEF,
            |_s: Arc<FilesState>, p, ctx: CallCtx| async move {
                blocking(move || list::run(ctx.policy(), p)).await
            },
        )
        .tool(
            manage::MOVE_DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                manage::move_entry(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            manage::DELETE_DEF,
            |s: Arc<FilesState>, p, ctx: CallCtx| async move {
                manage::delete(s, ctx.policy().clone(), p).await
            },
        )
        .tool(
            checkpoint::DEF,
            |_s: Arc<FilesState>, p, ctx: CallCtx| async move { checkpoint::run(&ctx, p).await },
        )
        .tool(
            checkpoint::LIST_DEF,
            |_s: Arc<FilesState>, p, ctx: CallCtx| async move { checkpoint::list(&ctx, p).await },
        )
        .tool(
            checkpoint::RESTORE_DEF,
            |_s: Arc<FilesState>, p, ctx: CallCtx| async move {
                checkpoint::restore(&ctx, p).await
            },
        )
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<FilesState>> {
    let policy = args.common.policy()?;
    let state = FilesState::new(args.max_content_bytes).with_feedback(
        kitbag_lsp_client::feedback::Feedback::from_flags(&args.lsp)?,
    );
    McpServer::new(IDENTITY, state, router(), policy).with_common_args(&args.common)
}

/// One thread: a request is read, answered and written without crossing threads (slow work
/// goes to the blocking pool). The host runs `kitbag server files` on the same.
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Current;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    let state = server.state().clone();
    let served = kitbag_shared::serve(server, &args.common).await;
    if let Some(f) = &state.feedback {
        // Language servers get a clean shutdown rather than a kill when we can.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), f.shutdown()).await;
    }
    served
}
