//! `cron_runs`: the run history, newest first.

use kitbag_shared::limits::{json_len, truncate_str, within_budget};
use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::list::bounded;
use crate::model::RunRecord;
use crate::state::CronState;

pub const DEFAULT_LIMIT: i64 = 20;
pub const MAX_LIMIT: i64 = 500;

pub const DEF: ToolDef = ToolDef::read(
    "cron_runs",
    "Scheduled task history",
    "Past cron runs, newest first: outcome, delivery, command exit code and output tail.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsParams {
    /// Only this entry's runs.
    #[serde(default)]
    pub id: Option<String>,
    /// Default 20, max 500.
    #[serde(default)]
    pub limit: Option<i64>,
    /// Newest runs to skip.
    #[serde(default)]
    pub offset: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RunsResult {
    pub runs: Vec<RunRecord>,
    /// Runs recorded (for `id` when given) in the kept history.
    pub total: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

pub fn run(state: &CronState, p: RunsParams) -> ToolResult<Reply<RunsResult>> {
    let limit = bounded("limit", p.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)?;
    let offset = bounded("offset", p.offset, 0, 0, i64::MAX)?;
    let (mut runs, total) = state.store.read_runs(p.id.as_deref(), offset, limit)?;
    if let Some(id) = &p.id
        && total == 0
    {
        let doc = state.store.load_current()?;
        if doc.get(id).is_none() {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("id: no cron entry `{id}` and no recorded runs for it; call cron_list for the ids"),
            )
            .with_detail(json!({"field": "id", "id": id})));
        }
    }
    // Cut at the budget (a run carries up to 4 KB of output, six times that escaped); the
    // first run always fits.
    // The budget holds a default call; an explicit `limit` gets what it asks for.
    if p.limit.is_none() {
        let used = json_len(&RunsResult {
            runs: Vec::new(),
            total,
            truncated: true,
            next_offset: Some(usize::MAX),
        });
        runs = within_budget(used, runs).0;
    }
    let end = offset + runs.len();
    let truncated = end < total;
    let mut text = String::new();
    if runs.is_empty() {
        text.push_str("no runs recorded");
    }
    for r in &runs {
        text.push_str(&format!(
            "{} {} {} (scheduled {}) {}",
            r.fired_at.to_rfc3339(),
            r.id,
            r.outcome.as_str(),
            r.scheduled_at.to_rfc3339(),
            if r.delivered {
                "delivered"
            } else {
                "not delivered"
            }
        ));
        if let Some(c) = &r.command {
            text.push_str(&format!(
                " cmd {}{} {}ms",
                c.status,
                c.exit_code
                    .map(|x| format!(" exit {x}"))
                    .unwrap_or_default(),
                c.duration_ms
            ));
            let tail = c.output_tail.trim_end();
            if !tail.is_empty() {
                let last: Vec<&str> = tail.lines().rev().take(3).collect();
                let joined = last.into_iter().rev().collect::<Vec<_>>().join(" | ");
                let (t, cut) = truncate_str(&joined, 200);
                text.push_str(&format!(" out: {t}{}", if cut { "…" } else { "" }));
            }
        }
        text.push('\n');
    }
    if truncated {
        text.push_str(&format!(
            "[{} of {total} shown; continue with offset={end}]",
            runs.len()
        ));
    }
    Ok(Reply::new(
        RunsResult {
            runs,
            total,
            truncated,
            next_offset: truncated.then_some(end),
        },
        text.trim_end().to_string(),
    ))
}
