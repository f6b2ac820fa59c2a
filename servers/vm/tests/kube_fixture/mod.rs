//! An in-repo Kubernetes API server for tests: what a real kube-apiserver, a kubelet and the
//! agent-sandbox controller would do, for the pieces kitbag-vm's Kubernetes backend uses —
//! and checked against real clients (`kubectl`, the Python `kubernetes` client) by
//! `tests/kube_api.rs`, so it is not a fake that only matches our own client.
//!
//! - **API** ([`http`], [`api`], [`watch`]): discovery, create/get/list/watch/update/patch/
//!   delete and the `status` subresource of pods, namespaces and the agent-sandbox resources
//!   (`agents.x-k8s.io/v1beta1` sandboxes; `extensions.agents.x-k8s.io/v1beta1`
//!   sandboxclaims, sandboxwarmpools, sandboxtemplates — only with
//!   [`FixtureOptions::sandbox_crds`]). JSON only: no protobuf, no OpenAPI (kubectl needs
//!   `--validate=false`), no server-side apply, no Table output (kubectl prints its own).
//! - **Kubelet** ([`pods`]): each Pod runs as a real kitbag-vm bubblewrap sandbox whose main
//!   command is the first container's `command` + `args`. The image is recorded, never
//!   pulled: the sandbox's root is the host's (read-only), with `/work` writable and
//!   `emptyDir` volumes bound read-write. `podIP` is `127.0.0.1`: the pod has its own network
//!   namespace, reached only through exec and port-forward.
//! - **Controllers** ([`controller`]): Sandbox → Pod, SandboxClaim → Sandbox, garbage
//!   collection of owned objects, `shutdownTime` checked every 100 ms.
//! - **Streams** ([`stream`]): `pods/exec` and `pods/portforward` over WebSocket (the
//!   `v5`/`v4.channel.k8s.io` protocols), `pods/log`; kubectl's `port-forward`
//!   ([`portforward`]): the `portforward.k8s.io` protocol over SPDY/3.1 ([`spdy`]), tunnelled
//!   in a WebSocket or on a plain upgrade ([`transport`]).
//!
//! Every request needs `Authorization: Bearer <token>`. The port serves plain HTTP and, told
//! apart by the first byte, HTTPS ([`tls`]): kubectl sends a token only over TLS, so
//! kubectl gets [`Fixture::write_kubeconfig_tls`]'s kubeconfig.
//!
//! Not implemented: protobuf, OpenAPI, Table output, server-side apply, SPDY for `exec`
//! (kubectl 1.32 uses WebSocket v5), `tty`, strategic merge by list keys (treated as a merge patch), list
//! `resourceVersionMatch`, container restarts, containers after the first, volumes other
//! than emptyDir, `$(VAR)` expansion in command/args, real warm-pool pre-warming.

#![allow(dead_code)]

pub mod api;
pub mod clients;
pub mod controller;
pub mod http;
pub mod patch;
pub mod pods;
pub mod portforward;
pub mod resources;
pub mod select;
pub mod shape;
pub mod spdy;
pub mod store;
pub mod stream;
pub mod tls;
pub mod transport;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use store::Store;

/// What the fixture serves and where it keeps its sandboxes.
#[derive(Debug, Clone)]
pub struct FixtureOptions {
    /// Serve `agents.x-k8s.io/v1beta1` and `extensions.agents.x-k8s.io/v1beta1`.
    pub sandbox_crds: bool,
    /// The bearer token every request must carry.
    pub token: String,
    /// The kitbag-vm binary (`env!("CARGO_BIN_EXE_kitbag-vm")`): each pod's agent.
    pub agent_exe: PathBuf,
    /// Pod directories (`instances/<id>`: work, logs, agent socket) and emptyDir volumes.
    pub state_dir: PathBuf,
}

/// State shared by the server, the controllers and the streams.
pub struct Inner {
    pub opts: FixtureOptions,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    store: Mutex<Store>,
    requests: Mutex<Vec<String>>,
    pub kubelet: pods::Kubelet,
    pub tls: tls::Tls,
    /// What kubectl's port-forward sessions (SPDY) did.
    pub portforward: portforward::SharedStats,
    pub cancel: CancellationToken,
}

