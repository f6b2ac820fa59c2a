//! Python sessions: one long-lived interpreter per name, whose variables persist between
//! `python {session}` calls.
//!
//! The interpreter runs a small driver (below) as a background job of the shell server — in a
//! terminal like every command, listed by shell_jobs, stopped by shell_kill — and reads its
//! requests, one JSON line each, from a FIFO in the scratch directory (not from its terminal,
//! which would echo them). Each request's code runs with `exec` in the session's globals,
//! with `sys.argv`, `sys.stdin` and the working directory set for it; then the driver prints
//! an end marker with the request's random tag and its status. The answer is the output
//! between the request and its marker, read back from the job's log.
//!
//! Bounds: at most [`MAX_SESSIONS`] at once; each interpreter's address space is capped
//! ([`MEMORY_LIMIT`], a `MemoryError` inside the code, the session survives); a session not
//! used for [`IDLE`] is stopped; a call that passes its timeout stops its session (the next
//! call starts a new one and says so: `session_new`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::lock::LockExt;
use kitbag_shared::{Access, CallCtx, ErrorCode, Reply, ToolError, ToolResult};
use serde_json::json;

use super::{PythonParams, PythonResult, sh_quote};
use crate::ShellState;
use crate::ansi::render;
use crate::bash::{self, BashParams};
use crate::jobs::Job;

pub const MAX_SESSIONS: usize = 4;
pub const IDLE: Duration = Duration::from_secs(15 * 60);
pub const MEMORY_LIMIT: u64 = 2 * 1024 * 1024 * 1024;
/// How long a call waits for code it follows (code that waited for input, just answered)
/// to end, before it says the session is busy.
const EARLIER_WAIT: Duration = Duration::from_millis(1500);

/// Runs in the interpreter: `python3 -u -c DRIVER FIFO`.
const DRIVER: &str = r#"
import io, json, os, resource, sys, traceback
limit = int(os.environ.get("KITBAG_PY_MEMORY", "0"))
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
scope = {"__name__": "__main__", "__builtins__": __builtins__}
with open(sys.argv[1], "r", encoding="utf-8") as requests:
    for line in requests:
        req = json.loads(line)
        status = 0
        sys.argv = ["<session>"] + req["args"]
        sys.stdin = io.StringIO(req["stdin"])
        try:
            os.chdir(req["cwd"])
            exec(compile(req["code"], "<python>", "exec"), scope)
        except SystemExit as e:
            if e.code is None:
                status = 0
            elif isinstance(e.code, int):
                status = e.code
            else:
                print(e.code, file=sys.stderr)
                status = 1
        except BaseException:
            traceback.print_exc()
            status = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        sys.stdout.write("\x1ekitbag-end %s %d\n" % (req["tag"], status))
        sys.stdout.flush()
"#;

/// One named interpreter.
pub struct Session {
    job: Arc<Job>,
    /// A request that stopped waiting on the terminal: its tag and where its output began.
    /// The next call goes ahead only once its end marker is out.
    pending: Mutex<Option<(String, u64)>>,
    /// The FIFO the driver reads requests from (opened read-write: never blocks on open).
    requests: Mutex<std::fs::File>,
    last_used: Mutex<Instant>,
}

#[derive(Default)]
pub struct Sessions {
    table: Mutex<BTreeMap<String, Arc<Session>>>,
}

impl Sessions {
    fn live(&self, name: &str) -> Option<Arc<Session>> {
        let mut t = self.table.locked();
        match t.get(name) {
            Some(s) if s.job.exit().is_none() => Some(s.clone()),
            Some(_) => {
                t.remove(name);
                None
            }
            None => None,
        }
    }

    fn remove_if(&self, name: &str, job_id: &str) {
        let mut t = self.table.locked();
        if t.get(name).is_some_and(|s| s.job.id == job_id) {
            t.remove(name);
        }
    }
}

fn check_name(name: &str) -> ToolResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ToolError::invalid_field(
            "session",
            format!("{name:?}: 1 to 64 letters, digits, `-`, `_` or `.` are accepted"),
        ))
    }
}

