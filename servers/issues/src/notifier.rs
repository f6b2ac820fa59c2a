//! Who wants to hear about which `issues://` resources, and telling them: the client that
//! subscribed with `resources/subscribe` (handshake era) and each `subscriptions/listen` stream
//! (2026-07-28). Every tool call's state holds one; `resources.rs` watches the change log and
//! announces through it.

use kitbag_shared::lock::LockExt;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use kitbag_shared::rmcp::model::ResourceUpdatedNotificationParam;
use kitbag_shared::rmcp::service::{Peer, RoleServer, SubscriptionSink};

struct Stream {
    id: u64,
    sink: SubscriptionSink,
    uris: HashSet<String>,
}

/// Who wants to hear about which resources.
#[derive(Default)]
pub struct Notifier {
    legacy_peer: Mutex<Option<Peer<RoleServer>>>,
    legacy_uris: Mutex<HashSet<String>>,
    streams: Mutex<Vec<Stream>>,
    next_stream: AtomicU64,
    watching: AtomicBool,
    /// Change-log position already announced (or predating every subscription).
    pub cursor: AtomicI64,
    poke: tokio::sync::Notify,
}

impl Notifier {
    /// Whether anyone listens (a `resources/subscribe` or a `subscriptions/listen` stream).
    pub fn has_subscribers(&self) -> bool {
        !self.legacy_uris.locked().is_empty() || !self.streams.locked().is_empty()
    }

    /// A change was committed by this process: look at the change log now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Announce these resources as updated to whoever subscribed to them.
    pub async fn send(&self, uris: &[String]) {
        let peer = self.legacy_peer.locked().clone();
        let legacy: Vec<String> = {
            let subs = self.legacy_uris.locked();
            uris.iter().filter(|u| subs.contains(*u)).cloned().collect()
        };
        if let Some(peer) = peer {
            for uri in legacy {
                if let Err(e) = peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                {
                    tracing::debug!("resources/updated not sent: {e}");
                }
            }
        }
        let streams: Vec<(u64, SubscriptionSink, Vec<String>)> = {
            let s = self.streams.locked();
            s.iter()
                .map(|st| {
                    let wanted = uris
                        .iter()
                        .filter(|u| st.uris.contains(*u))
                        .cloned()
                        .collect();
                    (st.id, st.sink.clone(), wanted)
                })
                .collect()
        };
        for (id, sink, wanted) in streams {
            for uri in wanted {
                if let Err(e) = sink.notify_resource_updated(uri).await {
                    tracing::debug!("subscription {id}: {e}");
                }
            }
        }
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

    /// The client that `resources/subscribe` subscriptions are announced to.
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        *self.legacy_peer.locked() = Some(peer);
    }

    /// `resources/subscribe`: announce changes of `uri` to the peer.
    pub fn subscribe(&self, uri: String) {
        self.legacy_uris.locked().insert(uri);
    }

    /// `resources/unsubscribe`.
    pub fn unsubscribe(&self, uri: &str) {
        self.legacy_uris.locked().remove(uri);
    }

    /// A `subscriptions/listen` stream wanting these resources; its id, for `remove_stream`.
    pub fn add_stream(&self, sink: SubscriptionSink, uris: HashSet<String>) -> u64 {
        let id = self.next_stream.fetch_add(1, Ordering::SeqCst);
        self.streams.locked().push(Stream { id, sink, uris });
        id
    }

    /// The stream has ended.
    pub fn remove_stream(&self, id: u64) {
        self.streams.locked().retain(|s| s.id != id);
    }
}
