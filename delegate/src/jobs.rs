//! Stateless subagent jobs (seed 002, issue #39 §5): a bounded `kitbag run --json` turn in the
//! background — read-only by default, at most `max_steps` model calls and `timeout_seconds` —
//! whose typed result (its answer, and the JSON its pack's `output_schema` asks for, checked)
//! is fetched later. No follow-up messages (each job is a session of its own, `job-<id>`), no
//! chatter in the caller's conversation. Jobs live in the host process: at most
//! [`MAX_RUNNING`] at once, the newest [`MAX_KEPT`] ended ones remembered; each is stopped with
//! everything it started when it times out, when cancelled, and when the host ends (its
//! process dies with the host; its servers with it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::lock::LockExt;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::digest::{CommandRun, Tokens};
use crate::result::Outcome;

pub const MAX_RUNNING: usize = 4;
pub const MAX_KEPT: usize = 50;
pub const DEFAULT_MAX_STEPS: u32 = 20;
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 600;
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;
pub const MAX_WAIT_SECONDS: u64 = 600;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStartParams {
    /// An agent pack.
    #[serde(default)]
    pub pack: Option<String>,
    pub prompt: String,
    /// Model calls; default 20.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Default 600.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Default true.
    #[serde(default)]
    pub read_only: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStatusParams {
    pub job_id: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobResultParams {
    pub job_id: String,
    /// Wait up to this long (default 0).
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
}

impl From<Outcome> for JobState {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Succeeded => Self::Succeeded,
            Outcome::Failed => Self::Failed,
            Outcome::TimedOut => Self::TimedOut,
            Outcome::Cancelled => Self::Cancelled,
        }
    }
}

/// A job as `agent_job_start` and `agent_job_status` report it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobStatus {
    pub job_id: String,
    pub state: JobState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    pub read_only: bool,
    pub max_steps: u32,
    pub timeout_seconds: u64,
    pub elapsed_ms: u64,
    /// Tool calls and commands so far.
    pub activity: u32,
    /// The latest of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
}

/// A job's result (`agent_job_result`); while it runs, `state: "running"` and no answer yet.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobResult {
    pub job_id: String,
    pub state: JobState,
    /// Its final answer.
    pub text: String,
    /// The JSON its pack's `output_schema` asked for, checked against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    pub steps: u64,
    pub tokens: Tokens,
    pub files_read: Vec<String>,
    pub files_written: Vec<String>,
    pub commands: Vec<CommandRun>,
    pub other_tools: Vec<String>,
    pub errors: Vec<String>,
    pub duration_ms: u64,
    /// The job's whole stream.
    pub log_path: String,
    /// Its session, kept as `.kitbag/sessions/<session>.jsonl`.
    pub session: String,
}

struct Job {
    status: JobStatus,
    started: Instant,
    result: Option<JobResult>,
    done: watch::Receiver<bool>,
}

/// The host's jobs.
pub struct Jobs {
    root: PathBuf,
    kitbag: String,
    jobs: Arc<Mutex<BTreeMap<String, Job>>>,
    /// Cancels every job when the host ends.
    all: CancellationToken,
}

impl Jobs {
    pub fn new(root: PathBuf, kitbag: String) -> Self {
        Self {
            root,
            kitbag,
            jobs: Arc::new(Mutex::new(BTreeMap::new())),
            all: CancellationToken::new(),
        }
    }

    /// Start a job; it runs on the current runtime.
    pub fn start(&self, p: JobStartParams) -> ToolResult<JobStatus> {
        let (max_steps, timeout) = check(&p)?;
        let read_only = p.read_only.unwrap_or(true);
        if let Some(pack) = &p.pack
            && !self
                .root
                .join(".kitbag/agents")
                .join(format!("{pack}.md"))
                .is_file()
        {
            return Err(ToolError::invalid_field(
                "pack",
                format!("no pack .kitbag/agents/{pack}.md"),
            ));
        }
        let mut jobs = self.jobs.locked();
        let running = jobs
            .values()
            .filter(|j| j.status.state == JobState::Running)
            .count();
        if running >= MAX_RUNNING {
            return Err(ToolError::new(
                ErrorCode::JobLimit,
                format!("{running} jobs are running, the most at once: wait for one (agent_job_result with wait_seconds)"),
            )
            .with_detail(json!({ "running": running, "limit": MAX_RUNNING })));
        }
        let id = crate::logs::new_id();
        let ct = self.all.child_token();
        let (tx, rx) = watch::channel(false);
        let status = JobStatus {
            job_id: id.clone(),
            state: JobState::Running,
            pack: p.pack.clone(),
            read_only,
            max_steps,
            timeout_seconds: timeout.as_secs(),
            elapsed_ms: 0,
            activity: 0,
            last_activity: None,
        };
        jobs.insert(
            id.clone(),
            Job {
                status: status.clone(),
                started: Instant::now(),
                result: None,
                done: rx,
            },
        );
        forget_oldest(&mut jobs);
        drop(jobs);
        let run = Run {
            root: self.root.clone(),
            kitbag: self.kitbag.clone(),
            jobs: self.jobs.clone(),
            id,
            pack: p.pack,
            prompt: p.prompt,
            max_steps,
            read_only,
            timeout,
            ct,
        };
        tokio::spawn(async move {
            run.execute().await;
            let _ = tx.send(true);
        });
        Ok(status)
    }

