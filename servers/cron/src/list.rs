//! `cron_list` and `cron_status`.

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::{Reply, ToolDef, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::Slot;
use crate::state::CronState;
use crate::view::EntryView;

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;

pub const LIST_DEF: ToolDef = ToolDef::read(
    "cron_list",
    "List scheduled tasks",
    "List cron entries: schedule, zone, session, next fire, last run; messages cut to 500 bytes.",
);

pub const STATUS_DEF: ToolDef = ToolDef::read(
    "cron_status",
    "Scheduler status",
    "When the next cron entry fires, whether a client receives firings, the store's \
     location.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub enabled_only: Option<bool>,
    #[serde(default)]
    pub offset: Option<i64>,
    /// Default 100.
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Problem {
    /// Position in the file's `entries` array (0-based).
    pub index: usize,
    pub error: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    pub entries: Vec<EntryView>,
    /// Entries matching (before paging).
    pub total: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// Unparsable entries in all, when `problems` lists only the first of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems_total: Option<usize>,
}

/// What `problems` may weigh in one answer; the entries fill the rest of the budget.
const PROBLEMS_BUDGET: usize = 4_000;

/// `v` in `min..=max`, `default` when absent.
pub(crate) fn bounded(
    field: &str,
    v: Option<i64>,
    default: i64,
    min: i64,
    max: i64,
) -> ToolResult<usize> {
    Ok(args::opt_range(field, v, min, max)?.unwrap_or(default) as usize)
}

pub fn list(state: &CronState, p: ListParams) -> ToolResult<Reply<ListResult>> {
    let offset = bounded("offset", p.offset, 0, 0, i64::MAX)?;
    let limit = bounded("limit", p.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)?;
    // The budget holds a default call; an explicit `limit` gets what it asks for.
    let budget = if p.limit.is_some() {
        usize::MAX
    } else {
        RESULT_BUDGET_BYTES
    };
    let doc = state.store.load_current()?;
    let now = state.now();
    let enabled_only = p.enabled_only.unwrap_or(false);
    let matching: Vec<_> = doc
        .entries()
        .filter(|e| !enabled_only || e.enabled)
        .collect();
    let total = matching.len();
    let all_problems: Vec<Problem> = doc
        .slots
        .iter()
        .enumerate()
        .filter_map(|(index, s)| match s {
            Slot::Invalid { error, .. } => Some(Problem {
                index,
                error: error.clone(),
            }),
            Slot::Entry(_) => None,
        })
        .collect();
    let problems_all = all_problems.len();
    let mut problems = Vec::new();
    let mut problems_used = 0;
    for mut pr in all_problems {
        let (e, _) = kitbag_shared::limits::truncate_str(&pr.error, 500);
        pr.error = e.to_string();
        problems_used += json_len(&pr) + 1;
        if problems_used > PROBLEMS_BUDGET {
            break;
        }
        problems.push(pr);
    }
    let problems_total = (problems.len() < problems_all).then_some(problems_all);
    // Entries up to the budget (room kept for the paging fields); the first always goes in,
    // cut to fit if it must, so that paging moves on.
    let mut used = json_len(&ListResult {
        entries: Vec::new(),
        total,
        truncated: true,
        next_offset: Some(usize::MAX),
        problems: Vec::new(),
        problems_total,
    }) + json_len(&problems)
        + 16;
    let mut entries: Vec<EntryView> = Vec::new();
    for e in matching.into_iter().skip(offset).take(limit) {
        let mut v = EntryView::of(state, e, now, true);
        let first = entries.is_empty();
        if first && budget == RESULT_BUDGET_BYTES {
            v.fit(budget.saturating_sub(used));
        }
        let add = json_len(&v) + usize::from(!first);
        if !first && used + add > budget {
            break;
        }
        used += add;
        entries.push(v);
    }
    let end = offset + entries.len();
    let truncated = end < total;
    let mut text = String::new();
    if total == 0 {
        text.push_str("no cron entries");
    }
    for v in &entries {
        text.push_str(&v.line());
        text.push('\n');
    }
    if truncated {
        text.push_str(&format!(
            "[{} of {total} shown; continue with offset={end}]\n",
            entries.len()
        ));
    }
    for pr in &problems {
        text.push_str(&format!(
            "unparsable entry #{} in {}: {}\n",
            pr.index,
            state.store.location(),
            pr.error
        ));
    }
    if let Some(n) = problems_total {
        text.push_str(&format!(
            "[{} of {n} unparsable entries shown]\n",
            problems.len()
        ));
    }
    Ok(Reply::new(
        ListResult {
            entries,
            total,
            truncated,
            next_offset: truncated.then_some(end),
            problems,
            problems_total,
        },
        text.trim_end().to_string(),
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StatusResult {
    pub total_entries: usize,
    pub enabled_entries: usize,
    /// true while any enabled entry exists: hold a keepalive lease.
    pub keepalive_needed: bool,
    /// The soonest fire time over all enabled entries (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_fire: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_id: Option<String>,
    /// `running`, or `read_only` when this server cannot write the store (it then fires nothing).
    pub scheduler: String,
    /// A client is connected to receive `notifications/kitbag/cron_fired`.
    pub client_connected: bool,
    /// Firings are also sent as Claude Code channel notifications.
    pub claude_channel: bool,
    pub store: String,
    pub now: String,
    /// Entries of a hand-written `cron.json` that could not be read, kept as written: listed
    /// under `problems` by cron_list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unparsable_entries: Option<usize>,
}

pub fn status(state: &CronState, _p: StatusParams) -> ToolResult<Reply<StatusResult>> {
    let doc = state.store.load_current()?;
    let now = state.now();
    let total = doc.entries().count();
    let mut enabled = 0;
    let mut next: Option<(chrono::DateTime<chrono::Utc>, String)> = None;
    for e in doc.entries().filter(|e| e.enabled) {
        enabled += 1;
        if let Some(t) = state.next_fire(e, now)
            && next.as_ref().is_none_or(|(n, _)| t < *n)
        {
            next = Some((t, e.id.clone()));
        }
    }
    let unparsable = doc
        .slots
        .iter()
        .filter(|s| matches!(s, Slot::Invalid { .. }))
        .count();
    let scheduler = if state.writable {
        "running"
    } else {
        "read_only"
    };
    let mut text = format!(
        "{enabled} of {total} entries enabled; keepalive {}; next {}; scheduler {scheduler}; client {}",
        if enabled > 0 { "needed" } else { "not needed" },
        next.as_ref()
            .map(|(t, id)| format!("{id} at {}", t.to_rfc3339()))
            .unwrap_or_else(|| "-".into()),
        if state.has_client() {
            "connected"
        } else {
            "not connected"
        },
    );
    if unparsable > 0 {
        text.push_str(&format!(
            "; {unparsable} unparsable entries kept as written in {} (cron_list shows them under problems)",
            state.store.location()
        ));
    }
    Ok(Reply::new(
        StatusResult {
            total_entries: total,
            enabled_entries: enabled,
            keepalive_needed: enabled > 0,
            next_fire: next.as_ref().map(|(t, _)| t.to_rfc3339()),
            next_id: next.map(|(_, id)| id),
            scheduler: scheduler.into(),
            client_connected: state.has_client(),
            claude_channel: state.claude_channel,
            store: state.store.location(),
            now: now.to_rfc3339(),
            unparsable_entries: (unparsable > 0).then_some(unparsable),
        },
        text,
    ))
}
