//! A server that started on its first call and then goes unused for its `idle_stop` time is
//! stopped, and waits `Idle` for its next call again: its tools stay listed, the next call
//! starts it as the first did. Never while a call is in flight on it or a client holds a
//! subscription there.

use super::child::{State, kill_group};
use super::{Calls, Hub};

use kitbag_shared::lock::LockExt;
use std::time::Duration;

/// What [`Hub::stop_if_idle`] found.
enum Quiet {
    /// Stopped; or nothing left to watch (restarted, removed, stopping).
    Done,
    /// Still needed (a call began, a subscription is held): watch on.
    Busy,
}

impl Hub {
    /// Watch the incarnation `generation` of child `id`: once no call has been in flight
    /// on it for `after`, stop it. The watch ends with that incarnation.
    pub(super) fn stop_when_idle(&self, id: u64, generation: u64, calls: &Calls, after: Duration) {
        let hub = self.me.clone();
        // The receiver alone: when the child is dropped (a reload removed it), the sender
        // goes with it and the watch ends.
        let mut rx = calls.in_flight.subscribe();
        tokio::spawn(async move {
            loop {
                if rx.wait_for(|n| *n == 0).await.is_err() {
                    return;
                }
                match tokio::time::timeout(after, rx.changed()).await {
                    // A call began or ended: wait for quiet again.
                    Ok(Ok(())) => continue,
                    Ok(Err(_)) => return,
                    Err(_) => {}
                }
                let Some(hub) = hub.upgrade() else { return };
                // Busy: checked again after another quiet spell.
                if matches!(hub.stop_if_idle(id, generation), Quiet::Done) {
                    return;
                }
            }
        });
    }

    /// Stop child `id` if it is still that incarnation, ready, with no call in flight and no
    /// subscription held at it. Decided under the hub's lock, under which every call is
    /// counted: a call routed after this finds the server `Idle` and starts it again.
    fn stop_if_idle(&self, id: u64, generation: u64) -> Quiet {
        let subscribed = self.relay.held.locked().keys().any(|(c, _)| *c == id);
        let pid = {
            let mut c = self.lock();
            let Some(child) = c.iter_mut().find(|c| c.id == id) else {
                return Quiet::Done;
            };
            if child.generation != generation || child.state != State::Ready || child.stopping {
                return Quiet::Done;
            }
            if subscribed || child.calls.in_flight() > 0 {
                return Quiet::Busy;
            }
            // A new generation: the exit of this incarnation is not a crash to restart.
            child.generation += 1;
            if let Some(stop) = child.stop.take() {
                stop.cancel();
            }
            child.peer = None;
            child.fast = None;
            child.state = State::Idle;
            let unused = child.idle_stop.unwrap_or_default().as_secs();
            tracing::info!(server = %child.spec.name, "stopped after {unused} s unused");
            child.pid.take()
        };
        self.invalidate_flat();
        self.note_idle();
        if let Some(pid) = pid {
            kill_group(pid);
        }
        Quiet::Done
    }
}
