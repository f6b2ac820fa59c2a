//! The scheduler: sleeps until the next due instant (no polling), fires what is due, and
//! goes back to sleep. A change that makes something due sooner (a create, an enable) wakes
//! it early, and so does a change to the store by another process (seen with inotify, at
//! most once a second) or a `cron.json` to import.
//!
//! Firing is a claim in one IMMEDIATE transaction: re-read the entry's row, check it still
//! exists, is enabled and has not been fired for this instant (by this or another process),
//! record `last_scheduled_at`, commit — and only then deliver. Two processes on one store
//! never fire the same run twice. A run missed while no server was running is made up once (the latest
//! missed instant, recorded `caught_up`), never as a burst; `catch_up: false` skips it
//! (recorded `missed`).

use kitbag_shared::lock::LockExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::command;
use crate::model::{CommandOutcome, Entry, LastRun, Outcome, RunRecord};
use crate::schedule::GRACE;
use crate::state::CronState;

/// Longest single sleep: re-checks the wall clock after suspends and clock changes.
pub const MAX_SLEEP: Duration = Duration::from_secs(15 * 60);

/// What is due for one entry at `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub scheduled_at: DateTime<Utc>,
    pub outcome: Outcome,
}

/// Decide whether an entry owes a run at `now`: at most one, the latest instant in
/// `(cursor, now]`. Pure, for tests with a fixed clock.
pub fn due_at(
    schedule: &crate::schedule::Schedule,
    entry: &Entry,
    cursor: DateTime<Utc>,
    now: DateTime<Utc>,
    started_at: DateTime<Utc>,
) -> Option<Due> {
    if !entry.enabled {
        return None;
    }
    let at = schedule.latest_in(cursor, now)?;
    let late = at < started_at || now - at > GRACE;
    let outcome = match (late, entry.catch_up) {
        (false, _) => Outcome::Fired,
        (true, true) => Outcome::CaughtUp,
        (true, false) => Outcome::Missed,
    };
    Some(Due {
        scheduled_at: at,
        outcome,
    })
}

/// A run this process claimed and now has to deliver.
struct Claimed {
    entry: Entry,
    due: Due,
    fired_at: DateTime<Utc>,
}

/// One pass: claim everything due; returns the claimed runs and when to wake next.
fn tick(state: &CronState) -> (Vec<Claimed>, Option<DateTime<Utc>>) {
    // Changes made from now on wake the next pass (see `CronState::wake_for`).
    *state.next_wake.locked() = None;
    let doc = match state.store.load_cached() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("scheduler: {}", e.message);
            return (Vec::new(), None);
        }
    };
    let now = state.now();
    let mut due: Vec<(String, Due)> = Vec::new();
    for e in doc.entries().filter(|e| e.enabled) {
        let Ok(s) = state.schedule_of(e) else {
            continue;
        };
        if let Some(d) = due_at(&s, e, state.cursor_of(e), now, state.started_at) {
            due.push((e.id.clone(), d));
        }
    }
    let claimed = if due.is_empty() || !state.writable {
        Vec::new()
    } else {
        match claim(state, &due) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("scheduler: claim failed: {}", e.message);
                Vec::new()
            }
        }
    };
    // Next wake-up: the earliest next fire over the (re-read) entries.
    let Ok(doc) = state.store.load_cached() else {
        return (claimed, None);
    };
    let now = state.now();
    let next = doc
        .entries()
        .filter(|e| e.enabled)
        .filter_map(|e| {
            let s = state.schedule_of(e).ok()?;
            s.next_after(state.cursor_of(e).max(now))
        })
        .min();
    (claimed, next)
}

