//! The hub's side of prompts and resources: the merged view cached until a child's catalog
//! changes, refreshing a child's lists, its subscriptions re-sent after a restart, and a
//! child's `resources/updated` relayed to the subscribers of that URI.

use kitbag_shared::lock::LockExt;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, ResourceUpdatedNotificationParam, ServerResult, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleClient};

use super::{Hub, State};
use crate::child_catalog::{SUBSCRIBE_TIMEOUT, View, bounded, fetch};

impl Hub {
    /// The merged prompts and resources (cached until a child's catalog changes).
    pub fn catalog(&self) -> Arc<View> {
        if let Some(v) = self.relay.view.locked().as_ref() {
            return v.clone();
        }
        let v = {
            let children = self.lock();
            Arc::new(View::build(children.iter().map(|c| {
                (
                    c.id,
                    c.spec.name.as_str(),
                    c.spec.entry.prefix.as_deref(),
                    &c.catalog,
                )
            })))
        };
        *self.relay.view.locked() = Some(v.clone());
        v
    }

    /// A child announced a new prompt or resource list: ask it again.
    pub async fn refresh_catalog(&self, name: &str) {
        let peer = {
            let c = self.lock();
            c.iter()
                .find(|c| c.spec.name == name)
                .and_then(|c| c.peer.clone())
        };
        let Some(peer) = peer else { return };
        let fresh = fetch(name, &peer).await;
        let changed = {
            let mut c = self.lock();
            match c.iter_mut().find(|c| c.spec.name == name) {
                Some(child) if child.catalog != fresh => {
                    child.catalog = fresh;
                    true
                }
                _ => false,
            }
        };
        if changed {
            self.relay.invalidate();
            self.notify_list_changed().await;
        }
    }

    /// Ask every ready child in `visible` that serves resources for its list again (a
    /// child that does not answer keeps its last list).
    pub(crate) async fn refresh_resources(&self, visible: &Option<HashSet<u64>>) {
        let peers: Vec<(u64, String, Peer<RoleClient>)> = {
            let c = self.lock();
            c.iter()
                .filter(|c| c.state == State::Ready && c.catalog.families.resources)
                .filter(|c| visible.as_ref().is_none_or(|v| v.contains(&c.id)))
                .filter_map(|c| c.peer.clone().map(|p| (c.id, c.spec.name.clone(), p)))
                .collect()
        };
        let lists =
            futures::future::join_all(peers.into_iter().map(|(id, name, peer)| async move {
                (
                    id,
                    bounded("resources/list", &name, peer.list_all_resources()).await,
                )
            }))
            .await;
        let mut changed = false;
        {
            let mut c = self.lock();
            for (id, list) in lists {
                if let (Some(list), Some(child)) = (list, c.iter_mut().find(|c| c.id == id))
                    && child.catalog.resources != list
                {
                    child.catalog.resources = list;
                    changed = true;
                }
            }
        }
        if changed {
            self.relay.invalidate();
            // Other clients learn of it too (debounced, and only if the offer changed).
            self.notify_list_changed().await;
        }
    }

    /// A ready child's peer, its name and request timeout, and the request's place among the
    /// child's calls in flight (a reload waits for it); or why there is none.
    fn peer_of(
        &self,
        id: u64,
    ) -> Result<
        (
            Peer<RoleClient>,
            String,
            Duration,
            crate::registry::CallGuard,
        ),
        McpError,
    > {
        let c = self.lock();
        let Some(child) = c.iter().find(|c| c.id == id) else {
            return Err(McpError::internal_error(
                "the server of this item was removed by a reload",
                None,
            ));
        };
        let name = child.spec.name.clone();
        let timeout = child
            .spec
            .entry
            .tool_timeout_sec
            .map(Duration::from_secs)
            .unwrap_or(kitbag_config::settings::DEFAULT_TOOL_TIMEOUT);
        match (&child.peer, &child.state) {
            (Some(p), _) => Ok((p.clone(), name, timeout, child.calls.begin())),
            (None, State::Restarting | State::Starting) => Err(McpError::internal_error(
                format!("server {name} is restarting; try again in a few seconds"),
                None,
            )),
            (None, _) => Err(McpError::internal_error(
                format!("server {name} is not running"),
                None,
            )),
        }
    }