    pub fn status(&self, p: &JobStatusParams) -> ToolResult<JobStatus> {
        let jobs = self.jobs.locked();
        let job = find(&jobs, &p.job_id)?;
        let mut s = job.status.clone();
        if s.state == JobState::Running {
            s.elapsed_ms = millis(job.started.elapsed());
        }
        Ok(s)
    }

    /// The job's result, waiting up to `wait_seconds` for its end.
    pub async fn result(&self, p: &JobResultParams) -> ToolResult<JobResult> {
        let wait = p.wait_seconds.unwrap_or(0);
        if wait > MAX_WAIT_SECONDS {
            return Err(ToolError::invalid_field(
                "wait_seconds",
                format!("{wait}; accepted: 0 to {MAX_WAIT_SECONDS}"),
            ));
        }
        let mut done = find(&self.jobs.locked(), &p.job_id)?.done.clone();
        let _ = tokio::time::timeout(Duration::from_secs(wait), done.wait_for(|d| *d)).await;
        let jobs = self.jobs.locked();
        let job = find(&jobs, &p.job_id)?;
        Ok(job.result.clone().unwrap_or_else(|| {
            JobResult::without_answer(&p.job_id, JobState::Running, job.started)
        }))
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        self.all.cancel();
    }
}

fn find<'a>(jobs: &'a BTreeMap<String, Job>, id: &str) -> ToolResult<&'a Job> {
    jobs.get(id).ok_or_else(|| {
        ToolError::new(
            ErrorCode::JobNotFound,
            format!("job_id: no job {id:?} in this host (jobs end with it)"),
        )
        .with_detail(json!({ "field": "job_id" }))
    })
}