/// Claim the due runs in one transaction; returns those this process must deliver.
fn claim(state: &CronState, due: &[(String, Due)]) -> kitbag_shared::ToolResult<Vec<Claimed>> {
    let is_busy = |id: &str| state.busy.locked().contains(id);
    let out = state.store.write(|tx| {
        let fired_at = state.now();
        let mut out = Vec::new();
        for (id, d) in due {
            let Some(mut e) = tx.get(id)? else { continue };
            if !e.enabled || e.last_scheduled_at.is_some_and(|t| t >= d.scheduled_at) {
                continue; // disabled meanwhile, or fired by another process
            }
            // The schedule may have been edited since the decision: re-check on the fresh entry.
            let Ok(s) = state.schedule_of(&e) else {
                continue;
            };
            let cursor = state.cursor_of(&e);
            if s.latest_in(cursor, fired_at) != Some(d.scheduled_at) {
                continue;
            }
            let busy = e.command.is_some() && d.outcome != Outcome::Missed && is_busy(id);
            let outcome = if busy {
                Outcome::SkippedBusy
            } else {
                d.outcome
            };
            // The unique claim: on PostgreSQL another replica may hold this fire already.
            if !tx.claim_fire(id, d.scheduled_at, fired_at, outcome)? {
                continue;
            }
            e.last_scheduled_at = Some(d.scheduled_at);
            if matches!(outcome, Outcome::Fired | Outcome::CaughtUp) {
                e.last_run = Some(LastRun {
                    scheduled_at: d.scheduled_at,
                    fired_at,
                    outcome,
                });
            }
            if !e.recurring {
                e.enabled = false;
            }
            tx.put(&e)?;
            out.push(Claimed {
                entry: e,
                due: Due {
                    scheduled_at: d.scheduled_at,
                    outcome,
                },
                fired_at,
            });
        }
        Ok(out)
    })?;
    // Committed: the command entries among them are running from now on.
    let mut busy = state.busy.locked();
    for c in &out {
        if c.entry.command.is_some() && matches!(c.due.outcome, Outcome::Fired | Outcome::CaughtUp)
        {
            busy.insert(c.entry.id.clone());
        }
    }
    Ok(out)
}

/// Claim `due` as one scheduler pass does, without delivering: how many runs this process
/// won. For benchmarks and tests that drive several claimers on one store.
pub fn claim_only(state: &CronState, due: &[(String, Due)]) -> kitbag_shared::ToolResult<usize> {
    claim(state, due).map(|c| c.len())
}

/// Deliver a claimed run: run its command, notify the client, record the run.
async fn finish(state: Arc<CronState>, c: Claimed) {
    let e = &c.entry;
    let deliver = matches!(c.due.outcome, Outcome::Fired | Outcome::CaughtUp);
    let mut cmd_outcome: Option<CommandOutcome> = None;
    if deliver && let Some(cmd) = &e.command {
        cmd_outcome = Some(if state.commands_enabled {
            let env = [
                ("KITBAG_CRON_ID", e.id.clone()),
                ("KITBAG_CRON_SESSION", e.session().to_string()),
                ("KITBAG_CRON_SCHEDULED_AT", c.due.scheduled_at.to_rfc3339()),
            ];
            let o = command::run(
                &cmd.run,
                Path::new(&state.root),
                Duration::from_secs(cmd.timeout_secs.max(1)),
                &env,
            )
            .await;
            state.busy.locked().remove(&e.id);
            o
        } else {
            state.busy.locked().remove(&e.id);
            CommandOutcome {
                status: "disabled".into(),
                exit_code: None,
                signal: None,
                duration_ms: 0,
                output_tail: "command actions are disabled (--no-commands)".into(),
                output_truncated: false,
                containment: None,
            }
        });
    }
    let mut delivered = false;
    if deliver {
        let mut payload = json!({
            "id": e.id,
            "session": e.session(),
            "message": e.message,
            "scheduled_at": c.due.scheduled_at.to_rfc3339(),
            "fired_at": c.fired_at.to_rfc3339(),
            "outcome": c.due.outcome.as_str(),
        });
        if let Some(o) = &cmd_outcome {
            payload["command"] = serde_json::to_value(o).unwrap_or_default();
        }
        let meta = json!({
            "cron_id": e.id,
            "session": e.session(),
            "scheduled_at": c.due.scheduled_at.to_rfc3339(),
            "fired_at": c.fired_at.to_rfc3339(),
            "outcome": c.due.outcome.as_str(),
        });
        delivered = state.deliver(payload, meta, &e.message).await;
    }
    let rec = RunRecord {
        id: e.id.clone(),
        session: e.session().to_string(),
        scheduled_at: c.due.scheduled_at,
        fired_at: c.fired_at,
        outcome: c.due.outcome,
        delivered,
        command: cmd_outcome,
        pid: state.pid,
    };
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || st.store.record_run(&rec)).await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("run history: {}", e.message),
        Err(e) => tracing::warn!("run history: {e}"),
    }
}

