//! The hub: the child servers, their tools, and the flat list the host offers.
//!
//! - [`child`]: one child server — its state, its client handler, its calls in flight, how it
//!   is spawned or connected;
//! - [`lifecycle`]: starting, restarting after a crash, stopping, reloading the config;
//! - [`idle`]: stopping a server that went unused, to wait for its next call again;
//! - [`notify`]: list-changed and progress notifications to the host's clients;
//! - [`flat`]: the flat list of tools, routing a name to its child, and the call itself;
//! - [`tools`]: a server's tools, parsed or compiled in (read without parsing);
//! - [`catalog`]: the merged prompts and resources kept current, and subscriptions held.

mod catalog;
mod child;
mod flat;
mod idle;
mod lifecycle;
mod notify;
mod tools;

pub use child::{
    CUT_OFF_REASON, CallGuard, Calls, Child, ChildClient, StartGuard, State, kill_group,
};
pub use flat::{FastRoute, FlatList, Listed, Route, sanitize};
use notify::ListFingerprint;
pub use tools::{CompiledTool, Tools};

use kitbag_shared::lock::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use kitbag_config::entry::ServerSpec;

const MAX_CRASHES: usize = 5;
const CRASH_WINDOW: Duration = Duration::from_secs(60);
const LIST_CHANGED_DEBOUNCE: Duration = Duration::from_millis(100);
/// How long the host waits at exit for its children to stop by themselves (after SIGTERM and
/// the end of their input) before SIGKILL. A shell's job kill grace fits well inside.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
pub struct Hub {
    children: Mutex<Vec<Child>>,
    progress: ProgressMap,
    /// Progress notifications being forwarded right now (see `drain_progress`).
    progress_inflight: std::sync::atomic::AtomicUsize,
    /// The host's clients (stdio, HTTP sessions) and their subscriptions.
    upstreams: crate::upstream::Upstreams,
    /// 2026-07-28 calls that take their child's requests, and calls parked for input.
    mrtr: Arc<crate::mrtr::Registry>,
    /// The flat list, rebuilt only when a child's tools change (not on every call).
    flat_cache: Mutex<Option<Arc<FlatList>>>,
    next_id: std::sync::atomic::AtomicU64,
    notify_pending: Mutex<bool>,
    local_progress: Mutex<Option<tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>>>,
    /// The list as last announced (names and descriptions), to skip no-op notifications.
    last_notified: Mutex<Option<ListFingerprint>>,
    /// 2026-07-28 clients' `subscriptions/listen` streams (list changes, resource updates).
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
    /// The merged prompts and resources, and resource subscriptions (catalog.rs).
    relay: crate::child_catalog::Relay,
    /// Children a reload took out of the config that are still finishing their calls; here
    /// so that `stop_all` stops them too.
    retiring: Mutex<Vec<Child>>,
    /// Bumped whenever a child leaves `Starting` (ready or failed); see `settle`.
    settled: tokio::sync::watch::Sender<u64>,
    /// `KITBAG_HOST_CONFIG` for children: the config file this host read (absolute), None
    /// for the embedded default.
    config_file: Option<std::path::PathBuf>,
    /// Custom notifications from children (e.g. kitbag-cron's `cron_fired`), for in-process
    /// listeners such as `kitbag daemon`; they also go to the upstream client.
    child_events: tokio::sync::broadcast::Sender<ChildEvent>,
    /// The tools of a server known without starting it, when it may wait for its first call.
    known: Option<KnownTools>,
    /// The kept catalogs of external servers marked `"lazy": true`.
    catalogs: Option<crate::catalog_cache::CatalogCache>,
    /// Whether some server may still be idle: false spares the byte path a lookup per call.
    some_idle: std::sync::atomic::AtomicBool,
    /// Who answers the children's questions to the operator when the host runs its own agent
    /// loop (`kitbag chat`, `run`, `daemon`); `None` when serving: its client is asked.
    operator: Mutex<Option<Arc<dyn kitbag_agent::host::Operator>>>,
    me: Weak<Hub>,
}

/// Which servers may start on their first call, and what they offer until then: `Some` for a
/// server whose tools are known without starting it (the binary's own families), None for
/// one that starts with the host.
pub type KnownTools = Arc<dyn Fn(&ServerSpec) -> Option<Known> + Send + Sync>;

/// What a server offers, known without starting it.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub tools: Tools,
    /// The families it declares beyond tools: the host declares them at its handshake, and a
    /// prompt or resource request starts the server (`wake.rs`).
    pub families: crate::child_catalog::Families,
    /// Its resource templates, so that a resource request or a subscription to one of its
    /// URIs is routed to it (and starts it) before it ever ran.
    pub templates: Vec<rmcp::model::ResourceTemplate>,
    /// Once started, it stops again after this long without a call (see `idle.rs`), unless
    /// its entry sets its own `idle_stop_secs`.
    pub idle_stop: Option<Duration>,
    /// It runs from the start all the same (cron with an entry to fire): listed at once from
    /// what is known, started in the background, so `tools/list` does not wait for it.
    pub start_now: bool,
}

/// A custom notification a child sent.
#[derive(Debug, Clone)]
pub struct ChildEvent {
    pub server: String,
    pub method: String,
    pub params: serde_json::Value,
}

