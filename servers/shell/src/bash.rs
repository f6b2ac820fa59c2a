//! `shell_bash`: run a command through `/bin/sh -c` in a PTY and return what it printed.

use kitbag_shared::args;
use kitbag_shared::lock::LockExt;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::{
    Access, CallCtx, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ShellState;
use crate::ansi::render;
use crate::process::{self, SpawnSpec, Waited};

pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
pub const MAX_ENV_ENTRIES: usize = 64;
pub const DEFAULT_TIMEOUT_MS: i64 = 120_000;
pub const MIN_TIMEOUT_MS: i64 = 1_000;
pub const MAX_TIMEOUT_MS: i64 = 600_000;

pub const DEF: ToolDef = ToolDef::write(
    "shell_bash",
    "Run shell command",
    "Run a `/bin/sh -c` command in a PTY: output, exit code; past 30 KB head and tail, \
     all in `log_path`. Stdin is at EOF: a command waiting for terminal input returns as a job \
     for shell_input. Servers: `background: true`.",
)
.destructive()
.open_world()
.exec();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashParams {
    /// At most 64 KB.
    pub command: String,
    /// Root-relative (default the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// ms, 1000–600000 (default 120000; background: none).
    #[serde(default)]
    pub timeout: Option<i64>,
    /// Merged over the server's (≤ 64).
    #[serde(default)]
    pub env: Option<serde_json::Map<String, serde_json::Value>>,
    /// Run as a background job; returns `job_id` at once.
    #[serde(default)]
    pub background: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct BashResult {
    /// Output as a terminal shows it (stdout and stderr merged), possibly head + tail.
    pub stdout: String,
    /// Always empty: the terminal merges both streams into `stdout`.
    pub stderr: String,
    /// Exit code (128 + N when killed by signal N; 137 after a timeout).
    pub exit_code: i32,
    /// The signal that ended the command, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    pub timed_out: bool,
    /// `stdout` is a head + tail preview; the log file has more (everything unless
    /// `log_dropped_bytes` > 0).
    pub truncated: bool,
    pub duration_ms: u64,
    /// The time limit applied (0: none, a background job without `timeout`).
    pub timeout_ms: u64,
    /// Bytes the command wrote.
    pub output_bytes: u64,
    /// The output on disk (root-relative when inside the root): complete unless
    /// `log_dropped_bytes` > 0, then its head and tail.
    pub log_path: String,
    /// Bytes of output the capped log dropped between its head and tail (`--log-max-bytes`).
    #[serde(skip_serializing_if = "crate::jobs::is_zero")]
    pub log_dropped_bytes: u64,
    /// Background jobs only: the job to pass to shell_output / shell_kill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Background jobs only: true while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// A process of the command sleeps reading its terminal; the command goes on as job
    /// `job_id`: answer it with shell_input, or stop it with shell_kill.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// How the command's processes were contained, so that all of them could be stopped:
    /// `cgroup-v2`, `cgroup-v1-freezer`, `subreaper` or `env-tag` (strongest first).
    pub containment: String,
    /// Set when containment is weaker than a cgroup: why, and what can escape it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containment_note: Option<String>,
}

/// Validated arguments of one command.
pub struct Prepared {
    pub command: String,
    /// The working directory, opened (`O_PATH`) beneath the root when the call was checked:
    /// the command starts in this very directory (issue #22 §1).
    pub cwd: OwnedFd,
    pub env: Vec<(String, String)>,
    pub timeout_ms: u64,
    /// `timeout` was given: a background job is held to it too.
    pub timeout_given: bool,
}

/// A call's `timeout` in ms: the default when absent, refused (not clamped) out of range.
pub fn timeout_ms(timeout: Option<i64>) -> ToolResult<u64> {
    match timeout {
        None => Ok(DEFAULT_TIMEOUT_MS as u64),
        Some(t) if (MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&t) => Ok(t as u64),
        Some(t) => Err(ToolError::invalid_field(
            "timeout",
            format!("{t} ms is out of range; {MIN_TIMEOUT_MS}–{MAX_TIMEOUT_MS} ms is accepted"),
        )),
    }
}

pub fn prepare(state: &ShellState, policy: &PathPolicy, p: &BashParams) -> ToolResult<Prepared> {
    if state.read_only {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "the shell capability is off: this server was started with --read-only",
        )
        .with_detail(json!({ "needed": "shell" })));
    }
    args::non_empty("command", p.command.trim(), "it is required")?;
    args::max_bytes("command", &p.command, MAX_COMMAND_BYTES)?;
    if p.command.contains('\0') {
        return Err(ToolError::invalid_field(
            "command",
            "must not contain NUL bytes",
        ));
    }
    let cwd_arg = p.cwd.as_deref().unwrap_or(".");
    // Outside the root is a bad argument; inside but not writable is a capability question.
    let inside = policy.resolve_in_root(cwd_arg, "cwd").map_err(|e| {
        ToolError::invalid_field(
            "cwd",
            format!("{cwd_arg}: must stay inside the root ({})", e.message),
        )
    })?;
    // The mount check first, so a refusal reads as it always did.
    policy.resolve(cwd_arg, "cwd", Access::Write)?;
    let not_a_dir =
        || ToolError::invalid_field("cwd", format!("{cwd_arg}: not an existing directory"));
    if !inside.abs.is_dir() {
        return Err(not_a_dir());
    }
    // The directory is opened now, beneath the root without following a link; the command
    // starts there even if the path is swapped for a link to elsewhere afterwards.
    let cwd = match policy.open_dir(cwd_arg, "cwd", Access::Write) {
        Ok((_, fd)) => fd,
        Err(e) if matches!(e.code, ErrorCode::FileNotFound | ErrorCode::NotADirectory) => {
            return Err(not_a_dir());
        }
        Err(e) => return Err(e),
    };
    let timeout_ms = timeout_ms(p.timeout)?;
    let mut env = Vec::new();
    if let Some(map) = &p.env {
        args::max_count("env", map.len(), MAX_ENV_ENTRIES, "entries")?;
        for (k, v) in map {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ToolError::invalid_field(
                    "env",
                    format!(
                        "key {k:?} is not accepted: keys must be non-empty and contain no `=` or NUL"
                    ),
                ));
            }
            let Some(v) = v.as_str() else {
                return Err(ToolError::invalid_field(
                    &format!("env.{k}"),
                    "values must be strings",
                ));
            };
            if v.contains('\0') {
                return Err(ToolError::invalid_field(
                    &format!("env.{k}"),
                    "must not contain NUL bytes",
                ));
            }
            env.push((k.clone(), v.to_string()));
        }
    }
    Ok(Prepared {
        command: p.command.clone(),
        cwd,
        env,
        timeout_ms,
        timeout_given: p.timeout.is_some(),
    })
}

