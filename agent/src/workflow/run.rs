//! A workflow run as recorded: `<root>/.kitbag/workflow-runs/<run_id>.json`, written whole
//! (atomically) at every change of state, so `workflow_status` — from this process or another
//! — reads a consistent run, and a run outlives the host that ran it: one whose host is gone
//! while it was `running` is marked `interrupted` by the next host to start (never lost).

use std::path::Path;

use kitbag_shared::state::{OFlags, StateDir};
use kitbag_shared::{ErrorCode, PathPolicy, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

const DIR: &str = ".kitbag/workflow-runs";
/// The lock `kitbag daemon` holds while it takes this project's queued runs.
const DAEMON_LOCK: &str = "daemon.lock";
/// Records of ended runs kept (the newest); older ones go when a host starts.
pub const KEEP_RUNS: usize = 500;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for the `kitbag daemon` running in this project to take it.
    Queued,
    Running,
    Succeeded,
    Failed,
    /// Its host stopped while it ran.
    Interrupted,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Running,
    Succeeded,
    Failed,
}

/// One step's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct StepResult {
    pub index: usize,
    /// agent, tool or shell.
    pub kind: String,
    pub status: StepStatus,
    /// Its text (the agent's answer, the tool's text, the command's output), cut at 4 KB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// Who invoked a run (seed 004: the root agent acts with operator authority).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Invoker {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

/// A run, as `workflow_status` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Run {
    pub run_id: String,
    pub workflow_name: String,
    pub status: RunStatus,
    pub inputs: Map<String, Value>,
    pub invoked_by: Invoker,
    /// The session of kind `workflow` its agent steps talk in.
    pub session: String,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// Null while it runs.
    pub completed_at: Option<u64>,
    /// Null while it runs.
    pub duration_ms: Option<u64>,
    /// The step running, or the one it ended at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_step: Option<usize>,
    pub steps_total: usize,
    pub steps: Vec<StepResult>,
    /// The last step's output, once it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Why it failed or was interrupted (seed 004's `error`; a top-level `error` is what
    /// clients read as a tool's error object, so kitbag names it `failure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The host process running it (and its start time), to tell a live run from one whose
    /// host is gone.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub host: Option<(u32, u64)>,
}

/// The on-disk form: the run plus its host (kept out of `workflow_status`).
#[derive(Serialize, Deserialize)]
struct Stored {
    #[serde(flatten)]
    run: Run,
    #[serde(default)]
    host_pid: Option<u32>,
    #[serde(default)]
    host_started: Option<u64>,
}