/// How long the first pass waits for a client, so runs made up at start-up reach it.
pub const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// The scheduler loop; runs until the process exits.
pub async fn run(state: Arc<CronState>) {
    tokio::select! {
        _ = state.connected.notified() => {}
        _ = tokio::time::sleep(CONNECT_WAIT) => {}
    }
    loop {
        let st = state.clone();
        let (claimed, next) = tokio::task::spawn_blocking(move || tick(&st))
            .await
            .unwrap_or_default();
        for c in claimed {
            tokio::spawn(finish(state.clone(), c));
        }
        *state.next_wake.locked() = Some(next.unwrap_or(DateTime::<Utc>::MAX_UTC));
        // Without word of other processes' changes (a PostgreSQL listener reconnecting),
        // look again every second.
        let longest = if state.store.sees_changes() {
            MAX_SLEEP
        } else {
            EXTERNAL_WAKE_EVERY
        };
        let wait = match next {
            Some(t) => state.clock.real_wait(t).min(longest),
            None => longest,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = state.wake.notified() => {}
        }
    }
}

/// Longest a change made by another process waits before the scheduler looks at it; also
/// the shortest interval between two such looks (the store's WAL changes on every commit).
pub const EXTERNAL_WAKE_EVERY: Duration = Duration::from_secs(1);