pub async fn run(
    state: Arc<ShellState>,
    p: BashParams,
    ctx: CallCtx,
) -> ToolResult<Reply<BashResult>> {
    let prepared = prepare(&state, ctx.policy(), &p)?;
    if p.background.unwrap_or(false) {
        return start_background(state, ctx.policy(), prepared, ctx.client_log());
    }
    run_foreground(state, &ctx, prepared, None).await
}

pub use crate::jobs::OnEnd;

/// Run a prepared command in the foreground: its answer when it ends, or a job when it waits
/// for input (see [`waiting_job`]).
pub async fn run_foreground(
    state: Arc<ShellState>,
    ctx: &CallCtx,
    prepared: Prepared,
    on_end: Option<OnEnd>,
) -> ToolResult<Reply<BashResult>> {
    let client_log = ctx.client_log();
    let policy = ctx.policy().clone();
    let cancel = ctx.cancel.clone();
    kitbag_shared::blocking(move || {
        let (log_path, log_shown) = state.next_log_path();
        let spawned = spawn(&state, &prepared, log_path, false);
        let mut running = match spawned {
            Ok(r) => r,
            Err(e) => {
                if let Some(f) = on_end {
                    f();
                }
                return Err(e);
            }
        };
        let log_shown = policy.display(&log_shown);
        let cancelled = || cancel.is_cancelled();
        let deadline = running.started + Duration::from_millis(prepared.timeout_ms);
        let waited = running.wait(deadline, &cancelled, true);
        if matches!(waited, Waited::Input) {
            // It cannot go on until someone types: it becomes a job the caller can answer,
            // still held to the call's timeout.
            running.detach();
            return Ok(waiting_job(
                &state, running, &prepared, log_shown, deadline, client_log, on_end,
            ));
        }
        let (exit, timed_out) = stop_after(&running, &state, waited);
        if let Some(f) = on_end {
            f();
        }
        if cancel.is_cancelled() {
            return Err(ToolError::new(
                ErrorCode::Cancelled,
                "cancelled; the command and its processes were stopped",
            ));
        }
        Ok(finished(
            &running,
            exit,
            timed_out,
            prepared.timeout_ms,
            log_shown,
        ))
    })
    .await
}

