//! Background jobs: `shell_bash {background: true}`, `shell_output`, `shell_kill`, `shell_jobs`.

use kitbag_shared::args;
use kitbag_shared::lock::LockExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::{CallCtx, ClientLog, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ShellState;
use crate::ansi::render;
use crate::tell::Teller;

use crate::process::{Exit, Running};

pub const OUTPUT_DEF: ToolDef = ToolDef::read(
    "shell_output",
    "Read background job output",
    "Read a background job's new output, its terminal `screen`, and whether it runs or waits \
     for input.",
);

pub const KILL_DEF: ToolDef = ToolDef::write(
    "shell_kill",
    "Stop background job",
    "Stop a background job and every process it started: SIGTERM, then SIGKILL.",
)
.destructive()
.idempotent();

pub const JOBS_DEF: ToolDef = ToolDef::read(
    "shell_jobs",
    "List background jobs",
    "List this session's background jobs: command, state, exit code, output size, log file.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputParams {
    pub job_id: String,
    /// Byte offset (default: where the last call stopped).
    #[serde(default)]
    pub since: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct OutputResult {
    pub job_id: String,
    /// New output as a terminal shows it.
    pub output: String,
    /// Offset to pass as `since` next time.
    pub next_since: u64,
    /// More output exists past `next_since` already.
    pub more: bool,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Its `timeout` ended it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// A process of the job sleeps reading its terminal: answer with shell_input.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// The terminal's screen now, as a person would see it (cursor movement, clears and
    /// redrawn progress bars applied; the last prompt is its last line).
    pub screen: String,
    pub log_path: String,
    /// Set when `since` fell in the middle of the output that the capped log dropped: those
    /// bytes are gone and `output` starts at `dropped.to` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<DroppedRange>,
    /// Bytes of the job's output the log no longer holds (its head and tail are kept).
    #[serde(skip_serializing_if = "is_zero")]
    pub log_dropped_bytes: u64,
}

/// A stretch of output, in byte offsets since the job started, that the log dropped.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DroppedRange {
    /// First dropped byte (the end of the kept head).
    pub from: u64,
    /// Where the kept tail starts; `output` begins here.
    pub to: u64,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillParams {
    pub job_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct KillResult {
    pub job_id: String,
    /// False when the job had already ended.
    pub killed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobsParams {
    /// Jobs to skip, oldest first.
    #[serde(default)]
    pub offset: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct JobInfo {
    pub job_id: String,
    pub command: String,
    pub pid: i32,
    pub running: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub output_bytes: u64,
    pub seconds: u64,
    pub log_path: String,
    /// How its processes are contained (see shell_bash).
    pub containment: String,
}

impl JobInfo {
    /// Its line in shell_jobs' text: id, state, log, command.
    pub fn line(&self) -> String {
        let state = if self.running {
            "running".to_string()
        } else {
            format!("exit {}", self.exit_code.unwrap_or(-1))
        };
        format!(
            "{}  {state}  {}  {}",
            self.job_id, self.log_path, self.command
        )
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct JobsResult {
    /// Oldest first, from `offset`, as many as fit the answer.
    pub jobs: Vec<JobInfo>,
    /// Jobs in all.
    pub total: usize,
    /// More follow: call again with `offset` = `next_offset`.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

pub struct Job {
    pub id: String,
    pub command: String,
    pub running: Running,
    exit: Mutex<Option<Exit>>,
    /// Where the last shell_output stopped.
    cursor: Mutex<u64>,
    log_shown: String,
    /// Its `timeout` ended it.
    timed_out: AtomicBool,
}

impl Job {
    /// Its log, as answers show it.
    pub fn log_shown(&self) -> &str {
        &self.log_shown
    }

    /// What shell_jobs and the `shell://jobs` resources show of it.
    pub fn info(&self) -> JobInfo {
        let exit = self.exit();
        JobInfo {
            job_id: self.id.clone(),
            command: self.command.chars().take(200).collect(),
            pid: self.running.pid,
            running: exit.is_none(),
            waiting_for_input: exit.is_none() && self.running.waiting_for_input(),
            exit_code: exit.as_ref().map(|e| e.code),
            output_bytes: self.running.capture.locked().total,
            seconds: self.running.started.elapsed().as_secs(),
            log_path: self.log_shown.clone(),
            containment: self.running.contain.kind().as_str().into(),
        }
    }

    /// How it stands, in words: "still running", "waiting for input on its terminal: …",
    /// "exited with code N", "stopped by its timeout (exit code N)".
    pub fn status(&self, exit: Option<&Exit>, waiting_for_input: bool) -> String {
        match exit {
            Some(e) if self.timed_out.load(Ordering::Relaxed) => {
                format!("stopped by its timeout (exit code {})", e.code)
            }
            Some(e) => format!("exited with code {}", e.code),
            None if waiting_for_input => format!(
                "waiting for input on its terminal: {:?}; answer with shell_input",
                self.running.capture.locked().screen.cursor_line()
            ),
            None => "still running".to_string(),
        }
    }

    /// The exit, once known.
    pub fn exit(&self) -> Option<Exit> {
        let mut slot = self.exit.locked();
        if slot.is_none()
            && let Some(e) = self.running.try_exit()
        {
            *slot = Some(e);
        }
        slot.clone()
    }
}

#[derive(Default)]
pub struct Jobs {
    table: Mutex<BTreeMap<String, Arc<Job>>>,
    next: Mutex<u64>,
}

impl Jobs {
    /// Keep a started background command as a new job (`job-N`).
    pub fn add(&self, command: String, running: Running, log_shown: String) -> Arc<Job> {
        let id = {
            let mut n = self.next.locked();
            *n += 1;
            format!("job-{n}")
        };
        let job = Arc::new(Job {
            id: id.clone(),
            command,
            running,
            exit: Mutex::new(None),
            cursor: Mutex::new(0),
            log_shown,
            timed_out: AtomicBool::new(false),
        });
        self.table.locked().insert(id, job.clone());
        job
    }

    /// Every job, oldest first (`job-9` before `job-10`), so pages follow one another.
    pub fn all(&self) -> Vec<(String, Arc<Job>)> {
        let mut jobs: Vec<(String, Arc<Job>)> = self
            .table
            .locked()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        jobs.sort_by_key(|(id, _)| id.strip_prefix("job-").and_then(|n| n.parse::<u64>().ok()));
        jobs
    }

    pub fn get(&self, id: &str) -> ToolResult<Arc<Job>> {
        self.table.locked().get(id).cloned().ok_or_else(|| {
            ToolError::new(
                ErrorCode::JobNotFound,
                format!("job_id: no job {id}; shell_jobs lists the jobs"),
            )
            .with_detail(json!({ "field": "job_id" }))
        })
    }

    /// Stop every job (server shutdown).
    pub fn stop_all(&self, grace: Duration) {
        let jobs: Vec<Arc<Job>> = self.table.locked().values().cloned().collect();
        for j in jobs {
            if j.running.alive() {
                j.running.terminate(grace);
            } else {
                j.running.contain.kill();
            }
        }
    }
}

/// Work to do once a command has ended (its scratch files removed), whether it ended during
/// the call or later as a job.
pub type OnEnd = Box<dyn FnOnce() + Send>;

/// How often a supervised job is looked at for a prompt on its terminal.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Watch a job from a thread of its own: stop it at `deadline` (its `timeout`), and tell the
/// client when it starts waiting for input and when it ends (a log message, and a resource
/// update where it subscribed), so that nobody has to poll.
pub fn supervise(
    state: &Arc<crate::ShellState>,
    job: &Arc<Job>,
    deadline: Option<Instant>,
    client_log: Option<ClientLog>,
    on_end: Option<OnEnd>,
) {
    let (job, grace) = (job.clone(), state.kill_grace);
    let tell = Teller::new(client_log, state.subscribers.clone());
    tell.started();
    std::thread::spawn(move || {
        // A foreground command handed over as a job was already reported waiting.
        let mut waiting = job.running.waiting_for_input();
        let exit = loop {
            let limit = deadline.map_or(WATCH_EVERY, |d| {
                d.saturating_duration_since(Instant::now()).min(WATCH_EVERY)
            });
            if let Some(e) = job.running.wait_exit(limit) {
                break e;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                job.timed_out.store(true, Ordering::Relaxed);
                job.running.terminate(grace);
                break job
                    .running
                    .wait_exit(Duration::from_secs(10))
                    .unwrap_or(Exit {
                        code: 137,
                        signal: Some("Killed".into()),
                    });
            }
            let now_waiting = job.running.waiting_for_input();
            if now_waiting && !waiting {
                let prompt = job.running.capture.locked().screen.cursor_line();
                tell.waiting(&job.id, &prompt);
            }
            waiting = now_waiting;
        };
        job.exit.locked().get_or_insert_with(|| exit.clone());
        if let Some(f) = on_end {
            f();
        }
        tell.ended(&job.id, exit.code, job.timed_out.load(Ordering::Relaxed));
    });
}

pub async fn output(
    state: Arc<ShellState>,
    p: OutputParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<OutputResult>> {
    let job = state.jobs.get(&p.job_id)?;
    let since = match args::opt_at_least("since", p.since, 0)? {
        None => *job.cursor.locked(),
        Some(n) => n as u64,
    };
    let cap = state.preview_bytes as u64;
    let exit = job.exit();
    let (total, read, log_dropped) = {
        let c = job.running.capture.locked();
        let read = c
            .log
            .read(since, cap)
            .map_err(|e| ToolError::io(&job.log_shown, &e))?;
        (c.total, read, c.log.dropped())
    };
    let mut bytes = read.bytes;
    // The page also ends where the answer's budget would be passed (escaping grows output up
    // to 6×); the next call starts there.
    let room = kitbag_shared::limits::RESULT_BUDGET_BYTES
        - 1024
        - kitbag_shared::limits::json_len(&job.log_shown)
        - kitbag_shared::limits::json_len(&p.job_id);
    let keep = kitbag_shared::limits::bytes_within(&bytes, room, false, |b| {
        render(&String::from_utf8_lossy(b))
    });
    bytes.truncate(keep);
    let next = read.start + bytes.len() as u64;
    *job.cursor.locked() = next;
    let output = render(&String::from_utf8_lossy(&bytes));
    let running = exit.is_none();
    let waiting_for_input = running && job.running.waiting_for_input();
    let screen = job.running.capture.locked().screen.text();
    let timed_out = job.timed_out.load(Ordering::Relaxed);
    let mut text = String::new();
    if let Some((from, to)) = read.dropped {
        text.push_str(&format!(
            "[bytes {from}–{to} of the output were dropped (the log keeps its first {from} \
             bytes and its last part); showing from byte {to}]\n"
        ));
    }
    text.push_str(output.trim_end_matches('\n'));
    let status = job.status(exit.as_ref(), waiting_for_input);
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(&format!(
        "[{} {status}; next_since={next}{}]",
        p.job_id,
        if next < total {
            "; more output waiting"
        } else {
            ""
        }
    ));
    Ok(Reply::new(
        OutputResult {
            job_id: p.job_id,
            output,
            next_since: next,
            more: next < total,
            running,
            exit_code: exit.map(|e| e.code),
            timed_out,
            waiting_for_input,
            screen,
            log_path: job.log_shown.clone(),
            dropped: read.dropped.map(|(from, to)| DroppedRange { from, to }),
            log_dropped_bytes: log_dropped,
        },
        text,
    ))
}

pub async fn kill(
    state: Arc<ShellState>,
    p: KillParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<KillResult>> {
    let job = state.jobs.get(&p.job_id)?;
    let grace = state.kill_grace;
    let job2 = job.clone();
    let killed = kitbag_shared::blocking(move || {
        let alive = job2.running.alive();
        if alive {
            job2.running.terminate(grace);
        }
        Ok(alive)
    })
    .await?;
    let exit = match job.exit() {
        Some(e) => Some(e),
        None => {
            let j = job.clone();
            kitbag_shared::blocking(move || {
                let e = j.running.wait_exit(Duration::from_secs(10));
                if let Some(e) = &e {
                    *j.exit.locked() = Some(e.clone());
                }
                Ok(e)
            })
            .await?
        }
    };
    let text = match (&exit, killed) {
        (Some(e), true) => format!("stopped {} (exit code {})", p.job_id, e.code),
        (Some(e), false) => format!("{} had already ended (exit code {})", p.job_id, e.code),
        (None, _) => format!("signalled {}; it has not reported an exit yet", p.job_id),
    };
    Ok(Reply::new(
        KillResult {
            job_id: p.job_id,
            killed,
            exit_code: exit.map(|e| e.code),
        },
        text,
    ))
}

pub async fn list(
    state: Arc<ShellState>,
    p: JobsParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<JobsResult>> {
    let jobs = state.jobs.all();
    let total = jobs.len();
    let offset = p.offset.unwrap_or(0).min(total);
    let out: Vec<JobInfo> = jobs
        .into_iter()
        .skip(offset)
        .map(|(_, job)| job.info())
        .collect();
    let empty = JobsResult {
        jobs: Vec::new(),
        total,
        truncated: true,
        next_offset: Some(total),
    };
    // Room beside the list for its paging fields.
    let used = kitbag_shared::limits::json_len(&empty) + 32;
    let (out, cut) = kitbag_shared::limits::within_budget(used, out);
    let mut text = String::new();
    for info in &out {
        text.push_str(&info.line());
        text.push('\n');
    }
    let next_offset = cut.then_some(offset + out.len());
    if let Some(next) = next_offset {
        text.push_str(&format!(
            "… {} more of {total}: call again with offset {next}\n",
            total - next
        ));
    }
    if total == 0 {
        text = "no background jobs".into();
    }
    Ok(Reply::new(
        JobsResult {
            jobs: out,
            total,
            truncated: cut,
            next_offset,
        },
        text.trim_end().to_string(),
    ))
}
