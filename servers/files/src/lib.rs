//! kitbag-files: file tools over MCP, confined to a root.
//!
//! Each tool's logic is a plain function in its own module; this file only wires them.

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
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<FilesState>> {
    let policy = args.common.policy()?;
    let state = FilesState::new(args.max_content_bytes);
    McpServer::new(IDENTITY, state, router(), policy).with_common_args(&args.common)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    kitbag_shared::serve(server, &args.common).await
}
