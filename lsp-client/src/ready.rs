//! Whether a language server has loaded the project — asked before every answer that spans
//! it (`rename`, `rename_file`, `references`, `implementation`, workspace `symbols`).
//!
//! A server asked too early answers from what it has seen: typescript-language-server routes
//! rename and references to its syntax server (open files only) while tsserver loads the
//! project; rust-analyzer answers from a half-built index. Such an answer looks whole and is
//! not — a rename would break every file it missed. So these actions wait until the server
//! has been quiet — no work-done progress running, nothing heard and nothing told for
//! [`QUIET`] — or refuse with `server_not_ready`.

use std::time::{Duration, Instant};

use kitbag_shared::lock::LockExt;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::json;

use crate::diagnostics::QUIET;
use crate::pool::Server;

/// The longest a project-wide action waits for the project to load.
pub const LOAD_WAIT: Duration = Duration::from_secs(60);

/// What the server was doing when a wait began or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// Work-done progress running (`Indexing`, `Initializing JS/TS language features…`).
    pub progress: usize,
    /// Since the last thing heard from or told to the server.
    pub quiet_for: Duration,
}

impl Activity {
    pub fn settled(&self) -> bool {
        self.progress == 0 && self.quiet_for >= QUIET
    }
}

/// The server's activity now: progress running, and how long it has been quiet (nothing
/// heard, nothing told, and at least since it started).
pub fn activity(server: &Server) -> Activity {
    let (progress, heard) = {
        let ev = server.rpc.events.locked();
        (ev.active_progress.len(), ev.last_event)
    };
    let last = [Some(server.started), heard, server.rpc.last_told()]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(server.started);
    Activity {
        progress,
        quiet_for: last.elapsed(),
    }
}

/// Wait until the server has loaded the project, at most `limit`; `server_not_ready` after
/// that (or `lsp_server_unavailable` if the server exits meanwhile). Returns how long it
/// waited.
pub async fn project_loaded(server: &Server, what: &str, limit: Duration) -> ToolResult<Duration> {
    let started = Instant::now();
    loop {
        let notified = server.rpc.changed.notified();
        let now = activity(server);
        if now.settled() {
            return Ok(started.elapsed());
        }
        if !server.rpc.is_alive() {
            return Err(ToolError::new(
                ErrorCode::LspServerUnavailable,
                format!(
                    "the {} language server exited while it loaded the project",
                    server.lang.name
                ),
            ));
        }
        let waited = started.elapsed();
        if waited >= limit {
            return Err(not_ready(server, what, waited, &now));
        }
        let nap = if now.progress == 0 {
            QUIET.saturating_sub(now.quiet_for)
        } else {
            QUIET
        }
        .min(limit - waited)
        .max(Duration::from_millis(10));
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

fn not_ready(server: &Server, what: &str, waited: Duration, now: &Activity) -> ToolError {
    let retry = waited.as_secs().clamp(5, 60);
    ToolError::new(
        ErrorCode::ServerNotReady,
        format!(
            "the {} language server is still loading the project ({} progress running after {} s); \
             {what} now would cover only part of it — nothing was changed. Call again in about {retry} s.",
            server.lang.name,
            now.progress,
            waited.as_secs()
        ),
    )
    .with_detail(json!({
        "language": server.lang.name,
        "waited_secs": waited.as_secs(),
        "progress_running": now.progress,
        "retry_after_secs": retry,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_needs_no_progress_and_a_quiet_period() {
        let quiet = Activity {
            progress: 0,
            quiet_for: QUIET,
        };
        assert!(quiet.settled());
        assert!(
            !Activity {
                progress: 1,
                ..quiet.clone()
            }
            .settled()
        );
        assert!(
            !Activity {
                quiet_for: QUIET / 2,
                ..quiet
            }
            .settled()
        );
    }
}
