//! `kitbag deploy render`: Kubernetes manifests for a team (or one person) running kitbag
//! over HTTP. Written from what kitbag does today — the static bearer token or OAuth, remote
//! servers in agent.json, `/healthz` — and validated offline with kubernetes-validate in the
//! tests.
//!
//! `team`: a gateway Deployment (≥ 2 stateless replicas of `kitbag serve --http`, probes on
//! `/healthz`, a PodDisruptionBudget, a HorizontalPodAutoscaler) behind a Service without
//! session affinity, sealing handshake-era sessions; its agent.json (a ConfigMap) reaches a
//! per-workspace runner (runner.rs: a StatefulSet or an agent-sandbox `Sandbox` running
//! `kitbag serve --http` with every local family over a persistent volume) as a remote server
//! over mutual TLS (certs.rs makes the CA and certificates) with the runner's token;
//! NetworkPolicies let only the gateway reach the runner. `single`: one Deployment with its
//! workspace volume and a Service.

mod certs;
mod runner;
mod yaml;

use std::path::PathBuf;

use serde_json::{Value, json};

/// `kitbag deploy render` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// `team` (gateway replicas and a workspace runner) or `single` (one pod).
    #[arg(long, value_enum, default_value_t = Profile::Team)]
    pub profile: Profile,
    /// The namespace every object goes in (create it first).
    #[arg(long, default_value = "kitbag")]
    pub namespace: String,
    /// The gateway's container image (one with the kitbag binary).
    #[arg(long, default_value = concat!("kitbag:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// The runner's image (the kitbag binary plus the language servers and debuggers the
    /// workspace needs); default: --image.
    #[arg(long)]
    pub runner_image: Option<String>,
    /// Gateway replicas (team: at least 2).
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// The most replicas the autoscaler may run.
    #[arg(long, default_value_t = 6)]
    pub max_replicas: u32,
    /// The workspace runner's name (one StatefulSet per workspace).
    #[arg(long, default_value = "default")]
    pub workspace: String,
    /// team: what runs the workspace — `statefulset` (plain Kubernetes) or `sandbox` (an
    /// agent-sandbox `Sandbox`; needs its controller and CRDs in the cluster).
    #[arg(long, value_enum, default_value_t = RunnerKind::Statefulset)]
    pub runner: RunnerKind,
    /// The workspace volume's size.
    #[arg(long, default_value = "10Gi")]
    pub workspace_size: String,
    /// Clients authenticate with OAuth tokens of this issuer (else a static bearer token,
    /// generated into the Secret).
    #[arg(long, requires = "oauth_resource")]
    pub oauth_issuer: Option<String>,
    /// The gateway's canonical URL (the tokens' audience), with --oauth-issuer.
    #[arg(long)]
    pub oauth_resource: Option<String>,
    /// team: the Secret (in --namespace, made by you) whose key `url` is a shared PostgreSQL's
    /// URL; the gateways then serve kitbag-memory on it (`KITBAG_DATABASE_URL`), one store for
    /// every replica.
    #[arg(long, value_name = "SECRET")]
    pub database_secret: Option<String>,
    /// Write one file per object into DIR instead of one stream to stdout.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunnerKind {
    Statefulset,
    Sandbox,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    Single,
    Team,
}

const PORT: u16 = 8080;

