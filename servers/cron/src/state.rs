//! The server's shared state: the store, the clock, the connected client, the scheduler's
//! wake-up signal and caches.

use kitbag_shared::lock::LockExt;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use kitbag_shared::rmcp::model::{CustomNotification, ServerNotification};
use kitbag_shared::rmcp::service::{Peer, RoleServer};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::backend::Backend;
use crate::clock::Clock;
use crate::model::Entry;
use crate::schedule::{GRACE, Schedule};

/// The notification a firing is delivered as.
pub const CRON_FIRED: &str = "notifications/kitbag/cron_fired";
/// Claude Code's channel notification (with `--claude-channel`).
pub const CLAUDE_CHANNEL: &str = "notifications/claude/channel";

pub struct CronState {
    pub store: Backend,
    /// Where command actions run.
    pub root: PathBuf,
    /// IANA zone used when an entry names none.
    pub machine_tz: String,
    pub clock: Arc<dyn Clock>,
    /// Wakes the scheduler (a change makes something due sooner, or the store changed on disk).
    pub wake: Arc<Notify>,
    /// The instant the scheduler sleeps until; None while it is working out the next one.
    pub next_wake: Mutex<Option<DateTime<Utc>>>,
    /// Signalled once a client is connected (the scheduler's first pass waits for it).
    pub connected: Notify,
    peer: Mutex<Option<Peer<RoleServer>>>,
    pub claude_channel: bool,
    pub commands_enabled: bool,
    /// The store may be written (false under --read-only): the scheduler only fires then.
    pub writable: bool,
    /// When this process started (on its clock): runs scheduled before it are made up.
    pub started_at: DateTime<Utc>,
    pub pid: u32,
    schedules: Mutex<HashMap<(String, String), Parsed>>,
    /// Next fire time per entry, valid while it lies in the future and the entry's
    /// schedule, zone, cursor and catch-up setting are unchanged.
    next_cache: Mutex<HashMap<String, NextCache>>,
    /// Entries whose command is still running.
    pub busy: Mutex<HashSet<String>>,
    /// When this process first saw an entry that carries no `created_at` (hand-written).
    first_seen: Mutex<HashMap<String, DateTime<Utc>>>,
}

/// A parsed schedule, or why an entry's schedule or zone cannot be used.
pub type Parsed = ToolResult<Arc<Schedule>>;

struct NextCache {
    schedule: String,
    tz: String,
    cursor: DateTime<Utc>,
    catch_up: bool,
    next: DateTime<Utc>,
}

pub struct Options {
    pub claude_channel: bool,
    pub commands_enabled: bool,
    pub writable: bool,
    pub machine_tz: String,
}

impl CronState {
    pub fn new(store: Backend, root: PathBuf, clock: Arc<dyn Clock>, opts: Options) -> Self {
        let started_at = clock.now();
        Self {
            store,
            root,
            machine_tz: opts.machine_tz,
            clock,
            wake: Arc::new(Notify::new()),
            next_wake: Mutex::new(None),
            connected: Notify::new(),
            peer: Mutex::new(None),
            claude_channel: opts.claude_channel,
            commands_enabled: opts.commands_enabled,
            writable: opts.writable,
            started_at,
            pid: std::process::id(),
            schedules: Mutex::new(HashMap::new()),
            next_cache: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashSet::new()),
            first_seen: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Keep the client for server-initiated notifications.
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        let mut slot = self.peer.locked();
        if slot.is_none() {
            *slot = Some(peer);
            self.connected.notify_one();
        }
    }

    pub fn has_client(&self) -> bool {
        self.peer.locked().is_some()
    }

    /// The parsed schedule of an entry (cached), or why it cannot be scheduled.
    pub fn schedule_of(&self, e: &Entry) -> Parsed {
        let tz = e.timezone_or(&self.machine_tz).to_string();
        let key = (e.schedule.clone(), tz.clone());
        let mut cache = self.schedules.locked();
        if let Some(s) = cache.get(&key) {
            return s.clone();
        }
        let parsed = Schedule::new(&e.schedule, &tz).map(Arc::new);
        if cache.len() > 50_000 {
            cache.clear();
        }
        cache.insert(key, parsed.clone());
        parsed
    }

    /// The instant after which an entry's runs count: its last handled run, else its
    /// creation, else when this process first saw it.
    pub fn cursor_of(&self, e: &Entry) -> DateTime<Utc> {
        if let Some(t) = e.last_scheduled_at.or(e.created_at) {
            return t;
        }
        let mut seen = self.first_seen.locked();
        *seen.entry(e.id.clone()).or_insert_with(|| self.clock.now())
    }

    /// The next time an enabled entry fires (None when disabled or unschedulable).
    pub fn next_fire(&self, e: &Entry, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !e.enabled {
            return None;
        }
        let cursor = self.cursor_of(e);
        let tz = e.timezone_or(&self.machine_tz);
        {
            let cache = self.next_cache.locked();
            if let Some(c) = cache.get(&e.id)
                && c.next > now
                && c.cursor == cursor
                && c.catch_up == e.catch_up
                && c.schedule == e.schedule
                && c.tz == tz
            {
                return Some(c.next);
            }
        }
        let s = self.schedule_of(e).ok()?;
        // A run still owed (due now, or to be made up) is the next one.
        let next = match s.latest_in(cursor, now) {
            Some(owed) if e.catch_up || now - owed <= GRACE => Some(owed),
            _ => s.next_after(cursor.max(now)),
        }?;
        let mut cache = self.next_cache.locked();
        if cache.len() > 50_000 {
            cache.clear();
        }
        cache.insert(
            e.id.clone(),
            NextCache {
                schedule: e.schedule.clone(),
                tz: tz.to_string(),
                cursor,
                catch_up: e.catch_up,
                next,
            },
        );
        Some(next)
    }

    /// Wake the scheduler if `e` (just created or enabled) fires before it would wake anyway,
    /// or if it is busy working out when to wake (it then looks again). Other changes need no
    /// wake-up: the scheduler re-reads the entry when it wakes.
    pub fn wake_for(&self, e: &Entry) {
        let Some(t) = self.next_fire(e, self.now()) else {
            return;
        };
        let planned = *self.next_wake.locked();
        if planned.is_none_or(|w| t < w) {
            self.wake.notify_one();
        }
    }

    pub fn ensure_writable(&self) -> ToolResult<()> {
        if self.writable {
            Ok(())
        } else {
            Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!(
                    "the cron store {} is read-only for this server (--read-only or an ro mount); entries cannot be changed",
                    self.store.location()
                ),
            )
            .with_detail(json!({"path": self.store.location(), "needed": "rw"})))
        }
    }

    /// Send a firing to the connected client; false when none is connected or sending failed.
    pub async fn deliver(&self, payload: Value, channel_meta: Value, message: &str) -> bool {
        let peer = self.peer.locked().clone();
        let Some(peer) = peer else {
            return false;
        };
        let sent = peer
            .send_notification(ServerNotification::CustomNotification(
                CustomNotification::new(CRON_FIRED, Some(payload)),
            ))
            .await;
        if let Err(e) = &sent {
            tracing::warn!("cron_fired notification failed: {e}");
        }
        if self.claude_channel {
            let params = json!({ "content": message, "meta": channel_meta });
            if let Err(e) = peer
                .send_notification(ServerNotification::CustomNotification(
                    CustomNotification::new(CLAUDE_CHANNEL, Some(params)),
                ))
                .await
            {
                tracing::warn!("claude/channel notification failed: {e}");
            }
        }
        sent.is_ok()
    }
}