    /// Send one request to child `id` and wait for its answer; the child's own JSON-RPC
    /// errors pass through unchanged, the client's cancellation is passed on.
    pub(crate) async fn forward(
        &self,
        id: u64,
        request: ClientRequest,
        timeout: Option<Duration>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ServerResult, McpError> {
        let (peer, name, tool_timeout, guard) = self.peer_of(id)?;
        let options =
            rmcp::service::PeerRequestOptions::with_timeout(timeout.unwrap_or(tool_timeout));
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| McpError::internal_error(format!("server {name}: {e}"), None))?;
        let request_id = handle.id.clone();
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = handle.await_response() => r,
            _ = cancel.cancelled() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(request_id),
                        Some("cancelled by the client".into()),
                    ))
                    .await;
                return Err(McpError::internal_error("the request was cancelled", None));
            }
            _ = guard.cut_off() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(request_id),
                        Some(crate::registry::CUT_OFF_REASON.into()),
                    ))
                    .await;
                return Err(McpError::internal_error(
                    crate::failure::stopped_by_reload_message(&name),
                    None,
                ));
            }
        };
        match outcome {
            Ok(r) => Ok(r),
            Err(rmcp::service::ServiceError::McpError(e)) => Err(e),
            Err(rmcp::service::ServiceError::TransportClosed) if guard.stopped_by_reload() => Err(
                McpError::internal_error(crate::failure::stopped_by_reload_message(&name), None),
            ),
            Err(rmcp::service::ServiceError::TransportClosed) => Err(McpError::internal_error(
                format!(
                    "server {name} exited during the request; it is being restarted — try again"
                ),
                None,
            )),
            Err(e) => Err(McpError::internal_error(
                format!("server {name}: {e}"),
                None,
            )),
        }
    }

    /// Subscribe at the child for one more upstream subscriber of (`id`, `uri`).
    pub(crate) async fn hold(&self, id: u64, uri: &str) -> Result<(), McpError> {
        let first = {
            let held = self.relay.held.locked();
            !held.contains_key(&(id, uri.to_string()))
        };
        if first {
            let request = ClientRequest::SubscribeRequest(rmcp::model::Request::new(
                SubscribeRequestParams::new(uri),
            ));
            self.forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await?;
        }
        *self
            .relay
            .held
            .locked()
            .entry((id, uri.to_string()))
            .or_insert(0) += 1;
        Ok(())
    }

    /// One upstream subscriber of (`id`, `uri`) less; the last one unsubscribes at the child.
    pub(crate) async fn release(&self, id: u64, uri: &str) {
        let last = {
            let mut held = self.relay.held.locked();
            let key = (id, uri.to_string());
            match held.get_mut(&key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    held.remove(&key);
                    true
                }
                None => false,
            }
        };
        if last {
            let request = ClientRequest::UnsubscribeRequest(rmcp::model::Request::new(
                UnsubscribeRequestParams::new(uri),
            ));
            if let Err(e) = self
                .forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await
            {
                tracing::debug!("resources/unsubscribe {uri}: {}", e.message);
            }
        }
    }

    /// A child (re)started: it holds no subscriptions yet; subscribe again to what the
    /// host's clients are subscribed to there.
    pub async fn resubscribe(&self, id: u64) {
        let uris: Vec<String> = self
            .relay
            .held
            .locked()
            .keys()
            .filter(|(child, _)| *child == id)
            .map(|(_, uri)| uri.clone())
            .collect();
        for uri in uris {
            let request = ClientRequest::SubscribeRequest(rmcp::model::Request::new(
                SubscribeRequestParams::new(uri.as_str()),
            ));
            if let Err(e) = self
                .forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await
            {
                tracing::warn!(
                    "re-subscribing to {uri} after a restart failed: {}",
                    e.message
                );
            }
        }
    }

    /// `notifications/resources/updated` from child `name`: to every upstream subscriber
    /// of the URI, if this child holds that subscription.
    pub async fn relay_updated(&self, name: &str, uri: String) {
        let Some(id) = self
            .lock()
            .iter()
            .find(|c| c.spec.name == name)
            .map(|c| c.id)
        else {
            return;
        };
        if !self.relay.held.locked().contains_key(&(id, uri.clone())) {
            return; // not ours to relay (or no longer wanted)
        }
        for peer in self.upstreams.subscribers(&uri, id) {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                .await;
        }
        for sink in self.listener_sinks() {
            let wanted = sink
                .accepted()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|u| u.contains(&uri));
            if wanted {
                let _ = sink.notify_resource_updated(uri.clone()).await;
            }
        }
    }
}
