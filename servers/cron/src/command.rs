//! The `command` action: `/bin/sh -c` in its own process group, with a timeout that kills
//! the whole group (the shell and everything it started). Processes that leave the group
//! (`setsid -f`, `setpgid(0, 0)`) are found through the server's containment
//! ([`kitbag_shared::contain`]: a cgroup per command where writable, else the subreaper and
//! the `KITBAG_JOB` tag), and whatever the command leaves running is stopped when it ends.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::Mutex;

use kitbag_shared::contain::{self, ChildReg};
use kitbag_shared::process::signal_group;

use crate::model::CommandOutcome;

/// Bytes of combined output kept for the run history.
pub const TAIL_BYTES: usize = 4096;
/// After SIGTERM, how long the group gets before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// The last `cap` bytes of a stream, and whether anything was dropped.
#[derive(Default)]
struct Tail {
    buf: Vec<u8>,
    dropped: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > TAIL_BYTES * 2 {
            let cut = self.buf.len() - TAIL_BYTES;
            self.buf.drain(..cut);
            self.dropped = true;
        }
    }

    fn finish(&self) -> (String, bool) {
        let (start, dropped) = if self.buf.len() > TAIL_BYTES {
            (self.buf.len() - TAIL_BYTES, true)
        } else {
            (0, self.dropped)
        };
        let text = String::from_utf8_lossy(&self.buf[start..]).into_owned();
        // Drop a partial first character left by the cut.
        let text = if start > 0 {
            text.trim_start_matches('\u{FFFD}').to_string()
        } else {
            text
        };
        (text, dropped)
    }
}

async fn pump(mut r: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail.lock().await.push(&buf[..n]),
        }
    }
}

/// Run `script` with `/bin/sh -c` in `cwd`, killing its process group after `timeout`.
pub async fn run(
    script: &str,
    cwd: &Path,
    timeout: Duration,
    env: &[(&str, String)],
) -> CommandOutcome {
    let started = Instant::now();
    // None when no server set containment up (unit tests, library use): the group alone.
    let job = contain::current().map(|c| Arc::new(c.job()));
    let mut cmd = shell(script, cwd, env, job.as_deref());
    // Registered under the reaper's lock: the orphan reaper never takes this child's status.
    let (spawned, _reg) = {
        let mut children = ChildReg::lock();
        let spawned = cmd.spawn();
        let reg = spawned
            .as_ref()
            .ok()
            .and_then(|c| c.id())
            .map(|pid| ChildReg::register(&mut children, pid as i32));
        (spawned, reg)
    };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return CommandOutcome {
                status: "spawn_failed".into(),
                exit_code: None,
                signal: None,
                duration_ms: started.elapsed().as_millis() as u64,
                output_tail: format!("cannot start /bin/sh: {e}"),
                output_truncated: false,
                containment: None,
            };
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    if let Some(j) = &job {
        j.attach(pgid);
    }
    let tail = Arc::new(Mutex::new(Tail::default()));
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, tail.clone())));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, tail.clone())));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let (status, timed_out) = wait_or_kill(&mut child, pgid, &job, deadline).await;
    stop_leftovers(pumps, pgid, &job, deadline, timed_out).await;
    let (output_tail, output_truncated) = tail.lock().await.finish();
    use std::os::unix::process::ExitStatusExt;
    let exit_code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    let status = if timed_out {
        "timed_out"
    } else if exit_code == Some(0) {
        "ok"
    } else {
        "failed"
    };
    CommandOutcome {
        status: status.into(),
        exit_code,
        signal,
        duration_ms: started.elapsed().as_millis() as u64,
        output_tail,
        output_truncated,
        containment: job.map(|j| j.kind().as_str().to_string()),
    }
}

/// `sh -c script` in its own process group, tagged with the containment job when there is one.
fn shell(script: &str, cwd: &Path, env: &[(&str, String)], job: Option<&contain::Job>) -> Command {
    let prefix = job.map(|j| j.shell_prefix()).unwrap_or_default();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("{prefix}{script}"))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .env_remove(kitbag_shared::process::HOST_DEPTH_VAR);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(j) = job {
        let (k, v) = j.env();
        cmd.env(k, v);
    }
    cmd
}

