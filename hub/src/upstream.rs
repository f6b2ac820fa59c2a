//! The host's clients: one over stdio, one per session over HTTP (`--http-sessions`). Each
//! gets the list-change notifications, and the `resources/updated` of the URIs it — not
//! another client — subscribed to (handshake era; a 2026-07-28 client's subscriptions live
//! on its own `subscriptions/listen` stream, see `Hub::listen`).
//!
//! A client is known by its peer's handshake record (`peer_info`, one per connection, shared
//! by every clone of the peer); clients whose transport closed are forgotten, and their
//! subscriptions handed back for release at the children.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kitbag_shared::lock::LockExt;
use rmcp::service::{Peer, RoleServer};

/// At most this many clients are remembered; the oldest goes first (a stateless HTTP peer is
/// closed after its request anyway, and pruned on the next look).
const MAX_CLIENTS: usize = 1024;

struct Client {
    peer: Peer<RoleServer>,
    /// Handshake-era subscriptions: URI → the child holding it.
    subscribed: HashMap<String, u64>,
}

#[derive(Default)]
pub struct Upstreams {
    clients: Mutex<Vec<Client>>,
}

/// A subscription to release at child `.0` (its client went away).
pub type Orphan = (u64, String);

fn same_connection(a: &Peer<RoleServer>, b: &Peer<RoleServer>) -> bool {
    match (a.peer_info(), b.peer_info()) {
        (Some(x), Some(y)) => Arc::ptr_eq(&x, &y),
        _ => false,
    }
}

impl Upstreams {
    /// Note the client behind `peer` (once per connection; newest last). Returns the
    /// subscriptions of clients that went away, to release.
    pub fn seen(&self, peer: &Peer<RoleServer>) -> Vec<Orphan> {
        let mut clients = self.clients.locked();
        let mut orphans = prune(&mut clients);
        match clients.iter().position(|c| same_connection(&c.peer, peer)) {
            Some(i) => {
                let client = clients.remove(i);
                clients.push(client);
            }
            None if peer.peer_info().is_some() => {
                if clients.len() >= MAX_CLIENTS {
                    let oldest = clients.remove(0);
                    orphans.extend(oldest.subscribed.into_iter().map(|(u, id)| (id, u)));
                }
                clients.push(Client {
                    peer: peer.clone(),
                    subscribed: HashMap::new(),
                });
            }
            None => {}
        }
        orphans
    }

    /// The client heard from last (for what has no better addressee).
    pub fn latest(&self) -> Option<Peer<RoleServer>> {
        self.clients.locked().last().map(|c| c.peer.clone())
    }

    /// Every client still connected.
    pub fn all(&self) -> Vec<Peer<RoleServer>> {
        self.clients
            .locked()
            .iter()
            .filter(|c| !c.peer.is_transport_closed())
            .map(|c| c.peer.clone())
            .collect()
    }

    /// Whether `peer`'s client already subscribed to `uri`.
    pub fn has(&self, peer: &Peer<RoleServer>, uri: &str) -> bool {
        self.clients
            .locked()
            .iter()
            .any(|c| same_connection(&c.peer, peer) && c.subscribed.contains_key(uri))
    }

    /// Record `peer`'s subscription to `uri` at child `id`.
    pub fn subscribe(&self, peer: &Peer<RoleServer>, uri: String, id: u64) {
        let mut clients = self.clients.locked();
        match clients.iter_mut().find(|c| same_connection(&c.peer, peer)) {
            Some(c) => {
                c.subscribed.insert(uri, id);
            }
            None => clients.push(Client {
                peer: peer.clone(),
                subscribed: HashMap::from([(uri, id)]),
            }),
        }
    }

    /// Drop `peer`'s subscription to `uri`; the child that held it.
    pub fn unsubscribe(&self, peer: &Peer<RoleServer>, uri: &str) -> Option<u64> {
        self.clients
            .locked()
            .iter_mut()
            .find(|c| same_connection(&c.peer, peer))
            .and_then(|c| c.subscribed.remove(uri))
    }

    /// The clients subscribed to `uri` at child `id`.
    pub fn subscribers(&self, uri: &str, id: u64) -> Vec<Peer<RoleServer>> {
        self.clients
            .locked()
            .iter()
            .filter(|c| c.subscribed.get(uri) == Some(&id) && !c.peer.is_transport_closed())
            .map(|c| c.peer.clone())
            .collect()
    }
}

/// Forget clients whose transport closed; their subscriptions.
fn prune(clients: &mut Vec<Client>) -> Vec<Orphan> {
    let mut orphans = Vec::new();
    clients.retain_mut(|c| {
        if c.peer.is_transport_closed() {
            orphans.extend(c.subscribed.drain().map(|(u, id)| (id, u)));
            false
        } else {
            true
        }
    });
    orphans
}
