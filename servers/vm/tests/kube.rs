//! kitbag-vm's Kubernetes backend end to end (`--features backend-kube`): the real binary
//! over stdio against the in-repo API fixture (`kube_fixture/`, checked against kubectl and
//! the official Python client by `kube_api.rs`), whose pods are real bubblewrap sandboxes —
//! so the agent really is uploaded through `pods/exec` and reached through
//! `pods/portforward`. Run once without the agent-sandbox CRDs (plain Pods) and once with
//! them (Sandboxes: suspend/resume, the shutdownTime lease). No real API server can run on
//! this machine; with `KITBAG_TEST_KUBECONFIG` set the Pod scenario also runs against that
//! cluster (its image must have /bin/sh and python3).
#![allow(clippy::unwrap_used)]

#[path = "kube_fixture/mod.rs"]
mod kube_fixture;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kitbag_testkit::{Era, McpClient, wait_until};
use kube_fixture::{Fixture, FixtureOptions};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
}

const TOKEN: &str = "kitbag-test-token-0123456789";

/// A fixture in its own runtime (the MCP client below is synchronous), or a skip when
/// bubblewrap cannot run here.
struct Cluster {
    /// Over HTTPS with the fixture's CA in the kubeconfig (the Sandbox run), else plain HTTP.
    tls: bool,
    rt: tokio::runtime::Runtime,
    fixture: Option<Fixture>,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start(sandbox_crds: bool) -> Option<Cluster> {
        let ci = std::env::var("CI").as_deref() == Ok("true");
        if std::process::Command::new("bwrap")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(!ci, "bwrap is required under CI=true");
            eprintln!("SKIP: bwrap is not installed");
            return None;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let fixture = rt.block_on(Fixture::start(FixtureOptions {
            sandbox_crds,
            token: TOKEN.into(),
            agent_exe: bin().to_path_buf(),
            state_dir: dir.path().join("fixture"),
        }));
        Some(Cluster {
            tls: sandbox_crds,
            rt,
            fixture: Some(fixture),
            dir,
        })
    }

    fn fixture(&self) -> &Fixture {
        self.fixture.as_ref().unwrap()
    }

    fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        if self.tls {
            self.fixture().write_kubeconfig_tls(&path, "agents");
        } else {
            self.fixture().write_kubeconfig(&path, "agents");
        }
        path
    }

    fn server(&self, lease: &str) -> McpClient {
        let root = self.dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let kubeconfig = self.kubeconfig();
        let mut c = McpClient::spawn(
            bin(),
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--kube-lease-seconds",
                lease,
            ],
            &root,
            Era::Handshake,
        );
        c.timeout = Duration::from_secs(180);
        c
    }

    fn live(&self) -> usize {
        self.fixture().live_pods().len()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(f) = self.fixture.take() {
            self.rt.block_on(f.shutdown());
        }
    }
}

fn http_get(url: &str, path: &str) -> std::io::Result<String> {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// `kill -9` of the server: no stop, no goodbye — what its pods must survive cleanly.
fn kill_server(c: McpClient) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
}

fn state_of(c: &mut McpClient, id: &str) -> Value {
    c.call_ok("instance_list", json!({"instance": id}))
        .structured["instances"][0]
        .clone()
}

