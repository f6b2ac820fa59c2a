//! How many requests one connection may have in flight.
//!
//! Without a bound, a client that pipelines 100,000 requests makes the server hold all of them
//! (1.2 GB in the host's tree). With it, reading pauses while the budget is spent, so the
//! client's writes block instead — backpressure through the pipe. A slot is taken when a
//! request is read and given back when its response is written, or when the client cancels
//! it (a cancelled request gets no response).

use crate::lock::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests one connection may have in flight before reading pauses.
pub const MAX_IN_FLIGHT: usize = 64;

#[derive(Debug, Clone)]
pub struct RequestBudget {
    slots: Arc<Semaphore>,
    held: Arc<Mutex<HashMap<String, OwnedSemaphorePermit>>>,
}

impl Default for RequestBudget {
    fn default() -> Self {
        Self::new(MAX_IN_FLIGHT)
    }
}

impl RequestBudget {
    pub fn new(limit: usize) -> Self {
        RequestBudget {
            slots: Arc::new(Semaphore::new(limit.max(1))),
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Take a slot for request `id` (its JSON text), waiting while none is free. A second
    /// request with an id already held shares its slot.
    pub async fn begin(&self, id: String) {
        if self.lock().contains_key(&id) {
            return;
        }
        let Ok(permit) = self.slots.clone().acquire_owned().await else {
            return; // closed: never, the semaphore is not closed
        };
        self.lock().insert(id, permit);
    }

    /// Take a slot for `id` if one is free now; false when the budget is spent.
    pub fn try_begin(&self, id: String) -> bool {
        if self.lock().contains_key(&id) {
            return true;
        }
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.lock().insert(id, permit);
                true
            }
            Err(_) => false,
        }
    }

    /// Wait until a slot is free, without taking it (for a reader that hands requests to
    /// another reader which takes the slot itself).
    pub async fn wait_for_room(&self) {
        if let Ok(permit) = self.slots.acquire().await {
            drop(permit);
        }
    }

    /// Whether request `id` is in flight (holds a slot).
    pub fn holds(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Give back the slot of request `id` (answered or cancelled); unknown ids are ignored.
    pub fn end(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Requests holding a slot now.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnedSemaphorePermit>> {
        self.held.locked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reading_waits_while_the_budget_is_spent() {
        let b = RequestBudget::new(2);
        b.begin("1".into()).await;
        b.begin("2".into()).await;
        b.begin("2".into()).await; // same id: no second slot
        assert_eq!(b.in_flight(), 2);
        let waiting = tokio::time::timeout(Duration::from_millis(50), b.begin("3".into())).await;
        assert!(waiting.is_err(), "a third request waits");
        b.end("1");
        tokio::time::timeout(Duration::from_secs(1), b.begin("3".into()))
            .await
            .expect("a slot came free");
        b.end("unknown");
        assert_eq!(b.in_flight(), 2);
    }
}
