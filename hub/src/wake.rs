//! Servers that start on their first call. A server whose tools the host knows without
//! starting it (the binary's own families: their catalogs are compiled in) waits `Idle`: its
//! tools are listed from the start, and the first call routed to it starts it — that call
//! waits for the handshake, later ones find it ready. A prompt or resource request starts
//! the idle servers that declare prompts or resources first, so the lists are whole.

use std::sync::Arc;
use std::time::Duration;

use crate::registry::{Hub, State};

/// How long the stdio reader waits for an idle server its call starts, before leaving the
/// call to the rmcp transport (which waits for the rest): the reader reads nothing else
/// meanwhile. A kitbag family starts in milliseconds.
pub const INLINE_WAKE_LIMIT: Duration = Duration::from_secs(2);

impl Hub {
    /// Before a plain call of `name` takes the byte path: its server, if idle, starts now
    /// (at most `limit`; the byte path needs a running server).
    pub async fn wake_route(self: &Arc<Self>, name: &str, limit: Duration) {
        if !self.may_be_idle() {
            return;
        }
        let flat = self.flat();
        let resolved = kitbag_shared::aliases::resolve(name, None, |n| flat.routes.contains_key(n));
        let name = resolved.as_ref().map_or(name, |a| a.name.as_str());
        let Some(route) = self.route(name) else {
            return;
        };
        let idle = self
            .lock()
            .iter()
            .any(|c| c.id == route.child_id && c.state == State::Idle);
        if idle {
            let _ = tokio::time::timeout(limit, self.wake(route.child_id)).await;
        }
    }

    /// Start the server `child_id` if it is idle, and wait until it is ready or has failed
    /// (also when another call is starting it right now).
    pub async fn wake(self: &Arc<Self>, child_id: u64) {
        let first = {
            let mut c = self.lock();
            match c.iter_mut().find(|c| c.id == child_id) {
                Some(child) if child.state == State::Idle => {
                    child.state = State::Starting;
                    true
                }
                Some(child) if child.state == State::Starting => false,
                _ => return,
            }
        };
        if first {
            self.clone().start(child_id).await;
            self.note_idle();
        } else {
            self.settle().await;
        }
    }

    /// Start the idle servers that declare prompts or resources (before a prompt or resource
    /// request is answered), and wait for each to be ready or to fail.
    pub async fn wake_catalogs(self: &Arc<Self>) {
        let idle: Vec<u64> = self
            .lock()
            .iter()
            .filter(|c| c.state == State::Idle)
            .filter(|c| c.catalog.families.prompts || c.catalog.families.resources)
            .map(|c| c.id)
            .collect();
        if idle.is_empty() {
            // Still wait for one another request is starting.
            self.settle().await;
            return;
        }
        futures::future::join_all(idle.into_iter().map(|id| self.wake(id))).await;
    }
}
