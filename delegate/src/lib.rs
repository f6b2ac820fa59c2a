//! kitbag-delegate: hands a task to a coding CLI — Codex (`codex exec --json`), Claude Code
//! (`claude -p --output-format stream-json`) or kitbag's own loop (`kitbag run --json`) — and
//! reduces its stream to the compact result seed 003 describes: outcome, duration, tokens,
//! the CLI's own summary, files read and written, commands run. The whole stream is kept in a
//! log file the result names.
//!
//! `agent_delegate` (the host's tool, hub/src/delegate_tool.rs) is [`delegate`] here, or
//! [`guest::run`] inside a kitbag-vm instance.

pub mod claude;
pub mod codex;
pub mod command;
pub mod digest;
pub mod guest;
pub mod jobs;
pub mod kitbag;
pub mod local;
pub mod logs;
pub mod params;
pub mod result;
pub mod stream;

use std::path::Path;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

pub use params::{AgentKind, DelegateParams};
pub use result::{DelegateResult, Outcome};

/// One CLI's stream format: each JSON event reduced into the digest, with a short progress
/// message when the event is worth telling (a command started, a file edited).
pub trait Reader: Send {
    fn event(&mut self, event: &Value, digest: &mut digest::Digest) -> Option<String>;
}

/// The reader of `agent`'s stream; `cwd` makes the paths it reports relative.
pub fn reader(agent: AgentKind, cwd: &Path) -> Box<dyn Reader> {
    let cwd = cwd.to_path_buf();
    match agent {
        AgentKind::Codex => Box::new(codex::CodexReader { cwd }),
        AgentKind::Claude => Box::new(claude::ClaudeReader::new(cwd)),
        AgentKind::Kitbag => Box::new(kitbag::KitbagReader::new(cwd)),
    }
}

/// What a delegation on this machine needs besides its parameters.
pub struct Context<'a> {
    /// The root: `cwd` resolves beneath it, the log goes under its `.kitbag/`.
    pub root: &'a Path,
    /// The kitbag binary, for `agent: "kitbag"`.
    pub kitbag: &'a str,
    /// Where progress messages go.
    pub progress: Option<UnboundedSender<String>>,
    pub ct: CancellationToken,
}

/// The environment variable set on the kitbag host's servers: `kitbag run` started by a
/// delegation is a deliberate new host, not a recursion.
const HOST_DEPTH: &str = kitbag_shared::process::HOST_DEPTH_VAR;

/// How many delegations deep a CLI runs (set on each one started here): a kitbag run that
/// delegates to a kitbag run that delegates… stops at [`MAX_DEPTH`].
pub const DEPTH_VAR: &str = "KITBAG_DELEGATE_DEPTH";
pub const MAX_DEPTH: u32 = 3;

/// How many delegations deep this process runs.
fn depth() -> u32 {
    std::env::var(DEPTH_VAR)
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// What a CLI started here gets in its environment: one level deeper.
fn deeper() -> (String, String) {
    (DEPTH_VAR.to_string(), (depth() + 1).to_string())
}

/// Run `p` in the root (not in an instance: see [`guest`]) to its end.
pub async fn delegate(p: DelegateParams, cx: Context<'_>) -> ToolResult<DelegateResult> {
    p.check()?;
    let depth = depth();
    if depth >= MAX_DEPTH {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            format!(
                "this process already runs {depth} delegations deep (at most {MAX_DEPTH}): do the task here"
            ),
        )
        .with_detail(json!({ "field": "agent", "depth": depth })));
    }
    let policy = PathPolicy::new(cx.root, &[], false).map_err(|e| ToolError::io(".", &e))?;
    let cwd_arg = p.cwd.as_deref().unwrap_or(".");
    let cwd = policy
        .resolve_in_root(cwd_arg, "cwd")
        .map_err(|e| {
            ToolError::invalid_field(
                "cwd",
                format!("{cwd_arg}: must stay inside the root ({})", e.message),
            )
        })?
        .abs;
    if !cwd.is_dir() {
        return Err(ToolError::invalid_field(
            "cwd",
            format!("{cwd_arg}: not an existing directory"),
        ));
    }
    let id = logs::new_id();
    let mut launch = command::launch(&p, cx.kitbag, &format!("delegate-{id}"));
    let program = kitbag_shared::process::locate(&launch.program)
        .ok_or_else(|| command::not_installed(p.agent, &launch.program, "here", "agent"))?;
    launch.program = program.to_string_lossy().into_owned();
    let (log_path, log) = logs::create(cx.root, &id).await?;
    let mut reader = reader(p.agent, &cwd);
    let mut feed = stream::Feed::new(reader.as_mut(), Some(log), cx.progress);
    let run = local::LocalRun {
        launch: &launch,
        cwd: &cwd,
        env: &[vec![deeper()], command::env(&p)].concat(),
        env_remove: &[HOST_DEPTH],
        timeout: p.timeout(),
        ct: cx.ct,
    };
    let ended = local::run(run, &mut feed).await.map_err(|e| {
        ToolError::new(
            ErrorCode::SpawnFailed,
            format!("{} could not start: {e}", launch.program),
        )
    })?;
    Ok(conclude(
        p.agent,
        feed,
        &ended,
        (cx.root, &log_path),
        cwd_arg.to_string(),
        None,
    ))
}

/// The compact result of a run that ended, reduced by `feed`; older logs are pruned.
fn conclude(
    agent: AgentKind,
    feed: stream::Feed<'_>,
    ended: &stream::Ended,
    (root, log_path): (&Path, &Path),
    cwd: String,
    instance: Option<String>,
) -> DelegateResult {
    let bytes = feed.log_bytes;
    logs::prune(root);
    result::build(
        agent,
        feed.digest,
        ended,
        (logs::shown(root, log_path), bytes),
        cwd,
        instance,
    )
}
