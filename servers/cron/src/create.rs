//! `cron_create`: add a scheduled entry.

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult, args};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{CommandAction, DEFAULT_COMMAND_TIMEOUT, Entry, MAX_ENTRIES};
use crate::schedule::{Schedule, parse_tz};
use crate::state::CronState;
use crate::view::EntryView;

pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
pub const MAX_COMMAND_BYTES: usize = 8 * 1024;
pub const MAX_COMMAND_TIMEOUT: i64 = 24 * 3600;

pub const DEF: ToolDef = ToolDef::write(
    "cron_create",
    "Create a scheduled task",
    "Schedule a message to you, optionally after a shell command whose \
     exit code and output tail go into it. `schedule`: `min hour day month weekday`, @daily, …",
)
.exec();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// Unique (default `cron-N`).
    #[serde(default)]
    pub id: Option<String>,
    /// E.g. `0 9 * * mon-fri`.
    pub schedule: String,
    pub message: String,
    /// Target session (default the entry id).
    #[serde(default)]
    pub session: Option<String>,
    /// false: create it paused.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// IANA zone, e.g. `Europe/Berlin`; default the machine's.
    #[serde(default)]
    pub timezone: Option<String>,
    /// false: fire once, then disable.
    #[serde(default)]
    pub recurring: Option<bool>,
    /// Default true: fire a missed run at start.
    #[serde(default)]
    pub catch_up: Option<bool>,
    /// /bin/sh -c in the root, each firing.
    #[serde(default)]
    pub command: Option<String>,
    /// Default 60.
    #[serde(default)]
    pub command_timeout_secs: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateResult {
    pub entry: EntryView,
}

/// A session id an entry is delivered to.
const SESSION: args::NameRules = args::NameRules {
    max_len: 128,
    first: session_byte,
    rest: session_byte,
    describe: "use 1–128 letters, digits, `.`, `_`, `-` or `:`",
};

/// An id given to `cron_create` (seed 001 writes entries with theirs).
const ID: args::NameRules = args::NameRules {
    max_len: 128,
    first: session_byte,
    rest: session_byte,
    describe: "use 1–128 letters, digits, `.`, `_`, `-` or `:` (or omit `id` to get the next `cron-N`)",
};

fn session_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':')
}

/// Check every argument; returns the entry to store (id filled in later).
pub fn validate(state: &CronState, p: &CreateParams) -> ToolResult<Entry> {
    let tz = match &p.timezone {
        Some(t) => {
            parse_tz(t)?;
            t.trim().to_string()
        }
        None => state.machine_tz.clone(),
    };
    Schedule::new(&p.schedule, &tz)?;
    args::non_empty(
        "message",
        p.message.trim(),
        "give the text to deliver when the entry fires",
    )?;
    args::max_bytes("message", &p.message, MAX_MESSAGE_BYTES)?;
    let session = match &p.session {
        Some(s) => args::name("session", s, &SESSION)?.to_string(),
        None => String::new(),
    };
    let command = match &p.command {
        None => {
            if p.command_timeout_secs.is_some() {
                return Err(ToolError::invalid_field(
                    "command_timeout_secs",
                    "only accepted together with `command`",
                ));
            }
            None
        }
        Some(c) => {
            args::non_empty("command", c.trim(), "omit it for a message-only entry")?;
            args::max_bytes("command", c, MAX_COMMAND_BYTES)?;
            if !state.commands_enabled {
                return Err(ToolError::new(
                    ErrorCode::CapabilityDenied,
                    "command actions are disabled on this server (--no-commands); create a message-only entry",
                )
                .with_detail(serde_json::json!({"field": "command"})));
            }
            let timeout = args::opt_range(
                "command_timeout_secs",
                p.command_timeout_secs,
                1,
                MAX_COMMAND_TIMEOUT,
            )?
            .map_or(DEFAULT_COMMAND_TIMEOUT, |t| t as u64);
            Some(CommandAction {
                run: c.clone(),
                timeout_secs: timeout,
            })
        }
    };
    let id = match &p.id {
        Some(i) => args::name("id", i, &ID)?.to_string(),
        None => String::new(),
    };
    Ok(Entry {
        id,
        schedule: p.schedule.trim().to_string(),
        message: p.message.clone(),
        session,
        enabled: p.enabled.unwrap_or(true),
        timezone: tz,
        recurring: p.recurring.unwrap_or(true),
        catch_up: p.catch_up.unwrap_or(true),
        command,
        created_at: Some(state.now()),
        last_scheduled_at: None,
        last_run: None,
        extra: Default::default(),
    })
}

pub fn run(state: &CronState, p: CreateParams) -> ToolResult<Reply<CreateResult>> {
    state.ensure_writable()?;
    let mut entry = validate(state, &p)?;
    // One transaction touching one row and two counters: the cost does not grow with the
    // number of entries.
    let entry = state.store.write(|tx| {
        if tx.count()? >= MAX_ENTRIES {
            return Err(ToolError::new(
                ErrorCode::InvalidParams,
                format!("the store already holds {MAX_ENTRIES} entries; delete some first"),
            ));
        }
        if entry.id.is_empty() {
            entry.id = tx.allocate_id()?;
        } else if tx.get(&entry.id)?.is_some() {
            return Err(ToolError::invalid_field(
                "id",
                format!(
                    "an entry `{}` exists already; omit `id` to get the next free `cron-N`, or give an id no entry has",
                    entry.id
                ),
            ));
        }
        tx.insert(&entry)?;
        Ok(entry)
    })?;
    state.wake_for(&entry);
    let mut view = EntryView::of(state, &entry, state.now(), false);
    // A 16 KB message of quotes or control characters escapes to far more than the budget.
    view.fit(kitbag_shared::limits::RESULT_BUDGET_BYTES - 100);
    let text = format!("created {}", view.line());
    Ok(Reply::new(CreateResult { entry: view }, text))
}
