//! The team profile's workspace runner: a `kitbag serve --http` with every local family on a
//! persistent volume, reached by the gateways only (mutual TLS and the runner token). Run by
//! a StatefulSet behind a headless Service, or by an agent-sandbox `Sandbox` — whose
//! controller makes the pod, the volume from `volumeClaimTemplates` and a headless Service
//! of the Sandbox's name.

use serde_json::{Value, json};

use super::{PORT, RenderArgs, RunnerKind, TLS_DIR, container, labels, meta, service, with};

/// agent-sandbox's API group and version (as kitbag-vm's Kubernetes backend uses them).
const SANDBOX_API: &str = "agents.x-k8s.io/v1beta1";

/// The URL the gateways reach the runner at: the StatefulSet's pod through its headless
/// Service, or the Sandbox's own Service.
pub fn url(args: &RenderArgs, runner: &str) -> String {
    let ns = &args.namespace;
    match args.runner {
        RunnerKind::Statefulset => {
            format!("https://{runner}-0.{runner}.{ns}.svc.cluster.local:{PORT}/mcp")
        }
        RunnerKind::Sandbox => format!("https://{runner}.{ns}.svc.cluster.local:{PORT}/mcp"),
    }
}

/// The runner's objects, in apply order.
pub fn objects(args: &RenderArgs, runner: &str) -> Vec<Value> {
    let template = json!({"metadata": {"labels": labels("runner")}, "spec": pod_spec(args)});
    let claims = json!([{
        "metadata": {"name": "workspace"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": args.workspace_size}},
        },
    }]);
    match args.runner {
        RunnerKind::Statefulset => vec![
            json!({
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": meta(args, runner, "runner"),
                "spec": {
                    "serviceName": runner,
                    "replicas": 1,
                    "selector": {"matchLabels": labels("runner")},
                    "template": template,
                    "volumeClaimTemplates": claims,
                },
            }),
            service(args, runner, "runner", true),
        ],
        // Fields of agent-sandbox's `api/v1beta1/sandbox_types.go`; no shutdownTime: a
        // workspace runs until deleted.
        RunnerKind::Sandbox => vec![json!({
            "apiVersion": SANDBOX_API,
            "kind": "Sandbox",
            "metadata": meta(args, runner, "runner"),
            "spec": {
                "podTemplate": template,
                "volumeClaimTemplates": claims,
            },
        })],
    }
}

fn pod_spec(args: &RenderArgs) -> Value {
    let mounts = json!([
        {"name": "auth", "mountPath": "/var/run/kitbag", "readOnly": true},
        {"name": "tls", "mountPath": TLS_DIR, "readOnly": true},
        {"name": "workspace", "mountPath": "/workspace"},
    ]);
    let runner = with(
        container(
            args.runner_image.as_deref().unwrap_or(&args.image),
            runner_args(),
            mounts,
        ),
        json!({
            "workingDir": "/workspace",
            // The kubelet has no client certificate: probes connect only.
            "readinessProbe": tcp_probe(),
            "livenessProbe": tcp_probe(),
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "8Gi"}},
        }),
    );
    json!({
        "containers": [runner],
        "volumes": [
            {"name": "auth", "secret": {"secretName": "kitbag-auth"}},
            super::tls_volume(&["ca.crt", "runner.crt", "runner.key"]),
        ],
    })
}

/// The runner serves every local family (the embedded default) to the gateway only: its
/// client certificate (mutual TLS) and the runner token.
fn runner_args() -> Vec<String> {
    [
        "serve",
        "--http",
        &format!("0.0.0.0:{PORT}"),
        "--auth-token-file",
        "/var/run/kitbag/runner-token",
        "--tls-cert",
        &format!("{TLS_DIR}/runner.crt"),
        "--tls-key",
        &format!("{TLS_DIR}/runner.key"),
        "--tls-client-ca",
        &format!("{TLS_DIR}/ca.crt"),
    ]
    .map(String::from)
    .to_vec()
}

fn tcp_probe() -> Value {
    json!({"tcpSocket": {"port": "http"}, "periodSeconds": 10, "timeoutSeconds": 2})
}
