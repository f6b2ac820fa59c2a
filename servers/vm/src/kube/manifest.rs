//! The objects kitbag-vm creates: a Pod, or an agent-sandbox `Sandbox` whose `podTemplate` is
//! the same pod (fields as in `api/v1beta1/sandbox_types.go` of kubernetes-sigs/agent-sandbox).
//!
//! The pod's container starts a shell that waits for `/kitbag/run` on an `emptyDir` volume;
//! the server uploads the agent, its libraries and that script through `pods/exec`, and the
//! shell then becomes the agent. So any image with `/bin/sh` works, and nothing about the
//! agent (its token above all) is in the pod's spec. `/work`, every instance's home, is a
//! second `emptyDir`.

use serde_json::{Value, json};

use crate::cgroup::Limits;

/// Where the agent's volume is mounted in the container.
pub const KITBAG_DIR: &str = "/kitbag";
/// The container kitbag-vm runs its agent in.
pub const CONTAINER: &str = "main";
/// The agent's port on the pod's own loopback, reached through `pods/portforward`.
pub const AGENT_PORT: u16 = 39_411;

pub const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "kitbag-vm";
pub const LABEL_INSTANCE: &str = "kitbag.dev/instance";
/// `host/pid/start-time` of the server that owns it (an annotation: label values cannot
/// hold slashes).
pub const ANNOTATION_OWNER: &str = "kitbag.dev/owner";

pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
pub const SANDBOX_VERSION: &str = "v1beta1";
/// SandboxClaims, SandboxTemplates and SandboxWarmPools (agent-sandbox's extensions).
pub const CLAIM_GROUP: &str = "extensions.agents.x-k8s.io";
/// Where the agent goes in a warm pool's pod, whose spec is its template's, not ours.
pub const CLAIM_DIR: &str = "/tmp/kitbag";
/// `image: "warmpool:NAME"` claims a Sandbox from that SandboxWarmPool.
pub const WARMPOOL_PREFIX: &str = "warmpool:";

/// What the engine makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Sandbox,
    /// A SandboxClaim against a warm pool: the Sandbox and its pod come from the pool.
    Claim,
}

impl Kind {
    /// The collection's path in `namespace`.
    pub fn collection(self, namespace: &str) -> String {
        match self {
            Kind::Pod => format!("/api/v1/namespaces/{namespace}/pods"),
            Kind::Sandbox => {
                format!("/apis/{SANDBOX_GROUP}/{SANDBOX_VERSION}/namespaces/{namespace}/sandboxes")
            }
            Kind::Claim => {
                format!(
                    "/apis/{CLAIM_GROUP}/{SANDBOX_VERSION}/namespaces/{namespace}/sandboxclaims"
                )
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::Sandbox => "sandbox",
            Kind::Claim => "sandbox claim",
        }
    }

    /// The directory the agent's files go to in the pod.
    pub fn agent_dir(self) -> &'static str {
        match self {
            Kind::Claim => CLAIM_DIR,
            _ => KITBAG_DIR,
        }
    }
}

pub struct Manifest<'a> {
    pub name: &'a str,
    pub id: &'a str,
    pub hostname: &'a str,
    pub image: &'a str,
    pub owner: &'a str,
    pub limits: Limits,
    /// `activeDeadlineSeconds` (a Pod's hard lifetime; a Sandbox uses `shutdownTime`).
    pub ttl_seconds: u64,
}

/// `/work`'s volume: an emptyDir, with `sizeLimit` when `resources.disk_mb` asks for one (the
/// kubelet evicts the pod past it).
fn work_volume(disk_mb: Option<u64>) -> Value {
    match disk_mb {
        Some(mb) => json!({ "sizeLimit": format!("{mb}Mi") }),
        None => json!({}),
    }
}

/// The shell the container starts with: wait for the uploaded start script, then become it.
pub fn boot_command() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "while [ ! -f {KITBAG_DIR}/run ]; do sleep 0.2; done; exec /bin/sh {KITBAG_DIR}/run"
        ),
    ]
}

fn metadata(m: &Manifest<'_>) -> Value {
    json!({
        "labels": { LABEL_MANAGED: MANAGED_BY, LABEL_INSTANCE: m.id },
        "annotations": { ANNOTATION_OWNER: m.owner },
    })
}