/// What both kinds of object share: spawn, exec, copies, a port, logs, bad input, stop,
/// and a main command's end.
fn common_scenario(cluster: &Cluster, c: &mut McpClient, backend_detail: &str) {
    let vm = c
        .call_ok(
            "instance_spawn",
            json!({
                "backend": "kube",
                "name": "web",
                "command": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
                "env": {"GREETING": "hello from a pod"},
                "ports": [8080],
                "resources": {"memory_mb": 256},
                "ready": {"port": 8080}
            }),
        )
        .structured;
    let id = vm["id"].as_str().unwrap().to_string();
    assert_eq!(vm["backend"], "kube", "{vm}");
    assert_eq!(vm["capabilities"]["mounts"], false);
    assert_eq!(vm["capabilities"]["pause_keeps_processes"], false);
    assert_eq!(cluster.live(), 1);
    let info = c.call_ok("self_info", json!({})).structured;
    let k = info["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "kube")
        .unwrap()
        .clone();
    assert_eq!(k["available"], true, "{k}");
    assert!(
        k["detail"].as_str().unwrap().contains(backend_detail),
        "{k}"
    );

    // exec through the agent: environment, exit code, cwd /work.
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "echo $GREETING; pwd; echo err >&2; exit 3"]}),
        )
        .structured;
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["stdout"], "hello from a pod\n/work\n", "{r}");
    assert_eq!(r["stderr"], "err\n", "{r}");

    // A file copied in is served by the main command, through the forwarded port.
    let root = cluster.dir.path().join("root");
    std::fs::write(root.join("page.txt"), "copied into a pod\n").unwrap();
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "host_path": "page.txt", "guest_path": "/work/page.txt"}),
    );
    let url = vm["ports"][0]["url"].as_str().unwrap().to_string();
    let page = http_get(&url, "/page.txt").unwrap();
    assert!(page.contains("copied into a pod"), "{page}");
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/page.txt", "host_path": "back.txt"}),
    );
    assert_eq!(
        std::fs::read_to_string(root.join("back.txt")).unwrap(),
        "copied into a pod\n"
    );

    // Bad input names its field and creates nothing.
    let before = cluster.fixture().requests().len();
    c.call_err(
        "instance_spawn",
        json!({"backend": "kube", "image": "bad image"}),
        "invalid_params",
    );
    c.call_err(
        "instance_spawn",
        json!({"backend": "kube", "mounts": [{"host": ".", "guest": "/mnt/x"}]}),
        "unsupported",
    );
    let created = cluster.fixture().requests()[before..]
        .iter()
        .filter(|r| r.starts_with("POST"))
        .count();
    assert_eq!(created, 0, "a refused spawn created something");

    // Stop: the object is deleted and its sandbox is gone.
    c.call_ok("instance_stop", json!({"instance": id}));
    wait_until("the pod to go", 30, || cluster.live() == 0);

    // A main command that ends ends the pod, with its code and its log.
    let short = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "kube", "command": ["sh", "-c", "echo bye; exit 5"]}),
        )
        .structured;
    let sid = short["id"].as_str().unwrap().to_string();
    wait_until("the short pod to end", 60, || {
        state_of(c, &sid)["state"] == "exited"
    });
    assert_eq!(state_of(c, &sid)["exit"]["code"], 5);
    let log = c
        .call_ok("instance_logs", json!({"instance": sid}))
        .structured;
    assert_eq!(log["text"], "bye\n", "{log}");
    wait_until("the short pod to go", 30, || cluster.live() == 0);
}

#[test]
fn pods_run_commands_copy_serve_and_end_with_their_server() {
    let Some(cluster) = Cluster::start(false) else {
        return;
    };
    let mut c = cluster.server("120");
    common_scenario(&cluster, &mut c, "Pods (no agent-sandbox CRDs)");
    let requests = cluster.fixture().requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /api/v1/namespaces/agents/pods")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.contains("/portforward?ports=39411")),
        "{requests:?}"
    );

    // A plain Pod cannot pause: said, and nothing changes.
    let id = c
        .call_ok("instance_spawn", json!({"backend": "kube"}))
        .structured["id"]
        .as_str()
        .unwrap()
        .to_string();
    let e = c.call_err(
        "instance_stop",
        json!({"instance": id, "pause": true}),
        "unsupported",
    );
    assert!(e.text.contains("cannot pause"), "{}", e.text);
    assert_eq!(state_of(&mut c, &id)["state"], "running");

    // No orphans: the server SIGKILLed, the hold line closes, the agent stops everything.
    let sleeper = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "kube", "command": ["sleep", "1000"]}),
        )
        .structured["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(cluster.live(), 2);
    kill_server(c);
    wait_until("the pods of a killed server to end", 30, || {
        cluster.live() == 0
    });
    // Their objects stay (nobody deleted them) until a later server's sweep removes them.
    let object = |id: &str| {
        cluster
            .fixture()
            .object("pods", "agents", &format!("kitbag-{id}"))
    };
    assert!(object(&id).is_some() && object(&sleeper).is_some());
    let mut again = cluster.server("120");
    again.call_ok("instance_spawn", json!({"backend": "kube"}));
    assert!(object(&id).is_none() && object(&sleeper).is_none());
    let _ = again.shutdown();
    wait_until("the last pod to go", 30, || cluster.live() == 0);
}

