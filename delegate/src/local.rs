//! Running a CLI on this machine: in a process group of its own that dies with the server,
//! its stdout read line by line into the reader and copied whole to the log, stderr's tail
//! kept, and the whole group stopped at the deadline, on cancellation, and after it exits
//! (helpers it left behind do not outlive the delegation).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kitbag_shared::process::{Group, stop_async};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::command::Launch;
use crate::stream::{Ended, Feed};

/// How long a stopped CLI gets to end on its own before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How much of stderr is kept (its end).
const STDERR_KEPT: usize = 4096;

pub struct LocalRun<'a> {
    pub launch: &'a Launch,
    pub cwd: &'a Path,
    /// Set in the CLI's environment (on top of the server's).
    pub env: &'a [(String, String)],
    /// Removed from it.
    pub env_remove: &'a [&'a str],
    pub timeout: Duration,
    pub ct: CancellationToken,
}

/// Run to the end (or the deadline, or cancellation), feeding `feed`.
pub async fn run(r: LocalRun<'_>, feed: &mut Feed<'_>) -> std::io::Result<Ended> {
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(&r.launch.program);
    cmd.args(&r.launch.args)
        .current_dir(r.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for k in r.env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in r.env {
        cmd.env(k, v);
    }
    kitbag_shared::process::die_with_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let stderr_task = tokio::spawn(async move {
        let mut tail = Vec::new();
        let Some(mut err) = stderr else {
            return tail;
        };
        let mut buf = [0u8; 8192];
        while let Ok(n) = err.read(&mut buf).await {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_KEPT {
                tail.drain(..tail.len() - STDERR_KEPT);
            }
        }
        tail
    });

    let deadline = tokio::time::Instant::now() + r.timeout;
    let mut stopped_by = None;
    if let Some(out) = stdout {
        let mut lines = BufReader::new(out);
        let mut line = Vec::new();
        loop {
            line.clear();
            tokio::select! {
                read = lines.read_until(b'\n', &mut line) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => feed.line(&line).await,
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    stopped_by = Some(Stop::Timeout);
                    break;
                }
                _ = r.ct.cancelled() => {
                    stopped_by = Some(Stop::Cancelled);
                    break;
                }
            }
        }
    }
    // Whatever ended the stream, nothing of the group stays: a CLI that closed stdout but
    // lingers, and helpers it started, are stopped with it.
    let status = match stopped_by {
        Some(_) => {
            stop_async(&Group(pgid), STOP_GRACE).await;
            child.wait().await.ok()
        }
        None => {
            let status = tokio::select! {
                s = child.wait() => s.ok(),
                _ = tokio::time::sleep_until(deadline) => { stopped_by = Some(Stop::Timeout); None }
                _ = r.ct.cancelled() => { stopped_by = Some(Stop::Cancelled); None }
            };
            stop_async(&Group(pgid), STOP_GRACE).await;
            match status {
                Some(s) => Some(s),
                None => child.wait().await.ok(),
            }
        }
    };
    let mut tail = stderr_task.await.unwrap_or_default();
    if tail.len() > STDERR_KEPT {
        tail.drain(..tail.len() - STDERR_KEPT);
    }
    feed.finish().await;
    use std::os::unix::process::ExitStatusExt;
    Ok(Ended {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out: stopped_by == Some(Stop::Timeout),
        cancelled: stopped_by == Some(Stop::Cancelled),
        elapsed: started.elapsed(),
        stderr_tail: String::from_utf8_lossy(&tail).trim().to_string(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Cancelled,
}
