//! MCP resources `issues://open` and `issues://N`, their change notifications, and the
//! `todo_reminder` prompt (the sticky reminder a host injects before each model call).
//!
//! Changes are noticed through the database's `change_log`, so an issue changed by another
//! process on the same database is announced too. Subscriptions come as `resources/subscribe`
//! (handshake era) or `subscriptions/listen` (2026-07-28).

use kitbag_shared::lock::LockExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::{self, Sql, StatusFilter, Store};
use crate::issue::{self, GetParams};
use crate::model::TodoStatus;
use crate::notifier::ChangeCursor;
use crate::render;
use crate::state::IssuesState;
use futures::future::BoxFuture;
use kitbag_shared::Extras;
use kitbag_shared::rmcp::ErrorData as McpError;
use kitbag_shared::rmcp::model::{
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities, SubscriptionFilter,
};
use kitbag_shared::rmcp::service::{Peer, RoleServer, SubscriptionContext};
use kitbag_shared::subscribers;

pub const OPEN_URI: &str = "issues://open";
/// Open issues listed in `issues://open` (and in `resources/list`).
const OPEN_LIST_MAX: i64 = 100;
/// How often the watcher reads the change log for other processes' changes on SQLite.
const POLL: Duration = Duration::from_millis(250);
/// On PostgreSQL, LISTEN/NOTIFY tells of changes at once; the poll only catches what a lost
/// listener connection missed.
const POLL_BEHIND_LISTEN: Duration = Duration::from_secs(30);

/// Is `uri` one of ours: `issues://open` or `issues://<number>`.
pub fn parse_uri(uri: &str) -> Option<Option<i64>> {
    let rest = uri.strip_prefix("issues://")?;
    if rest == "open" {
        return Some(None);
    }
    let n: i64 = rest.strip_prefix('#').unwrap_or(rest).parse().ok()?;
    (n >= 1).then_some(Some(n))
}

/// The issue resource's template (the host routes by it before this server has started).
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("issues://{number}", "issue")
            .with_title("An issue")
            .with_description("One issue by number, with its updates and todos, as markdown")
            .with_mime_type("text/markdown"),
    ]
}

/// Watch the change log and announce changed resources, while anyone listens.
fn ensure_watcher(state: &Arc<IssuesState>) {
    if !state.notifier.start_watching() {
        return;
    }
    let state = state.clone();
    tokio::spawn(async move {
        let st = state.clone();
        // Other replicas' changes arrive as NOTIFY at once (PostgreSQL); the poll below
        // still finds any a lost listener missed.
        let weak = Arc::downgrade(&state);
        let poke = move || match weak.upgrade() {
            Some(s) => {
                s.notifier.poke();
                true
            }
            None => false,
        };
        // The watcher's own connection, so a long tool call never delays a notification
        // (opened off the runtime: the PostgreSQL client blocks).
        let opened = tokio::task::spawn_blocking(move || {
            let conn = st.conn.locked();
            let watcher = db::reopen(&conn, st.db_path.as_deref())?;
            db::listen(&watcher, poke);
            anyhow::Ok(watcher)
        })
        .await;
        // Start from the change log as it was when the server opened the database: a change
        // made between a subscription and this task's start is not missed.
        let mut cursor = ChangeCursor::new(state.notifier.cursor.load(Ordering::SeqCst));
        let conn = match opened {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!("resource watcher cannot open the database: {e}");
                state.notifier.stop_watching();
                return;
            }
            Err(e) => {
                tracing::warn!("resource watcher failed: {e}");
                state.notifier.stop_watching();
                return;
            }
        };
        let poll = match conn.engine() {
            db::Engine::Sqlite => POLL,
            db::Engine::Postgres => POLL_BEHIND_LISTEN,
        };
        let conn = Arc::new(Mutex::new(conn));
        loop {
            tokio::select! {
                _ = state.notifier.poked() => {}
                _ = tokio::time::sleep(poll) => {}
            }
            let c = conn.clone();
            let project = state.project.clone();
            let since = cursor.floor();
            let found = tokio::task::spawn_blocking(move || {
                let mut c = c.locked();
                db::changes_since(&mut *c, &project, since)
            })
            .await;
            let rows = match found {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    tracing::debug!("change log: {}", e.message);
                    continue;
                }
                Err(_) => continue,
            };
            let numbers = cursor.advance(&rows, std::time::Instant::now());
            state
                .notifier
                .cursor
                .store(cursor.floor(), Ordering::SeqCst);
            if numbers.is_empty() || !state.notifier.subscribers.has_subscribers() {
                continue;
            }
            let mut uris = vec![OPEN_URI.to_string()];
            uris.extend(numbers.iter().map(|n| format!("issues://{n}")));
            state.notifier.subscribers.send(&uris).await;
        }
    });
}