/// The pod's spec (also a Sandbox's `podTemplate.spec`).
pub fn pod_spec(m: &Manifest<'_>) -> Value {
    let mut limits = json!({ "memory": format!("{}Mi", m.limits.memory_mb) });
    if m.limits.cpus > 0.0 {
        limits["cpu"] = json!(format!("{}m", (m.limits.cpus * 1000.0).round() as u64));
    }
    let hostname: String = m
        .hostname
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(63)
        .collect();
    let mut spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": CONTAINER,
            "image": m.image,
            "command": boot_command(),
            "volumeMounts": [
                { "name": "kitbag", "mountPath": KITBAG_DIR },
                { "name": "work", "mountPath": "/work" },
            ],
            "resources": { "limits": limits.clone(), "requests": limits },
        }],
        // /work (the instances' home and default cwd) exists and is writable in any image.
        "volumes": [{ "name": "kitbag", "emptyDir": {} }, { "name": "work", "emptyDir": work_volume(m.limits.disk_mb) }],
    });
    let hostname = hostname.trim_matches('-');
    if !hostname.is_empty() {
        spec["hostname"] = json!(hostname);
    }
    spec
}

pub fn pod(m: &Manifest<'_>) -> Value {
    let mut meta = metadata(m);
    meta["name"] = json!(m.name);
    let mut spec = pod_spec(m);
    if m.ttl_seconds > 0 {
        spec["activeDeadlineSeconds"] = json!(m.ttl_seconds);
    }
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec })
}

/// A Sandbox that expires at `shutdown_time` (RFC 3339) unless renewed, and is then deleted.
pub fn sandbox(m: &Manifest<'_>, shutdown_time: &str) -> Value {
    let mut meta = metadata(m);
    meta["name"] = json!(m.name);
    json!({
        "apiVersion": format!("{SANDBOX_GROUP}/{SANDBOX_VERSION}"),
        "kind": "Sandbox",
        "metadata": meta,
        "spec": {
            "podTemplate": { "metadata": metadata(m), "spec": pod_spec(m) },
            "operatingMode": "Running",
            "shutdownTime": shutdown_time,
            "shutdownPolicy": "Delete",
        },
    })
}

/// A SandboxClaim on warm pool `pool`, expiring at `shutdown_time` unless renewed (fields as
/// in `extensions/api/v1beta1/sandboxclaim_types.go`).
pub fn claim(m: &Manifest<'_>, pool: &str, shutdown_time: &str) -> Value {
    let mut meta = metadata(m);
    meta["name"] = json!(m.name);
    json!({
        "apiVersion": format!("{CLAIM_GROUP}/{SANDBOX_VERSION}"),
        "kind": "SandboxClaim",
        "metadata": meta,
        "spec": {
            "warmPoolRef": { "name": pool },
            "lifecycle": { "shutdownTime": shutdown_time, "shutdownPolicy": "Delete" },
            "additionalPodMetadata": { "labels": { LABEL_INSTANCE: m.id } },
        },
    })
}

/// `network: "none"`: a NetworkPolicy that selects the instance's pod and allows no ingress
/// and no egress, owned by the pod's object so it goes with it. Only a CNI that implements
/// NetworkPolicy enforces it; port-forward (the agent's line) is not affected either way.
pub fn deny_all_policy(name: &str, id: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "labels": { LABEL_MANAGED: MANAGED_BY, LABEL_INSTANCE: id },
            "ownerReferences": [{
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }],
        },
        "spec": {
            "podSelector": { "matchLabels": { LABEL_INSTANCE: id } },
            "policyTypes": ["Ingress", "Egress"],
        },
    })
}

pub fn policies(namespace: &str) -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies")
}

