//! `instance_exec`: run a command in an instance.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::instance_dir;
use crate::proto::{self, ExecRequest, ExitStatus, Frame, Request};
use crate::tools::validate;
use crate::{Caller, VmState};
use kitbag_shared::limits::{self as budget, RESULT_BUDGET_BYTES, json_len};

pub const MAX_STDIN: usize = 1 << 20;
/// The full output of one exec kept on disk (head of it).
const LOG_CAP: u64 = 8 << 20;

pub const DEF: ToolDef = ToolDef::write(
    "instance_exec",
    "Run command in instance",
    "Run an argv ([\"sh\",\"-c\",\"…\"] for shell) in an instance: exit code, stdout, stderr \
     (head + tail; all in log_path). background: a job for instance_logs.",
)
.destructive()
.exec();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    pub instance: String,
    pub command: Vec<String>,
    /// Up to 1 MB.
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Default /work.
    #[serde(default)]
    pub cwd: Option<String>,
    /// 1–600, default 60.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub background: Option<bool>,
    /// Per stream, default 32768.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecResult {
    pub instance: String,
    /// Exit code (128 + N when signal N ended it); absent for a background job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout or stderr is a head + tail preview.
    pub truncated: bool,
    pub duration_ms: u64,
    /// The full output on the host (root-relative when inside the root).
    pub log_path: String,
    /// Background jobs: pass as instance_logs {source: "job:<id>"}.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// Keeps the first and last bytes of a stream.
pub struct HeadTail {
    cap: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    pub total: u64,
}

