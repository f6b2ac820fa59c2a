//! The background jobs as MCP resources — `shell://jobs` (the list) and `shell://jobs/<id>`
//! (one job: how it stands, its command, its terminal's screen) — and their subscriptions
//! (`resources/subscribe` or `subscriptions/listen`); `tell.rs` announces the changes.

use std::sync::Arc;

use kitbag_shared::lock::LockExt;

use futures::future::BoxFuture;
use kitbag_shared::Extras;
use kitbag_shared::rmcp::ErrorData as McpError;
use kitbag_shared::rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    SubscriptionFilter,
};
use kitbag_shared::rmcp::service::{Peer, RoleServer, SubscriptionContext};
use kitbag_shared::subscribers;
use serde_json::json;

use crate::ShellState;
use crate::jobs::Job;
use crate::tell::{JOB_PREFIX, JOBS_URI, job_uri};

/// Jobs named in `resources/list` (the newest); the rest stay readable by URI.
const LISTED_MAX: usize = 100;

/// Which resource `uri` is: `Some(None)` the list, `Some(Some(id))` a job, `None` not ours.
pub fn parse_uri(uri: &str) -> Option<Option<&str>> {
    if uri == JOBS_URI {
        return Some(None);
    }
    let id = uri.strip_prefix(JOB_PREFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(Some(id))
}

/// The job resource's template (the host routes by it before this server has started).
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("shell://jobs/{job_id}", "job")
            .with_title("A background job")
            .with_description("How the job stands, its command and its terminal's screen")
            .with_mime_type("text/plain"),
    ]
}

/// `shell://jobs`: a line per job, oldest first, as shell_jobs shows them.
fn list_text(state: &ShellState) -> String {
    let jobs = state.jobs.all();
    if jobs.is_empty() {
        return "no background jobs".into();
    }
    let mut text = String::new();
    for (_, job) in jobs {
        text.push_str(&job.info().line());
        text.push('\n');
    }
    text
}

/// `shell://jobs/<id>`: how it stands, what it runs, and its terminal's screen.
fn job_text(job: &Job) -> String {
    let info = job.info();
    let status = job.status(job.exit().as_ref(), info.waiting_for_input);
    let screen = job.running.capture.locked().screen.text();
    format!(
        "{id}: {status}\ncommand: {command}\npid {pid}, {seconds} s, {bytes} bytes of output, \
         log {log}\n\n{screen}\n",
        id = info.job_id,
        command = info.command,
        pid = info.pid,
        seconds = info.seconds,
        bytes = info.output_bytes,
        log = info.log_path,
    )
}

fn not_ours(uri: &str) -> String {
    format!("no resource {uri}; this server offers {JOBS_URI} and {JOB_PREFIX}<job_id>")
}

/// The jobs as resources, and their subscriptions.
pub struct ShellExtras;

impl Extras<ShellState> for ShellExtras {
    fn capabilities(&self, caps: &mut ServerCapabilities) {
        *caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
    }

    fn on_connected(&self, state: Arc<ShellState>, peer: Peer<RoleServer>) {
        state.subscribers.set_peer(peer);
    }

    fn list_resources(
        &self,
        state: Arc<ShellState>,
    ) -> BoxFuture<'static, Result<ListResourcesResult, McpError>> {
        Box::pin(async move {
            let mut list = vec![
                Resource::new(JOBS_URI, "jobs")
                    .with_title("Background jobs")
                    .with_description("A line per background job: id, state, log, command")
                    .with_mime_type("text/plain"),
            ];
            let jobs = state.jobs.all();
            let skip = jobs.len().saturating_sub(LISTED_MAX);
            for (id, job) in jobs.into_iter().skip(skip) {
                let command: String = job.command.chars().take(80).collect();
                list.push(
                    Resource::new(job_uri(&id), id.clone())
                        .with_title(format!("{id}: {command}"))
                        .with_description(
                            "How the job stands, its command and its terminal's screen",
                        )
                        .with_mime_type("text/plain"),
                );
            }
            Ok(ListResourcesResult::with_all_items(list))
        })
    }

    fn list_resource_templates(
        &self,
        _state: Arc<ShellState>,
    ) -> BoxFuture<'static, Result<ListResourceTemplatesResult, McpError>> {
        Box::pin(async { Ok(ListResourceTemplatesResult::with_all_items(templates())) })
    }

    fn read_resource(
        &self,
        state: Arc<ShellState>,
        req: ReadResourceRequestParams,
    ) -> BoxFuture<'static, Result<ReadResourceResult, McpError>> {
        Box::pin(async move {
            let uri = req.uri;
            let text = match parse_uri(&uri) {
                None => return Err(McpError::resource_not_found(not_ours(&uri), None)),
                Some(None) => list_text(&state),
                Some(Some(id)) => match state.jobs.get(id) {
                    Ok(job) => job_text(&job),
                    Err(e) => {
                        return Err(McpError::resource_not_found(
                            e.message,
                            Some(json!({"uri": uri})),
                        ));
                    }
                },
            };
            Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri).with_mime_type("text/plain"),
            ]))
        })
    }

    fn subscribe(
        &self,
        state: Arc<ShellState>,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        if parse_uri(&uri).is_none() {
            return Err(McpError::invalid_params(
                format!("cannot subscribe: {}", not_ours(&uri)),
                None,
            ));
        }
        state.subscribers.subscribe(uri, peer);
        Ok(())
    }

    fn unsubscribe(&self, state: Arc<ShellState>, uri: String) -> Result<(), McpError> {
        state.subscribers.unsubscribe(&uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(subscribers::accepted_filter(requested, |u| {
            parse_uri(u).is_some()
        }))
    }

    fn listen(
        &self,
        state: Arc<ShellState>,
        context: SubscriptionContext,
    ) -> BoxFuture<'static, Result<(), McpError>> {
        Box::pin(async move {
            state.subscribers.listen(context, || {}).await;
            Ok(())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert_eq!(parse_uri("shell://jobs"), Some(None));
        assert_eq!(parse_uri("shell://jobs/job-3"), Some(Some("job-3")));
        assert_eq!(job_uri("job-3"), "shell://jobs/job-3");
        for bad in [
            "shell://jobs/",
            "shell://jobs/a/b",
            "shell://job",
            "issues://1",
        ] {
            assert_eq!(parse_uri(bad), None, "{bad}");
        }
    }
}
