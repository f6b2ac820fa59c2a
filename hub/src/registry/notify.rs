//! What the hub tells the host's clients on its own: list-changed notifications (debounced,
//! and only when a list really changed) and the progress of calls, forwarded under the
//! caller's token.

use super::child::State;
use super::{Hub, LIST_CHANGED_DEBOUNCE, ProgressMap};

use kitbag_shared::lock::LockExt;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleClient, SubscriptionContext, SubscriptionSink};

/// What list-changed notifications compare: the offered tools and prompts (names and
/// descriptions, in order) and the resource URIs and templates.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct ListFingerprint {
    tools: Vec<(String, Option<String>)>,
    prompts: Vec<(String, Option<String>)>,
    resources: Vec<String>,
}

/// Which of the offered lists changed.
#[derive(Debug, Clone, Copy, Default)]
struct Changed {
    tools: bool,
    prompts: bool,
    resources: bool,
}

impl Hub {
    pub(super) fn fingerprint(&self) -> ListFingerprint {
        let (prompts, resources) = self.catalog().fingerprint();
        ListFingerprint {
            tools: self
                .flat()
                .listed
                .iter()
                .map(|t| (t.name.clone(), t.description().map(str::to_string)))
                .collect(),
            prompts,
            resources,
        }
    }

    /// Tell the client the lists changed now (the agent policy changed what it may see).
    pub async fn notify_list_changed_now(&self) {
        let any = self.catalog().any();
        self.announce_list_changed(Changed {
            tools: true,
            prompts: any.prompts,
            resources: any.resources,
        })
        .await;
    }

    pub(crate) fn listener_sinks(&self) -> Vec<SubscriptionSink> {
        self.listeners
            .locked()
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect()
    }

    /// Send `{tools,prompts,resources}/list_changed` to every handshake-era client and on
    /// every 2026-07-28 subscription stream that asked for it.
    async fn announce_list_changed(&self, changed: Changed) {
        for p in self.upstreams.all() {
            if changed.tools {
                let _ = p.notify_tool_list_changed().await;
            }
            if changed.prompts {
                let _ = p.notify_prompt_list_changed().await;
            }
            if changed.resources {
                let _ = p.notify_resource_list_changed().await;
            }
        }
        for sink in self.listener_sinks() {
            let accepted = sink.accepted().clone();
            if changed.tools && accepted.tools_list_changed == Some(true) {
                let _ = sink.notify_tool_list_changed().await;
            }
            if changed.prompts && accepted.prompts_list_changed == Some(true) {
                let _ = sink.notify_prompt_list_changed().await;
            }
            if changed.resources && accepted.resources_list_changed == Some(true) {
                let _ = sink.notify_resource_list_changed().await;
            }
        }
    }

    /// Serve one `subscriptions/listen` stream until the client cancels it.
    pub async fn listen(&self, context: SubscriptionContext) {
        let accepted = context.accepted();
        let wanted = accepted.tools_list_changed == Some(true)
            || accepted.prompts_list_changed == Some(true)
            || accepted.resources_list_changed == Some(true)
            || accepted
                .resource_subscriptions
                .as_ref()
                .is_some_and(|u| !u.is_empty());
        if !wanted {
            context.cancelled().await;
            return;
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.listeners.locked().push((id, context.sink().clone()));
        context.cancelled().await;
        self.listeners.locked().retain(|(i, _)| *i != id);
    }

    /// Tell the client the list changed — debounced (several children starting or a reload
    /// produce one notification) and only when the offered list really differs.
    pub(crate) async fn notify_list_changed(&self) {
        {
            let mut pending = self.notify_pending.locked();
            if *pending {
                return; // a notification is already on its way and will see this change
            }
            *pending = true;
        }
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            tokio::time::sleep(LIST_CHANGED_DEBOUNCE).await;
            *hub.notify_pending.locked() = false;
            let fingerprint = hub.fingerprint();
            let changed = {
                let mut last = hub.last_notified.locked();
                let before = last.clone().unwrap_or_default();
                *last = Some(fingerprint.clone());
                Changed {
                    tools: before.tools != fingerprint.tools,
                    prompts: before.prompts != fingerprint.prompts,
                    resources: before.resources != fingerprint.resources,
                }
            };
            if changed.tools || changed.prompts || changed.resources {
                hub.announce_list_changed(changed).await;
            }
        });
    }

    /// rmcp hands a child's notifications to spawned tasks but its response straight to the
    /// waiting call, so the last progress a child sent before its answer could arrive after
    /// it — and be dropped with the call's token mapping (the conformance suite's
    /// `tools-call-with-progress` saw 2 of 3). Before a call with a progress token is
    /// answered, the progress tasks already queued get to run and finish forwarding.
    /// rmcp gives no ordering between the two, so this is a bounded wait: the queued tasks
    /// are yielded to, then a few milliseconds (a loaded machine may start them late), then
    /// any forward still running is waited for (at most 200 ms).
    pub(super) async fn drain_progress(&self) {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        for _ in 0..200 {
            if self
                .progress_inflight
                .load(std::sync::atomic::Ordering::Acquire)
                == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub(super) async fn forward_progress(&self, child: u64, params: ProgressNotificationParam) {
        use std::sync::atomic::Ordering;
        self.progress_inflight.fetch_add(1, Ordering::AcqRel);
        self.forward_progress_now(child, params).await;
        self.progress_inflight.fetch_sub(1, Ordering::AcqRel);
    }

    async fn forward_progress_now(&self, child: u64, mut params: ProgressNotificationParam) {
        let upstream_token = {
            let map = self.progress.locked();
            map.get(&(child, params.progress_token.clone())).cloned()
        };
        let peer = self.upstreams.latest();
        let Some((token, caller)) = upstream_token else {
            return;
        };
        params.progress_token = token;
        // With an MCP client, the calling request's own peer: over HTTP every request has
        // one, and the shared upstream peer is only the latest (progress of concurrent calls
        // went to the wrong, often finished, request). Without one, the CLI's sink below.
        let peer = caller.or(peer);
        if let Some(peer) = peer {
            let _ = peer.notify_progress(params).await;
        } else if let Some(sink) = self.local_progress.locked().as_ref() {
            // No MCP client: the CLI (`kitbag call`) shows progress itself.
            let _ = sink.send(params);
        }
    }

    /// The peers of ready children that declared logging.
    pub(crate) fn logging_children(&self) -> Vec<Peer<RoleClient>> {
        self.lock()
            .iter()
            .filter(|c| c.state == State::Ready && c.catalog.families.logging)
            .filter_map(|c| c.peer.clone())
            .collect()
    }

    /// Stop delivering local progress (ends the receiver's stream).
    pub fn clear_local_progress(&self) {
        *self.local_progress.locked() = None;
    }

    /// Receive progress of calls made without an MCP client (the CLI).
    pub fn local_progress(
        &self,
    ) -> tokio::sync::mpsc::UnboundedReceiver<ProgressNotificationParam> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.local_progress.locked() = Some(tx);
        rx
    }
}
pub(super) fn upstream_progress_mapped(map: &ProgressMap, key: &(u64, ProgressToken)) -> bool {
    map.locked().contains_key(key)
}
