//! Workflows (issue #39 §3; seed 004's `kaged.workflow.*`): the runs of the workflows the
//! config declares (kitbag-config's `workflow`). `trigger` checks the inputs
//! (`inputs.rs`), records a run of kind `workflow` (`run.rs`) and runs its steps in the
//! background (`runner.rs`, placeholders filled by `template.rs`); `status` reads the record,
//! from any process. The host serves them as `workflow_list`, `workflow_trigger` and
//! `workflow_status`.

pub mod inputs;
pub mod run;
pub mod runner;
pub mod template;

use std::sync::Arc;

use kitbag_config::workflow::{Invoker as Who, Workflow};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use run::{Invoker, Run, RunStatus};

/// One workflow as `workflow_list` shows it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Listed {
    pub name: String,
    pub description: String,
    /// A JSON Schema object.
    pub inputs: Value,
    /// operator, guest.
    pub invokable_by: Vec<String>,
    pub timeout_seconds: u64,
    pub steps: usize,
}

#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ListResult {
    pub workflows: Vec<Listed>,
    pub count: usize,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// operator or guest.
    #[serde(default)]
    pub invokable_by: Option<Who>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerParams {
    pub name: String,
    #[serde(default)]
    pub inputs: Map<String, Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    pub run_id: String,
}

/// `workflow_trigger`'s answer (seed 004).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Triggered {
    pub run_id: String,
    pub workflow_name: String,
    pub status: RunStatus,
    pub created_at: u64,
}

fn who(i: Who) -> String {
    match i {
        Who::Operator => "operator",
        Who::Guest => "guest",
    }
    .into()
}

pub fn list(workflows: &[Workflow], p: &ListParams) -> ListResult {
    let shown: Vec<Listed> = workflows
        .iter()
        .filter(|w| p.invokable_by.is_none_or(|i| w.invokable_by.contains(&i)))
        .map(|w| Listed {
            name: w.name.clone(),
            description: w.description.clone(),
            inputs: w.inputs.clone(),
            invokable_by: w.invokable_by.iter().copied().map(who).collect(),
            timeout_seconds: w.timeout_seconds,
            steps: w.steps.len(),
        })
        .collect();
    ListResult {
        count: shown.len(),
        workflows: shown,
    }
}

pub fn not_found(name: &str, workflows: &[Workflow]) -> ToolError {
    let names: Vec<&str> = workflows.iter().map(|w| w.name.as_str()).collect();
    ToolError::new(
        ErrorCode::WorkflowNotFound,
        format!(
            "no workflow {name:?} (declared: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
    )
    .with_detail(json!({"field": "name"}))
}

/// Check the inputs and record the run (`running`): what [`runner::Runner::execute`] runs.
pub fn start(
    runner: &runner::Runner,
    workflows: &[Workflow],
    p: TriggerParams,
    caller: &str,
) -> ToolResult<(Workflow, Run)> {
    let w = workflows
        .iter()
        .find(|w| w.name == p.name)
        .ok_or_else(|| not_found(&p.name, workflows))?;
    let inputs = inputs::check(&w.inputs, &p.inputs)?;
    let run_id = run::new_id();
    let run = Run {
        session: format!("workflow-{run_id}"),
        run_id,
        workflow_name: w.name.clone(),
        status: RunStatus::Running,
        inputs,
        invoked_by: Invoker {
            kind: "operator".into(),
            id: caller.to_string(),
        },
        created_at: kitbag_shared::clock::unix_secs(),
        completed_at: None,
        duration_ms: None,
        current_step: None,
        steps_total: w.steps.len(),
        steps: Vec::new(),
        output: None,
        failure: None,
        host: run::this_host(),
    };
    runner.store.save(&run)?;
    runner.host.audit(
        "workflow.triggered",
        json!({"run_id": run.run_id, "workflow": run.workflow_name, "caller": caller}),
    );
    Ok((w.clone(), run))
}

/// Check the inputs, record the run and start it; the run goes on in the background — in the
/// `kitbag daemon` of this project when one runs (it outlives clients: the run is queued for
/// it), else in this process.
pub fn trigger(
    runner: &runner::Runner,
    workflows: &[Workflow],
    p: TriggerParams,
    caller: &str,
) -> ToolResult<Triggered> {
    let (w, mut run) = start(runner, workflows, p, caller)?;
    let to_daemon = runner.store.daemon_alive();
    if to_daemon {
        run.status = RunStatus::Queued;
        run.host = None;
        runner.store.save(&run)?;
    }
    let answer = Triggered {
        run_id: run.run_id.clone(),
        workflow_name: run.workflow_name.clone(),
        status: run.status,
        created_at: run.created_at,
    };
    if !to_daemon {
        tokio::spawn(runner.clone().execute(w, run));
    }
    Ok(answer)
}

/// What `kitbag daemon` needs to take the runs clients queued: how to run one, and the
/// workflows declared now (a reload may change them).
pub struct Queue {
    pub runner: runner::Runner,
    pub declared: Arc<dyn Fn() -> Vec<Workflow> + Send + Sync>,
}

/// In `kitbag daemon`: start every queued run (each in the background); how many.
pub fn take_queued(runner: &runner::Runner, workflows: &[Workflow]) -> usize {
    let queued = runner.store.queued();
    let n = queued.len();
    for mut run in queued {
        run.status = RunStatus::Running;
        run.host = run::this_host();
        match workflows.iter().find(|w| w.name == run.workflow_name) {
            Some(w) => {
                if runner.store.save(&run).is_ok() {
                    tokio::spawn(runner.clone().execute(w.clone(), run));
                }
            }
            None => {
                run.status = RunStatus::Failed;
                run.failure = Some(format!(
                    "workflow {} is no longer declared in this daemon's config",
                    run.workflow_name
                ));
                run.completed_at = Some(kitbag_shared::clock::unix_secs());
                let _ = runner.store.save(&run);
            }
        }
    }
    n
}

/// A run's record.
pub fn status(store: &Arc<run::RunStore>, p: &StatusParams) -> ToolResult<Run> {
    store.load(&p.run_id)
}
