//! `workflow_list`, `workflow_trigger`, `workflow_status` (issue #39 §3): the host's own tools
//! over kitbag-agent's workflows, offered only when the config (or `.kitbag/workflows/`)
//! declares a workflow — with none they would only cost the model's context. Root-only
//! (seed 004). Runs go on in this process, recorded under `.kitbag/workflow-runs`.

use std::sync::{Arc, Mutex, OnceLock};

use kitbag_agent::workflow::{self, run::RunStore, runner::Runner};
use kitbag_config::workflow::Workflow;
use kitbag_shared::lock::LockExt;
use kitbag_shared::{ToolError, ToolResult};
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::json;

use crate::own_answer::{answer, decode};

pub const LIST_TOOL: &str = "workflow_list";
pub const TRIGGER_TOOL: &str = "workflow_trigger";
pub const STATUS_TOOL: &str = "workflow_status";

/// The declared workflows and what their runs need; replaced on reload.
#[derive(Default)]
pub struct Workflows {
    declared: Mutex<Vec<Workflow>>,
    config: Mutex<Arc<kitbag_config::Config>>,
    store: OnceLock<Arc<RunStore>>,
}

impl Workflows {
    /// The config's workflows and `.kitbag/workflows/` of the working directory; a bad file
    /// is logged and left out (the config's own were checked when it loaded).
    pub fn set(&self, config: &kitbag_config::Config) {
        let root = std::env::current_dir().unwrap_or_default();
        let all = kitbag_config::workflow::with_files(config.workflows.clone(), &root)
            .unwrap_or_else(|e| {
                tracing::warn!("workflows: {e}");
                config.workflows.clone()
            });
        if !all.is_empty() {
            // Runs a gone host left `running` are marked, once, before anything is triggered.
            if let Ok(store) = self.store() {
                let n = store.tidy();
                if n > 0 {
                    tracing::info!(
                        runs = n,
                        "workflow runs of a stopped host marked interrupted"
                    );
                }
            }
        }
        *self.declared.locked() = all;
        *self.config.locked() = Arc::new(config.clone());
    }

    pub fn any(&self) -> bool {
        !self.declared.locked().is_empty()
    }

    fn store(&self) -> ToolResult<Arc<RunStore>> {
        if let Some(s) = self.store.get() {
            return Ok(s.clone());
        }
        let root = std::env::current_dir().map_err(|e| ToolError::io(".", &e))?;
        let s = Arc::new(RunStore::open(&root)?);
        Ok(self.store.get_or_init(|| s).clone())
    }

    pub fn owns(&self, name: &str) -> bool {
        self.any() && kitbag_config::workflow::TOOLS.contains(&name)
    }
}

fn tool<P: schemars::JsonSchema + 'static, R: schemars::JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
    title: &'static str,
    read_only: bool,
) -> Tool {
    let input = kitbag_shared::schema::input_schema::<P>().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    meta.insert(
        kitbag_config::policy::PRINCIPAL_SCOPE.into(),
        json!("root-only"),
    );
    meta.insert(
        kitbag_shared::tier::TIER_META.into(),
        json!(if read_only { "read" } else { "exec" }),
    );
    Tool::new(name, description, input)
        .with_raw_output_schema(Arc::new(kitbag_shared::schema::output_schema_for::<R>(
            name,
        )))
        .with_annotations(
            rmcp::model::ToolAnnotations::with_title(title)
                .read_only(read_only)
                .destructive(false)
                .open_world(false),
        )
        .with_meta(rmcp::model::MetaObject(meta))
}

/// The three tools.
pub fn tools() -> Vec<Tool> {
    // Built once (`crate::serve::prepare_own_tools`), cloned after.
    static BUILT: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_tools).clone()
}

fn build_tools() -> Vec<Tool> {
    vec![
        tool::<workflow::ListParams, workflow::ListResult>(
            LIST_TOOL,
            "Workflows of this project, with their input schemas.",
            "Workflows",
            true,
        ),
        tool::<workflow::StatusParams, workflow::run::Run>(
            STATUS_TOOL,
            "A workflow run's state, steps and output.",
            "Workflow run",
            true,
        ),
        tool::<workflow::TriggerParams, workflow::Triggered>(
            TRIGGER_TOOL,
            "Start a workflow with `inputs`; returns `run_id` at once (poll workflow_status).",
            "Trigger a workflow",
            false,
        ),
    ]
}