/// Render, then print or write. Returns the exit code.
pub fn render_command(args: &RenderArgs) -> anyhow::Result<i32> {
    let objects = render(args)?;
    match &args.output {
        None => {
            for o in &objects {
                print!("---\n{}", yaml::document(o));
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            for (i, o) in objects.iter().enumerate() {
                let kind = o["kind"].as_str().unwrap_or("object").to_lowercase();
                let name = o["metadata"]["name"].as_str().unwrap_or("unnamed");
                let path = dir.join(format!("{i:02}-{kind}-{name}.yaml"));
                std::fs::write(&path, yaml::document(o))?;
            }
            eprintln!("wrote {} manifests to {}", objects.len(), dir.display());
        }
    }
    if args.oauth_issuer.is_none() {
        eprintln!(
            "the Secret holds freshly generated bearer tokens: keep these manifests private (or replace the Secret's values before applying)"
        );
    }
    Ok(0)
}

/// The objects, in apply order.
pub fn render(args: &RenderArgs) -> anyhow::Result<Vec<Value>> {
    check(args)?;
    match args.profile {
        Profile::Team => team(args),
        Profile::Single => single(args),
    }
}

fn check(args: &RenderArgs) -> anyhow::Result<()> {
    let dns_label = |what: &str, v: &str| -> anyhow::Result<()> {
        let ok = !v.is_empty()
            && v.len() <= 40
            && v.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !v.starts_with('-')
            && !v.ends_with('-');
        anyhow::ensure!(
            ok,
            "--{what} {v:?}: lowercase letters, digits and '-', at most 40 characters"
        );
        Ok(())
    };
    dns_label("namespace", &args.namespace)?;
    dns_label("workspace", &args.workspace)?;
    if args.profile == Profile::Team {
        anyhow::ensure!(
            args.replicas >= 2,
            "--replicas {}: a team gateway runs at least 2 replicas (so one can restart while the other serves)",
            args.replicas
        );
        anyhow::ensure!(
            args.max_replicas >= args.replicas,
            "--max-replicas {} is below --replicas {}",
            args.max_replicas,
            args.replicas
        );
    }
    if let Some(r) = &args.oauth_resource {
        anyhow::ensure!(
            r.starts_with("https://"),
            "--oauth-resource {r:?}: the gateway's canonical https:// URL"
        );
    }
    Ok(())
}

fn meta(args: &RenderArgs, name: &str, component: &str) -> Value {
    json!({
        "name": name,
        "namespace": args.namespace,
        "labels": labels(component),
    })
}

fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "kitbag",
        "app.kubernetes.io/component": component,
    })
}

fn probe() -> Value {
    json!({
        "httpGet": {"path": "/healthz", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 2,
    })
}

/// What every kitbag container shares: no privilege escalation, the port, the probes.
fn container(image: &str, args: Vec<String>, mounts: Value) -> Value {
    json!({
        "name": "kitbag",
        "image": image,
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": probe(),
        "livenessProbe": probe(),
        "securityContext": {"allowPrivilegeEscalation": false},
        "volumeMounts": mounts,
    })
}

/// `base` with `extra`'s fields added (a container's shared fields and its own).
fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// `kitbag serve --http` flags for a pod: every address, the client authentication.
fn serve_args(args: &RenderArgs, token_file: &str, config: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = vec![];
    if let Some(c) = config {
        a.extend(["--config".into(), c.into()]);
    }
    a.extend(["serve".into(), "--http".into(), format!("0.0.0.0:{PORT}")]);
    match (&args.oauth_issuer, &args.oauth_resource) {
        (Some(issuer), Some(resource)) => a.extend([
            "--oauth-issuer".into(),
            issuer.clone(),
            "--oauth-resource".into(),
            resource.clone(),
        ]),
        _ => a.extend(["--auth-token-file".into(), token_file.into()]),
    }
    a
}

fn secret(args: &RenderArgs, keys: &[&str]) -> anyhow::Result<Value> {
    let mut data = serde_json::Map::new();
    for k in keys {
        let token = kitbag_shared::random::hex(32)
            .map_err(|e| anyhow::anyhow!("reading /dev/urandom for a token: {e}"))?;
        data.insert(k.to_string(), Value::String(token));
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(args, "kitbag-auth", "auth"),
        "type": "Opaque",
        "stringData": data,
    }))
}

