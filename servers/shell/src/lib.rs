//! kitbag-shell: shell commands in a PTY over MCP, with background jobs and logs on disk.

pub mod ansi;
pub mod bash;
pub mod input;
pub mod jobs;
pub mod logs;
pub mod process;
pub mod pump;
pub mod python;
pub mod resources;
pub mod screen;
pub mod spawn;
pub mod tell;
pub mod waiting;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use kitbag_shared::state::StateDir;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolRouter};

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-shell",
    version,
    about = "MCP server: shell commands in a PTY"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Where full command logs are kept. Default: <root>/.kitbag/shell.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Size of the output preview returned per call, in bytes (head + tail).
    #[arg(long, default_value_t = 30 * 1024)]
    pub preview_bytes: usize,

    /// Grace period between SIGTERM and SIGKILL, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub kill_grace_ms: u64,

    /// How many command logs to keep in the state directory.
    #[arg(long, default_value_t = 200)]
    pub keep_logs: usize,

    /// Cap of each command's log, in bytes: the first fifth (head) and the last bytes (tail)
    /// are kept, the middle is dropped with a marker. 0: no cap.
    #[arg(long, value_name = "BYTES", default_value_t = 5 * 1024 * 1024)]
    pub log_max_bytes: u64,

    /// Cap of the logs directory's total size, in bytes: finished commands' logs are deleted,
    /// oldest first, at server start and whenever a command ends. 0: no cap.
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub logs_max_total_bytes: u64,
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-shell",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Run shell commands with shell_bash (PTY, cwd inside the root, timeout, full log on disk). Use background: true for long-running processes, then shell_output / shell_kill / shell_jobs.",
};

pub struct ShellState {
    pub read_only: bool,
    pub preview_bytes: usize,
    pub kill_grace: Duration,
    /// The logs directory as configured (for answers), and held by descriptor (for writing:
    /// a `.kitbag` renamed and replaced by a link cannot redirect the logs; issue #22).
    pub log_dir: PathBuf,
    pub log_held: Option<Arc<StateDir>>,
    /// Head and tail bytes kept of each log.
    pub log_caps: (u64, u64),
    pub logs: Arc<logs::LogDir>,
    pub jobs: jobs::Jobs,
    /// Scratch files of `python` (none when read-only).
    pub scratch: Option<Arc<python::Scratch>>,
    pub python_sessions: python::session::Sessions,
    /// Who subscribed to the `shell://jobs` resources.
    pub subscribers: Arc<kitbag_shared::subscribers::Subscribers>,
    seq: AtomicU64,
}

impl ShellState {
    /// A number for a scratch file's name, unique in this server.
    pub fn next_scratch(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh log file: the path to write it by (through the held directory) and the path
    /// to show. Old logs are pruned when a command starts and when its output ends
    /// ([`logs::LogDir`]).
    pub fn next_log_path(&self) -> (PathBuf, PathBuf) {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{}-{n}.log", std::process::id(), unix_millis());
        let at = match &self.log_held {
            Some(d) => d.path(&name),
            None => self.log_dir.join(&name),
        };
        (at, self.log_dir.join(name))
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

pub fn router() -> ToolRouter<ShellState> {
    ToolRouter::new()
        .tool(bash::DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            bash::run(s, p, ctx)
        })
        .tool(jobs::OUTPUT_DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            jobs::output(s, p, ctx)
        })
        .tool(python::DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            python::run(s, p, ctx)
        })
        .tool(input::DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            input::run(s, p, ctx)
        })
        .tool(jobs::KILL_DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            jobs::kill(s, p, ctx)
        })
        .tool(jobs::JOBS_DEF, |s: Arc<ShellState>, p, ctx: CallCtx| {
            jobs::list(s, p, ctx)
        })
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<ShellState>> {
    let policy = args.common.policy()?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| policy.root().join(".kitbag/shell"));
    let log_dir = state_dir.join("logs");
    let held = if args.common.read_only {
        None
    } else {
        let held = StateDir::open(&policy, &state_dir, true)
            .map_err(|e| anyhow::anyhow!("state directory {}: {e}", state_dir.display()))?;
        // Logs are working files, never project content.
        held.ignore_all();
        Some(held)
    };
    let log_held = match &held {
        Some(h) => Some(Arc::new(h.subdir("logs", true).map_err(|e| {
            anyhow::anyhow!("logs directory {}: {e}", log_dir.display())
        })?)),
        None => None,
    };
    let scratch = match &held {
        Some(h) => Some(Arc::new(python::Scratch::new(
            h.subdir("python", true).map_err(|e| {
                anyhow::anyhow!(
                    "scratch directory {}: {e}",
                    state_dir.join("python").display()
                )
            })?,
            state_dir.join("python"),
        ))),
        None => None,
    };
    let logs = Arc::new(logs::LogDir::new(
        log_held
            .as_ref()
            .map_or_else(|| log_dir.clone(), |d| d.dir_path()),
        args.keep_logs.max(1),
        args.logs_max_total_bytes,
        args.log_max_bytes,
    ));
    if let Some(s) = &scratch {
        s.sweep();
    }
    if let Some(held) = &held {
        // Logs of earlier servers beyond the limits, and temp files of writes that a kill
        // cut short in the state directories.
        logs.prune();
        let kitbag_dir = policy.root().join(".kitbag");
        match StateDir::open(&policy, &kitbag_dir, false) {
            Ok(k) => kitbag_shared::atomic::sweep_stale_temps(&k.dir_path()),
            Err(_) => 0,
        };
        if !state_dir.starts_with(&kitbag_dir) {
            kitbag_shared::atomic::sweep_stale_temps(&held.dir_path());
        }
    }
    let state = ShellState {
        read_only: args.common.read_only || policy.is_read_only(),
        preview_bytes: args.preview_bytes.max(1024),
        kill_grace: Duration::from_millis(args.kill_grace_ms),
        log_dir,
        log_held,
        log_caps: logs::split_cap(args.log_max_bytes),
        logs,
        jobs: jobs::Jobs::default(),
        scratch,
        python_sessions: python::session::Sessions::default(),
        subscribers: Default::default(),
        seq: AtomicU64::new(0),
    };
    McpServer::new(IDENTITY, state, router(), policy)
        .with_extras(resources::ShellExtras)
        .with_common_args(&args.common)
}

/// The runtime this server runs on (its own binary and `kitbag server shell` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    // A child subreaper (orphans of commands come back to this process) and, where writable,
    // a cgroup per command.
    let container = kitbag_shared::contain::init_server("shell");
    let server = build(&args)?;
    let state = server.state().clone();
    let result = kitbag_shared::serve(server, &args.common).await;
    // The client is gone: no job — nor anything a command left behind — outlives the server.
    let grace = state.kill_grace;
    let _ = tokio::task::spawn_blocking(move || {
        state.jobs.stop_all(grace);
        container.shutdown();
        if let Some(s) = &state.scratch {
            s.sweep();
        }
    })
    .await;
    result
}
