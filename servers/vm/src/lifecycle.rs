//! Timers and ends: idle pause/stop, TTL, lease expiry, retention of ended records, the main
//! command's own end, and stopping everything when the server exits.
//!
//! Activity (resets the idle clock): instance_spawn, instance_exec, instance_copy,
//! expose_port/unexpose_port, keepalive_* on the instance, a relayed connection opening or
//! closing. Not activity: instance_list, instance_logs, self_info, the instance's own
//! processes. Idle is blocked while a foreground exec or copy runs, a relayed connection is
//! open or a lease lives. The TTL is a hard cap nothing extends.

use kitbag_shared::lock::LockExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::VmState;
use crate::instance::{OnIdle, State};
use crate::proto::ExitStatus;

const TICK: Duration = Duration::from_millis(200);

/// What a stop did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StopOutcome {
    pub state: State,
    pub exit: Option<ExitStatus>,
    pub removed: bool,
    /// Guest ports whose listeners were closed.
    pub closed_ports: Vec<u16>,
    pub released_leases: u64,
    /// Instances it had spawned (nested use), stopped with it.
    pub stopped_descendants: Vec<String>,
}

/// Stop an instance and every instance below it (spawned by a guest inside it): listeners
/// closed, leases released, processes stopped (SIGTERM, grace, SIGKILL), cgroups removed;
/// with `remove`, records and directories deleted too.
pub async fn stop_instance(
    state: &Arc<VmState>,
    id: &str,
    grace: Duration,
    reason: &str,
    remove: bool,
) -> StopOutcome {
    let below = crate::descendants(&state.lock(), id);
    let stops = below
        .iter()
        .map(|d| stop_one(state, d, grace, "owner_stopped", remove));
    futures::future::join_all(stops).await;
    let mut outcome = stop_one(state, id, grace, reason, remove).await;
    outcome.stopped_descendants = below;
    outcome
}

async fn stop_one(
    state: &Arc<VmState>,
    id: &str,
    grace: Duration,
    reason: &str,
    remove: bool,
) -> StopOutcome {
    let (sandbox, closed_ports, released) = {
        let mut map = state.lock();
        let Some(inst) = map.get_mut(id) else {
            return StopOutcome {
                state: State::Stopped,
                exit: None,
                removed: true,
                closed_ports: Vec::new(),
                released_leases: 0,
                stopped_descendants: Vec::new(),
            };
        };
        let ports: Vec<u16> = inst.ports.keys().copied().collect();
        for p in inst.ports.values() {
            p.close.cancel();
        }
        inst.ports.clear();
        let released = inst.leases.len() as u64;
        inst.leases.clear();
        if let Some(close) = inst.guest_close.take() {
            close.cancel();
        }
        let sandbox = if inst.state.is_live() {
            inst.state = State::Stopping;
            inst.stop_reason.get_or_insert_with(|| reason.to_string());
            inst.sandbox.clone()
        } else {
            None
        };
        (sandbox, ports, released)
    };
    let exit = match sandbox {
        Some(s) => Some(s.stop(grace).await),
        None => None,
    };
    let mut outcome = StopOutcome {
        state: State::Stopped,
        exit,
        removed: false,
        closed_ports,
        released_leases: released,
        stopped_descendants: Vec::new(),
    };
    // The record is settled under the lock; its directory is removed after, off the lock.
    let removed_dir = {
        let mut map = state.lock();
        let Some(inst) = map.get_mut(id) else {
            return outcome;
        };
        if inst.state == State::Stopping {
            inst.state = State::Stopped;
            inst.ended_at = Some(SystemTime::now());
            if inst.exit.is_none() {
                inst.exit = outcome.exit;
            }
        }
        outcome.state = inst.state;
        outcome.exit = inst.exit;
        let dir = inst.dir.clone();
        remove.then(|| {
            map.remove(id);
            dir
        })
    };
    if let Some(dir) = removed_dir {
        let _ = tokio::fs::remove_dir_all(&dir).await;
        outcome.removed = true;
    }
    outcome
}

/// Wait for a sandbox to end by itself (its main command ended, or it was killed) and record
/// it, unless a stop is already doing that.
pub fn watch_exit(state: Arc<VmState>, id: String) {
    let sandbox = state.lock().get(&id).and_then(|i| i.sandbox.clone());
    let Some(sandbox) = sandbox else { return };
    tokio::spawn(async move {
        let status = sandbox.wait().await;
        let ended_by_itself = {
            let mut map = state.lock();
            match map.get_mut(&id) {
                Some(inst) if matches!(inst.state, State::Running | State::Paused) => {
                    inst.state = State::Exited;
                    inst.exit = Some(status);
                    inst.ended_at = Some(SystemTime::now());
                    for p in inst.ports.values() {
                        p.close.cancel();
                    }
                    inst.ports.clear();
                    inst.leases.clear();
                    if let Some(close) = inst.guest_close.take() {
                        close.cancel();
                    }
                    true
                }
                _ => false,
            }
        };
        if ended_by_itself {
            let s = sandbox.clone();
            let _ = tokio::task::spawn_blocking(move || s.cleanup()).await;
            // What its guest spawned does not outlive it.
            let below = crate::descendants(&state.lock(), &id);
            for d in below {
                stop_one(&state, &d, Duration::from_secs(1), "owner_stopped", false).await;
            }
        }
    });
}

