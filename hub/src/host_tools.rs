//! The host's own tools: `host_status` (every server's state, each agent session's use) and
//! `host_reload` (re-read the configuration), their schemas and their text.

use rmcp::model::Tool;
use serde::Serialize;

use crate::fastpath;
use crate::registry::{Hub, ReloadReport, State};

pub const STATUS_TOOL: &str = "host_status";
pub const RELOAD_TOOL: &str = "host_reload";

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStatus {
    pub name: String,
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub uptime_secs: u64,
    pub restarts: u32,
    pub tools: usize,
    /// Prompts, resources and resource templates offered from this server (collisions
    /// left out).
    pub prompts: usize,
    pub resources: usize,
    pub resource_templates: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StatusResult {
    pub servers: Vec<ServerStatus>,
    pub tools: usize,
    /// Tool-name, prompt-name and resource-URI collisions (the first configured server
    /// keeps the name or URI).
    pub collisions: Vec<String>,
    /// Top-level settings with where each value came from (env, file, default).
    pub settings: Vec<kitbag_config::settings::Setting>,
    /// Calls forwarded at the byte level (fastpath.rs) since start.
    pub byte_level_calls: u64,
    /// The agent's sessions in `.kitbag/sessions` of the working directory, with their token
    /// totals (`kitbag run`, `chat`, `daemon`), by name — as many as fit the answer
    /// (`sessions_total` counts them all; `kitbag sessions` lists every one).
    pub sessions: Vec<kitbag_agent::record::SessionTotals>,
    pub sessions_total: usize,
    pub sessions_truncated: bool,
}

/// The arguments of both host tools: none (an unexpected one is `invalid_params` naming it).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Every server's state, as `host_status` reports it.
pub fn status(hub: &Hub, settings: Vec<kitbag_config::settings::Setting>) -> StatusResult {
    let flat = hub.flat();
    let catalog = hub.catalog();
    let c = hub.lock();
    let servers = c
        .iter()
        .map(|ch| ServerStatus {
            name: ch.spec.name.clone(),
            state: ch.state.clone(),
            pid: ch.pid,
            uptime_secs: if ch.state == State::Ready {
                ch.started.map_or(0, |s| s.elapsed().as_secs())
            } else {
                0
            },
            restarts: ch.restarts,
            tools: flat
                .routes
                .values()
                .filter(|r| c.get(r.child).is_some_and(|x| x.spec.name == ch.spec.name))
                .count(),
            prompts: catalog
                .prompts
                .iter()
                .filter(|(id, _)| *id == ch.id)
                .count(),
            resources: catalog
                .resources
                .iter()
                .filter(|(id, _)| *id == ch.id)
                .count(),
            resource_templates: catalog
                .templates
                .iter()
                .filter(|(id, _)| *id == ch.id)
                .count(),
            ready_ms: ch.ready_ms,
            last_error: ch.last_error.clone(),
        })
        .collect();
    let sessions = std::env::current_dir()
        .map(|d| kitbag_agent::session::all_totals(&d))
        .unwrap_or_default();
    let mut status = StatusResult {
        servers,
        tools: flat.listed.len() + 1,
        collisions: flat
            .collisions
            .iter()
            .chain(&catalog.collisions)
            .cloned()
            .collect(),
        settings,
        byte_level_calls: fastpath::forwarded(),
        sessions: Vec::new(),
        sessions_total: sessions.len(),
        sessions_truncated: true,
    };
    // Sessions only grow: they take what the rest of the answer leaves of the budget.
    let used = kitbag_shared::limits::json_len(&status);
    let (sessions, cut) = kitbag_shared::limits::within_budget(used, sessions);
    status.sessions = sessions;
    status.sessions_truncated = cut;
    status
}

pub fn status_tool() -> Tool {
    // Built once (`crate::serve::prepare_own_tools`), cloned after.
    static BUILT: std::sync::OnceLock<Tool> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_status_tool).clone()
}

fn build_status_tool() -> Tool {
    let input = kitbag_shared::schema::input_schema::<NoParams>().unwrap_or_default();
    Tool::new(
        STATUS_TOOL,
        "Every server the host runs: state, pid, uptime, restarts, tools, last error; tool-name collisions.",
        input,
    )
    .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<StatusResult>("host_status")))
    .with_annotations(rmcp::model::ToolAnnotations::with_title("Host status").read_only(true).open_world(false))
}

pub fn reload_tool() -> Tool {
    // Built once (`crate::serve::prepare_own_tools`), cloned after.
    static BUILT: std::sync::OnceLock<Tool> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_reload_tool).clone()
}

fn build_reload_tool() -> Tool {
    let input = kitbag_shared::schema::input_schema::<NoParams>().unwrap_or_default();
    Tool::new(
        RELOAD_TOOL,
        "Re-read the host's config file (edit it first) and apply it, keeping this connection: changed servers restart once their calls finish. A bad config changes nothing.",
        input,
    )
    .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<crate::registry::ReloadReport>("host_reload")))
    .with_annotations(rmcp::model::ToolAnnotations::with_title("Reload host config").read_only(false).destructive(false).idempotent(true).open_world(false))
}

/// `host_status` as text: a line per server, then a line per agent session.
pub fn status_text(status: &StatusResult) -> String {
    let mut text = String::new();
    for s in &status.servers {
        text.push_str(&format!(
            "{}: {:?}, {} tools, {} restarts{}\n",
            s.name,
            s.state,
            s.tools,
            s.restarts,
            s.last_error
                .as_ref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        ));
    }
    for s in &status.sessions {
        text.push_str(&format!("session {}: {s}\n", s.name));
    }
    if status.sessions_truncated {
        text.push_str(&format!(
            "… {} sessions in all: `kitbag sessions` lists them\n",
            status.sessions_total
        ));
    }
    text.trim_end().to_string()
}

/// `host_reload`'s answer as text.
pub fn reload_text(report: &ReloadReport) -> String {
    format!(
        "reloaded: started [{}], stopped [{}], unchanged [{}]",
        report.started.join(", "),
        report.stopped.join(", "),
        report.unchanged.join(", ")
    )
}