/// What `kitbag daemon` takes queued runs with; `None` when no workflow is declared.
pub fn queue(
    workflows: &Arc<Workflows>,
    host: Arc<dyn kitbag_agent::host::ToolHost>,
) -> Option<workflow::Queue> {
    if !workflows.any() {
        return None;
    }
    let runner = Runner {
        host,
        config: workflows.config.locked().clone(),
        store: workflows.store().ok()?,
    };
    let source = workflows.clone();
    Some(workflow::Queue {
        runner,
        declared: Arc::new(move || source.declared.locked().clone()),
    })
}

/// Every declared workflow (`kitbag workflow list`).
pub fn list(workflows: &Workflows) -> workflow::ListResult {
    workflow::list(
        &workflows.declared.locked(),
        &workflow::ListParams { invokable_by: None },
    )
}

/// A run's record (`kitbag workflow status`).
pub fn status(workflows: &Workflows, run_id: &str) -> ToolResult<workflow::run::Run> {
    workflow::status(
        &workflows.store()?,
        &workflow::StatusParams {
            run_id: run_id.to_string(),
        },
    )
}

/// Trigger `name` and wait for its end, in this process (`kitbag workflow run`).
pub async fn run_to_end(
    workflows: &Workflows,
    host: Arc<dyn kitbag_agent::host::ToolHost>,
    caller: &str,
    name: &str,
    inputs: serde_json::Map<String, serde_json::Value>,
) -> ToolResult<workflow::run::Run> {
    let declared = workflows.declared.locked().clone();
    let runner = Runner {
        host,
        config: workflows.config.locked().clone(),
        store: workflows.store()?,
    };
    let p = workflow::TriggerParams {
        name: name.to_string(),
        inputs,
    };
    let (w, run) = workflow::start(&runner, &declared, p, caller)?;
    let id = run.run_id.clone();
    runner.clone().execute(w, run).await;
    runner.store.load(&id)
}

/// Answer one of the three; `host` runs the triggered steps, `caller` is who triggers.
pub fn call(
    workflows: &Workflows,
    host: Arc<dyn kitbag_agent::host::ToolHost>,
    caller: &str,
    name: &str,
    args: Option<JsonObject>,
) -> CallToolResult {
    let declared = workflows.declared.locked().clone();
    match name {
        LIST_TOOL => answer(
            decode::<workflow::ListParams>(args).map(|p| workflow::list(&declared, &p)),
            |l| {
                let names: Vec<&str> = l.workflows.iter().map(|w| w.name.as_str()).collect();
                format!("{} workflow(s): {}", l.count, names.join(", "))
            },
        ),
        TRIGGER_TOOL => answer(
            decode::<workflow::TriggerParams>(args).and_then(|p| {
                let runner = Runner {
                    host,
                    config: workflows.config.locked().clone(),
                    store: workflows.store()?,
                };
                workflow::trigger(&runner, &declared, p, caller)
            }),
            |t| {
                format!(
                    "workflow {} {}: run {} (poll workflow_status)",
                    t.workflow_name,
                    if t.status == workflow::run::RunStatus::Queued {
                        "queued for this project's kitbag daemon"
                    } else {
                        "started"
                    },
                    t.run_id
                )
            },
        ),
        _ => answer(
            decode::<workflow::StatusParams>(args)
                .and_then(|p| workflow::status(&workflows.store()?, &p)),
            |r| {
                let mut s = format!("run {} of {}: {:?}", r.run_id, r.workflow_name, r.status);
                if r.status == workflow::run::RunStatus::Queued {
                    s.push_str(" (waiting for this project's kitbag daemon)");
                }
                if let Some(step) = r.current_step {
                    s.push_str(&format!(", step {} of {}", step + 1, r.steps_total));
                }
                if let Some(e) = &r.failure {
                    s.push_str(&format!("\nerror: {e}"));
                }
                if let Some(o) = &r.output {
                    s.push_str(&format!("\n{o}"));
                }
                s
            },
        ),
    }
}
