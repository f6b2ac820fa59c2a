//! Running a workflow: its steps in order, each recorded as it starts and ends, the run
//! bounded by the workflow's `timeout_seconds`. Tool steps and shell steps (the shell family's
//! `shell_bash`) go through the host like any call — its routes, policy and audit; agent steps
//! are turns of the agent loop in the run's session. The first failing step fails the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_config::workflow::{Step, Workflow};
use kitbag_llm::Block;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::run::{Run, RunStatus, RunStore, StepResult, StepStatus};
use super::template;
use crate::host::ToolHost;

/// Why a step failed, as the run records it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct StepFailed(pub String);

impl StepFailed {
    fn of(e: anyhow::Error) -> Self {
        StepFailed(format!("{e:#}"))
    }
}

/// Longest output kept per step.
const MAX_OUTPUT: usize = 4096;

/// What a run needs: the host its calls go through, the config its agent steps are made from.
#[derive(Clone)]
pub struct Runner {
    pub host: Arc<dyn ToolHost>,
    pub config: Arc<kitbag_config::Config>,
    pub store: Arc<RunStore>,
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_OUTPUT {
        return s.to_string();
    }
    let mut end = MAX_OUTPUT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

/// A call result's text.
fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Runner {
    async fn call(
        &self,
        name: &str,
        args: Value,
        id: String,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, StepFailed> {
        let Value::Object(args) = args else {
            return Err(StepFailed("arguments: not an object".into()));
        };
        self.host
            .call(name, Some(args), id, cancel.clone())
            .await
            .map_err(|e| StepFailed(format!("{name}: {}", e.message)))
    }

    async fn step(
        &self,
        run: &Run,
        index: usize,
        step: &Step,
        inputs: &Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<String, StepFailed> {
        let id = format!("{}-{index}", run.run_id);
        match step {
            Step::Tool { tool, args } => {
                let r = self
                    .call(tool, template::value(args, inputs), id, cancel)
                    .await?;
                let text = text_of(&r);
                if r.is_error == Some(true) {
                    return Err(StepFailed(text));
                }
                Ok(text)
            }
            Step::Shell {
                shell,
                timeout_seconds,
            } => {
                let mut args = json!({"command": template::text(shell, inputs, true)});
                if let Some(t) = timeout_seconds {
                    args["timeout"] = json!(t.saturating_mul(1000).clamp(1000, 600_000));
                }
                let r = self.call("shell_bash", args, id, cancel).await?;
                let s = r.structured_content.clone().unwrap_or_default();
                let out = s["stdout"]
                    .as_str()
                    .map_or_else(|| text_of(&r), str::to_owned);
                match s["exit_code"].as_i64() {
                    Some(0) => Ok(out),
                    Some(code) => Err(StepFailed(format!("exit code {code}: {}", out.trim_end()))),
                    None => Err(StepFailed(text_of(&r))),
                }
            }
            Step::Agent { prompt, pack } => {
                let prompt = template::text(prompt, inputs, false);
                let agent = crate::prepare_agent(&self.config, pack.as_deref(), Some(&prompt))
                    .await
                    .map_err(StepFailed::of)?;
                let root = std::env::current_dir().map_err(|e| StepFailed(e.to_string()))?;
                let mut session =
                    crate::session::Session::open(&root, &run.session).map_err(StepFailed::of)?;
                let mut note = |_: crate::turn::Note<'_>| {};
                let outcome = crate::turn::run_turn(
                    self.host.as_ref(),
                    &agent.llm,
                    &agent.cfg,
                    &mut session,
                    vec![Block::text(&prompt)],
                    Some(format!("workflow:{}", run.workflow_name)),
                    cancel,
                    &mut note,
                )
                .await
                .map_err(StepFailed::of)?;
                if outcome.waiting.is_some() {
                    return Err(StepFailed(
                        "the agent asked the operator, which a workflow run cannot answer".into(),
                    ));
                }
                Ok(outcome.text)
            }
        }
    }

    fn save(&self, run: &Run) {
        if let Err(e) = self.store.save(run) {
            tracing::warn!(run = %run.run_id, "workflow run not recorded: {}", e.message);
        }
    }

    /// Run `workflow`'s steps for `run` (already saved as `running`) to the end.
    pub async fn execute(self, workflow: Workflow, mut run: Run) {
        let started = Instant::now();
        let cancel = CancellationToken::new();
        let budget = Duration::from_secs(workflow.timeout_seconds);
        let inputs = run.inputs.clone();
        let mut failed = None;
        for (index, step) in workflow.steps.iter().enumerate() {
            run.current_step = Some(index);
            run.steps.push(StepResult {
                index,
                kind: match step {
                    Step::Agent { .. } => "agent",
                    Step::Tool { .. } => "tool",
                    Step::Shell { .. } => "shell",
                }
                .into(),
                status: StepStatus::Running,
                output: None,
                error: None,
                duration_ms: None,
            });
            self.save(&run);
            let t = Instant::now();
            let left = budget.saturating_sub(started.elapsed());
            let outcome =
                match tokio::time::timeout(left, self.step(&run, index, step, &inputs, &cancel))
                    .await
                {
                    Ok(r) => r,
                    Err(_) => {
                        cancel.cancel();
                        Err(StepFailed(format!(
                            "the run's {} s ran out",
                            workflow.timeout_seconds
                        )))
                    }
                };
            let last = run.steps.last_mut().expect("pushed above");
            last.duration_ms = Some(t.elapsed().as_millis() as u64);
            match outcome {
                Ok(out) => {
                    last.status = StepStatus::Succeeded;
                    last.output = Some(cut(&out));
                }
                Err(e) => {
                    last.status = StepStatus::Failed;
                    last.error = Some(cut(&e.0));
                    failed = Some(format!("step {index} failed: {}", cut(&e.0)));
                    break;
                }
            }
        }
        run.status = if failed.is_some() {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        };
        run.output = match failed {
            Some(_) => None,
            None => run.steps.last().and_then(|s| s.output.clone()),
        };
        run.failure = failed;
        run.completed_at = Some(kitbag_shared::clock::unix_secs());
        run.duration_ms = Some(started.elapsed().as_millis() as u64);
        self.save(&run);
        self.host.audit(
            "workflow.finished",
            json!({"run_id": run.run_id, "workflow": run.workflow_name, "status": run.status}),
        );
    }
}