async fn with_db<T: Send + 'static>(
    state: Arc<IssuesState>,
    f: impl FnOnce(&IssuesState, &mut Store) -> Result<T, McpError> + Send + 'static,
) -> Result<T, McpError> {
    tokio::task::spawn_blocking(move || {
        let mut conn = state.conn.locked();
        f(&state, &mut conn)
    })
    .await
    .map_err(|e| McpError::internal_error(e.to_string(), None))?
}

fn tool_err(e: kitbag_shared::ToolError) -> McpError {
    match e.code {
        kitbag_shared::ErrorCode::IssueNotFound => McpError::resource_not_found(e.message, None),
        _ => McpError::internal_error(e.message, None),
    }
}

/// The open issues as markdown.
pub fn open_markdown(
    state: &IssuesState,
    conn: &mut Store,
) -> Result<String, kitbag_shared::ToolError> {
    let (issues, total) = db::list(
        conn,
        &state.project,
        StatusFilter::NonTerminal,
        None,
        OPEN_LIST_MAX,
        0,
    )?;
    let mut s = format!("# Open issues of {} ({total})\n\n", state.project);
    if issues.is_empty() {
        s.push_str("(none)\n");
    }
    for i in &issues {
        s.push_str("- ");
        s.push_str(&render::summary_line(i));
        s.push('\n');
    }
    if total > issues.len() as i64 {
        s.push_str(&format!(
            "\n… and {} more; issue_list pages through them\n",
            total - issues.len() as i64
        ));
    }
    Ok(s)
}

/// Resources, subscriptions and the reminder prompt.
pub struct IssuesExtras;

impl Extras<IssuesState> for IssuesExtras {
    fn capabilities(&self, caps: &mut ServerCapabilities) {
        *caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_prompts()
            .build();
    }

    fn on_connected(&self, state: Arc<IssuesState>, peer: Peer<RoleServer>) {
        state.notifier.subscribers.set_peer(peer);
    }

