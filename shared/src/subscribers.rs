//! Who subscribed to which resources, and telling them: the client that subscribed with
//! `resources/subscribe` (handshake era) and each `subscriptions/listen` stream (2026-07-28).
//! A server with resources that change keeps one and calls [`Subscribers::send`] when they do;
//! its [`crate::Extras`] hands it the subscriptions.

use crate::lock::LockExt;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::{Peer, RoleServer, SubscriptionContext, SubscriptionSink};

struct Stream {
    id: u64,
    sink: SubscriptionSink,
    uris: HashSet<String>,
}

/// Who wants to hear about which resources.
#[derive(Default)]
pub struct Subscribers {
    legacy_peer: Mutex<Option<Peer<RoleServer>>>,
    legacy_uris: Mutex<HashSet<String>>,
    streams: Mutex<Vec<Stream>>,
    next_stream: AtomicU64,
}

impl Subscribers {
    /// Whether anyone listens (a `resources/subscribe` or a `subscriptions/listen` stream).
    pub fn has_subscribers(&self) -> bool {
        !self.legacy_uris.locked().is_empty() || !self.streams.locked().is_empty()
    }

    /// Announce these resources as updated to whoever subscribed to them (best effort: a
    /// client gone loses it).
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

    /// The client that `resources/subscribe` subscriptions are announced to.
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        *self.legacy_peer.locked() = Some(peer);
    }

    /// `resources/subscribe`: announce changes of `uri` to the peer.
    pub fn subscribe(&self, uri: String, peer: Peer<RoleServer>) {
        self.set_peer(peer);
        self.legacy_uris.locked().insert(uri);
    }

    /// `resources/unsubscribe`.
    pub fn unsubscribe(&self, uri: &str) {
        self.legacy_uris.locked().remove(uri);
    }

    /// Serve one `subscriptions/listen` stream until the client cancels it: its accepted
    /// resources are announced to it meanwhile. `started` runs once it is registered (a
    /// server starts its change watcher there, so no change after the registration is lost).
    pub async fn listen(&self, context: SubscriptionContext, started: impl FnOnce()) {
        let uris: HashSet<String> = context
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let id = self.next_stream.fetch_add(1, Ordering::SeqCst);
        self.streams.locked().push(Stream {
            id,
            sink: context.sink().clone(),
            uris,
        });
        started();
        context.cancelled().await;
        self.streams.locked().retain(|s| s.id != id);
    }
}

/// The part of a `subscriptions/listen` filter a server accepts: the resource URIs `ours`
/// recognises.
pub fn accepted_filter(
    requested: &SubscriptionFilter,
    ours: impl Fn(&str) -> bool,
) -> SubscriptionFilter {
    let uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|u| ours(u))
        .cloned()
        .collect();
    SubscriptionFilter::builder()
        .resource_subscriptions(uris)
        .build()
}