/// A foreground command found waiting for input, kept as a job: the answer shows what it
/// printed (its prompt last) and the job to answer.
fn waiting_job(
    state: &Arc<ShellState>,
    running: process::Running,
    p: &Prepared,
    log_shown: String,
    deadline: std::time::Instant,
    client_log: Option<kitbag_shared::ClientLog>,
    on_end: Option<OnEnd>,
) -> Reply<BashResult> {
    let (mut reply_stdout, truncated, total, prompt) = {
        let capture = running.capture.locked();
        let (bytes, truncated) = capture.preview();
        (
            render(&String::from_utf8_lossy(&bytes)),
            truncated,
            capture.total,
            capture.screen.cursor_line(),
        )
    };
    let room = kitbag_shared::limits::RESULT_BUDGET_BYTES
        - 1024
        - kitbag_shared::limits::json_len(&log_shown);
    let cut;
    (reply_stdout, cut) =
        kitbag_shared::limits::head_tail_within(&reply_stdout, room, "the log file has them");
    let duration_ms = running.started.elapsed().as_millis() as u64;
    let containment = running.contain.kind().as_str().to_string();
    let containment_note = running.contain.note();
    let pid = running.pid;
    let job = state
        .jobs
        .add(p.command.clone(), running, log_shown.clone());
    crate::jobs::supervise(state, &job, Some(deadline), client_log, on_end);
    let text = format!(
        "{}\n[waiting for input on its terminal: {prompt:?}; it goes on as {} (pid {pid}): \
         answer with shell_input, read with shell_output, stop with shell_kill]",
        reply_stdout.trim_end_matches('\n'),
        job.id
    );
    Reply::new(
        BashResult {
            stdout: reply_stdout,
            stderr: String::new(),
            exit_code: 0,
            signal: None,
            timed_out: false,
            truncated: truncated || cut,
            duration_ms,
            timeout_ms: p.timeout_ms,
            output_bytes: total,
            log_path: log_shown,
            log_dropped_bytes: 0,
            job_id: Some(job.id.clone()),
            running: Some(true),
            waiting_for_input: true,
            containment,
            containment_note,
        },
        text,
    )
}

/// Start the prepared command in its pseudo-terminal, logging to `log_path`.
fn spawn(
    state: &ShellState,
    p: &Prepared,
    log_path: std::path::PathBuf,
    background: bool,
) -> ToolResult<process::Running> {
    process::spawn(SpawnSpec {
        command: &p.command,
        cwd: p.cwd.as_fd(),
        env: &p.env,
        log_path,
        preview_bytes: state.preview_bytes,
        log_caps: state.log_caps,
        logs: state.logs.clone(),
        background,
    })
    .map_err(|e| {
        ToolError::new(
            ErrorCode::ShellSpawnFailed,
            format!("could not start /bin/sh: {e}"),
        )
    })
}

/// Start a prepared command as a background job, listed as `title`: kept in the server's job
/// table, held to its `timeout` when one was given, `on_end` run when it ends.
pub fn start_job(
    state: &Arc<ShellState>,
    policy: &PathPolicy,
    p: &Prepared,
    title: String,
    client_log: Option<kitbag_shared::ClientLog>,
    on_end: Option<OnEnd>,
) -> ToolResult<Arc<crate::jobs::Job>> {
    let (log_path, log_shown) = state.next_log_path();
    let running = spawn(state, p, log_path, true)?;
    let log_shown = policy.display(&log_shown);
    let deadline = p
        .timeout_given
        .then(|| running.started + Duration::from_millis(p.timeout_ms));
    let job = state.jobs.add(title, running, log_shown);
    crate::jobs::supervise(state, &job, deadline, client_log, on_end);
    Ok(job)
}