impl HeadTail {
    pub fn new(cap: usize) -> Self {
        HeadTail {
            cap,
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            total: 0,
        }
    }
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_cap = self.cap / 2;
        if self.head.len() < head_cap {
            let n = (head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        let tail_cap = self.cap - head_cap;
        self.tail.extend(bytes);
        while self.tail.len() > tail_cap {
            self.tail.pop_front();
        }
    }
    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.truncated() {
            let dropped = self.total - (self.head.len() + self.tail.len()) as u64;
            out.push_str(&format!(
                "\n… [{dropped} bytes omitted; full output in log_path] …\n"
            ));
        }
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

pub async fn run(
    state: Arc<VmState>,
    p: ExecParams,
    caller: Caller,
) -> ToolResult<Reply<ExecResult>> {
    validate::writable(&state)?;
    validate::argv("command", &p.command)?;
    let env: BTreeMap<String, String> = validate::env("env", &p.env.unwrap_or_default())?
        .into_iter()
        .collect();
    let cwd = p.cwd.unwrap_or_else(|| "/work".into());
    validate::guest_path("cwd", &cwd)?;
    let stdin = p.stdin.unwrap_or_default();
    if stdin.len() > MAX_STDIN {
        return Err(ToolError::invalid_field(
            "stdin",
            format!("{} bytes; at most 1 MB", stdin.len()),
        ));
    }
    let timeout = validate::range("timeout_seconds", p.timeout_seconds.unwrap_or(60), 1, 600)?;
    // Without max_output_bytes both streams together must fit the answer's budget.
    let fit = p.max_output_bytes.is_none();
    let max_out = validate::range(
        "max_output_bytes",
        p.max_output_bytes.unwrap_or(32 * 1024),
        1024,
        1 << 20,
    )?;
    let background = p.background.unwrap_or(false);
    let (id, sandbox, _busy) = state.sandbox(&p.instance, !background, &caller)?;
    let seq = next_job_seq(&state, &id);
    let job = background.then(|| format!("j{seq}"));
    // A job's log is the agent's (in the instance's control directory); a foreground exec's
    // is the server's own, where the instance cannot plant anything.
    let log_path = match &job {
        Some(j) => instance_dir::guest_logs_dir(sandbox.dir()).join(format!("job-{j}.log")),
        None => instance_dir::exec_log(sandbox.dir(), seq),
    };
    let shown = crate::instance::shown(&state.root, &log_path);
    let req = Request::Exec(ExecRequest {
        argv: p.command.clone(),
        env,
        cwd,
        stdin_len: stdin.len() as u64,
        job: job.clone(),
    });
    let started = Instant::now();
    let stream = sandbox.agent().await.map_err(|e| {
        ToolError::new(
            ErrorCode::InstanceNotRunning,
            format!("instance {id}: its agent does not answer ({e})"),
        )
    })?;
    let (read, mut write) = tokio::io::split(stream);
    let sent = async {
        proto::write_line(&mut write, &req).await?;
        write.write_all(stdin.as_bytes()).await?;
        write.flush().await
    };
    sent.await.map_err(|e| {
        ToolError::internal(format!("instance {id}: sending the command failed: {e}"))
    })?;
    let mut read = tokio::io::BufReader::new(read);
    if let Some(job) = job {
        return job_started(&mut read, id, job, shown, started).await;
    }
    let mut capture = Capture::new(max_out as usize, &log_path);
    let exit = wait_exit(read, write, &mut capture, &id, timeout, &shown, fit).await?;
    Ok(finished(id, exit, &capture, started, shown, fit))
}

/// The instance's next job number (0 when the instance is gone meanwhile).
fn next_job_seq(state: &VmState, id: &str) -> u64 {
    let mut map = state.lock();
    map.get_mut(id)
        .map(|i| {
            i.job_seq += 1;
            i.job_seq
        })
        .unwrap_or(0)
}

/// A background job: the agent's first frame says whether it started.
async fn job_started<R: tokio::io::AsyncRead + Unpin>(
    read: &mut R,
    id: String,
    job: String,
    shown: String,
    started: Instant,
) -> ToolResult<Reply<ExecResult>> {
    match proto::read_frame(read).await {
        Ok(Some(Frame::Started(pid))) => Ok(Reply::new(
            ExecResult {
                instance: id.clone(),
                exit_code: None,
                signal: None,
                stdout: String::new(),
                stderr: String::new(),
                truncated: false,
                duration_ms: started.elapsed().as_millis() as u64,
                log_path: shown,
                job_id: Some(job.clone()),
            },
            format!(
                "job {job} started in {id} (pid {pid} inside); output: instance_logs {{instance: \"{id}\", source: \"job:{job}\"}}"
            ),
        )),
        Ok(Some(Frame::Error(e))) => Err(ToolError::invalid_field("command", e)),
        other => Err(ToolError::internal(format!(
            "unexpected answer from the agent: {other:?}"
        ))),
    }
}

/// A command's output as it arrives: previews of both streams, and the log on disk.
struct Capture {
    stdout: HeadTail,
    stderr: HeadTail,
    /// None when the log could not be created: the command still runs.
    log: Option<std::fs::File>,
    logged: u64,
}

impl Capture {
    /// Both previews; with `fit`, cut (head + tail) so that together they serialize within
    /// the answer's budget less `besides` bytes. Says whether `fit` cut anything.
    fn streams(&self, fit: bool, besides: usize) -> (String, String, bool) {
        let (out, err) = (self.stdout.render(), self.stderr.render());
        let room = RESULT_BUDGET_BYTES.saturating_sub(besides);
        if !fit || json_len(&out) + json_len(&err) <= room {
            return (out, err, false);
        }
        // A stream that fits in half leaves the rest to the other.
        let half = room / 2;
        let (out_room, err_room) = match (json_len(&out), json_len(&err)) {
            (o, _) if o <= half => (o, room - o),
            (_, e) if e <= half => (room - e, e),
            _ => (half, room - half),
        };
        const WHERE: &str = "all of it in log_path";
        let (out, a) = budget::head_tail_within(&out, out_room, WHERE);
        let (err, b) = budget::head_tail_within(&err, err_room, WHERE);
        (out, err, a || b)
    }

    fn new(cap: usize, log_path: &std::path::Path) -> Self {
        Self {
            stdout: HeadTail::new(cap),
            stderr: HeadTail::new(cap),
            log: instance_dir::create_server_file(log_path).ok(),
            logged: 0,
        }
    }
}

/// Read the agent's frames until the command exits, or the timeout kills it.
async fn wait_exit<R: tokio::io::AsyncRead + Unpin, W>(
    mut read: R,
    write: W,
    capture: &mut Capture,
    id: &str,
    timeout: u64,
    shown: &str,
    fit: bool,
) -> ToolResult<ExitStatus> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let frame = match tokio::time::timeout_at(deadline, proto::read_frame(&mut read)).await {
            Err(_) => None,
            Ok(Ok(Some(f))) => Some(f),
            Ok(Ok(None)) | Ok(Err(_)) => {
                let (stdout, stderr, _) = capture.streams(fit, 1024);
                return Err(ToolError::new(
                    ErrorCode::InstanceNotRunning,
                    format!("instance {id} ended while the command ran"),
                )
                .with_detail(json!({ "stdout": stdout, "stderr": stderr })));
            }
        };
        match frame {
            None => {
                // Dropping the connection makes the agent kill the whole process group.
                drop(read);
                drop(write);
                let (stdout, stderr, _) = capture.streams(fit, 1024 + json_len(shown));
                return Err(ToolError::new(
                    ErrorCode::Timeout,
                    format!("the command ran past {timeout} s; its process group was killed"),
                )
                .with_detail(json!({
                    "timeout_seconds": timeout,
                    "stdout": stdout,
                    "stderr": stderr,
                    "log_path": shown,
                })));
            }
            Some(Frame::Stdout(b)) => {
                capture.stdout.push(&b);
                write_log(&mut capture.log, &mut capture.logged, &b);
            }
            Some(Frame::Stderr(b)) => {
                capture.stderr.push(&b);
                write_log(&mut capture.log, &mut capture.logged, &b);
            }
            Some(Frame::Started(_)) => {}
            Some(Frame::Exit(s)) => return Ok(s),
            Some(Frame::Error(e)) => {
                return Err(ToolError::invalid_field("command", e));
            }
        }
    }
}