/// Watch `.kitbag/` with inotify and wake the scheduler when another process changed the
/// store (at most once a second) or a `cron.json` appeared to import (at once). Blocks in
/// `read`: no wake-ups while nothing changes.
pub fn watch_store(state: &Arc<CronState>) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let crate::backend::Backend::Sqlite(store) = &state.store else {
        return; // PostgreSQL: LISTEN/NOTIFY instead (pg.rs)
    };
    let dir = store.dir.clone();
    if std::fs::create_dir_all(&dir).is_err() && !dir.is_dir() {
        tracing::warn!("cannot watch {}: no such directory", dir.display());
        return;
    }
    let inotify = match Inotify::init(InitFlags::IN_CLOEXEC) {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(
                "inotify unavailable ({e}); other processes' changes are seen within 15 min"
            );
            return;
        }
    };
    let flags = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        // A `.kitbag` replaced by a link is not followed out of the root.
        | AddWatchFlags::IN_DONT_FOLLOW;
    if let Err(e) = inotify.add_watch(&dir, flags) {
        tracing::warn!("cannot watch {}: {e}", dir.display());
        return;
    }
    let wake = state.wake.clone();
    let spawned = std::thread::Builder::new()
        .name("cron-watch".into())
        .spawn(move || {
            let mut last: Option<std::time::Instant> = None;
            loop {
                let events = match inotify.read_events() {
                    Ok(events) => events,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!("inotify read failed: {e}");
                        break;
                    }
                };
                let mut import = false;
                let mut changed = false;
                for ev in &events {
                    match ev.name.as_deref().and_then(|n| n.to_str()) {
                        Some("cron.json") => {
                            import |= ev.mask.intersects(
                                AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO,
                            );
                        }
                        Some("cron.db" | "cron.db-wal") => changed = true,
                        None => changed |= ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW),
                        _ => {}
                    }
                }
                if !import && changed {
                    // Rate-limited: events arriving meanwhile wait in the kernel's queue.
                    if let Some(since) = last.map(|t| t.elapsed())
                        && since < EXTERNAL_WAKE_EVERY
                    {
                        std::thread::sleep(EXTERNAL_WAKE_EVERY - since);
                    }
                }
                if import || changed {
                    wake.notify_one();
                    last = Some(std::time::Instant::now());
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the store watcher: {e}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::schedule::Schedule;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn entry(catch_up: bool) -> Entry {
        serde_json::from_value(
            json!({"id": "cron-1", "schedule": "0 * * * *", "message": "m", "catch_up": catch_up}),
        )
        .unwrap()
    }

    #[test]
    fn due_is_on_time_late_or_missed() {
        let s = Schedule::new("0 * * * *", "UTC").unwrap();
        let started = utc("2026-01-01T09:00:00Z");
        let cursor = utc("2026-01-01T09:30:00Z");
        // Nothing owed before 10:00.
        assert_eq!(
            due_at(
                &s,
                &entry(true),
                cursor,
                utc("2026-01-01T09:59:59Z"),
                started
            ),
            None
        );
        // On time.
        assert_eq!(
            due_at(
                &s,
                &entry(true),
                cursor,
                utc("2026-01-01T10:00:00.2Z"),
                started
            ),
            Some(Due {
                scheduled_at: utc("2026-01-01T10:00:00Z"),
                outcome: Outcome::Fired
            })
        );
        // Hours late (server was down): the latest instant only, made up once.
        assert_eq!(
            due_at(
                &s,
                &entry(true),
                cursor,
                utc("2026-01-01T13:20:00Z"),
                started
            ),
            Some(Due {
                scheduled_at: utc("2026-01-01T13:00:00Z"),
                outcome: Outcome::CaughtUp
            })
        );
        assert_eq!(
            due_at(
                &s,
                &entry(false),
                cursor,
                utc("2026-01-01T13:20:00Z"),
                started
            ),
            Some(Due {
                scheduled_at: utc("2026-01-01T13:00:00Z"),
                outcome: Outcome::Missed
            })
        );
        // A run from before this process started is made up even when only seconds late.
        assert_eq!(
            due_at(
                &s,
                &entry(true),
                cursor,
                utc("2026-01-01T10:00:05Z"),
                utc("2026-01-01T10:00:03Z")
            )
            .unwrap()
            .outcome,
            Outcome::CaughtUp
        );
        // Once handled (cursor moved to it), nothing more is owed.
        assert_eq!(
            due_at(
                &s,
                &entry(true),
                utc("2026-01-01T13:00:00Z"),
                utc("2026-01-01T13:20:00Z"),
                started
            ),
            None
        );
        let mut off = entry(true);
        off.enabled = false;
        assert_eq!(
            due_at(&s, &off, cursor, utc("2026-01-01T13:20:00Z"), started),
            None
        );
    }

    #[test]
    fn a_dst_gap_run_is_due_once_after_the_gap() {
        // 02:30 does not exist in New York on 2026-03-08: due at 03:00 EDT (07:00Z), once.
        let s = Schedule::new("30 2 * * *", "America/New_York").unwrap();
        let e = entry(true);
        let started = utc("2026-03-08T00:00:00Z");
        let cursor = utc("2026-03-08T05:00:00Z");
        assert_eq!(
            due_at(&s, &e, cursor, utc("2026-03-08T06:59:59Z"), started),
            None
        );
        let d = due_at(&s, &e, cursor, utc("2026-03-08T07:00:01Z"), started).unwrap();
        assert_eq!(d.scheduled_at, utc("2026-03-08T07:00:00Z"));
        assert_eq!(
            due_at(&s, &e, d.scheduled_at, utc("2026-03-08T12:00:00Z"), started),
            None
        );
    }
}
