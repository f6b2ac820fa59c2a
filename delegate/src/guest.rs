//! Running a CLI inside a kitbag-vm instance, through the instance's own tools: started as a
//! background job (`instance_exec`), its output paged in as it grows (`instance_logs`),
//! fed to the same reader as a local run and copied to the same log on the host.
//!
//! The CLI runs under `timeout` inside the instance, so the deadline holds even if this
//! server goes away; cancellation signals its process group there.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kitbag_shared::{ToolError, ToolResult};

use crate::stream::{Ended, Feed};
use crate::{Context, DelegateParams, DelegateResult, command, logs};

/// One page of a job's output.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub text: String,
    pub next_offset: u64,
    /// More is there already (read again at once).
    pub more: bool,
    pub running: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// The instance's tools, as the host calls them.
pub trait Guest: Send + Sync {
    /// Start `argv` as a background job in `cwd`; its job id.
    fn start(&self, argv: Vec<String>, cwd: Option<String>) -> BoxFuture<'_, ToolResult<String>>;
    /// The job's output from `offset`.
    fn read<'a>(&'a self, job: &'a str, offset: u64) -> BoxFuture<'a, ToolResult<Page>>;
    /// Run `argv` to its end (a short command: the stop of a cancelled job).
    fn exec(&self, argv: Vec<String>) -> BoxFuture<'_, ToolResult<()>>;
}

/// How often a running job's output is looked at.
const POLL: Duration = Duration::from_millis(200);
/// Grace `timeout` gives the CLI after its TERM, before KILL.
const KILL_AFTER_SECONDS: u64 = 5;

/// Run `p` inside `instance` to its end.
pub async fn run(
    p: DelegateParams,
    instance: &str,
    guest: &dyn Guest,
    cx: Context<'_>,
) -> ToolResult<DelegateResult> {
    p.check()?;
    let cwd = p.cwd.clone().unwrap_or_else(|| "/work".to_string());
    if !cwd.starts_with('/') {
        return Err(ToolError::invalid_field(
            "cwd",
            format!("{cwd}: inside an instance, an absolute path (default /work)"),
        ));
    }
    let id = logs::new_id();
    // `kitbag` inside an instance is whatever `kitbag` its PATH has.
    let launch = command::launch(&p, "kitbag", &format!("delegate-{id}"));
    let pid_file = format!("/tmp/kitbag-delegate-{id}.pid");
    // sh records its pid, then becomes `timeout` — which leads a process group of its own:
    // that group is what a cancellation signals.
    // The model's name is checked to be quoting-free (params.rs); the instance's own shell
    // sets it (an exec's environment may not name KITBAG_ variables).
    let exports: String = command::env(&p)
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'; "))
        .collect();
    let script = format!(
        "{exports}command -v {prog} >/dev/null 2>&1 || {{ echo 'kitbag: {prog} is not installed in this instance' >&2; exit 127; }}; \
         echo $$ > {pid_file}; exec timeout -k {KILL_AFTER_SECONDS} {secs} \"$@\"",
        prog = launch.program,
        secs = p.timeout().as_secs(),
    );
    let mut argv = vec!["sh".into(), "-c".into(), script, "sh".into()];
    argv.extend(launch.argv());
    let job = guest.start(argv, Some(cwd.clone())).await?;

    let (log_path, log) = logs::create(cx.root, &id).await?;
    let mut reader = crate::reader(p.agent, Path::new(&cwd));
    let mut feed = Feed::new(reader.as_mut(), Some(log), cx.progress);
    let started = Instant::now();
    // The host's own deadline is `timeout`'s plus its grace, in case the instance stalls.
    let deadline = started + p.timeout() + Duration::from_secs(KILL_AFTER_SECONDS + 10);
    let mut offset = 0;
    let mut partial: Vec<u8> = Vec::new();
    let mut cancelled = false;
    let last = loop {
        let page = guest.read(&job, offset).await?;
        offset = page.next_offset;
        partial.extend_from_slice(page.text.as_bytes());
        while let Some(nl) = partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = partial.drain(..=nl).collect();
            feed.line(&line).await;
        }
        if page.more {
            continue;
        }
        if !page.running {
            break page;
        }
        if Instant::now() >= deadline {
            break page;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = cx.ct.cancelled() => {
                cancelled = true;
                let stop = format!("kill -TERM -- -$(cat {pid_file}) 2>/dev/null; true");
                let _ = guest.exec(vec!["sh".into(), "-c".into(), stop]).await;
                break page;
            }
        }
    };
    if !partial.is_empty() {
        feed.line(&partial).await;
    }
    feed.finish().await;
    let _ = guest
        .exec(vec!["rm".into(), "-f".into(), pid_file.clone()])
        .await;
    // `timeout` exits 124 when it stopped the CLI (137 when it had to kill it).
    let timed_out = matches!(last.exit_code, Some(124 | 137)) || (last.running && !cancelled);
    if last.exit_code == Some(127) && feed.digest.summary.is_none() {
        let place = format!("in instance {instance}");
        return Err(command::not_installed(
            p.agent,
            &launch.program,
            &place,
            "instance",
        ));
    }
    let ended = Ended {
        exit_code: if timed_out { None } else { last.exit_code },
        signal: last.signal,
        timed_out,
        cancelled,
        elapsed: started.elapsed(),
        // Inside an instance stderr shares the job's log: its stray lines say what went wrong.
        stderr_tail: String::new(),
    };
    Ok(crate::conclude(
        p.agent,
        feed,
        &ended,
        (cx.root, &log_path),
        cwd,
        Some(instance.to_string()),
    ))
}