/// What a reload changed.
#[derive(Debug, Default, serde::Serialize, schemars::JsonSchema)]
pub struct ReloadReport {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub unchanged: Vec<String>,
}

/// What a server offers before it starts, if it may wait for its first call: a family the
/// host knows, or an external server marked `"lazy": true` whose catalog was kept at its last
/// start (its own `idle_stop_secs` applies).
fn known_now(
    known: Option<&KnownTools>,
    catalogs: Option<&crate::catalog_cache::CatalogCache>,
    spec: &ServerSpec,
) -> Option<Known> {
    let known = known?;
    if let Some(k) = known(spec) {
        return Some(k);
    }
    if spec.entry.lazy != Some(true) {
        return None;
    }
    let (tools, families) = catalogs?.load(&spec.entry)?;
    Some(Known {
        tools: Tools::parsed(tools),
        families,
        templates: Vec::new(),
        idle_stop: None,
        start_now: false,
    })
}

impl Hub {
    /// `config_file`: the absolute path of the config the servers came from (None for the
    /// embedded default), given to every child as `KITBAG_HOST_CONFIG`.
    /// `known`: the servers that start on their first call instead (None: all start now).
    /// `catalogs`: where the catalogs of external servers marked `"lazy": true` are kept;
    /// with `known`, such a server whose catalog is there waits for its first call too.
    pub fn new(
        specs: Vec<ServerSpec>,
        config_file: Option<std::path::PathBuf>,
        known: Option<KnownTools>,
        catalogs: Option<crate::catalog_cache::CatalogCache>,
    ) -> Arc<Hub> {
        let next_id = std::sync::atomic::AtomicU64::new(0);
        let children = specs
            .into_iter()
            .map(|spec| {
                let tools = known_now(known.as_ref(), catalogs.as_ref(), &spec);
                Child::new(
                    spec,
                    next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    tools,
                )
            })
            .collect::<Vec<Child>>();
        let some_idle = children.iter().any(|c| c.state == State::Idle);
        Arc::new_cyclic(|me| Hub {
            children: Mutex::new(children),
            progress: Mutex::new(HashMap::new()),
            progress_inflight: std::sync::atomic::AtomicUsize::new(0),
            upstreams: Default::default(),
            mrtr: Default::default(),
            flat_cache: Mutex::new(None),
            next_id,
            notify_pending: Mutex::new(false),
            local_progress: Mutex::new(None),
            last_notified: Mutex::new(None),
            listeners: Mutex::new(Vec::new()),
            relay: Default::default(),
            retiring: Mutex::new(Vec::new()),
            settled: tokio::sync::watch::Sender::new(0),
            config_file,
            child_events: tokio::sync::broadcast::Sender::new(256),
            some_idle: std::sync::atomic::AtomicBool::new(some_idle),
            known,
            catalogs,
            operator: Mutex::new(None),
            me: me.clone(),
        })
    }

    /// Who answers the children's questions to the operator (the agent loop's terminal or
    /// pause), instead of the host's client.
    pub fn set_operator(&self, operator: Option<Arc<dyn kitbag_agent::host::Operator>>) {
        *self.operator.locked() = operator;
    }

    pub(crate) fn operator(&self) -> Option<Arc<dyn kitbag_agent::host::Operator>> {
        self.operator.locked().clone()
    }

    /// The host's clients and their subscriptions.
    pub(crate) fn upstreams(&self) -> &crate::upstream::Upstreams {
        &self.upstreams
    }

    /// 2026-07-28 calls that take their child's requests, and calls parked for input.
    pub(crate) fn mrtr(&self) -> &Arc<crate::mrtr::Registry> {
        &self.mrtr
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Child>> {
        self.children.locked()
    }

    /// Whether a server may be idle (`wake.rs`): false once none is.
    pub(crate) fn may_be_idle(&self) -> bool {
        self.some_idle.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Look again whether a server is idle (after one started, or a reload).
    pub(crate) fn note_idle(&self) {
        let any = self.lock().iter().any(|c| c.state == State::Idle);
        self.some_idle
            .store(any, std::sync::atomic::Ordering::Relaxed);
    }

    /// Children's custom notifications from now on.
    pub fn child_events(&self) -> tokio::sync::broadcast::Receiver<ChildEvent> {
        self.child_events.subscribe()
    }

    /// A request came from `peer`'s client: remember it (and release the subscriptions of
    /// clients that went away).
    pub fn set_upstream(&self, peer: Peer<RoleServer>) {
        let orphans = self.upstreams.seen(&peer);
        if orphans.is_empty() {
            return;
        }
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            for (id, uri) in orphans {
                hub.release(id, &uri).await;
            }
        });
    }
}
/// The environment variables that tell a child which host started it (`self_info` and
/// `self_restart` in kitbag-vm check `KITBAG_HOST_PID` against their parent pid before
/// signalling it).
pub const HOST_PID_VAR: &str = "KITBAG_HOST_PID";
pub const HOST_CONFIG_VAR: &str = "KITBAG_HOST_CONFIG";

pub fn protocol_error(msg: impl Into<String>) -> McpError {
    McpError::invalid_params(msg.into(), None)
}

/// (child id, child's token) → the caller's token and the peer of the request that made the
/// call.
type ProgressMap = Mutex<HashMap<(u64, ProgressToken), (ProgressToken, Option<Peer<RoleServer>>)>>;