/// Wait for the shell until `deadline`; past it, the one stop sequence (SIGTERM, a grace,
/// SIGKILL) on its group and job. Returns its status and whether the deadline ended it.
async fn wait_or_kill(
    child: &mut tokio::process::Child,
    pgid: i32,
    job: &Option<Arc<contain::Job>>,
    deadline: tokio::time::Instant,
) -> (Option<std::process::ExitStatus>, bool) {
    match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(s) => (s.ok(), false),
        Err(_) => {
            let overdue = Overdue {
                shell: child.id().unwrap_or(0),
                pgid,
                job: job.clone(),
            };
            let killed = tokio::task::spawn_blocking(move || {
                kitbag_shared::process::stop(&overdue, TERM_GRACE).then_some(overdue)
            })
            .await
            .ok()
            .flatten();
            if let Some(Overdue { job: Some(j), .. }) = killed {
                // The grace ran out: the job's cgroup goes at once too.
                let _ = tokio::task::spawn_blocking(move || j.kill()).await;
            }
            (child.wait().await.ok(), true)
        }
    }
}

/// A command past its deadline: signals reach its process group and its job; it is gone once
/// the shell has exited (what it leaves behind is [`stop_leftovers`]' business).
struct Overdue {
    shell: u32,
    pgid: i32,
    job: Option<Arc<contain::Job>>,
}

impl kitbag_shared::process::Stoppable for Overdue {
    fn signal(&self, signal: Signal) {
        signal_group(self.pgid, signal);
        if let Some(j) = &self.job {
            j.signal(signal);
        }
    }

    fn alive(&self) -> bool {
        kitbag_shared::process::running(self.shell)
    }
}

/// After the shell ended: let the output pumps finish, and stop what the command left behind.
async fn stop_leftovers(
    pumps: Vec<tokio::task::JoinHandle<()>>,
    pgid: i32,
    job: &Option<Arc<contain::Job>>,
    deadline: tokio::time::Instant,
    timed_out: bool,
) {
    // The shell is gone; anything it left in its group still holding the pipes is killed
    // at the deadline (or right away when the deadline already passed).
    let drain = futures::future::join_all(pumps);
    tokio::pin!(drain);
    if tokio::time::timeout_at(deadline, &mut drain).await.is_err() {
        signal_group(pgid, Signal::SIGKILL);
        kill_job(job).await;
        let _ = tokio::time::timeout(TERM_GRACE, &mut drain).await;
    }
    if timed_out {
        // Stragglers that ignored SIGTERM.
        signal_group(pgid, Signal::SIGKILL);
    }
    // Whatever the command left running — in its group or escaped from it — is stopped.
    if let Some(j) = job.clone() {
        let _ = tokio::task::spawn_blocking(move || j.terminate(TERM_GRACE)).await;
    }
}

async fn kill_job(job: &Option<Arc<contain::Job>>) {
    if let Some(j) = job.clone() {
        let _ = tokio::task::spawn_blocking(move || j.kill()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn alive(pid: i32) -> bool {
        kitbag_shared::process::running(pid as u32)
    }

    #[tokio::test]
    async fn exit_code_and_output_are_recorded() {
        let d = tempfile::tempdir().unwrap();
        let o = run(
            "echo out; echo err >&2; echo \"$KITBAG_CRON_ID\"; pwd; exit 3",
            d.path(),
            Duration::from_secs(10),
            &[("KITBAG_CRON_ID", "cron-7".into())],
        )
        .await;
        assert_eq!(o.status, "failed");
        assert_eq!(o.exit_code, Some(3));
        assert!(o.output_tail.contains("out") && o.output_tail.contains("err"));
        assert!(o.output_tail.contains("cron-7"));
        let real = std::fs::canonicalize(d.path()).unwrap();
        assert!(
            o.output_tail.contains(real.to_str().unwrap()),
            "{}",
            o.output_tail
        );
        let ok = run("true", d.path(), Duration::from_secs(10), &[]).await;
        assert_eq!((ok.status.as_str(), ok.exit_code), ("ok", Some(0)));
    }

    #[tokio::test]
    async fn long_output_keeps_the_tail() {
        let d = tempfile::tempdir().unwrap();
        let o = run(
            "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done",
            d.path(),
            Duration::from_secs(30),
            &[],
        )
        .await;
        assert_eq!(o.status, "ok");
        assert!(o.output_truncated);
        assert!(o.output_tail.len() <= TAIL_BYTES);
        assert!(o.output_tail.trim_end().ends_with("line2999"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pids");
        let script = format!(
            "sleep 300 & echo $! > {p}; sh -c 'sleep 300' & echo $! >> {p}; echo started; wait",
            p = pidfile.display()
        );
        let started = Instant::now();
        let o = run(&script, d.path(), Duration::from_millis(700), &[]).await;
        assert_eq!(o.status, "timed_out");
        assert!(o.output_tail.contains("started"));
        assert!(started.elapsed() < Duration::from_secs(20));
        let pids: Vec<i32> = std::fs::read_to_string(&pidfile)
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 2);
        std::thread::sleep(Duration::from_millis(300));
        for p in pids {
            assert!(!alive(p), "child {p} survived the timeout");
        }
    }
}