/// Start the command as a background job (kept in the server's job table) and answer at once
/// with its `job_id`.
fn start_background(
    state: Arc<ShellState>,
    policy: &PathPolicy,
    p: Prepared,
    client_log: Option<kitbag_shared::ClientLog>,
) -> ToolResult<Reply<BashResult>> {
    let job = start_job(&state, policy, &p, p.command.clone(), client_log, None)?;
    let (pid, log_shown) = (job.running.pid, job.log_shown().to_string());
    let containment = job.running.contain.kind().as_str().to_string();
    let containment_note = job.running.contain.note();
    let id = job.id.clone();
    let mut text = format!(
        "started {id} (pid {pid}); read its output with shell_output, stop it with shell_kill"
    );
    if let Some(n) = &containment_note {
        text.push_str(&format!("\n[{n}]"));
    }
    Ok(Reply::new(
        BashResult {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: 0,
            signal: None,
            timed_out: false,
            truncated: false,
            duration_ms: 0,
            timeout_ms: if p.timeout_given { p.timeout_ms } else { 0 },
            output_bytes: 0,
            log_path: log_shown,
            log_dropped_bytes: 0,
            job_id: Some(id),
            running: Some(true),
            waiting_for_input: false,
            containment,
            containment_note,
        },
        text,
    ))
}

/// After the wait: stop whatever the command left running (everything, when the wait ended
/// in a timeout or a cancel). Returns how it ended and whether the timeout ended it.
fn stop_after(
    running: &process::Running,
    state: &ShellState,
    waited: Waited,
) -> (process::Exit, bool) {
    match waited {
        Waited::Exited(exit) => {
            // Output still in the terminal, then anything the command left running.
            running.drain(Duration::from_millis(200));
            if running.alive() {
                running.terminate(state.kill_grace);
                running.drain(Duration::from_millis(200));
            }
            (exit, false)
        }
        Waited::TimedOut | Waited::Cancelled | Waited::Input => {
            running.terminate(state.kill_grace);
            let exit = running.wait_exit(Duration::from_secs(5));
            running.drain(Duration::from_millis(500));
            let signal = exit
                .and_then(|e| e.signal)
                .or_else(|| Some("Killed".into()));
            (
                process::Exit { code: 137, signal },
                matches!(waited, Waited::TimedOut),
            )
        }
    }
}

/// The answer: the rendered output preview and a footer with the exit, timeout,
/// containment and where the log is.
fn finished(
    running: &process::Running,
    exit: process::Exit,
    timed_out: bool,
    timeout_ms: u64,
    log_shown: String,
) -> Reply<BashResult> {
    let duration_ms = running.started.elapsed().as_millis() as u64;
    let capture = running.capture.locked();
    let (bytes, truncated) = capture.preview();
    // The preview is 30 KB of bytes; escaped (quotes, control characters) it can weigh up to
    // 6× that: cut again to the answer's budget, less the other fields.
    let room = kitbag_shared::limits::RESULT_BUDGET_BYTES
        - 1024
        - kitbag_shared::limits::json_len(&log_shown)
        - running
            .contain
            .note()
            .map_or(0, |n| kitbag_shared::limits::json_len(&n));
    let (stdout, cut) = kitbag_shared::limits::head_tail_within(
        &render(&String::from_utf8_lossy(&bytes)),
        room,
        "the log file has them",
    );
    let truncated = truncated || cut;
    let mut text = stdout.trim_end_matches('\n').to_string();
    let mut footer = vec![format!("exit code {}", exit.code)];
    if timed_out {
        footer.push(format!(
            "timed out after {timeout_ms} ms; the process tree was stopped"
        ));
    }
    let containment_note = running.contain.note();
    if let Some(n) = &containment_note {
        footer.push(n.clone());
    }
    if truncated {
        let dropped = capture.log.dropped();
        if dropped > 0 {
            footer.push(format!(
                "{} bytes of output; log (head and tail, {dropped} bytes dropped): {log_shown}",
                capture.total
            ));
        } else {
            footer.push(format!(
                "{} bytes of output; full log: {log_shown}",
                capture.total
            ));
        }
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(&format!("[{}]", footer.join("; ")));
    Reply::new(
        BashResult {
            stdout,
            stderr: String::new(),
            exit_code: exit.code,
            signal: exit.signal,
            timed_out,
            truncated,
            duration_ms,
            timeout_ms,
            output_bytes: capture.total,
            log_path: log_shown,
            log_dropped_bytes: capture.log.dropped(),
            job_id: None,
            running: None,
            waiting_for_input: false,
            containment: running.contain.kind().as_str().into(),
            containment_note,
        },
        text,
    )
}