fn service(args: &RenderArgs, name: &str, component: &str, headless: bool) -> Value {
    let mut spec = json!({
        "selector": labels(component),
        "ports": [{"name": "http", "port": if headless { PORT } else { 80 }, "targetPort": "http", "protocol": "TCP"}],
    });
    if headless {
        spec["clusterIP"] = json!("None");
    }
    // No sessionAffinity: any replica answers any request (kitbag serves statelessly).
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(args, name, component),
        "spec": spec,
    })
}

/// Where pods find the mTLS files (the Secret `kitbag-tls`, each pod only its own key).
const TLS_DIR: &str = "/var/run/kitbag-tls";

/// The Secret `kitbag-tls`: the deployment's CA, the runner's and the gateways' certificates.
fn tls_secret(args: &RenderArgs, runner: &str) -> anyhow::Result<Value> {
    let ns = &args.namespace;
    let names = [
        format!("{runner}-0.{runner}.{ns}.svc.cluster.local"),
        format!("{runner}.{ns}.svc.cluster.local"),
        format!("{runner}.{ns}.svc"),
        // An operator's `kubectl port-forward` to the runner, with the gateway's certificate.
        "localhost".to_string(),
    ];
    let c = certs::make(&format!("{ns}/{}", args.workspace), &names)?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(args, "kitbag-tls", "auth"),
        "type": "Opaque",
        "stringData": {
            "ca.crt": c.ca,
            "runner.crt": c.runner_cert,
            "runner.key": c.runner_key,
            "gateway.crt": c.gateway_cert,
            "gateway.key": c.gateway_key,
        },
    }))
}

/// A volume of the Secret `kitbag-tls` holding only `keys` (owner-readable).
fn tls_volume(keys: &[&str]) -> Value {
    let items: Vec<Value> = keys.iter().map(|k| json!({"key": k, "path": k})).collect();
    json!({"name": "tls", "secret": {"secretName": "kitbag-tls", "items": items, "defaultMode": 0o400}})
}

