//! `agent_job_start`, `agent_job_status`, `agent_job_result` (issue #39 §5): the host's tools
//! over kitbag-delegate's subagent jobs — bounded `kitbag run` turns in the background. Listed
//! only when this host can reach a model (a `model` setting or an API key): without one a job
//! could only fail, and the tools would only cost the model's context.

use std::sync::{Arc, OnceLock};

use kitbag_delegate::jobs::{
    JobResult, JobResultParams, JobStartParams, JobStatus, JobStatusParams, Jobs,
};
use kitbag_shared::{ToolError, ToolResult};
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::json;

use crate::own_answer::{answer, decode};

pub const START_TOOL: &str = "agent_job_start";
pub const STATUS_TOOL: &str = "agent_job_status";
pub const RESULT_TOOL: &str = "agent_job_result";
pub const TOOLS: [&str; 3] = [START_TOOL, STATUS_TOOL, RESULT_TOOL];

/// The host's jobs, made at the first start (in the working directory, with this binary).
#[derive(Default)]
pub struct HostJobs(OnceLock<Jobs>);

impl HostJobs {
    fn jobs(&self) -> ToolResult<&Jobs> {
        if let Some(j) = self.0.get() {
            return Ok(j);
        }
        let root = std::env::current_dir().map_err(|e| ToolError::io(".", &e))?;
        let kitbag = std::env::current_exe().map_err(|e| ToolError::io("kitbag", &e))?;
        let jobs = Jobs::new(root, kitbag.to_string_lossy().into_owned());
        Ok(self.0.get_or_init(|| jobs))
    }
}

fn tool<P: schemars::JsonSchema + 'static, R: schemars::JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
    title: &'static str,
    tier: &'static str,
) -> Tool {
    let input = kitbag_shared::schema::input_schema::<P>().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    meta.insert(kitbag_shared::tier::TIER_META.into(), json!(tier));
    Tool::new(name, description, input)
        .with_raw_output_schema(Arc::new(kitbag_shared::schema::output_schema_for::<R>(
            name,
        )))
        .with_annotations(
            rmcp::model::ToolAnnotations::with_title(title)
                .read_only(tier == "read")
                .destructive(false)
                .open_world(tier != "read"),
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
        tool::<JobStartParams, JobStatus>(
            START_TOOL,
            "Run a bounded subagent turn in the background (read-only by default).",
            "Start a subagent job",
            "exec",
        ),
        tool::<JobStatusParams, JobStatus>(
            STATUS_TOOL,
            "A subagent job's state and latest activity.",
            "Subagent job status",
            "read",
        ),
        tool::<JobResultParams, JobResult>(
            RESULT_TOOL,
            "A subagent job's answer and typed output.",
            "Subagent job result",
            "read",
        ),
    ]
}

fn status_text(s: &JobStatus) -> String {
    let mut t = format!(
        "job {}: {:?} after {:.1}s, {} tool calls",
        s.job_id,
        s.state,
        s.elapsed_ms as f64 / 1000.0,
        s.activity
    );
    if let Some(a) = &s.last_activity {
        t.push_str(&format!(" (latest: {a})"));
    }
    t
}

/// Answer one of the three.
pub async fn call(jobs: &HostJobs, name: &str, args: Option<JsonObject>) -> CallToolResult {
    match name {
        START_TOOL => answer(
            decode::<JobStartParams>(args).and_then(|p| jobs.jobs()?.start(p)),
            |s| {
                format!(
                    "job {} started (agent_job_result with wait_seconds for its answer)",
                    s.job_id
                )
            },
        ),
        STATUS_TOOL => answer(
            decode::<JobStatusParams>(args).and_then(|p| jobs.jobs()?.status(&p)),
            status_text,
        ),
        _ => {
            let r = match decode::<JobResultParams>(args) {
                Ok(p) => match jobs.jobs() {
                    Ok(j) => j.result(&p).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            answer(r, |r| {
                let mut t = format!("job {}: {:?}", r.job_id, r.state);
                if !r.errors.is_empty() {
                    t.push_str(&format!("\nErrors: {}", r.errors.join("; ")));
                }
                if let Some(o) = &r.output {
                    t.push_str(&format!("\nOutput: {o}"));
                }
                if !r.text.is_empty() {
                    t.push_str(&format!("\n\n{}", r.text));
                }
                t
            })
        }
    }
}