    fn list_resources(
        &self,
        state: Arc<IssuesState>,
    ) -> BoxFuture<'static, Result<ListResourcesResult, McpError>> {
        Box::pin(async move {
            with_db(state, |state, conn| {
                let (issues, _) = db::list(
                    conn,
                    &state.project,
                    StatusFilter::NonTerminal,
                    None,
                    OPEN_LIST_MAX,
                    0,
                )
                .map_err(tool_err)?;
                let mut list = vec![
                    Resource::new(OPEN_URI, "open issues")
                        .with_title("Open issues")
                        .with_description("Every issue not resolved or rejected, as markdown")
                        .with_mime_type("text/markdown"),
                ];
                for i in issues {
                    list.push(
                        Resource::new(format!("issues://{}", i.number), format!("#{}", i.number))
                            .with_title(format!("#{} {}", i.number, i.title))
                            .with_description(format!(
                                "Issue #{} [{}] with its updates and todos",
                                i.number, i.status
                            ))
                            .with_mime_type("text/markdown"),
                    );
                }
                Ok(ListResourcesResult::with_all_items(list))
            })
            .await
        })
    }

    fn list_resource_templates(
        &self,
        _state: Arc<IssuesState>,
    ) -> BoxFuture<'static, Result<ListResourceTemplatesResult, McpError>> {
        Box::pin(async { Ok(ListResourceTemplatesResult::with_all_items(templates())) })
    }

    fn read_resource(
        &self,
        state: Arc<IssuesState>,
        req: ReadResourceRequestParams,
    ) -> BoxFuture<'static, Result<ReadResourceResult, McpError>> {
        Box::pin(async move {
            let uri = req.uri.clone();
            let Some(which) = parse_uri(&uri) else {
                return Err(McpError::resource_not_found(
                    format!(
                        "no resource {uri}; this server offers issues://open and issues://<number>"
                    ),
                    None,
                ));
            };
            let text = with_db(state, move |state, conn| match which {
                None => open_markdown(state, conn).map_err(tool_err),
                Some(n) => {
                    let r = issue::get(
                        state,
                        conn,
                        GetParams {
                            number: n,
                            updates_offset: None,
                            updates_limit: None,
                            todos_offset: None,
                        },
                    )
                    .map_err(tool_err)?;
                    Ok(r.text)
                }
            })
            .await?;
            Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri).with_mime_type("text/markdown"),
            ]))
        })
    }

    fn subscribe(
        &self,
        state: Arc<IssuesState>,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        if parse_uri(&uri).is_none() {
            return Err(McpError::invalid_params(
                format!(
                    "cannot subscribe to {uri}; this server offers issues://open and issues://<number>"
                ),
                None,
            ));
        }
        state.notifier.subscribers.subscribe(uri, peer);
        ensure_watcher(&state);
        Ok(())
    }

    fn unsubscribe(&self, state: Arc<IssuesState>, uri: String) -> Result<(), McpError> {
        state.notifier.subscribers.unsubscribe(&uri);
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
        state: Arc<IssuesState>,
        context: SubscriptionContext,
    ) -> BoxFuture<'static, Result<(), McpError>> {
        Box::pin(async move {
            let watched = state.clone();
            state
                .notifier
                .subscribers
                .listen(context, || ensure_watcher(&watched))
                .await;
            Ok(())
        })
    }

    fn list_prompts(
        &self,
        _state: Arc<IssuesState>,
    ) -> BoxFuture<'static, Result<ListPromptsResult, McpError>> {
        Box::pin(async {
            let p = Prompt::new(
                "todo_reminder",
                Some(
                    "The bound issue's open todos (up to 5, the in-progress one always included) as a short checklist to place near the end of the context before each model call; empty when nothing is open. Skip it when the previous turn already carries a todo result.",
                ),
                None,
            );
            Ok(ListPromptsResult::with_all_items(vec![p]))
        })
    }

    fn get_prompt(
        &self,
        state: Arc<IssuesState>,
        req: GetPromptRequestParams,
    ) -> BoxFuture<'static, Result<GetPromptResult, McpError>> {
        Box::pin(async move {
            if req.name != "todo_reminder" {
                return Err(McpError::invalid_params(
                    format!(
                        "no prompt named {}; this server offers todo_reminder",
                        req.name
                    ),
                    None,
                ));
            }
            let text = with_db(state, |state, conn| {
                let Some(n) = state.bound() else {
                    return Ok(String::new());
                };
                let row = db::find(conn, &state.project, n).map_err(tool_err)?;
                let todos = db::todos(conn, row.seq).map_err(tool_err)?;
                let live: Vec<_> = todos
                    .into_iter()
                    .filter(|t| t.status != TodoStatus::Abandoned)
                    .collect();
                Ok(render::reminder(n, &row.title, &live).unwrap_or_default())
            })
            .await?;
            let messages = if text.is_empty() {
                Vec::new()
            } else {
                vec![PromptMessage::new_text(Role::User, text)]
            };
            Ok(GetPromptResult::new(messages).with_description("Open todos of the bound issue"))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert_eq!(parse_uri("issues://open"), Some(None));
        assert_eq!(parse_uri("issues://42"), Some(Some(42)));
        assert_eq!(parse_uri("issues://#7"), Some(Some(7)));
        for bad in [
            "issues://0",
            "issues://-1",
            "issues://x",
            "file:///x",
            "issues://",
        ] {
            assert_eq!(parse_uri(bad), None, "{bad}");
        }
    }
}
