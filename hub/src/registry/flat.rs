//! The flat list the host offers (every child's tools under their offered names, collisions
//! reported), the route from an offered name to its child, and the call through rmcp.

use super::Hub;
use super::child::{CUT_OFF_REASON, CallGuard, State};
use super::notify::upstream_progress_mapped;
use super::tools::Tools;

use kitbag_shared::lock::LockExt;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressToken, ServerResult, Tool,
};
use rmcp::service::{Peer, RoleServer};

use crate::failure::CallFailure;
use kitbag_config::settings::DEFAULT_TOOL_TIMEOUT;

/// A tool as offered upstream.
#[derive(Debug, Clone)]
pub struct Route {
    pub child: usize,
    pub child_id: u64,
    pub original: String,
    /// Arguments the child marked private (`kitbag/private_args`): logged by size only.
    pub private_args: Arc<[String]>,
}

/// Where a byte-level call goes ([`Hub::fast_route`]).
pub struct FastRoute {
    pub link: Arc<crate::fastpath::FastLink>,
    pub private_args: Arc<[String]>,
    /// The tool's name at its server.
    pub original: String,
    pub server: String,
    pub timeout: Duration,
    pub guard: CallGuard,
}

/// The flat list: every child's tools under their offered names, in name order.
#[derive(Default)]
pub struct FlatList {
    pub listed: Vec<Listed>,
    pub routes: BTreeMap<String, Route>,
    /// "server.tool → offered name: taken by other_server" reports.
    pub collisions: Vec<String>,
    /// The listed tools as `Tool`s under their offered names, built on first use.
    tools: OnceLock<Vec<Tool>>,
}

/// One tool of the flat list: its offered name and where it comes from.
pub struct Listed {
    pub name: String,
    source: Tools,
    index: usize,
}

impl Listed {
    /// Its description, as its server gives it.
    pub fn description(&self) -> Option<&str> {
        self.source.description(self.index)
    }

    /// The tool under its offered name (parsing its compiled-in catalog the first time).
    pub fn tool(&self) -> Option<Tool> {
        let mut t = self.source.all().get(self.index)?.clone();
        t.name = self.name.clone().into();
        Some(t)
    }

    /// Its JSON text as offered, when at hand without serializing: a compiled-in catalog's
    /// tool offered under its own name.
    pub fn text(&self) -> Option<&'static str> {
        let text = self.source.text(self.index)?;
        (self.source.name(self.index) == Some(self.name.as_str())).then_some(text)
    }
}

impl FlatList {
    /// The listed tools as `Tool`s (parsing compiled-in catalogs the first time).
    pub fn tools(&self) -> &[Tool] {
        self.tools
            .get_or_init(|| self.listed.iter().filter_map(Listed::tool).collect())
    }

    /// Each listed tool's name and JSON text, in the list's order: a compiled-in catalog's
    /// own text where it is offered under its own name, else the tool serialized.
    pub fn tools_text(&self) -> Vec<(&str, Cow<'_, str>)> {
        self.listed
            .iter()
            .filter_map(|l| {
                let text = match l.text() {
                    Some(text) => Cow::Borrowed(text),
                    None => Cow::Owned(serde_json::to_string(&l.tool()?).ok()?),
                };
                Some((l.name.as_str(), text))
            })
            .collect()
    }
}

/// Tool names every client accepts: `[A-Za-z0-9_-]`, at most 64 characters.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.chars().take(64).collect()
}

fn glob_match(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| {
        globset::Glob::new(p)
            .map(|g| g.compile_matcher().is_match(name))
            .unwrap_or(p == name)
    })
}

impl Hub {
    pub(super) fn invalidate_flat(&self) {
        *self.flat_cache.locked() = None;
        self.relay.invalidate();
    }

    /// The flat, sorted, deterministic list; collisions resolved by config order.
    pub fn flat(&self) -> Arc<FlatList> {
        if let Some(f) = self.flat_cache.locked().as_ref() {
            return f.clone();
        }
        let flat = Arc::new(self.build_flat());
        *self.flat_cache.locked() = Some(flat.clone());
        flat
    }

    fn build_flat(&self) -> FlatList {
        let c = self.lock();
        let mut flat = FlatList::default();
        let mut owner: HashMap<String, String> = HashMap::new();
        for (i, child) in c.iter().enumerate() {
            let e = &child.spec.entry;
            for (index, original) in child.tools.names().enumerate() {
                if let Some(only) = &e.enabled_tools
                    && !glob_match(only, original)
                {
                    continue;
                }
                if glob_match(&e.disabled_tools, original) {
                    continue;
                }
                let offered = match e.aliases.get(original) {
                    Some(a) => sanitize(a),
                    None => sanitize(&format!(
                        "{}{}",
                        e.prefix.clone().unwrap_or_default(),
                        original
                    )),
                };
                if let Some(first) = owner.get(&offered) {
                    flat.collisions.push(format!(
                        "{}.{original} → {offered}: already offered by {first}; set `prefix` or `aliases` for {}",
                        child.spec.name, child.spec.name
                    ));
                    continue;
                }
                owner.insert(offered.clone(), child.spec.name.clone());
                flat.listed.push(Listed {
                    name: offered.clone(),
                    source: child.tools.clone(),
                    index,
                });
                flat.routes.insert(
                    offered,
                    Route {
                        child: i,
                        child_id: child.id,
                        original: original.to_string(),
                        private_args: child.tools.private_args(index).into(),
                    },
                );
            }
        }
        flat.listed.sort_by(|a, b| a.name.cmp(&b.name));
        flat
    }