fn team(args: &RenderArgs) -> anyhow::Result<Vec<Value>> {
    let runner = format!("kitbag-runner-{}", args.workspace);
    let runner_url = runner::url(args, &runner);
    let mut servers = json!({
        "web": {"command": "kitbag", "args": ["server", "web"]},
        "workspace": {
            "url": runner_url,
            "headers": {"Authorization": "Bearer ${KITBAG_RUNNER_TOKEN}"},
            "tls": {
                "ca": format!("{TLS_DIR}/ca.crt"),
                "cert": format!("{TLS_DIR}/gateway.crt"),
                "key": format!("{TLS_DIR}/gateway.key"),
            },
        },
    });
    let mut env = vec![
        json!({"name": "KITBAG_RUNNER_TOKEN", "valueFrom": {"secretKeyRef": {"name": "kitbag-auth", "key": "runner-token"}}}),
    ];
    // Shared state lives in PostgreSQL, so any gateway replica answers for it.
    if let Some(db) = &args.database_secret {
        servers["memory"] = json!({"command": "kitbag", "args": ["server", "memory"]});
        // The runner's own memory (a file on its volume) would offer the same tools.
        servers["workspace"]["disabled_tools"] = json!(["memory_*"]);
        env.push(json!({"name": "KITBAG_DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": db, "key": "url"}}}));
    }
    let agent_json = serde_json::to_string_pretty(&json!({ "mcp": servers })).unwrap_or_default();
    let auth_mount = json!({"name": "auth", "mountPath": "/var/run/kitbag", "readOnly": true});
    let tls_mount = json!({"name": "tls", "mountPath": TLS_DIR, "readOnly": true});
    let mut gateway_args = serve_args(
        args,
        "/var/run/kitbag/token",
        Some("/etc/kitbag/agent.json"),
    );
    // Handshake-era sessions every replica opens (no affinity, no store). On SIGTERM: 5 s
    // of `/healthz` 503 while still serving (the Service drops the pod meanwhile), then up to
    // 25 s for calls in flight — inside the pod's termination grace.
    gateway_args.extend(
        [
            "--sealed-sessions",
            "--session-key-file",
            "/var/run/kitbag/session-keys",
            "--drain-secs",
            "5",
            "--shutdown-grace-secs",
            "25",
        ]
        .map(String::from),
    );
    let gateway = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(args, "kitbag-gateway", "gateway"),
            "spec": {
                "replicas": args.replicas,
                "selector": {"matchLabels": labels("gateway")},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {
                    "metadata": {"labels": labels("gateway")},
                    "spec": {
                        "terminationGracePeriodSeconds": 40,
                        "containers": [with(
    container(
                                &args.image,
                                gateway_args,
                                json!([
                                    auth_mount,
                                    tls_mount,
                                    {"name": "config", "mountPath": "/etc/kitbag", "readOnly": true},
                                    {"name": "state", "mountPath": "/var/lib/kitbag"},
                                ]),
                            ),
     json!({"env": env,
                            "workingDir": "/var/lib/kitbag",
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}}),
     )],
                        "volumes": [
                            {"name": "auth", "secret": {"secretName": "kitbag-auth"}},
                            tls_volume(&["ca.crt", "gateway.crt", "gateway.key"]),
                            {"name": "config", "configMap": {"name": "kitbag-config"}},
                            {"name": "state", "emptyDir": {}},
                        ],
                    },
                },
            },
        });
    let mut keys = vec!["runner-token", "session-keys"];
    if args.oauth_issuer.is_none() {
        keys.insert(0, "token");
    }
    let mut objects = vec![
        secret(args, &keys)?,
        tls_secret(args, &runner)?,
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(args, "kitbag-config", "gateway"),
            "data": {"agent.json": agent_json},
        }),
        gateway,
        service(args, "kitbag", "gateway", false),
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta(args, "kitbag-gateway", "gateway"),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels("gateway")}},
        }),
        json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": meta(args, "kitbag-gateway", "gateway"),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kitbag-gateway"},
                "minReplicas": args.replicas,
                "maxReplicas": args.max_replicas,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
            },
        }),
    ];
    objects.extend(runner::objects(args, &runner));
    objects.extend([
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta(args, "kitbag-runner-from-gateway", "runner"),
            "spec": {
                "podSelector": {"matchLabels": labels("runner")},
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{"podSelector": {"matchLabels": labels("gateway")}}],
                    "ports": [{"protocol": "TCP", "port": PORT}],
                }],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta(args, "kitbag-gateway-http", "gateway"),
            "spec": {
                "podSelector": {"matchLabels": labels("gateway")},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": PORT}]}],
            },
        }),
    ]);
    Ok(objects)
}

fn single(args: &RenderArgs) -> anyhow::Result<Vec<Value>> {
    let one = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(args, "kitbag", "single"),
            "spec": {
                "replicas": 1,
                // One pod owns the workspace volume: the old one goes before the new one starts.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels("single")},
                "template": {
                    "metadata": {"labels": labels("single")},
                    "spec": {
                        "containers": [with(
    container(
                                &args.image,
                                serve_args(args, "/var/run/kitbag/token", None),
                                json!([
                                    {"name": "auth", "mountPath": "/var/run/kitbag", "readOnly": true},
                                    {"name": "workspace", "mountPath": "/workspace"},
                                ]),
                            ),
     json!({"workingDir": "/workspace",
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "8Gi"}}}),
     )],
                        "volumes": [
                            {"name": "auth", "secret": {"secretName": "kitbag-auth"}},
                            {"name": "workspace", "persistentVolumeClaim": {"claimName": "kitbag-workspace"}},
                        ],
                    },
                },
            },
        });
    let mut objects = Vec::new();
    if args.oauth_issuer.is_none() {
        objects.push(secret(args, &["token"])?);
    }
    objects.extend([
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(args, "kitbag-workspace", "single"),
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": args.workspace_size}},
            },
        }),
        one,
        service(args, "kitbag", "single", false),
    ]);
    Ok(objects)
}
