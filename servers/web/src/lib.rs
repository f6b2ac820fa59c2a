//! kitbag-web: fetch web pages as clean text over MCP, behind an SSRF guard.

pub mod charset;
pub mod feed;
pub mod fetch;
pub mod guard;
pub mod html;
pub mod pdf;
pub mod render;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter};

pub use fetch::WebState;

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-web",
    version,
    about = "MCP server: fetch web pages as markdown"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Allow private, loopback and link-local addresses (turns the SSRF guard off).
    #[arg(long)]
    pub allow_private: bool,

    /// Exempt one host (name or IP literal) from the address check (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,

    /// Largest body read, in bytes (default 5 MB, at most 10 MB). News pages carry 1–2 MB of
    /// markup before their article; the text answer stays capped and pageable.
    #[arg(long, default_value_t = 5 << 20)]
    pub max_body_bytes: usize,

    /// How long a fetched page stays cached, in seconds.
    #[arg(long, default_value_t = 900)]
    pub cache_ttl_secs: u64,

    /// The browser `render` uses (a path, or a name on PATH); default: the first of chromium,
    /// chromium-browser, google-chrome-stable, google-chrome, chrome, headless_shell on PATH.
    #[arg(long, env = "KITBAG_CHROMIUM", value_name = "PATH")]
    pub chromium: Option<std::path::PathBuf>,

    /// Pages rendered at once (1–16); more wait their turn within their timeout.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub render_pages: u16,

    /// The browser's memory, all its processes together (proportional set size), in MB: past
    /// it the browser is stopped and the render refused (the next render starts a new one).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(128..=65536))]
    pub render_memory_mb: u64,

    /// How long a rendered page may take to go network-idle before its DOM is read anyway, in
    /// milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=120_000))]
    pub render_settle_ms: u64,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-web",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "web_fetch turns an http(s) page into markdown (or pretty JSON / text), paged by characters; a page JavaScript fills in is rendered in headless Chromium. Internal addresses are refused, the browser's requests too.",
};

pub fn router() -> ToolRouter<WebState> {
    ToolRouter::new().tool(fetch::DEF, |s: Arc<WebState>, p, ctx: CallCtx| {
        fetch::run(s, p, ctx)
    })
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<WebState>> {
    let policy = args.common.policy()?;
    let cfg = guard::GuardConfig {
        allow_private: args.allow_private,
        allow_hosts: args
            .allow_hosts
            .iter()
            .map(|h| h.trim_matches(['[', ']']).to_ascii_lowercase())
            .collect(),
    };
    let max_body = args.max_body_bytes.clamp(1024, 10 << 20);
    let render = render::RenderConfig {
        chromium: args.chromium.clone(),
        max_pages: usize::from(args.render_pages),
        memory_bytes: args.render_memory_mb << 20,
        settle: Duration::from_millis(args.render_settle_ms),
    };
    let state = WebState::new(
        cfg,
        max_body,
        Duration::from_secs(args.cache_ttl_secs),
        render,
    )?;
    McpServer::new(IDENTITY, state, router(), policy).with_common_args(&args.common)
}

/// The runtime this server runs on (its own binary and `kitbag server web` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    let server = build(&args)?;
    kitbag_shared::serve(server, &args.common).await
}
