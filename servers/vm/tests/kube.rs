//! kitbag-vm's Kubernetes backend end to end (`--features backend-kube`): the real binary
//! over stdio against a cluster — by default the in-repo API fixture (`kube_fixture/`,
//! checked against kubectl and the official Python client by `kube_api.rs`), whose pods are
//! real bubblewrap sandboxes, so the agent really is uploaded through `pods/exec` and
//! reached through `pods/portforward`. Run once without the agent-sandbox CRDs (plain Pods)
//! and once with them (Sandboxes: suspend/resume, a warm pool, the shutdownTime lease).
//!
//! With `KITBAG_TEST_KUBECONFIG` set the same scenarios run against that cluster instead
//! ([`target`]: namespace, image, network from `KITBAG_TEST_KUBE_*`): the Pod scenario on a
//! cluster without agent-sandbox, the Sandbox scenario on one with it (the other says SKIP;
//! kitbag-vm makes Sandboxes wherever they are served); checks of the fixture's request log
//! say SKIP there too. No real API server can run on this machine: that path has not run
//! here.
#![allow(clippy::unwrap_used)]

#[path = "kube_fixture/mod.rs"]
mod kube_fixture;
#[path = "kube/target.rs"]
mod target;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use kitbag_testkit::{McpClient, wait_until};
use serde_json::{Value, json};
use target::Cluster;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
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
    let vm = cluster.spawn(
        c,
        json!({
            "name": "web",
            "command": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
            "env": {"GREETING": "hello from a pod"},
            "ports": [8080],
            "resources": {"memory_mb": 256},
            "ready": {"port": 8080}
        }),
    );
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

    bad_input_creates_nothing(cluster, c);

    // Stop: the object is deleted and its pod is gone.
    c.call_ok("instance_stop", json!({"instance": id}));
    wait_until("the pod to go", cluster.patience(30), || {
        cluster.live() == 0
    });

    // A main command that ends ends the pod, with its code and its log.
    let short = cluster.spawn(c, json!({"command": ["sh", "-c", "echo bye; exit 5"]}));
    let sid = short["id"].as_str().unwrap().to_string();
    wait_until("the short pod to end", cluster.patience(60), || {
        state_of(c, &sid)["state"] == "exited"
    });
    assert_eq!(state_of(c, &sid)["exit"]["code"], 5);
    let log = c
        .call_ok("instance_logs", json!({"instance": sid}))
        .structured;
    assert_eq!(log["text"], "bye\n", "{log}");
    wait_until("the short pod to go", cluster.patience(30), || {
        cluster.live() == 0
    });
}

/// Bad input names its field and creates nothing.
fn bad_input_creates_nothing(cluster: &Cluster, c: &mut McpClient) {
    let before = cluster.as_fixture().map_or(0, |f| f.requests().len());
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
    cluster.fixture_only("a refused spawn sends no POST", |f| {
        let created = f.requests()[before..]
            .iter()
            .filter(|r| r.starts_with("POST"))
            .count();
        assert_eq!(created, 0, "a refused spawn created something");
    });
}

fn id_of(vm: &Value) -> String {
    vm["id"].as_str().unwrap().to_string()
}

#[test]
fn pods_run_commands_copy_serve_and_end_with_their_server() {
    let Some(cluster) = Cluster::start(false) else {
        return;
    };
    let mut c = cluster.server("120");
    common_scenario(&cluster, &mut c, "Pods (no agent-sandbox CRDs)");
    cluster.fixture_only("Pods are POSTed; the agent is reached on port 39411", |f| {
        let requests = f.requests();
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
    });

    // A plain Pod cannot pause: said, and nothing changes.
    let id = id_of(&cluster.spawn(&mut c, json!({})));
    let e = c.call_err(
        "instance_stop",
        json!({"instance": id, "pause": true}),
        "unsupported",
    );
    assert!(e.text.contains("cannot pause"), "{}", e.text);
    assert_eq!(state_of(&mut c, &id)["state"], "running");

    // No orphans: the server SIGKILLed, the hold line closes, the agent stops everything.
    let sleeper = id_of(&cluster.spawn(&mut c, json!({"command": ["sleep", "1000"]})));
    assert_eq!(cluster.live(), 2);
    kill_server(c);
    wait_until(
        "the pods of a killed server to end",
        cluster.patience(30),
        || cluster.live() == 0,
    );
    // Their objects stay (nobody deleted them) until a later server's sweep removes them.
    let object = |id: &str| cluster.object("pods", &format!("kitbag-{id}"));
    assert!(object(&id).is_some() && object(&sleeper).is_some());
    let mut again = cluster.server("120");
    cluster.spawn(&mut again, json!({}));
    wait_until("the sweep to delete them", cluster.patience(10), || {
        object(&id).is_none() && object(&sleeper).is_none()
    });
    let _ = again.shutdown();
    wait_until("the last pod to go", cluster.patience(30), || {
        cluster.live() == 0
    });
}