#[test]
fn sandboxes_suspend_resume_and_expire_without_their_server() {
    let Some(cluster) = Cluster::start(true) else {
        return;
    };
    let mut c = cluster.server("6");
    common_scenario(&cluster, &mut c, "agent-sandbox Sandboxes");
    assert!(
        cluster.fixture().requests().iter().any(
            |r| r.starts_with("POST /apis/agents.x-k8s.io/v1beta1/namespaces/agents/sandboxes")
        ),
    );

    // Suspend: the pod is deleted (processes are lost); a call resumes it on a new pod.
    let id = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "kube", "command": ["sleep", "1000"]}),
        )
        .structured["id"]
        .as_str()
        .unwrap()
        .to_string();
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    assert_eq!(state_of(&mut c, &id)["state"], "paused");
    wait_until("the suspended Sandbox's pod to go", 30, || {
        cluster.live() == 0
    });
    let name = format!("kitbag-{id}");
    let sb = cluster
        .fixture()
        .object("sandboxes", "agents", &name)
        .unwrap();
    assert_eq!(sb["spec"]["operatingMode"], "Suspended", "{sb}");
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "echo back"]}),
        )
        .structured;
    assert_eq!(r["stdout"], "back\n", "{r}");
    assert_eq!(state_of(&mut c, &id)["state"], "running");

    // A warm pool: the claimed Sandbox's pod runs its template's command in its template's
    // container; the agent starts beside it.
    let pool = "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxTemplate\nmetadata: {name: py}\nspec:\n  podTemplate:\n    spec:\n      containers: [{name: python, image: python:3.12-slim, command: [sleep, '1000']}]\n---\napiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata: {name: py}\nspec: {replicas: 1, sandboxTemplateRef: {name: py}}\n";
    let out = cluster.rt.block_on(kube_fixture::clients::kubectl_in(
        &cluster.kubeconfig(),
        &["create", "--validate=false", "-f", "-"],
        Some(pool),
    ));
    assert!(out.ok, "{}", out.stderr);
    let warm = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "kube", "image": "warmpool:py"}),
        )
        .structured;
    let wid = warm["id"].as_str().unwrap().to_string();
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": wid, "command": ["sh", "-c", "echo warm; pwd"]}),
        )
        .structured;
    assert_eq!(r["stdout"], "warm\n/work\n", "{r}");
    let claim = format!("kitbag-{wid}");
    let bound = cluster
        .fixture()
        .object("sandboxclaims", "agents", &claim)
        .unwrap();
    assert_eq!(bound["spec"]["warmPoolRef"]["name"], "py", "{bound}");
    c.call_err(
        "instance_stop",
        json!({"instance": wid, "pause": true}),
        "unsupported",
    );
    c.call_ok("instance_stop", json!({"instance": wid}));
    wait_until("the claim to go", 30, || {
        cluster
            .fixture()
            .object("sandboxclaims", "agents", &claim)
            .is_none()
    });
    c.call_err(
        "instance_spawn",
        json!({"backend": "kube", "image": "warmpool:nope"}),
        "invalid_params",
    );

    // A suspended Sandbox stops without coming back first: it is deleted.
    let sleeper = c
        .call_ok("instance_spawn", json!({"backend": "kube"}))
        .structured["id"]
        .as_str()
        .unwrap()
        .to_string();
    c.call_ok("instance_stop", json!({"instance": sleeper, "pause": true}));
    let posts = |f: &Fixture| {
        f.requests()
            .iter()
            .filter(|r| r.starts_with("POST"))
            .count()
    };
    let before = posts(cluster.fixture());
    let stopped = c
        .call_ok("instance_stop", json!({"instance": sleeper}))
        .structured;
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    wait_until("the suspended Sandbox to be deleted", 30, || {
        cluster
            .fixture()
            .object("sandboxes", "agents", &format!("kitbag-{sleeper}"))
            .is_none()
    });
    assert_eq!(
        posts(cluster.fixture()),
        before,
        "no pod was made to stop it"
    );

    // The lease: renewed while the server lives...
    let first = sb["spec"]["shutdownTime"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(3));
    let renewed = cluster
        .fixture()
        .object("sandboxes", "agents", &name)
        .unwrap()["spec"]["shutdownTime"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(renewed > first, "{first} → {renewed}");
    // ...and when the server is gone, the Sandbox expires and is deleted on its own.
    kill_server(c);
    wait_until("the Sandbox to expire", 30, || {
        cluster
            .fixture()
            .object("sandboxes", "agents", &name)
            .is_none()
    });
    assert_eq!(cluster.live(), 0);
}

/// The Pod scenario's core against a real cluster, when `KITBAG_TEST_KUBECONFIG` names one
/// (kind, k3s, a test namespace of a real cluster; `KITBAG_TEST_KUBE_IMAGE` an image with
/// /bin/sh and python3, default `python:3.12-slim`). No cluster can run on this machine: here
/// it says so and returns — it has never run in this repository's CI.
#[test]
fn a_real_cluster_when_one_is_configured() {
    let Some(kubeconfig) = std::env::var_os("KITBAG_TEST_KUBECONFIG") else {
        eprintln!("SKIP: KITBAG_TEST_KUBECONFIG is not set (no real cluster on this machine)");
        return;
    };
    let image =
        std::env::var("KITBAG_TEST_KUBE_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into());
    let dir = tempfile::tempdir().unwrap();
    let mut c = McpClient::spawn(
        bin(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        dir.path(),
        Era::Handshake,
    );
    c.timeout = Duration::from_secs(600);
    let vm = c
        .call_ok(
            "instance_spawn",
            json!({
                "backend": "kube",
                "image": image,
                "network": "outbound",
                "command": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
                "ports": [8080],
                "ready": {"port": 8080}
            }),
        )
        .structured;
    let id = vm["id"].as_str().unwrap().to_string();
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "echo hi > /work/page.txt; echo $KITBAG_INSTANCE_ID"]}),
        )
        .structured;
    assert_eq!(r["stdout"].as_str().unwrap().trim(), id);
    let url = vm["ports"][0]["url"].as_str().unwrap().to_string();
    assert!(http_get(&url, "/page.txt").unwrap().contains("hi"));
    let stopped = c
        .call_ok("instance_stop", json!({"instance": id}))
        .structured;
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    let _ = c.shutdown();
}