/// Start the interpreter of session `name`.
fn start(
    state: &Arc<ShellState>,
    ctx: &CallCtx,
    python: &std::path::Path,
    name: &str,
) -> ToolResult<Arc<Session>> {
    let scratch = state.scratch.clone().ok_or_else(|| {
        ToolError::new(
            ErrorCode::CapabilityDenied,
            "the shell capability is off: this server was started with --read-only",
        )
    })?;
    if state.python_sessions.table.locked().len() >= MAX_SESSIONS {
        return Err(ToolError::invalid_field(
            "session",
            format!(
                "{MAX_SESSIONS} sessions run already; reuse one, or stop one with shell_kill (shell_jobs lists them)"
            ),
        ));
    }
    let fifo = format!(
        "session-{}-{}.fifo",
        std::process::id(),
        state.next_scratch()
    );
    let requests = scratch
        .fifo(&fifo)
        .map_err(|e| ToolError::io("session", &e))?;
    let command = format!(
        "exec {} -u -c {} {}",
        sh_quote(&python.to_string_lossy()),
        sh_quote(DRIVER),
        sh_quote(&scratch.shown(&fifo).to_string_lossy())
    );
    let params = BashParams {
        command,
        cwd: None,
        timeout: None,
        env: None,
        background: Some(true),
    };
    let mut prepared = bash::prepare(state, ctx.policy(), &params)?;
    prepared
        .env
        .push(("KITBAG_PY_MEMORY".into(), MEMORY_LIMIT.to_string()));
    let on_end = {
        let (state, name, scratch, fifo) = (
            state.clone(),
            name.to_string(),
            scratch.clone(),
            fifo.clone(),
        );
        let job_id = Arc::new(Mutex::new(String::new()));
        let id2 = job_id.clone();
        let f: bash::OnEnd = Box::new(move || {
            let _ = scratch.remove(&fifo);
            state.python_sessions.remove_if(&name, &id2.locked());
        });
        (f, job_id)
    };
    let job = bash::start_job(
        state,
        ctx.policy(),
        &prepared,
        format!("python session {name}"),
        None,
        Some(on_end.0),
    )
    .inspect_err(|_| {
        let _ = scratch.remove(&fifo);
    })?;
    *on_end.1.locked() = job.id.clone();
    let session = Arc::new(Session {
        job,
        pending: Mutex::new(None),
        requests: Mutex::new(requests),
        last_used: Mutex::new(Instant::now()),
    });
    watch_idle(state, &session);
    state
        .python_sessions
        .table
        .locked()
        .insert(name.to_string(), session.clone());
    Ok(session)
}

/// Stop the session once it has not been used for [`IDLE`].
fn watch_idle(state: &Arc<ShellState>, session: &Arc<Session>) {
    let (session, grace) = (Arc::downgrade(session), state.kill_grace);
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(5));
            let Some(s) = session.upgrade() else { return };
            if s.job.exit().is_some() {
                return;
            }
            if s.last_used.locked().elapsed() >= IDLE {
                s.job.running.terminate(grace);
                return;
            }
        }
    });
}

pub async fn run(
    state: Arc<ShellState>,
    ctx: &CallCtx,
    python: PathBuf,
    name: String,
    p: PythonParams,
) -> ToolResult<Reply<PythonResult>> {
    check_name(&name)?;
    let timeout_ms = bash::timeout_ms(p.timeout)?;
    let cwd_arg = p.cwd.clone().unwrap_or_else(|| ".".into());
    let cwd = ctx.policy().resolve(&cwd_arg, "cwd", Access::Write)?;
    if !cwd.abs.is_dir() {
        return Err(ToolError::invalid_field(
            "cwd",
            format!("{cwd_arg}: not an existing directory"),
        ));
    }
    let (session, new) = match state.python_sessions.live(&name) {
        Some(s) => (s, false),
        None => (start(&state, ctx, &python, &name)?, true),
    };
    let tag = kitbag_shared::random::hex(8).map_err(|e| ToolError::io("session", &e))?;
    let request = json!({
        "tag": tag,
        "code": p.code,
        "args": p.args.unwrap_or_default(),
        "stdin": p.stdin.unwrap_or_default(),
        "cwd": cwd.abs,
    });
    let state2 = state.clone();
    kitbag_shared::blocking(move || {
        let s = session;
        *s.last_used.locked() = Instant::now();
        let started = Instant::now();
        // One request at a time per interpreter: this call's output is between its request
        // and its end marker.
        let requests = s.requests.locked();
        let earlier = s.pending.locked().clone();
        if let Some((tag, start)) = earlier {
            if matches!(
                wait_for_end(&s.job, start, &tag, EARLIER_WAIT, false),
                Ended::TimedOut
            ) {
                return Err(ToolError::new(
                    ErrorCode::SessionActive,
                    format!(
                        "session {name}: the earlier code still waits for input on its terminal; \
                         answer it with shell_input {{\"job_id\": \"{}\"}} or stop the session \
                         with shell_kill",
                        s.job.id
                    ),
                )
                .with_detail(json!({ "field": "session", "job_id": s.job.id })));
            }
            *s.pending.locked() = None;
        }
        let start = s.job.running.capture.locked().total;
        let mut line = request.to_string();
        line.push('\n');
        send(&requests, line.as_bytes(), &s.job)?;
        let limit = Duration::from_millis(timeout_ms);
        let outcome = wait_for_end(&s.job, start, &tag, limit, true);
        *s.last_used.locked() = Instant::now();
        let waiting = matches!(outcome, Ended::Waiting);
        let (end, status, timed_out) = match outcome {
            Ended::Marker { at, status } => (at, status, false),
            Ended::Waiting => {
                *s.pending.locked() = Some((tag.clone(), start));
                (s.job.running.capture.locked().total, 0, false)
            }
            Ended::Died(code) => {
                let total = s.job.running.capture.locked().total;
                (total, code, false)
            }
            Ended::TimedOut => {
                s.job.running.terminate(state2.kill_grace);
                let total = s.job.running.capture.locked().total;
                (total, 137, true)
            }
        };
        let (stdout, truncated, output_bytes) =
            output_between(&s.job, start, end, state2.preview_bytes);
        let ended = s.job.exit().is_some() || timed_out;
        let mut text = stdout.trim_end_matches('\n').to_string();
        let mut footer = vec![format!("exit code {status}"), format!("session {name}")];
        if new {
            footer.push("new interpreter".into());
        }
        if waiting {
            footer.push(format!(
                "waiting for input on its terminal: answer with shell_input {{\"job_id\": \"{}\"}}",
                s.job.id
            ));
        }
        if timed_out {
            footer.push(format!(
                "timed out after {timeout_ms} ms; the session was stopped"
            ));
        } else if ended {
            footer.push("the interpreter ended; the next call starts a new one".into());
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[{}]", footer.join("; ")));
        Ok(Reply::new(
            PythonResult {
                stdout,
                exit_code: status,
                timed_out,
                truncated,
                duration_ms: started.elapsed().as_millis() as u64,
                timeout_ms,
                output_bytes,
                log_path: s.job.log_shown().to_string(),
                session: Some(name),
                session_new: new,
                job_id: waiting.then(|| s.job.id.clone()),
            },
            text,
        ))
    })
    .await
}

/// Write a request into the FIFO (non-blocking) while the interpreter reads it, however
/// long; an error once it has ended or has read nothing for 5 s.
fn send(fifo: &std::fs::File, bytes: &[u8], job: &Job) -> ToolResult<()> {
    crate::process::write_while_read(fifo, bytes, Duration::from_secs(5), &|| {
        job.exit().is_some()
    })
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::BrokenPipe => ToolError::new(
            ErrorCode::IoError,
            "session: the interpreter stopped reading requests; stop it with shell_kill (the \
             next call starts a new one)",
        ),
        _ => ToolError::io("session", &e),
    })
}

