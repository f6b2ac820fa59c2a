//! `agent_delegate` (issue #39 §4): the host's tool over kitbag-delegate. It runs the coding
//! CLI in the root, or inside a kitbag-vm instance through that instance's own tools
//! (`instance_exec` in the background, `instance_logs` paged) — called through this host's
//! pipeline, so the caller's policy decides whether it may use them. Progress goes to the
//! caller as notifications; the result is the compact one.

use std::sync::Arc;

use futures::future::BoxFuture;
use kitbag_delegate::guest::{Guest, Page};
use kitbag_delegate::{DelegateParams, DelegateResult};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rmcp::model::{CallToolResult, JsonObject, ProgressNotificationParam, Tool};
use serde_json::{Value, json};

use kitbag_agent::host::ToolHost;

use crate::pipeline::CallMeta;

pub const DELEGATE_TOOL: &str = "agent_delegate";

pub fn tool() -> Tool {
    // Built once (`crate::serve::prepare_own_tools`), cloned after.
    static BUILT: std::sync::OnceLock<Tool> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_tool).clone()
}

fn build_tool() -> Tool {
    let input = kitbag_shared::schema::input_schema::<DelegateParams>().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    meta.insert(kitbag_shared::tier::TIER_META.into(), json!("exec"));
    Tool::new(
        DELEGATE_TOOL,
        "Hand a coding task to Codex, Claude Code or kitbag run; returns a compact account.",
        input,
    )
    .with_raw_output_schema(Arc::new(kitbag_shared::schema::output_schema_for::<
        DelegateResult,
    >(DELEGATE_TOOL)))
    .with_annotations(
        rmcp::model::ToolAnnotations::with_title("Delegate to a coding agent")
            .read_only(false)
            .destructive(true)
            .open_world(true),
    )
    .with_meta(rmcp::model::MetaObject(meta))
}

/// Run one delegation to its end.
pub async fn call(host: &dyn ToolHost, args: Option<JsonObject>, meta: CallMeta) -> CallToolResult {
    crate::own_answer::answer(run(host, args, meta).await, kitbag_delegate::result::text)
}

async fn run(
    host: &dyn ToolHost,
    args: Option<JsonObject>,
    meta: CallMeta,
) -> ToolResult<DelegateResult> {
    let p: DelegateParams = crate::own_answer::decode(args)?;
    p.check()?;
    let root = std::env::current_dir().map_err(|e| ToolError::io(".", &e))?;
    let kitbag = std::env::current_exe().map_err(|e| ToolError::io("kitbag", &e))?;
    let kitbag = kitbag.to_string_lossy().into_owned();
    let (tx, forward) = progress_forwarder(&meta);
    let cx = kitbag_delegate::Context {
        root: &root,
        kitbag: &kitbag,
        progress: tx,
        ct: meta.ct.clone(),
    };
    let result = match p.instance.clone() {
        None => kitbag_delegate::delegate(p, cx).await,
        Some(instance) => {
            let guest = InstanceTools {
                host,
                instance: instance.clone(),
                request_id: meta.request_id.clone(),
            };
            kitbag_delegate::guest::run(p, &instance, &guest, cx).await
        }
    };
    // Every progress message is sent before the result goes out.
    if let Some(f) = forward {
        let _ = f.await;
    }
    result
}

/// A sender whose messages become the caller's progress notifications (none when the call
/// asked for no progress), and the task that sends them.
fn progress_forwarder(
    meta: &CallMeta,
) -> (
    Option<tokio::sync::mpsc::UnboundedSender<String>>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let Some((token, Some(peer))) = meta.progress.clone() else {
        return (None, None);
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let task = tokio::spawn(async move {
        let mut n = 0.0;
        while let Some(message) = rx.recv().await {
            n += 1.0;
            let _ = peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), n).with_message(message),
                )
                .await;
        }
    });
    (Some(tx), Some(task))
}

/// The instance's tools, called through this host's pipeline as the caller.
struct InstanceTools<'a> {
    host: &'a dyn ToolHost,
    instance: String,
    request_id: String,
}

impl InstanceTools<'_> {
    async fn call(&self, tool: &str, args: Value) -> ToolResult<Value> {
        let args = match args {
            Value::Object(m) => Some(m),
            _ => None,
        };
        let r = self
            .host
            // Not the caller's cancellation: a cancelled delegation still signals the job
            // and reads its end (guest.rs).
            .call(
                tool,
                args,
                self.request_id.clone(),
                tokio_util::sync::CancellationToken::new(),
            )
            .await
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::ServerUnavailable,
                    format!("instance: {tool} is not available here ({})", e.message),
                )
                .with_detail(json!({ "field": "instance" }))
            })?;
        let structured = r.structured_content.clone().unwrap_or(Value::Null);
        if r.is_error == Some(true) {
            let e: Option<ToolError> = structured
                .get("error")
                .and_then(|e| serde_json::from_value(e.clone()).ok());
            return Err(
                e.unwrap_or_else(|| ToolError::new(ErrorCode::Internal, format!("{tool} failed")))
            );
        }
        Ok(structured)
    }
}

impl Guest for InstanceTools<'_> {
    fn start(&self, argv: Vec<String>, cwd: Option<String>) -> BoxFuture<'_, ToolResult<String>> {
        Box::pin(async move {
            let mut args = json!({
                "instance": self.instance,
                "command": argv,
                "background": true,
            });
            if let Some(c) = cwd {
                args["cwd"] = json!(c);
            }
            let r = self.call("instance_exec", args).await?;
            r.get("job_id")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| ToolError::internal("instance_exec gave no job_id"))
        })
    }

    fn read<'a>(&'a self, job: &'a str, offset: u64) -> BoxFuture<'a, ToolResult<Page>> {
        Box::pin(async move {
            let r = self
                .call(
                    "instance_logs",
                    json!({
                        "instance": self.instance,
                        "source": format!("job:{job}"),
                        "offset": offset,
                        "max_bytes": 256 * 1024,
                    }),
                )
                .await?;
            let exit = r.get("exit");
            Ok(Page {
                text: r
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                next_offset: r
                    .get("next_offset")
                    .and_then(Value::as_u64)
                    .unwrap_or(offset),
                more: r.get("truncated").and_then(Value::as_bool) == Some(true),
                running: r.get("running").and_then(Value::as_bool) == Some(true),
                exit_code: exit
                    .and_then(|e| e.get("code"))
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok()),
                signal: exit
                    .and_then(|e| e.get("signal"))
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok()),
            })
        })
    }

    fn exec(&self, argv: Vec<String>) -> BoxFuture<'_, ToolResult<()>> {
        Box::pin(async move {
            self.call(
                "instance_exec",
                json!({"instance": self.instance, "command": argv, "timeout_seconds": 30}),
            )
            .await
            .map(|_| ())
        })
    }
}
