//! Where `tests/kube.rs`'s scenarios run: the in-repo API fixture (default), or a real
//! cluster when `KITBAG_TEST_KUBECONFIG` names one.
//!
//! A real cluster is read and written through `kubectl` (with the same kubeconfig, context
//! and namespace as the server under test); the fixture through its own store. Settings:
//!
//! - `KITBAG_TEST_KUBECONFIG`: the kubeconfig (a token or client certificate: kitbag-vm
//!   refuses exec credential plugins); `KITBAG_TEST_KUBE_CONTEXT`: a context in it;
//! - `KITBAG_TEST_KUBE_NAMESPACE`: the namespace (default: the context's, else `default`);
//! - `KITBAG_TEST_KUBE_IMAGE`: an image with `/bin/sh` and `python3` (default
//!   `python:3.12-slim`);
//! - `KITBAG_TEST_KUBE_NETWORK`: `outbound` to spawn without the deny-all NetworkPolicy
//!   (when the test's account may not create NetworkPolicies).

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

use super::bin;
use super::kube_fixture::clients::{Out, kubectl_in};
use super::kube_fixture::{Fixture, FixtureOptions};

const TOKEN: &str = "kitbag-test-token-0123456789";
/// The fixture's namespace for instances.
const FIXTURE_NAMESPACE: &str = "agents";

/// A real cluster's settings, from the environment.
pub struct Real {
    kubeconfig: PathBuf,
    context: Option<String>,
    namespace: Option<String>,
    image: String,
    network: Option<String>,
    /// It serves agent-sandbox's Sandboxes, and SandboxClaims.
    pub sandboxes: bool,
    pub claims: bool,
}

enum Where {
    /// Over HTTPS with the fixture's CA in the kubeconfig (`tls`), else plain HTTP.
    Fixture {
        tls: bool,
        fixture: Option<Fixture>,
    },
    Real(Real),
}