/// Whether `id` can name a run (what `new_id` makes): guards the file name.
fn check_id(id: &str) -> ToolResult<()> {
    let ok =
        (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok { Ok(()) } else { Err(not_found(id)) }
}

pub fn not_found(id: &str) -> ToolError {
    ToolError::new(
        ErrorCode::RunNotFound,
        format!("no workflow run {id:?} (workflow_trigger returns the run_id)"),
    )
    .with_detail(json!({"field": "run_id"}))
}

/// A new run id: time-ordered, unique.
pub fn new_id() -> String {
    let rand =
        kitbag_shared::random::hex(5).unwrap_or_else(|_| format!("{:x}", std::process::id()));
    format!(
        "wr-{:x}-{rand}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    )
}

/// The runs of one root.
#[derive(Debug)]
pub struct RunStore {
    dir: StateDir,
}

fn io(e: std::io::Error) -> ToolError {
    ToolError::io(DIR, &e)
}

impl RunStore {
    pub fn open(root: &Path) -> ToolResult<RunStore> {
        let policy = PathPolicy::new(root, &[], false).map_err(io)?;
        let dir = StateDir::open(&policy, &root.join(DIR), true).map_err(io)?;
        Ok(RunStore { dir })
    }

    pub fn save(&self, run: &Run) -> ToolResult<()> {
        let (host_pid, host_started) = match run.host {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let stored = Stored {
            run: run.clone(),
            host_pid,
            host_started,
        };
        let bytes = serde_json::to_vec_pretty(&stored)
            .map_err(|e| ToolError::internal(format!("run record: {e}")))?;
        kitbag_shared::atomic::write_atomic(
            &self.dir.path(format!("{}.json", run.run_id)),
            &bytes,
            false,
        )
        .map_err(io)
    }

    pub fn load(&self, id: &str) -> ToolResult<Run> {
        check_id(id)?;
        let f = match self.dir.open_file(format!("{id}.json"), OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(io(e)),
        };
        let s: Stored = serde_json::from_reader(std::io::BufReader::new(f))
            .map_err(|e| ToolError::internal(format!("run {id}: unreadable record: {e}")))?;
        let mut run = s.run;
        run.host = s.host_pid.zip(s.host_started);
        Ok(run)
    }

    /// Become this project's daemon: the exclusive lock on `daemon.lock`, held as long as the
    /// file lives. `None` when another process holds it.
    pub fn claim_daemon(&self) -> ToolResult<Option<std::fs::File>> {
        let f = self
            .dir
            .open_file(DAEMON_LOCK, OFlags::RDWR | OFlags::CREATE)
            .map_err(io)?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(f)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(io(e.into())),
        }
    }

    /// Whether a `kitbag daemon` holds this project's runs (its lock is taken).
    pub fn daemon_alive(&self) -> bool {
        let Ok(f) = self
            .dir
            .open_file(DAEMON_LOCK, OFlags::RDWR | OFlags::CREATE)
        else {
            return false;
        };
        // A shared lock is refused exactly while the daemon holds its exclusive one; taken, it
        // goes with `f`.
        matches!(
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
            Err(rustix::io::Errno::WOULDBLOCK)
        )
    }

    /// The runs waiting for the daemon, oldest first.
    pub fn queued(&self) -> Vec<Run> {
        let mut runs: Vec<Run> = self
            .ids()
            .iter()
            .filter_map(|id| self.load(id).ok())
            .filter(|r| r.status == RunStatus::Queued)
            .collect();
        runs.sort_by_key(|r| r.created_at);
        runs
    }

    /// Every run's id.
    fn ids(&self) -> Vec<String> {
        kitbag_shared::paths::fd::list_dir(self.dir.fd())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(n, _)| n.to_str()?.strip_suffix(".json").map(str::to_owned))
            .collect()
    }

    /// At a host's start: mark `interrupted` every run left `running` by a host that is gone,
    /// and keep the newest [`KEEP_RUNS`] records of ended runs (older ones are removed). How
    /// many runs were marked.
    pub fn tidy(&self) -> usize {
        self.tidy_keeping(KEEP_RUNS)
    }

    fn tidy_keeping(&self, keep: usize) -> usize {
        let mut ended: Vec<(u64, String)> = Vec::new();
        let mut n = 0;
        for id in self.ids() {
            let Ok(mut run) = self.load(&id) else {
                continue;
            };
            if run.status == RunStatus::Queued {
                continue;
            }
            if run.status != RunStatus::Running {
                ended.push((run.created_at, id));
                continue;
            }
            if run.host.is_some_and(host_alive) {
                continue;
            }
            run.status = RunStatus::Interrupted;
            let at = run
                .current_step
                .map_or(String::new(), |s| format!(" during step {s}"));
            run.failure = Some(format!("its host stopped{at}; trigger the workflow again"));
            if let Some(s) = run.steps.last_mut()
                && s.status == StepStatus::Running
            {
                s.status = StepStatus::Failed;
                s.error = Some("interrupted".into());
            }
            let t = kitbag_shared::clock::unix_secs();
            run.completed_at = Some(t);
            run.duration_ms = Some(t.saturating_sub(run.created_at) * 1000);
            if self.save(&run).is_ok() {
                n += 1;
            }
        }
        if ended.len() > keep {
            ended.sort();
            for (_, id) in &ended[..ended.len() - keep] {
                let _ = self.dir.remove(format!("{id}.json"));
            }
        }
        n
    }
}

/// This process's id and start time (what a run records as its host).
pub fn this_host() -> Option<(u32, u64)> {
    let pid = std::process::id();
    kitbag_shared::proc_stat::start_time(pid as i32).map(|t| (pid, t))
}

fn host_alive((pid, started): (u32, u64)) -> bool {
    kitbag_shared::proc_stat::running(pid as i32)
        && kitbag_shared::proc_stat::start_time(pid as i32) == Some(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, status: RunStatus, created_at: u64, host: Option<(u32, u64)>) -> Run {
        Run {
            run_id: id.into(),
            workflow_name: "w".into(),
            status,
            inputs: Map::new(),
            invoked_by: Invoker {
                kind: "operator".into(),
                id: "agent:primary".into(),
            },
            session: format!("workflow-{id}"),
            created_at,
            completed_at: None,
            duration_ms: None,
            current_step: Some(0),
            steps_total: 1,
            steps: vec![StepResult {
                index: 0,
                kind: "shell".into(),
                status: StepStatus::Running,
                output: None,
                error: None,
                duration_ms: None,
            }],
            output: None,
            failure: None,
            host,
        }
    }

    #[test]
    fn a_gone_hosts_runs_are_interrupted_a_live_ones_left_and_old_records_pruned() {
        let d = tempfile::tempdir().expect("tmp");
        let store = RunStore::open(d.path()).expect("store");
        store
            .save(&run(
                "wr-gone",
                RunStatus::Running,
                10,
                Some((4_194_305, 1)),
            ))
            .expect("save");
        store
            .save(&run("wr-live", RunStatus::Running, 11, this_host()))
            .expect("save");
        for (i, t) in [1, 2, 3].into_iter().enumerate() {
            store
                .save(&run(&format!("wr-old{i}"), RunStatus::Succeeded, t, None))
                .expect("save");
        }
        assert_eq!(store.tidy_keeping(2), 1);
        let gone = store.load("wr-gone").expect("gone");
        assert_eq!(gone.status, RunStatus::Interrupted);
        assert_eq!(gone.steps[0].status, StepStatus::Failed);
        assert!(
            gone.failure
                .as_deref()
                .is_some_and(|f| f.contains("during step 0"))
        );
        assert_eq!(
            store.load("wr-live").expect("live").status,
            RunStatus::Running
        );
        // The oldest ended record went; the interrupted one counts from the next start.
        assert_eq!(
            store.load("wr-old0").expect_err("pruned").code,
            ErrorCode::RunNotFound
        );
        store.load("wr-old1").expect("kept");
        assert_eq!(
            store.load("../x").expect_err("bad id").code,
            ErrorCode::RunNotFound
        );
    }
}