#[test]
fn sandboxes_suspend_resume_and_expire_without_their_server() {
    let Some(cluster) = Cluster::start(true) else {
        return;
    };
    let mut c = cluster.server("6");
    common_scenario(&cluster, &mut c, "agent-sandbox Sandboxes");
    cluster.fixture_only("Sandboxes are POSTed", |f| {
        assert!(f.requests().iter().any(|r| {
            r.starts_with("POST /apis/agents.x-k8s.io/v1beta1/namespaces/agents/sandboxes")
        }));
    });

    // Suspend: the pod is deleted (processes are lost); a call resumes it on a new pod.
    let id = id_of(&cluster.spawn(&mut c, json!({"command": ["sleep", "1000"]})));
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    assert_eq!(state_of(&mut c, &id)["state"], "paused");
    wait_until(
        "the suspended Sandbox's pod to go",
        cluster.patience(30),
        || cluster.live() == 0,
    );
    let name = format!("kitbag-{id}");
    let sb = cluster.object("sandboxes", &name).unwrap();
    assert_eq!(sb["spec"]["operatingMode"], "Suspended", "{sb}");
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "echo back"]}),
        )
        .structured;
    assert_eq!(r["stdout"], "back\n", "{r}");
    assert_eq!(state_of(&mut c, &id)["state"], "running");

    warm_pool(&cluster, &mut c);

    // A suspended Sandbox stops without coming back first: it is deleted.
    let sleeper = id_of(&cluster.spawn(&mut c, json!({})));
    c.call_ok("instance_stop", json!({"instance": sleeper, "pause": true}));
    let posts = |f: &kube_fixture::Fixture| {
        f.requests()
            .iter()
            .filter(|r| r.starts_with("POST"))
            .count()
    };
    let before = cluster.as_fixture().map_or(0, posts);
    let stopped = c
        .call_ok("instance_stop", json!({"instance": sleeper}))
        .structured;
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    wait_until(
        "the suspended Sandbox to be deleted",
        cluster.patience(30),
        || {
            cluster
                .object("sandboxes", &format!("kitbag-{sleeper}"))
                .is_none()
        },
    );
    cluster.fixture_only("no pod is made to stop it", |f| {
        assert_eq!(posts(f), before, "no pod was made to stop it")
    });

    // The lease: renewed while the server lives...
    let first = sb["spec"]["shutdownTime"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(3));
    let renewed = cluster.object("sandboxes", &name).unwrap()["spec"]["shutdownTime"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(renewed > first, "{first} → {renewed}");
    // ...and when the server is gone, the Sandbox expires and is deleted on its own.
    kill_server(c);
    wait_until("the Sandbox to expire", cluster.patience(30), || {
        cluster.object("sandboxes", &name).is_none()
    });
    wait_until("its pod to go", cluster.patience(10), || {
        cluster.live() == 0
    });
}

/// A warm pool: the claimed Sandbox's pod runs its template's command in its template's
/// container; the agent starts beside it. (A cluster without SandboxClaims says SKIP.)
fn warm_pool(cluster: &Cluster, c: &mut McpClient) {
    if cluster.real().is_some_and(|r| !r.claims) {
        eprintln!(
            "SKIP: the cluster serves no SandboxClaims (extensions.agents.x-k8s.io): no warm pool"
        );
        return;
    }
    let image = cluster.real().map_or("python:3.12-slim", |r| r.image());
    let pool = format!(
        "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxTemplate\nmetadata: {{name: kitbag-test-py}}\nspec:\n  podTemplate:\n    spec:\n      containers: [{{name: python, image: {image:?}, command: [sleep, '1000']}}]\n---\napiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata: {{name: kitbag-test-py}}\nspec: {{replicas: 1, sandboxTemplateRef: {{name: kitbag-test-py}}}}\n"
    );
    let out = cluster.create(&pool);
    assert!(out.ok, "{}", out.stderr);
    let warm = cluster.spawn(c, json!({"image": "warmpool:kitbag-test-py"}));
    let wid = id_of(&warm);
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": wid, "command": ["sh", "-c", "echo warm; pwd"]}),
        )
        .structured;
    assert_eq!(r["stdout"], "warm\n/work\n", "{r}");
    let claim = format!("kitbag-{wid}");
    let bound = cluster.object("sandboxclaims", &claim).unwrap();
    assert_eq!(
        bound["spec"]["warmPoolRef"]["name"], "kitbag-test-py",
        "{bound}"
    );
    c.call_err(
        "instance_stop",
        json!({"instance": wid, "pause": true}),
        "unsupported",
    );
    c.call_ok("instance_stop", json!({"instance": wid}));
    wait_until("the claim to go", cluster.patience(30), || {
        cluster.object("sandboxclaims", &claim).is_none()
    });
    c.call_err(
        "instance_spawn",
        json!({"backend": "kube", "image": "warmpool:nope"}),
        "invalid_params",
    );
}