    pub fn server_name(&self, child: usize) -> String {
        self.lock()
            .get(child)
            .map(|c| c.spec.name.clone())
            .unwrap_or_default()
    }

    /// For the byte-level path: the link, original tool name, server name and tool timeout
    /// of a tool whose server is ready, and the call's place among the server's calls in
    /// flight (hold it until the answer is in).
    pub fn fast_route(&self, name: &str) -> Option<FastRoute> {
        let route = self.route(name)?;
        let c = self.lock();
        let child = c.iter().find(|c| c.id == route.child_id)?;
        if child.state != State::Ready {
            return None;
        }
        let link = child.fast.clone().filter(|l| l.is_open())?;
        let timeout = child
            .spec
            .entry
            .tool_timeout_sec
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TOOL_TIMEOUT);
        Some(FastRoute {
            link,
            private_args: route.private_args,
            original: route.original,
            server: child.spec.name.clone(),
            timeout,
            guard: child.calls.begin(),
        })
    }

    /// Find the route for a tool name as offered, or as the child spells it (e.g. dotted).
    pub fn route(&self, name: &str) -> Option<Route> {
        let flat = self.flat();
        flat.routes
            .get(name)
            .cloned()
            .or_else(|| flat.routes.get(&sanitize(name)).cloned())
    }

    /// Forward a call; a child that is down or dies mid-call gives an error result, never a hang.
    pub async fn call(
        &self,
        route: &Route,
        arguments: Option<rmcp::model::JsonObject>,
        upstream_progress: Option<(ProgressToken, Option<Peer<RoleServer>>)>,
        cancel: tokio_util::sync::CancellationToken,
        trace: Option<kitbag_shared::otel::Propagate>,
    ) -> Result<CallToolResult, CallFailure> {
        let mut woken = false;
        let (connected, name, timeout, state) = loop {
            let found = {
                let c = self.lock();
                let Some(child) = c.iter().find(|c| c.id == route.child_id) else {
                    return Err(CallFailure::Removed);
                };
                (
                    // Counted from here, under the lock: a reload waits for this call.
                    child.peer.clone().map(|peer| (peer, child.calls.begin())),
                    child.spec.name.clone(),
                    child
                        .spec
                        .entry
                        .tool_timeout_sec
                        .map(Duration::from_secs)
                        .unwrap_or(DEFAULT_TOOL_TIMEOUT),
                    child.state.clone(),
                )
            };
            // Stopped for being unused since the caller woke it (`idle.rs`): started again.
            match (&found.3, self.me.upgrade()) {
                (State::Idle, Some(hub)) if !woken => {
                    woken = true;
                    hub.wake(route.child_id).await;
                }
                _ => break found,
            }
        };
        let Some((peer, guard)) = connected else {
            return Err(match state {
                State::Restarting | State::Starting => CallFailure::Restarting { name },
                _ => CallFailure::NotRunning { name },
            });
        };
        let mut params = CallToolRequestParams::new(route.original.clone());
        params.arguments = arguments;
        let mut request = ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        if let Some(trace) = &trace {
            trace.apply(rmcp::model::GetMeta::get_meta_mut(&mut request));
        }
        let options =
            rmcp::service::PeerRequestOptions::with_timeout(timeout).reset_timeout_on_progress();
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| CallFailure::Service {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        let key = (route.child_id, handle.progress_token.clone());
        if let Some(up) = upstream_progress {
            self.progress.locked().insert(key.clone(), up);
        }
        let id = handle.id.clone();
        // Err: the call ends here, not at the child — the client cancelled it, or a reload
        // stopped waiting for it.
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = handle.await_response() => Ok(r),
            _ = cancel.cancelled() => Err(("cancelled by the client", CallFailure::Cancelled)),
            _ = guard.cut_off() => Err((CUT_OFF_REASON, CallFailure::StoppedByReload { name: name.clone() })),
        };
        if upstream_progress_mapped(&self.progress, &key) {
            self.drain_progress().await;
        }
        self.progress.locked().remove(&key);
        match outcome {
            Err((reason, answer)) => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some(reason.into()),
                    ))
                    .await;
                Err(answer)
            }
            Ok(Ok(ServerResult::CallToolResult(mut r))) => {
                r.result_type = Some(rmcp::model::ResultType::COMPLETE);
                Ok(r)
            }
            Ok(Ok(other)) => Err(CallFailure::Unexpected {
                name,
                result: format!("{other:?}"),
            }),
            Ok(Err(rmcp::service::ServiceError::TransportClosed)) if guard.stopped_by_reload() => {
                Err(CallFailure::StoppedByReload { name })
            }
            Ok(Err(rmcp::service::ServiceError::TransportClosed)) => {
                Err(CallFailure::Exited { name })
            }
            Ok(Err(e)) => Err(CallFailure::Service {
                name,
                reason: e.to_string(),
            }),
        }
    }
}
