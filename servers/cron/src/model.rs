//! What the store holds: entries (the seed's shape plus scheduling state), the whole store as
//! read ([`Doc`]), and the records of the run history. Plain data; how it is kept is in
//! `store.rs` (SQLite), `pg.rs` (PostgreSQL), `entries.rs` (the queries), `history.rs` and
//! `legacy.rs` (`cron.json`).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most entries one store holds.
pub const MAX_ENTRIES: usize = 10_000;

fn yes() -> bool {
    true
}

/// Default seconds a command action may run before its process group is killed.
pub const DEFAULT_COMMAND_TIMEOUT: u64 = 60;

fn default_timeout() -> u64 {
    DEFAULT_COMMAND_TIMEOUT
}

/// A shell command run when the entry fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandAction {
    /// Run with `/bin/sh -c` in the server's root.
    pub run: String,
    /// Seconds before its whole process group is killed.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

/// How a run came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Fired on time.
    Fired,
    /// Made up once at start-up (or after a long stall) for a run missed meanwhile.
    CaughtUp,
    /// Missed while the server was down and not made up (`catch_up: false`).
    Missed,
    /// Not fired: the entry's previous command was still running.
    SkippedBusy,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fired => "fired",
            Outcome::CaughtUp => "caught_up",
            Outcome::Missed => "missed",
            Outcome::SkippedBusy => "skipped_busy",
        }
    }
}

/// The latest run of an entry, kept in the entry itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LastRun {
    pub scheduled_at: DateTime<Utc>,
    pub fired_at: DateTime<Utc>,
    pub outcome: Outcome,
}

/// One cron entry as stored (the seed's shape plus scheduling state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub schedule: String,
    pub message: String,
    /// Session the firing is delivered to; empty means the entry's id.
    #[serde(default)]
    pub session: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// IANA zone; empty means the machine's.
    #[serde(default)]
    pub timezone: String,
    #[serde(default = "yes")]
    pub recurring: bool,
    #[serde(default = "yes")]
    pub catch_up: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    /// The latest scheduled instant already handled (fired, made up or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Fields a hand edit added, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Entry {
    pub fn session(&self) -> &str {
        if self.session.is_empty() {
            &self.id
        } else {
            &self.session
        }
    }

    pub fn timezone_or<'a>(&'a self, machine: &'a str) -> &'a str {
        if self.timezone.is_empty() {
            machine
        } else {
            &self.timezone
        }
    }
}

/// An element of `entries`: a usable entry, or one kept as written because it did not parse.
#[derive(Debug, Clone)]
pub enum Slot {
    Entry(Box<Entry>),
    Invalid { raw: Value, error: String },
}

impl Slot {
    /// A stored row (both backends keep an entry as its JSON body, plus the error of one kept
    /// as written).
    pub fn of_row(body: &str, error: Option<String>) -> Slot {
        let raw =
            || serde_json::from_str::<Value>(body).unwrap_or_else(|_| Value::String(body.into()));
        match error {
            Some(error) => Slot::Invalid { raw: raw(), error },
            None => match serde_json::from_str::<Entry>(body) {
                Ok(e) => Slot::Entry(Box::new(e)),
                Err(e) => Slot::Invalid {
                    raw: raw(),
                    error: e.to_string(),
                },
            },
        }
    }
}

/// The whole store: every entry, in creation order.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub next_id: u64,
    pub slots: Vec<Slot>,
}

impl Doc {
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(|s| match s {
            Slot::Entry(e) => Some(e.as_ref()),
            Slot::Invalid { .. } => None,
        })
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.slots.iter_mut().find_map(|s| match s {
            Slot::Entry(e) if e.id == id => Some(e.as_mut()),
            _ => None,
        })
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries().find(|e| e.id == id)
    }

    /// Hand out the next `cron-N` id.
    pub fn allocate_id(&mut self) -> String {
        let mut n = self.next_id.max(1);
        while self.get(&format!("cron-{n}")).is_some() {
            n += 1;
        }
        self.next_id = n + 1;
        format!("cron-{n}")
    }
}

/// A recorded run (one JSON line in the history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecord {
    pub id: String,
    pub session: String,
    pub scheduled_at: DateTime<Utc>,
    pub fired_at: DateTime<Utc>,
    pub outcome: Outcome,
    /// A client was connected and the notification was sent.
    pub delivered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandOutcome>,
    /// The server process that fired it.
    pub pid: u32,
}

/// What a command action did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandOutcome {
    /// `ok` (exit 0), `failed` (non-zero exit or signal), `timed_out` (killed), `spawn_failed`,
    /// or `disabled` (the server runs with --no-commands).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// The last few KB of combined stdout and stderr.
    pub output_tail: String,
    /// Earlier output was dropped from `output_tail`.
    pub output_truncated: bool,
    /// How the command's processes were contained so all of them could be stopped:
    /// `cgroup-v2`, `cgroup-v1-freezer`, `subreaper` or `env-tag` (strongest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
}
