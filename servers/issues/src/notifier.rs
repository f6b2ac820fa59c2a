//! Who wants to hear about which `issues://` resources ([`Subscribers`]), and the state of the
//! change-log watcher that tells them. Every tool call's state holds one; `resources.rs`
//! watches the change log and announces through it.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use kitbag_shared::subscribers::Subscribers;

#[derive(Default)]
pub struct Notifier {
    pub subscribers: Subscribers,
    watching: AtomicBool,
    /// Change-log position already announced (or predating every subscription).
    pub cursor: AtomicI64,
    poke: tokio::sync::Notify,
}

impl Notifier {
    /// A change was committed by this process: look at the change log now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Resolves once `poke` was called (since the last time this resolved).
    pub async fn poked(&self) {
        self.poke.notified().await
    }

    /// Mark the change-log watcher as running: false when it runs already.
    pub fn start_watching(&self) -> bool {
        !self.watching.swap(true, Ordering::SeqCst)
    }

    /// The watcher has stopped (it could not open the database): the next subscriber starts
    /// another.
    pub fn stop_watching(&self) {
        self.watching.store(false, Ordering::SeqCst);
    }
}