fn finished(
    id: String,
    exit: ExitStatus,
    capture: &Capture,
    started: Instant,
    shown: String,
    fit: bool,
) -> Reply<ExecResult> {
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut text = format!("exit {} in {duration_ms} ms", exit.code);
    // What the answer holds besides the two streams: ids, numbers, field names, log_path.
    let (out, err, cut) = capture.streams(fit, 512 + json_len(&id) + json_len(&shown));
    let truncated = cut || capture.stdout.truncated() || capture.stderr.truncated();
    if !out.is_empty() {
        text.push_str(&format!("\n{out}"));
    }
    if !err.is_empty() {
        text.push_str(&format!("\n[stderr]\n{err}"));
    }
    Reply::new(
        ExecResult {
            instance: id,
            exit_code: Some(exit.code),
            signal: exit.signal,
            stdout: out,
            stderr: err,
            truncated,
            duration_ms,
            log_path: shown,
            job_id: None,
        },
        text,
    )
}

fn write_log(log: &mut Option<std::fs::File>, logged: &mut u64, bytes: &[u8]) {
    if let Some(f) = log {
        let room = LOG_CAP.saturating_sub(*logged) as usize;
        let n = room.min(bytes.len());
        if n > 0 && f.write_all(&bytes[..n]).is_ok() {
            *logged += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail() {
        let mut h = HeadTail::new(8);
        h.push(b"0123456789abcdef");
        assert!(h.truncated());
        let r = h.render();
        assert!(r.starts_with("0123"));
        assert!(r.ends_with("cdef"));
        let mut small = HeadTail::new(64);
        small.push(b"hello");
        assert!(!small.truncated());
        assert_eq!(small.render(), "hello");
    }
}