/// One scenario's cluster: what it runs on, a scratch directory (the server's root), and
/// the instances it spawned (what a real cluster's checks look at).
pub struct Cluster {
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    place: Where,
    spawned: RefCell<Vec<String>>,
    /// Objects a scenario made with kubectl (`kind/name`), deleted at the end.
    made: RefCell<Vec<String>>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Real {
    /// `KITBAG_TEST_KUBE_IMAGE`.
    pub fn image(&self) -> &str {
        &self.image
    }

    fn from_env() -> Option<Real> {
        let named = env("KITBAG_TEST_KUBECONFIG")?;
        // The server runs in a scratch directory: an absolute path.
        let kubeconfig = std::fs::canonicalize(&named)
            .unwrap_or_else(|e| panic!("KITBAG_TEST_KUBECONFIG={named}: {e}"));
        let mut real = Real {
            kubeconfig,
            context: env("KITBAG_TEST_KUBE_CONTEXT"),
            namespace: env("KITBAG_TEST_KUBE_NAMESPACE"),
            image: env("KITBAG_TEST_KUBE_IMAGE").unwrap_or_else(|| "python:3.12-slim".into()),
            network: env("KITBAG_TEST_KUBE_NETWORK"),
            sandboxes: false,
            claims: false,
        };
        // As kitbag-vm's probe decides: the group's v1beta1 lists the resource.
        let serves = |group: &str, resource: &str| {
            let path = format!("/apis/{group}/v1beta1");
            let out = real.kubectl_sync(&["get", "--raw", &path]);
            let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            list["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x["name"] == resource))
        };
        let version = real.kubectl_sync(&["version", "-o", "json"]);
        assert!(
            version.status.success(),
            "KITBAG_TEST_KUBECONFIG is set, but kubectl cannot reach that cluster: {}",
            String::from_utf8_lossy(&version.stderr)
        );
        let sandboxes = serves("agents.x-k8s.io", "sandboxes");
        let claims = sandboxes && serves("extensions.agents.x-k8s.io", "sandboxclaims");
        (real.sandboxes, real.claims) = (sandboxes, claims);
        Some(real)
    }

    /// `--kubeconfig`, `--context`, `-n` for kubectl.
    fn kubectl_args(&self) -> Vec<String> {
        let mut a = vec!["--kubeconfig".into(), self.kubeconfig.display().to_string()];
        if let Some(c) = &self.context {
            a.extend(["--context".into(), c.clone()]);
        }
        if let Some(n) = &self.namespace {
            a.extend(["-n".into(), n.clone()]);
        }
        a
    }

    fn kubectl_sync(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("kubectl")
            .args(self.kubectl_args())
            .args(args)
            .output()
            .expect("KITBAG_TEST_KUBECONFIG is set: kubectl must be installed")
    }
}

impl Cluster {
    /// The fixture (with or without agent-sandbox's CRDs), or the real cluster when one is
    /// configured and it is the kind of cluster the scenario needs; None (with a SKIP line)
    /// when the scenario cannot run here.
    pub fn start(sandbox_crds: bool) -> Option<Cluster> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let place = match Real::from_env() {
            Some(real) if real.sandboxes != sandbox_crds => {
                let (has, needs) = match sandbox_crds {
                    true => (
                        "does not serve",
                        "needs agent-sandbox (agents.x-k8s.io/v1beta1)",
                    ),
                    false => (
                        "serves",
                        "needs a cluster without agent-sandbox (kitbag-vm makes Sandboxes wherever they are served)",
                    ),
                };
                eprintln!(
                    "SKIP: the cluster of KITBAG_TEST_KUBECONFIG {has} agent-sandbox; this scenario {needs}"
                );
                return None;
            }
            Some(real) => Where::Real(real),
            None => {
                if !bwrap_installed() {
                    return None;
                }
                let fixture = rt.block_on(Fixture::start(FixtureOptions {
                    sandbox_crds,
                    token: TOKEN.into(),
                    agent_exe: bin().to_path_buf(),
                    state_dir: dir.path().join("fixture"),
                }));
                Where::Fixture {
                    tls: sandbox_crds,
                    fixture: Some(fixture),
                }
            }
        };
        Some(Cluster {
            rt,
            dir,
            place,
            spawned: RefCell::new(Vec::new()),
            made: RefCell::new(Vec::new()),
        })
    }

    pub fn is_real(&self) -> bool {
        matches!(self.place, Where::Real(_))
    }

    /// A real cluster's settings (None on the fixture).
    pub fn real(&self) -> Option<&Real> {
        match &self.place {
            Where::Real(r) => Some(r),
            Where::Fixture { .. } => None,
        }
    }

    /// Run `check` on the fixture; on a real cluster say what is not checked there.
    pub fn fixture_only(&self, what: &str, check: impl FnOnce(&Fixture)) {
        match self.as_fixture() {
            Some(f) => check(f),
            None => eprintln!("SKIP on a real cluster: {what} (needs the fixture's request log)"),
        }
    }

    /// `secs` on the fixture; on a real cluster more (scheduling, image pulls, controllers).
    pub fn patience(&self, secs: u64) -> u64 {
        if self.is_real() {
            (secs * 4).max(120)
        } else {
            secs
        }
    }

    /// The kubeconfig the server (and kubectl) use.
    pub fn kubeconfig(&self) -> PathBuf {
        match &self.place {
            Where::Real(r) => r.kubeconfig.clone(),
            Where::Fixture { tls, fixture } => {
                let f = fixture.as_ref().expect("fixture");
                let path = self.dir.path().join("kubeconfig");
                if *tls {
                    f.write_kubeconfig_tls(&path, FIXTURE_NAMESPACE);
                } else {
                    f.write_kubeconfig(&path, FIXTURE_NAMESPACE);
                }
                path
            }
        }
    }

    /// kitbag-vm over stdio, with the cluster and a `lease` (seconds).
    pub fn server(&self, lease: &str) -> McpClient {
        let root = self.dir.path().join("root");
        std::fs::create_dir_all(&root).expect("root");
        let kubeconfig = self.kubeconfig();
        let mut args = vec![
            "--kubeconfig".to_string(),
            kubeconfig.display().to_string(),
            "--kube-lease-seconds".into(),
            lease.into(),
        ];
        if let Some(r) = self.real() {
            if let Some(c) = &r.context {
                args.extend(["--kube-context".into(), c.clone()]);
            }
            if let Some(n) = &r.namespace {
                args.extend(["--kube-namespace".into(), n.clone()]);
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = McpClient::spawn(bin(), &args, &root, Era::Handshake);
        c.timeout = Duration::from_secs(if self.is_real() { 600 } else { 180 });
        c
    }

    /// `instance_spawn` with the target's defaults (a real cluster's image and network,
    /// unless `args` names them), remembering the instance.
    pub fn spawn(&self, c: &mut McpClient, mut args: Value) -> Value {
        args["backend"] = json!("kube");
        if let Some(r) = self.real() {
            if args.get("image").is_none() {
                args["image"] = json!(r.image);
            }
            if let (Some(n), None) = (&r.network, args.get("network")) {
                args["network"] = json!(n);
            }
        }
        let vm = c.call_ok("instance_spawn", args).structured;
        let id = vm["id"].as_str().expect("instance id").to_string();
        self.spawned.borrow_mut().push(id);
        vm
    }

    /// Pods of this scenario's instances that are pending or running (on the fixture: every
    /// pod whose sandbox runs).
    pub fn live(&self) -> usize {
        let Some(real) = self.real() else {
            return self.fixture().live_pods().len();
        };
        let ids = self.spawned.borrow().join(",");
        if ids.is_empty() {
            return 0;
        }
        let selector = format!("kitbag.dev/instance in ({ids})");
        let out = real.kubectl_sync(&["get", "pods", "-l", &selector, "-o", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: Value = serde_json::from_slice(&out.stdout).expect("pod list");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && matches!(p["status"]["phase"].as_str(), Some("Pending" | "Running"))
            })
            .count()
    }

    /// An object of the instances' namespace (`pods`, `sandboxes`, `sandboxclaims`).
    pub fn object(&self, plural: &str, name: &str) -> Option<Value> {
        let Some(real) = self.real() else {
            return self.fixture().object(plural, FIXTURE_NAMESPACE, name);
        };
        let out = real.kubectl_sync(&[
            "get",
            qualified(plural),
            name,
            "--ignore-not-found",
            "-o",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `kubectl create -f -` of `yaml` (each object deleted when the scenario ends). Not on
    /// the plain-HTTP fixture: kubectl sends its token only over TLS.
    pub fn create(&self, yaml: &str) -> Out {
        let kubeconfig = self.kubeconfig();
        let mut args: Vec<String> = match self.real() {
            Some(r) => r.kubectl_args()[2..].to_vec(),
            None => Vec::new(),
        };
        args.extend(["create", "--validate=false", "-f", "-", "-o", "name"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.rt.block_on(kubectl_in(&kubeconfig, &args, Some(yaml)));
        let names = out.stdout.lines().map(str::to_string);
        self.made.borrow_mut().extend(names);
        out
    }

    /// The fixture, for what only it can show (None on a real cluster).
    pub fn as_fixture(&self) -> Option<&Fixture> {
        match &self.place {
            Where::Fixture {
                fixture: Some(f), ..
            } => Some(f),
            _ => None,
        }
    }

    fn fixture(&self) -> &Fixture {
        self.as_fixture().expect("the fixture")
    }

    /// A real cluster after a scenario: what it made goes, whatever happened.
    fn clean_real(&self, real: &Real) {
        let made = self.made.borrow();
        for object in made.iter().rev() {
            let _ = real.kubectl_sync(&["delete", object, "--ignore-not-found", "--wait=false"]);
        }
        let ids = self.spawned.borrow().join(",");
        if ids.is_empty() {
            return;
        }
        let selector = format!("kitbag.dev/instance in ({ids})");
        let kinds = match (real.sandboxes, real.claims) {
            (true, true) => {
                "sandboxclaims.extensions.agents.x-k8s.io,sandboxes.agents.x-k8s.io,pods"
            }
            (true, false) => "sandboxes.agents.x-k8s.io,pods",
            _ => "pods",
        };
        let _ = real.kubectl_sync(&[
            "delete",
            kinds,
            "-l",
            &selector,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Where::Fixture { fixture, .. } = &mut self.place
            && let Some(f) = fixture.take()
        {
            self.rt.block_on(f.shutdown());
        }
        if let Where::Real(real) = &self.place {
            self.clean_real(real);
        }
    }
}

/// agent-sandbox's resources by their full names (a cluster may serve other `sandboxes`).
fn qualified(plural: &str) -> &str {
    match plural {
        "sandboxes" => "sandboxes.agents.x-k8s.io",
        "sandboxclaims" => "sandboxclaims.extensions.agents.x-k8s.io",
        other => other,
    }
}

fn bwrap_installed() -> bool {
    if std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "bwrap is required under CI=true"
    );
    eprintln!("SKIP: bwrap is not installed");
    false
}
