//! kitbag-cron: scheduled work that fires reliably, over MCP.
//!
//! Entries live in `<root>/.kitbag/cron.db` (SQLite; an older `cron.json` is imported), or in
//! a PostgreSQL shared by several servers (`--database-url`); a scheduler task sleeps until
//! the next due instant and delivers each firing to the
//! connected client as `notifications/kitbag/cron_fired` (and, with `--claude-channel`, as Claude Code's
//! `notifications/claude/channel`). Each tool's logic is a plain function in its module.

pub mod backend;
pub mod clock;
pub mod command;
pub mod create;
pub mod dir;
pub mod entries;
pub mod file_lock;
pub mod history;
pub mod idle;
pub mod keepalive;
pub mod legacy;
pub mod list;
pub mod manage;
pub mod model;
pub mod pg;
pub mod runs;
pub mod schedule;
pub mod scheduler;
pub mod schema;
pub mod state;
pub mod store;
pub mod view;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::Parser;
use kitbag_shared::rmcp::model::{JsonObject, ServerCapabilities};
use kitbag_shared::rmcp::service::{Peer, RoleServer};
use kitbag_shared::{
    Access, CallCtx, CommonArgs, Extras, Identity, McpServer, ToolRouter, audit::AuditLog, blocking,
};

use crate::backend::Backend;
use crate::clock::{Clock, ScaledClock, SystemClock};
pub use crate::state::CronState;
use crate::store::Store;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kitbag-cron",
    version,
    about = "MCP server: cron schedules delivered to the client as notifications"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Also deliver firings as Claude Code channel notifications (`notifications/claude/channel`),
    /// so a Claude Code session receives the message as input.
    #[arg(long)]
    pub claude_channel: bool,

    /// Refuse `command` actions (entries only deliver messages).
    #[arg(long)]
    pub no_commands: bool,

    /// Rotate the run history when it exceeds this many bytes (two old files are kept; on
    /// PostgreSQL the newest 3 x BYTES of records).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub history_max_bytes: u64,

    /// A shared PostgreSQL instead of `<root>/.kitbag/cron.db` (`postgres://USER@HOST/DB`, or
    /// a Unix socket directory as host: `postgres://USER@%2Frun%2Fpostgresql/DB`). Schema
    /// created and migrated on start; many servers may share it, each due run fires once.
    #[arg(long, value_name = "URL", env = "KITBAG_DATABASE_URL")]
    pub database_url: Option<String>,

    /// Testing: start the scheduler's clock at this RFC 3339 instant instead of now.
    #[arg(long, hide = true, value_name = "RFC3339")]
    pub test_clock_start: Option<String>,

    /// Testing: run the scheduler's clock this many times faster than real time.
    #[arg(long, hide = true, value_name = "FACTOR")]
    pub test_clock_rate: Option<f64>,

    /// Testing: the real instant (Unix milliseconds) at which the test clock read its start,
    /// so that several processes share one virtual time. Default: this process's start.
    #[arg(long, hide = true, value_name = "UNIX_MS")]
    pub test_clock_anchor: Option<u64>,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-cron",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Scheduled tasks. cron_create schedules a message (and optionally a shell command) on a 5-field cron schedule in an IANA time zone; each firing arrives as a notifications/kitbag/cron_fired notification carrying the entry's session and message. cron_list shows next fire times, cron_runs the history, cron_status whether work is scheduled.",
};

pub fn router() -> ToolRouter<CronState> {
    ToolRouter::new()
        .tool(
            create::DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || create::run(&s, p)).await
            },
        )
        .tool(
            list::LIST_DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || list::list(&s, p)).await
            },
        )
        .tool(
            list::STATUS_DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || list::status(&s, p)).await
            },
        )
        .tool(
            manage::DELETE_DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || manage::delete(&s, p)).await
            },
        )
        .tool(
            manage::ENABLE_DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || manage::set_enabled(&s, p, true)).await
            },
        )
        .tool(
            manage::DISABLE_DEF,
            |s: Arc<CronState>, p, ctx: CallCtx| async move {
                keep_peer(&s, &ctx);
                blocking(move || manage::set_enabled(&s, p, false)).await
            },
        )
        .tool(runs::DEF, |s: Arc<CronState>, p, ctx: CallCtx| async move {
            keep_peer(&s, &ctx);
            blocking(move || runs::run(&s, p)).await
        })
}