impl Inner {
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn log_request(&self, line: String) {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    }
}

/// A running fixture: an HTTP/1.1 server on `127.0.0.1`, its controllers and pods.
pub struct Fixture {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// `https://127.0.0.1:PORT`: the same server over TLS (certificate from a private CA, see
    /// [`Fixture::write_kubeconfig_tls`]).
    pub https_url: String,
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
}

/// Events kept for watches unless [`Fixture::set_history_limit`] says otherwise.
pub const DEFAULT_HISTORY: usize = 1000;

impl Fixture {
    pub async fn start(opts: FixtureOptions) -> Fixture {
        std::fs::create_dir_all(opts.state_dir.join("instances")).expect("state dir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr").to_string();
        let inner = Arc::new(Inner {
            kubelet: pods::Kubelet::new().expect("spawner thread"),
            tls: tls::Tls::new(&opts.state_dir),
            opts,
            addr: addr.clone(),
            store: Mutex::new(Store::new(DEFAULT_HISTORY)),
            requests: Mutex::new(Vec::new()),
            portforward: Default::default(),
            cancel: CancellationToken::new(),
        });
        api::create_builtin_namespaces(&inner);
        let tasks = vec![
            tokio::spawn(http::serve(inner.clone(), listener)),
            tokio::spawn(controller::run(inner.clone())),
        ];
        Fixture {
            url: format!("http://{addr}"),
            https_url: format!("https://{addr}"),
            inner,
            tasks,
        }
    }

    /// A kubeconfig for this server: one cluster at [`Fixture::url`] (plain HTTP), the token
    /// as its user, a context with `namespace`, made current. kubectl sends no credentials
    /// over plain HTTP: give it [`Fixture::write_kubeconfig_tls`]'s.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) {
        self.kubeconfig(path, namespace, &self.url, None);
    }

    /// The same over HTTPS ([`Fixture::https_url`]) with the fixture's CA
    /// (`certificate-authority-data`), as a real cluster's kubeconfig.
    pub fn write_kubeconfig_tls(&self, path: &Path, namespace: &str) {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.inner.tls.ca_pem);
        self.kubeconfig(path, namespace, &self.https_url, Some(ca));
    }

    fn kubeconfig(&self, path: &Path, namespace: &str, server: &str, ca: Option<String>) {
        let ca = ca
            .map(|c| format!("    certificate-authority-data: {c}\n"))
            .unwrap_or_default();
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kitbag-fixture\n  cluster:\n    server: {server}\n{ca}users:\n- name: kitbag-fixture\n  user:\n    token: {token:?}\ncontexts:\n- name: kitbag-fixture\n  context:\n    cluster: kitbag-fixture\n    user: kitbag-fixture\n    namespace: {namespace:?}\ncurrent-context: kitbag-fixture\npreferences: {{}}\n",
            token = self.inner.opts.token,
        );
        std::fs::write(path, text).expect("write kubeconfig");
    }

    /// Names of the pods whose bubblewrap sandbox still runs.
    pub fn live_pods(&self) -> Vec<String> {
        self.inner.kubelet.live()
    }

    /// `METHOD path?query` of every request served, in order.
    pub fn requests(&self) -> Vec<String> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A stored object (`ns` is ignored for cluster-scoped resources).
    pub fn object(&self, kind_plural: &str, ns: &str, name: &str) -> Option<Value> {
        let r = resources::by_plural(kind_plural)?;
        self.inner.store().get(&store::key(r, ns, name)).cloned()
    }

    /// Keep only the newest `events` events for watches (older start points get
    /// `410 Expired`); trims the history now.
    pub fn set_history_limit(&self, events: usize) {
        self.inner.store().set_history_limit(events);
    }

    /// What the SPDY port-forward sessions (kubectl's) did so far.
    pub fn portforward_stats(&self) -> portforward::Stats {
        self.inner
            .portforward
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The cluster's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store().current_rv()
    }

    /// Stop serving, stop every sandbox, and check that none is left.
    pub async fn shutdown(self) {
        self.inner.cancel.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        let leftover = self.inner.kubelet.stop_all().await;
        assert!(
            leftover.is_empty(),
            "sandbox processes left after shutdown: {leftover:?}"
        );
    }
}