/// Ended jobs past [`MAX_KEPT`] are forgotten, oldest first.
fn forget_oldest(jobs: &mut BTreeMap<String, Job>) {
    let ended: Vec<String> = jobs
        .iter()
        .filter(|(_, j)| j.status.state != JobState::Running)
        .map(|(id, _)| id.clone())
        .collect();
    for id in ended.iter().take(ended.len().saturating_sub(MAX_KEPT)) {
        jobs.remove(id);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The bounds `p` asks for, checked.
fn check(p: &JobStartParams) -> ToolResult<(u32, Duration)> {
    if p.prompt.trim().is_empty() {
        return Err(ToolError::invalid_field("prompt", "must not be empty"));
    }
    if p.prompt.len() > crate::params::MAX_TASK_BYTES {
        return Err(ToolError::invalid_field(
            "prompt",
            format!(
                "{} bytes; at most {}",
                p.prompt.len(),
                crate::params::MAX_TASK_BYTES
            ),
        ));
    }
    let steps = p.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
    if !(1..=100).contains(&steps) {
        return Err(ToolError::invalid_field(
            "max_steps",
            format!("{steps}; accepted: 1 to 100"),
        ));
    }
    let secs = p.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    if !(1..=MAX_TIMEOUT_SECONDS).contains(&secs) {
        return Err(ToolError::invalid_field(
            "timeout_seconds",
            format!("{secs}; accepted: 1 to {MAX_TIMEOUT_SECONDS}"),
        ));
    }
    if let Some(pack) = &p.pack {
        crate::params::check_pack(pack)?;
    }
    Ok((steps, Duration::from_secs(secs)))
}

/// One job on its way.
struct Run {
    root: PathBuf,
    kitbag: String,
    jobs: Arc<Mutex<BTreeMap<String, Job>>>,
    id: String,
    pack: Option<String>,
    prompt: String,
    max_steps: u32,
    read_only: bool,
    timeout: Duration,
    ct: CancellationToken,
}

impl Run {
    async fn execute(self) {
        let session = format!("job-{}", self.id);
        let launch = crate::command::job_launch(
            &self.kitbag,
            &session,
            self.pack.as_deref(),
            self.max_steps,
            self.read_only,
            &self.prompt,
        );
        let started = Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // Progress becomes the job's status, not notifications: nobody waits on the call.
        let jobs = self.jobs.clone();
        let id = self.id.clone();
        let activity = tokio::spawn(async move {
            while let Some(note) = rx.recv().await {
                if let Some(j) = jobs.locked().get_mut(&id) {
                    j.status.activity += 1;
                    j.status.last_activity = Some(note);
                }
            }
        });
        let outcome = self.run(&launch, &session, tx).await;
        let _ = activity.await;
        let result = match outcome {
            Ok(r) => r,
            Err(e) => JobResult {
                errors: vec![e.message],
                ..JobResult::without_answer(&self.id, JobState::Failed, started)
            },
        };
        let mut jobs = self.jobs.locked();
        if let Some(j) = jobs.get_mut(&self.id) {
            j.status.state = result.state;
            j.status.elapsed_ms = result.duration_ms;
            j.result = Some(result);
        }
    }

    async fn run(
        &self,
        launch: &crate::command::Launch,
        session: &str,
        tx: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> ToolResult<JobResult> {
        let (log_path, log) = crate::logs::create(&self.root, &format!("job-{}", self.id)).await?;
        let mut reader = crate::kitbag::KitbagReader::new(self.root.clone());
        let mut feed = crate::stream::Feed::new(&mut reader, Some(log), Some(tx));
        let run = crate::local::LocalRun {
            launch,
            cwd: &self.root,
            env: &[crate::deeper()],
            env_remove: &[crate::HOST_DEPTH],
            timeout: self.timeout,
            ct: self.ct.clone(),
        };
        let ended = crate::local::run(run, &mut feed)
            .await
            .map_err(|e| ToolError::new(ErrorCode::SpawnFailed, format!("kitbag run: {e}")))?;
        let log_bytes = feed.log_bytes;
        let digest = std::mem::take(&mut feed.digest);
        drop(feed);
        let output = digest.output.clone();
        let r = crate::result::build(
            crate::AgentKind::Kitbag,
            digest,
            &ended,
            (crate::logs::shown(&self.root, &log_path), log_bytes),
            ".".into(),
            None,
        );
        Ok(JobResult {
            job_id: self.id.clone(),
            state: r.outcome.into(),
            text: r.summary,
            output,
            steps: r.turns.unwrap_or(0),
            tokens: r.tokens,
            files_read: r.files_read,
            files_written: r.files_written,
            commands: r.commands,
            other_tools: r.other_tools,
            errors: r.errors,
            duration_ms: r.duration_ms,
            log_path: r.log_path,
            session: session.to_string(),
        })
    }
}

impl JobResult {
    /// A job with no answer (yet): running, or failed before it could run.
    fn without_answer(id: &str, state: JobState, started: Instant) -> Self {
        Self {
            job_id: id.to_string(),
            state,
            text: String::new(),
            output: None,
            steps: 0,
            tokens: Tokens::default(),
            files_read: Vec::new(),
            files_written: Vec::new(),
            commands: Vec::new(),
            other_tools: Vec::new(),
            errors: Vec::new(),
            duration_ms: millis(started.elapsed()),
            log_path: String::new(),
            session: format!("job-{id}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn params(v: Value) -> JobStartParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bounds_are_checked_and_named() {
        for (v, field) in [
            (json!({"prompt": " "}), "prompt"),
            (json!({"prompt": "x", "max_steps": 0}), "max_steps"),
            (json!({"prompt": "x", "max_steps": 101}), "max_steps"),
            (
                json!({"prompt": "x", "timeout_seconds": 0}),
                "timeout_seconds",
            ),
            (json!({"prompt": "x", "pack": "../x"}), "pack"),
        ] {
            let e = check(&params(v.clone())).unwrap_err();
            assert_eq!(e.detail["field"], field, "{v}");
        }
        let (steps, t) = check(&params(json!({"prompt": "x"}))).unwrap();
        assert_eq!(
            (steps, t.as_secs()),
            (DEFAULT_MAX_STEPS, DEFAULT_TIMEOUT_SECONDS)
        );
    }

    #[tokio::test]
    async fn an_unknown_job_and_a_missing_pack_are_typed() {
        let d = tempfile::tempdir().unwrap();
        let jobs = Jobs::new(d.path().to_path_buf(), "kitbag".into());
        let e = jobs
            .status(&JobStatusParams {
                job_id: "nope".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::JobNotFound);
        let e = jobs
            .start(params(json!({"prompt": "x", "pack": "reviewer"})))
            .unwrap_err();
        assert_eq!(e.detail["field"], "pack");
    }
}