/// In the 2026-07-28 era there is no `notifications/initialized`: take the client from the
/// first request instead.
fn keep_peer(state: &CronState, ctx: &CallCtx) {
    if let Some(peer) = ctx.peer() {
        state.set_peer(peer.clone());
    }
}

/// Declares the notifications and keeps the client for them.
pub struct CronExtras {
    claude_channel: bool,
}

impl Extras<CronState> for CronExtras {
    fn capabilities(&self, caps: &mut ServerCapabilities) {
        let exp = caps.experimental.get_or_insert_with(Default::default);
        let mut fired = JsonObject::new();
        fired.insert("notification".into(), serde_json::json!(state::CRON_FIRED));
        exp.insert("kitbag/cron".into(), fired);
        if self.claude_channel {
            exp.insert("claude/channel".into(), JsonObject::new());
        }
    }

    fn on_connected(&self, state: Arc<CronState>, peer: Peer<RoleServer>) {
        state.set_peer(peer);
    }
}

fn clock_from(args: &Args) -> anyhow::Result<Arc<dyn Clock>> {
    match (&args.test_clock_start, args.test_clock_rate) {
        (None, None) => Ok(Arc::new(SystemClock)),
        (start, rate) => {
            let start: DateTime<Utc> = match start {
                Some(s) => DateTime::parse_from_rfc3339(s)
                    .map_err(|e| anyhow::anyhow!("--test-clock-start {s}: {e}"))?
                    .with_timezone(&Utc),
                None => Utc::now(),
            };
            let rate = rate.unwrap_or(1.0);
            Ok(Arc::new(match args.test_clock_anchor {
                Some(ms) => ScaledClock::anchored(
                    start,
                    rate,
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
                ),
                None => ScaledClock::new(start, rate),
            }))
        }
    }
}

/// The store the arguments name: PostgreSQL with a database URL (an empty one counts as
/// unset), else the SQLite file under the root; and whether this server may change it.
/// Blocks (the PostgreSQL client does): call it on a blocking thread.
pub fn open_store(args: &Args) -> anyhow::Result<(Backend, bool)> {
    let policy = args.common.policy()?;
    match kitbag_shared::state::pg::url_given(args.database_url.as_deref()) {
        Some(url) => {
            let writable = !policy.is_read_only();
            let store = pg::open(url, writable, args.history_max_bytes)?;
            Ok((Backend::Postgres(Arc::new(store)), writable))
        }
        None => {
            let store = Store::new(&policy, args.history_max_bytes);
            let writable = !policy.is_read_only() && policy.allows(&store.dir, Access::Write);
            Ok((Backend::Sqlite(store.read_only(!writable)), writable))
        }
    }
}

/// The server over an open store.
pub fn build(args: &Args, opened: (Backend, bool)) -> anyhow::Result<McpServer<CronState>> {
    let policy = args.common.policy()?;
    let root = policy.root().to_path_buf();
    let (store, writable) = opened;
    let state = CronState::new(
        store,
        root,
        clock_from(args)?,
        state::Options {
            claude_channel: args.claude_channel,
            commands_enabled: !args.no_commands,
            writable,
            machine_tz: schedule::machine_timezone(),
        },
    );
    let audit = match &args.common.audit_log {
        Some(p) => Some(AuditLog::open(p)?),
        None => None,
    };
    // The store lives under the root fixed at start-up: no adoption of a client root.
    Ok(McpServer::new(IDENTITY, state, router(), policy)
        .with_audit(audit)
        .with_extras(CronExtras {
            claude_channel: args.claude_channel,
        }))
}

/// The runtime this server runs on (its own binary and `kitbag server cron` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    // A child subreaper and, where writable, a cgroup per command (see command.rs).
    let container = kitbag_shared::contain::init_server("cron");
    let batch = args.clone();
    let opened = tokio::task::spawn_blocking(move || open_store(&batch))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))??;
    let server = build(&args, opened)?;
    let state = server.state().clone();
    match &state.store {
        Backend::Sqlite(_) if state.writable => scheduler::watch_store(&state),
        Backend::Sqlite(_) => {}
        Backend::Postgres(p) => p.listen(state.wake.clone()),
    }
    if let Some(socket) = kitbag_shared::vmlink::socket() {
        tokio::spawn(keepalive::hold_while_enabled(state.clone(), socket));
    }
    tokio::spawn(scheduler::run(state));
    let result = kitbag_shared::serve(server, &args.common).await;
    // No command — nor anything it left behind — outlives the server.
    let _ = tokio::task::spawn_blocking(move || container.shutdown()).await;
    result
}
