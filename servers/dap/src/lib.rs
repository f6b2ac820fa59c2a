//! kitbag-dap: one `debug` tool over real debug adapters (debugpy first).

pub mod cdp;
pub mod config;
pub mod dap;
pub mod debug;

use std::sync::Arc;

use clap::Parser;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter};

pub use debug::DapState;

#[derive(Debug, Parser)]
#[command(name = "kitbag-dap", version, about = "MCP server: debugging over DAP")]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// TOML file with `[dap.adapters.<runtime>]` tables (`command`, `adapter_id`, `launch`):
    /// overrides a built-in runtime's adapter command or adds a runtime.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-dap",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Debug programs with the `debug` tool: launch with breakpoints, continue, inspect variables, read output, disconnect. Paths are root-relative.",
};

pub fn router() -> ToolRouter<DapState> {
    ToolRouter::new().tool(debug::DEF, |s: Arc<DapState>, p, ctx: CallCtx| async move {
        debug::run(&s, ctx.policy().clone(), p).await
    })
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<DapState>> {
    let policy = args.common.policy()?;
    let cfg = match &args.config {
        Some(path) => config::Config::load(path)?,
        None => config::Config::default(),
    };
    let audit = match &args.common.audit_log {
        Some(p) => Some(kitbag_shared::audit::AuditLog::open(p)?),
        None => None,
    };
    let state = DapState::new(cfg).with_audit(audit.clone());
    Ok(McpServer::new(IDENTITY, state, router(), policy)
        .with_common_args(&args.common)?
        .with_audit(audit))
}

/// The runtime this server runs on (its own binary and `kitbag server dap` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    kitbag_shared::serve(server, &args.common).await
}