/// The object name for an instance id: a DNS label.
pub fn object_name(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = format!("kitbag-{clean}");
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn manifest() -> Manifest<'static> {
        Manifest {
            name: "kitbag-i-1",
            id: "i-1",
            hostname: "Web_1",
            image: "debian:bookworm",
            owner: "host/1/2",
            limits: Limits {
                memory_mb: 512,
                cpus: 0.5,
                pids: 100,
                disk_mb: None,
            },
            ttl_seconds: 60,
        }
    }

    #[test]
    fn disk_mb_is_the_work_volumes_size_limit() {
        let volume = |p: &Value| p["spec"]["volumes"][1].clone();
        let plain = pod(&manifest());
        assert_eq!(volume(&plain), json!({ "name": "work", "emptyDir": {} }));
        let mut m = manifest();
        m.limits.disk_mb = Some(256);
        assert_eq!(
            volume(&pod(&m)),
            json!({ "name": "work", "emptyDir": { "sizeLimit": "256Mi" } })
        );
    }

    #[test]
    fn a_pod_carries_the_boot_shell_the_volume_and_limits() {
        let p = pod(&manifest());
        assert_eq!(p["kind"], "Pod");
        assert_eq!(p["spec"]["activeDeadlineSeconds"], 60);
        assert_eq!(p["spec"]["hostname"], "web1");
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["command"][0], "/bin/sh");
        assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
        assert_eq!(c["resources"]["limits"]["cpu"], "500m");
        assert_eq!(c["volumeMounts"][0]["mountPath"], KITBAG_DIR);
        assert_eq!(p["metadata"]["labels"][LABEL_MANAGED], MANAGED_BY);
        assert_eq!(p["metadata"]["annotations"][ANNOTATION_OWNER], "host/1/2");
    }

    /// Every field kitbag-vm writes exists in agent-sandbox's API types
    /// (`api/v1beta1/sandbox_types.go`, `extensions/api/v1beta1/sandboxclaim_types.go`).
    #[test]
    fn fields_are_the_crds_own() {
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        let within = |got: Vec<String>, allowed: &[&str], what: &str| {
            for k in got {
                assert!(
                    allowed.contains(&k.as_str()),
                    "{what}.{k} is not in the CRD"
                );
            }
        };
        let s = sandbox(&manifest(), "2026-11-26T22:00:00Z");
        within(
            keys(&s["spec"]),
            &[
                "podTemplate",
                "volumeClaimTemplates",
                "service",
                "shutdownTime",
                "shutdownPolicy",
                "operatingMode",
            ],
            "Sandbox.spec",
        );
        within(
            keys(&s["spec"]["podTemplate"]),
            &["spec", "metadata"],
            "podTemplate",
        );
        within(
            keys(&s["spec"]["podTemplate"]["metadata"]),
            &["labels", "annotations"],
            "podTemplate.metadata",
        );
        let c = claim(&manifest(), "pool", "2026-11-26T22:00:00Z");
        within(
            keys(&c["spec"]),
            &[
                "warmPoolRef",
                "lifecycle",
                "additionalPodMetadata",
                "safeToEvict",
                "env",
            ],
            "SandboxClaim.spec",
        );
        within(
            keys(&c["spec"]["lifecycle"]),
            &["shutdownTime", "ttlSecondsAfterFinished", "shutdownPolicy"],
            "SandboxClaim.spec.lifecycle",
        );
        within(
            keys(&c["spec"]["additionalPodMetadata"]),
            &["labels", "annotations"],
            "additionalPodMetadata",
        );
    }

    #[test]
    fn a_sandbox_wraps_the_same_pod_and_expires() {
        let s = sandbox(&manifest(), "2026-11-26T22:00:00Z");
        assert_eq!(s["apiVersion"], "agents.x-k8s.io/v1beta1");
        assert_eq!(s["spec"]["shutdownPolicy"], "Delete");
        assert_eq!(s["spec"]["shutdownTime"], "2026-11-26T22:00:00Z");
        assert!(s["spec"]["podTemplate"]["spec"]["activeDeadlineSeconds"].is_null());
        assert_eq!(
            s["spec"]["podTemplate"]["spec"]["containers"][0]["name"],
            CONTAINER
        );
        assert_eq!(object_name("I_7.x"), "kitbag-i-7-x");
        let c = claim(&manifest(), "python", "2026-11-26T22:00:00Z");
        assert_eq!(c["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
        assert_eq!(c["spec"]["warmPoolRef"]["name"], "python");
        assert_eq!(c["spec"]["lifecycle"]["shutdownPolicy"], "Delete");
        let owner = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kitbag-i-1", "uid": "u-1"}});
        let p = deny_all_policy("kitbag-i-1", "i-1", &owner);
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(
            p["spec"]["podSelector"]["matchLabels"][LABEL_INSTANCE],
            "i-1"
        );
        assert!(p["spec"]["ingress"].is_null() && p["spec"]["egress"].is_null());
    }
}