enum Ended {
    /// The end marker begins at byte `at` of the job's output.
    Marker {
        at: u64,
        status: i32,
    },
    /// The code waits reading the terminal (`getpass`, a password prompt).
    Waiting,
    /// The interpreter exited (its code) before the marker.
    Died(i32),
    TimedOut,
}

/// Wait for request `tag`'s end marker in the job's output after byte `start` (with
/// `watch_input`, also stop once the code waits reading the terminal).
fn wait_for_end(job: &Job, start: u64, tag: &str, limit: Duration, watch_input: bool) -> Ended {
    let marker = format!("\x1ekitbag-end {tag} ");
    let began = Instant::now();
    let deadline = began + limit;
    let mut next_check = began + Duration::from_millis(250);
    let mut scanned = start;
    loop {
        let total = job.running.capture.locked().total;
        if total > scanned {
            // Re-read a marker's length before the new bytes: it may straddle two reads.
            let from = scanned.saturating_sub(marker.len() as u64 + 8).max(start);
            let read = job.running.capture.locked().log.read(from, total - from);
            if let Ok(read) = read
                && let Some(i) = memchr::memmem::find(&read.bytes, marker.as_bytes())
            {
                let rest = &read.bytes[i + marker.len()..];
                if let Some(eol) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
                    let status = std::str::from_utf8(&rest[..eol])
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(1);
                    return Ended::Marker {
                        at: read.start + i as u64,
                        status,
                    };
                }
            }
            scanned = total;
        }
        if let Some(e) = job.exit() {
            return Ended::Died(e.code);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ended::TimedOut;
        }
        if watch_input && now >= next_check {
            if job.running.waiting_for_input() {
                return Ended::Waiting;
            }
            next_check = Instant::now() + Duration::from_millis(250);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The job's output between bytes `start` and `end`, rendered: the whole if it fits
/// `preview` bytes, else its head and tail; whether it was cut; its length.
fn output_between(job: &Job, start: u64, end: u64, preview: usize) -> (String, bool, u64) {
    let len = end.saturating_sub(start);
    let capture = job.running.capture.locked();
    let read = |from: u64, n: u64| {
        capture
            .log
            .read(from, n)
            .map(|r| r.bytes)
            .unwrap_or_default()
    };
    let preview = preview as u64;
    if len <= preview {
        return (
            render(&String::from_utf8_lossy(&read(start, len))),
            false,
            len,
        );
    }
    let half = preview / 2;
    let head = read(start, half);
    let tail = read(end - half, half);
    let text = format!(
        "{}\n… [{} bytes elided; the session's log has them] …\n{}",
        render(&String::from_utf8_lossy(&head)),
        len - 2 * half,
        render(&String::from_utf8_lossy(&tail))
    );
    (text, true, len)
}
