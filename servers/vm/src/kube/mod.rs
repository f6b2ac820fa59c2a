//! The Kubernetes backend (cargo feature `backend-kube`): each instance a pod of a cluster —
//! an agent-sandbox `Sandbox` when the cluster has its CRDs (`agents.x-k8s.io/v1beta1`),
//! else a plain Pod with `activeDeadlineSeconds` (vm.md §3.11).
//!
//! The pod runs kitbag-vm's own agent (uploaded through `pods/exec`, reached through
//! `pods/portforward`), so exec with process groups and detached jobs, copies, logs, ports and
//! stop behave exactly as in a sandbox or a VM. A pod belongs to the cluster, not to this
//! server; three things end it with the server: the agent's `hold` line (closed when the
//! server dies: the agent stops everything and exits, and the pod ends), the Sandbox's
//! `shutdownTime`, which the server keeps pushing forward (`--kube-lease-seconds`), and a
//! later server's sweep of pods whose owner annotation names a dead server on this host.

pub mod api;
pub mod config;
pub mod manifest;
pub mod pod;
pub mod tls;
pub mod wait;
pub mod ws;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use api::Api;
use manifest::{ANNOTATION_OWNER, Kind, LABEL_MANAGED, MANAGED_BY};

use crate::error::{VmError, VmResult};

/// What the probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    pub available: bool,
    pub detail: String,
    /// The agent-sandbox CRDs are served: instances are `Sandbox`es.
    pub sandboxes: bool,
    /// SandboxClaims are served: `image: "warmpool:NAME"` works.
    pub claims: bool,
}

/// The cluster (or why there is none), its probe (once), and the agent files to upload.
pub struct KubeEngine {
    /// Shared (not cloned) so the reason stays typed for every spawn that asks.
    pub api: Result<Api, Arc<VmError>>,
    /// How far ahead a Sandbox's `shutdownTime` is kept.
    pub lease: Duration,
    probe: tokio::sync::OnceCell<Probe>,
    payload: tokio::sync::OnceCell<Result<Arc<pod::Payload>, Arc<VmError>>>,
    pub exe: PathBuf,
}

impl KubeEngine {
    pub fn new(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
        namespace: Option<&str>,
        lease: Duration,
        exe: PathBuf,
    ) -> KubeEngine {
        let path = config::default_path(kubeconfig);
        let api = config::load(path.as_deref(), context, namespace)
            .and_then(Api::new)
            .map_err(Arc::new);
        KubeEngine {
            api,
            lease,
            probe: tokio::sync::OnceCell::new(),
            payload: tokio::sync::OnceCell::new(),
            exe,
        }
    }

    pub fn probed(&self) -> Option<&Probe> {
        self.probe.get()
    }

    /// Ask the cluster once: reachable, allowed to list pods, Sandboxes served? A server
    /// that could not answer is probed again on the next spawn.
    pub async fn probe(&self) -> Probe {
        if let Some(p) = self.probe.get() {
            return p.clone();
        }
        let probe = match &self.api {
            Err(e) => Probe {
                available: false,
                detail: e.to_string(),
                sandboxes: false,
                claims: false,
            },
            Ok(api) => describe(api).await,
        };
        if probe.available {
            if let Ok(api) = &self.api {
                let removed = sweep(api, probe.sandboxes).await;
                if removed > 0 {
                    tracing::info!("kube: removed {removed} objects of servers that are gone");
                }
            }
            let _ = self.probe.set(probe.clone());
        }
        probe
    }

    /// The agent, its libraries and start script, read once.
    pub async fn payload(&self) -> VmResult<Arc<pod::Payload>> {
        self.payload
            .get_or_init(|| async {
                let exe = self.exe.clone();
                tokio::task::spawn_blocking(move || pod::Payload::build(&exe))
                    .await
                    .unwrap_or_else(|e| Err(VmError::engine(e.to_string())))
                    .map(Arc::new)
                    .map_err(Arc::new)
            })
            .await
            .clone()
            .map_err(|e| VmError::engine(format!("the agent's files: {e}")))
    }
}

async fn describe(api: &Api) -> Probe {
    let source = api.cfg.source.clone();
    let version = match api.get("/version").await {
        Ok(v) => v["gitVersion"].as_str().unwrap_or("?").to_string(),
        Err(e) => {
            return Probe {
                available: false,
                detail: format!("{} ({source}): {e}", api.cfg.server),
                sandboxes: false,
                claims: false,
            };
        }
    };
    let ns = api.namespace();
    if let Err(e) = api
        .get(&format!("{}?limit=1", Kind::Pod.collection(ns)))
        .await
    {
        return Probe {
            available: false,
            detail: format!("cannot list pods in namespace {ns}: {e}"),
            sandboxes: false,
            claims: false,
        };
    }
    let serves = |group: &'static str, resource: &'static str| async move {
        api.get(&format!("/apis/{group}/{}", manifest::SANDBOX_VERSION))
            .await
            .is_ok_and(|list| {
                list["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x["name"] == resource))
            })
    };
    let sandboxes = serves(manifest::SANDBOX_GROUP, "sandboxes").await;
    let claims = sandboxes && serves(manifest::CLAIM_GROUP, "sandboxclaims").await;
    Probe {
        available: true,
        detail: format!(
            "{} {version}, namespace {ns} ({source}); instances are {}",
            api.cfg.server,
            match (sandboxes, claims) {
                (true, true) => "agent-sandbox Sandboxes (warm pools: image \"warmpool:NAME\")",
                (true, false) => "agent-sandbox Sandboxes",
                _ => "Pods (no agent-sandbox CRDs)",
            }
        ),
        sandboxes,
        claims,
    }
}

/// Delete what servers on this host left behind: objects kitbag-vm made whose owner is not
/// alive. Another host's objects are not ours to judge (their lease ends them).
async fn sweep(api: &Api, sandboxes: bool) -> usize {
    let mut removed = 0;
    let selector = api::q(&format!("{LABEL_MANAGED}={MANAGED_BY}"));
    let kinds: &[Kind] = if sandboxes {
        &[Kind::Claim, Kind::Sandbox, Kind::Pod]
    } else {
        &[Kind::Pod]
    };
    for kind in kinds {
        let collection = kind.collection(api.namespace());
        let Ok(list) = api
            .get(&format!("{collection}?labelSelector={selector}"))
            .await
        else {
            continue;
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let owner = item["metadata"]["annotations"][ANNOTATION_OWNER]
                .as_str()
                .unwrap_or("");
            let Some(name) = item["metadata"]["name"].as_str() else {
                continue;
            };
            // A Sandbox's own pod goes with it.
            let owned_by_sandbox = item["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| !o.is_empty());
            if crate::owner::owner_alive(owner) || (*kind == Kind::Pod && owned_by_sandbox) {
                continue;
            }
            if api.delete(&format!("{collection}/{name}"), 0).await.is_ok() {
                removed += 1;
            }
        }
    }
    removed
}
