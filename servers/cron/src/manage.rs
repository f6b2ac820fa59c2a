//! `cron_delete`, `cron_enable`, `cron_disable`.

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::entries::Changes;
use crate::state::CronState;
use crate::view::EntryView;

pub const DELETE_DEF: ToolDef = ToolDef::write(
    "cron_delete",
    "Delete a scheduled task",
    "Delete a cron entry (its cron_runs history stays); cron_disable only pauses.",
)
.destructive()
.idempotent();

pub const ENABLE_DEF: ToolDef = ToolDef::write(
    "cron_enable",
    "Enable a scheduled task",
    "Resume a paused cron entry from its next time (missed runs are skipped); re-arms a \
     one-shot entry.",
)
.idempotent();

pub const DISABLE_DEF: ToolDef = ToolDef::write(
    "cron_disable",
    "Disable a scheduled task",
    "Pause a cron entry; cron_enable resumes it.",
)
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdParams {
    pub id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct DeleteResult {
    pub deleted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ToggleResult {
    pub entry: EntryView,
    /// false when the entry already was in that state.
    pub changed: bool,
}

fn unknown(tx: &mut Changes<'_>, id: &str) -> ToolError {
    let known = tx.some_ids(20).unwrap_or_default();
    ToolError::new(
        ErrorCode::NotFound,
        format!(
            "id: no cron entry `{id}`; call cron_list for the ids ({})",
            if known.is_empty() {
                "there are none".to_string()
            } else {
                format!("e.g. {}", known.join(", "))
            }
        ),
    )
    .with_detail(json!({"field": "id", "id": id}))
}

pub fn delete(state: &CronState, p: IdParams) -> ToolResult<Reply<DeleteResult>> {
    state.ensure_writable()?;
    state.store.write(|tx| {
        if tx.remove(&p.id)? {
            Ok(())
        } else {
            Err(unknown(tx, &p.id))
        }
    })?;
    // Nothing new can be due sooner: the scheduler finds the entry gone when it wakes.
    Ok(Reply::new(
        DeleteResult {
            deleted: p.id.clone(),
        },
        format!("deleted {}", p.id),
    ))
}

pub fn set_enabled(state: &CronState, p: IdParams, on: bool) -> ToolResult<Reply<ToggleResult>> {
    state.ensure_writable()?;
    let now = state.now();
    let (entry, changed) = state.store.write(|tx| {
        let Some(mut e) = tx.get(&p.id)? else {
            return Err(unknown(tx, &p.id));
        };
        let changed = e.enabled != on;
        if changed && on {
            // Runs that fell while disabled are not owed.
            e.last_scheduled_at = Some(e.last_scheduled_at.map_or(now, |t| t.max(now)));
        }
        e.enabled = on;
        if changed {
            tx.put(&e)?;
        }
        Ok((e, changed))
    })?;
    if changed && on {
        state.wake_for(&entry);
    }
    let mut view = EntryView::of(state, &entry, now, false);
    // A 16 KB message of quotes or control characters escapes to far more than the budget.
    view.fit(kitbag_shared::limits::RESULT_BUDGET_BYTES - 100);
    let text = format!(
        "{} {}",
        match (on, changed) {
            (true, true) => "enabled",
            (false, true) => "disabled",
            (true, false) => "already enabled:",
            (false, false) => "already disabled:",
        },
        view.line()
    );
    Ok(Reply::new(
        ToggleResult {
            entry: view,
            changed,
        },
        text,
    ))
}
