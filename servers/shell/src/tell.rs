//! Telling the client of a background job's changes — it started, a process of it waits for
//! input, it ended — as a log message and, where the client subscribed to the job's resource
//! (`resources.rs`), as `notifications/resources/updated`.

use std::sync::Arc;

use kitbag_shared::ClientLog;
use kitbag_shared::subscribers::Subscribers;
use serde_json::json;

pub const JOBS_URI: &str = "shell://jobs";
pub const JOB_PREFIX: &str = "shell://jobs/";

/// One job's resource.
pub fn job_uri(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

/// Tells the client of one job's changes.
pub struct Teller {
    log: Option<ClientLog>,
    subscribers: Arc<Subscribers>,
    runtime: Option<tokio::runtime::Handle>,
}

impl Teller {
    /// Made where a tool call runs (on the server's runtime); used from the job's thread.
    pub fn new(log: Option<ClientLog>, subscribers: Arc<Subscribers>) -> Teller {
        Teller {
            log,
            subscribers,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The job list has a new job.
    pub fn started(&self) {
        self.updated(vec![JOBS_URI.to_string()]);
    }

    /// A process of the job sleeps reading its terminal; `prompt` is the cursor's line.
    pub fn waiting(&self, id: &str, prompt: &str) {
        if let Some(log) = &self.log {
            log.info(
                "kitbag-shell",
                json!({
                    "message": format!("{id} waits for input on its terminal: {prompt:?}; answer with shell_input {{\"job_id\": \"{id}\", \"text\": \"…\"}}"),
                    "job_id": id,
                    "waiting_for_input": true,
                    "prompt": prompt,
                }),
            );
        }
        self.updated(vec![job_uri(id), JOBS_URI.to_string()]);
    }

    /// The job has ended.
    pub fn ended(&self, id: &str, exit_code: i32, timed_out: bool) {
        if let Some(log) = &self.log {
            let how = if timed_out {
                " (its timeout stopped it)"
            } else {
                ""
            };
            log.info(
                "kitbag-shell",
                json!({
                    "message": format!("{id} ended with exit code {exit_code}{how}; shell_output {{\"job_id\": \"{id}\"}} reads the rest"),
                    "job_id": id,
                    "exit_code": exit_code,
                    "timed_out": timed_out,
                }),
            );
        }
        self.updated(vec![job_uri(id), JOBS_URI.to_string()]);
    }

    fn updated(&self, uris: Vec<String>) {
        let Some(runtime) = &self.runtime else { return };
        if !self.subscribers.has_subscribers() {
            return;
        }
        let subscribers = self.subscribers.clone();
        runtime.spawn(async move { subscribers.send(&uris).await });
    }
}