enum Action {
    Pause(String),
    Stop(String, &'static str),
    Remove(String),
    Warn(String),
}

/// Run the timers every 200 ms until the server ends.
pub async fn tick_forever(state: Arc<VmState>) {
    loop {
        tokio::time::sleep(TICK).await;
        tick(&state).await;
    }
}

/// One pass of the timers.
pub async fn tick(state: &Arc<VmState>) {
    let actions = plan(state);
    for action in actions {
        match action {
            Action::Warn(msg) => state.warn_client(msg),
            Action::Pause(id) => {
                let sandbox = {
                    let map = state.lock();
                    map.get(&id).and_then(|i| i.sandbox.clone())
                };
                if let Some(s) = sandbox {
                    let paused = tokio::task::spawn_blocking(move || s.pause()).await;
                    let mut map = state.lock();
                    if let Some(inst) = map.get_mut(&id) {
                        match paused {
                            Ok(Ok(())) if inst.state == State::Running => {
                                inst.state = State::Paused
                            }
                            Ok(Ok(())) => {}
                            // Not again at the next tick: after another idle period.
                            Ok(Err(e)) => {
                                tracing::warn!(instance = id, "idle pause failed: {e}");
                                inst.last_activity = std::time::Instant::now();
                            }
                            Err(e) => tracing::warn!(instance = id, "idle pause failed: {e}"),
                        }
                    }
                }
            }
            Action::Stop(id, reason) => {
                let state = state.clone();
                tokio::spawn(async move {
                    stop_instance(&state, &id, Duration::from_secs(5), reason, false).await;
                });
            }
            Action::Remove(id) => {
                let dir = state.lock().remove(&id).map(|i| i.dir);
                if let Some(dir) = dir {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            }
        }
    }
}

fn plan(state: &Arc<VmState>) -> Vec<Action> {
    let now = Instant::now();
    let wall = SystemTime::now();
    let mut actions = Vec::new();
    let mut expired = Vec::new();
    let mut map = state.lock();
    for inst in map.values_mut() {
        // Leases end on their own: a forgotten lease must not pin an instance forever.
        let gone: Vec<String> = inst
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= wall)
            .map(|(k, _)| k.clone())
            .collect();
        for lease in gone {
            if let Some(l) = inst.leases.remove(&lease) {
                expired.push((lease, inst.id.clone(), l.expires));
                inst.touch();
            }
        }
        if !inst.state.is_live() {
            let retain = Duration::from_secs(state.opts.retain_exited);
            if inst.state != State::Lost
                && inst
                    .ended_at
                    .and_then(|t| wall.duration_since(t).ok())
                    .is_some_and(|d| d > retain)
            {
                actions.push(Action::Remove(inst.id.clone()));
            }
            continue;
        }
        if !matches!(inst.state, State::Running | State::Paused) {
            continue;
        }
        if let Some((deadline, _)) = inst.ttl_deadline {
            if now >= deadline {
                actions.push(Action::Stop(inst.id.clone(), "ttl"));
                continue;
            }
            let left = deadline - now;
            if !inst.ttl_warned && left <= warn_before(inst.ttl_seconds) {
                inst.ttl_warned = true;
                actions.push(Action::Warn(format!(
                    "instance {} will be stopped in {} s: its TTL ({} s) ends; copy out what you need",
                    inst.id,
                    left.as_secs(),
                    inst.ttl_seconds
                )));
            }
        }
        if inst.state != State::Running || inst.idle_timeout == 0 {
            continue;
        }
        if !inst.idle_blockers().is_empty() {
            continue;
        }
        let idle_for = now.saturating_duration_since(inst.last_activity);
        let timeout = Duration::from_secs(inst.idle_timeout);
        if idle_for >= timeout {
            actions.push(match inst.on_idle {
                OnIdle::Pause => Action::Pause(inst.id.clone()),
                OnIdle::Stop => Action::Stop(inst.id.clone(), "idle"),
            });
        } else if !inst.idle_warned && timeout - idle_for <= warn_before(inst.idle_timeout) {
            inst.idle_warned = true;
            let what = match inst.on_idle {
                OnIdle::Pause => "paused",
                OnIdle::Stop => "stopped",
            };
            actions.push(Action::Warn(format!(
                "instance {} will be {what} in {} s for lack of activity; keepalive_acquire keeps it running",
                inst.id,
                (timeout - idle_for).as_secs()
            )));
        }
    }
    drop(map);
    if !expired.is_empty() {
        let mut e = state.expired_leases.locked();
        for (lease, id, at) in expired {
            e.insert(lease, (id, at));
        }
    }
    actions
}

/// Warn 60 s ahead, or halfway for shorter timers.
fn warn_before(total_seconds: u64) -> Duration {
    Duration::from_secs(60).min(Duration::from_millis(total_seconds * 500))
}

/// Server exit: every live instance stopped (1 s grace: the host SIGKILLs us 1.5 s after
/// SIGTERM), and every instance directory removed — instances do not outlive their server.
pub async fn stop_all(state: &Arc<VmState>) {
    let ids: Vec<String> = state.lock().keys().cloned().collect();
    let stops = ids.iter().map(|id| {
        let lost = state.lock().get(id).is_some_and(|i| i.state == State::Lost);
        let state = state.clone();
        async move {
            if !lost {
                stop_instance(&state, id, Duration::from_secs(1), "server_exit", true).await;
            }
        }
    });
    futures::future::join_all(stops).await;
}
