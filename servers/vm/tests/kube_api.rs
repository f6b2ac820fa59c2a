//! The Kubernetes API fixture (tests/kube_fixture) against real, independent clients: the
//! wire format is what `kubectl` 1.32 (Debian's) and the official Python `kubernetes`
//! client (testkit/kube-py) accept — not only what kitbag-vm's own backend sends.
//!
//! - kubectl, over HTTPS (client-go sends a kubeconfig's token only over TLS): discovery,
//!   create/get/wait/exec/logs/watch/delete of pods, sandboxes (suspend, resume, expiry),
//!   claims, and the error messages it prints for 404, 409 and 422.
//! - raw HTTP: 401, watch start points (410 Expired after the history is trimmed),
//!   bookmarks, preconditions (409), the status subresource, JSON patch, selectors.
//! - kubectl's `port-forward` (SPDY/3.1 and the `portforward.k8s.io` streams) on both of
//!   its transports — tunnelled in a WebSocket (`SPDY/3.1+portforward.k8s.io`, its first
//!   try) and a plain SPDY upgrade (`KUBECTL_PORT_FORWARD_WEBSOCKETS=false`) — moving
//!   megabytes both ways over several connections, a refused port as kubectl reports it,
//!   and kubectl ending cleanly; the WebSocket channel protocol (`v4.channel.k8s.io`, the
//!   backend's) with the Python client (`kubernetes.stream.portforward`).
//!
//! Skips loudly without kubectl, bwrap or the Python venv unless CI=true.
#![allow(clippy::unwrap_used)]

#[path = "kube_fixture/mod.rs"]
mod kube_fixture;
#[path = "kube_api/port_forward.rs"]
mod port_forward;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kitbag_testkit::clients::{require, testkit_dir};
use kube_fixture::clients::{Out, http, json_of, json_stream, kubectl_in};
use kube_fixture::{Fixture, FixtureOptions};
use serde_json::{Value, json};

const TOKEN: &str = "kitbag-test-token";

struct Env {
    f: Fixture,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

async fn start(crds: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::start(FixtureOptions {
        sandbox_crds: crds,
        token: TOKEN.into(),
        agent_exe: env!("CARGO_BIN_EXE_kitbag-vm").into(),
        state_dir: dir.path().join("state"),
    })
    .await;
    let kubeconfig = dir.path().join("kubeconfig");
    f.write_kubeconfig_tls(&kubeconfig, "default");
    f.write_kubeconfig(&dir.path().join("kubeconfig-http"), "default");
    Env { f, dir, kubeconfig }
}

/// Stop the fixture and check that no sandbox process of it is left.
async fn finish(env: Env) {
    let state = env.dir.path().join("state");
    env.f.shutdown().await;
    let left = kitbag_testkit::pids_with_cmdline(state.to_str().unwrap());
    assert!(left.is_empty(), "processes left: {left:?}");
}

fn prerequisites(kubectl: bool) -> bool {
    if !kitbag_testkit::bwrap_usable() {
        return false;
    }
    !kubectl
        || require(
            std::process::Command::new("kubectl")
                .args(["version", "--client"])
                .output()
                .is_ok_and(|o| o.status.success()),
            "kubectl is not installed (scripts/test: apt-get install kubectl)",
        )
}

impl Env {
    async fn kubectl(&self, args: &[&str]) -> Out {
        kubectl_in(&self.kubeconfig, args, None).await
    }
    async fn kubectl_ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args).await;
        assert!(o.ok, "kubectl {args:?}: {}\n{}", o.stderr, o.stdout);
        o.stdout
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
    async fn wait_for(&self, what: &str, secs: u64, mut done: impl FnMut(&Fixture) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done(&self.f) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: hello
  labels: {app: hello}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    command: [\"/bin/sh\", \"-c\", \"echo hi; sleep 300\"]
    env: [{name: GREETING, value: hello-env}]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, emptyDir: {}}]
";

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_drives_pods() {
    if !prerequisites(true) {
        return;
    }
    let env = start(true).await;
    let v = env.kubectl_ok(&["version", "-o", "json"]).await;
    let v: Value = serde_json::from_str(&v).unwrap();
    assert_eq!(v["serverVersion"]["minor"], "32");
    let res = env.kubectl_ok(&["api-resources"]).await;
    assert!(
        res.contains("sandboxes") && res.contains("agents.x-k8s.io/v1beta1"),
        "{res}"
    );
    assert!(env.kubectl_ok(&["get", "ns"]).await.contains("default"));
    // The backend's deny-all NetworkPolicy, as kubectl reads it back.
    assert!(res.contains("networkpolicies"), "{res}");
    let policy = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\nspec:\n  podSelector: {matchLabels: {app: x}}\n  policyTypes: [Ingress, Egress]\n";
    let path = env.dir.path().join("policy.yaml");
    std::fs::write(&path, policy).unwrap();
    env.kubectl_ok(&["create", "--validate=false", "-f", path.to_str().unwrap()])
        .await;
    let got = env
        .kubectl_ok(&[
            "get",
            "networkpolicy",
            "deny",
            "-o",
            "jsonpath={.spec.policyTypes}",
        ])
        .await;
    assert!(got.contains("Egress"), "{got}");

    // A watch from before the pod exists, to see its whole life as events.
    let mut watcher = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["get", "pods", "-w", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    env.wait_for("kubectl's watch", 20, |f| {
        f.requests().iter().any(|r| {
            r.starts_with("GET /api/v1/namespaces/default/pods?") && r.contains("watch=true")
        })
    })
    .await;
    let pod = env.file("pod.yaml", POD);
    env.kubectl_ok(&["create", "--validate=false", "-f", &pod])
        .await;
    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/hello",
        "--timeout=30s",
    ])
    .await;
    let list: Value =
        serde_json::from_str(&env.kubectl_ok(&["get", "pods", "-o", "json"]).await).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["status"]["phase"], "Running");
    let ip = env
        .kubectl_ok(&[
            "get",
            "pod",
            "hello",
            "-o",
            "jsonpath={.status.podIP} {.status.containerStatuses[0].ready}",
        ])
        .await;
    assert_eq!(ip, "127.0.0.1 true");
    assert_eq!(env.f.live_pods(), vec!["hello".to_string()]);

    exec_and_logs(&env).await;
    kubectl_errors(&env, &pod).await;

    let pid = process_of(&env, "hello");
    env.kubectl_ok(&["delete", "pod", "hello"]).await;
    assert!(env.f.object("pods", "default", "hello").is_none());
    assert!(env.f.live_pods().is_empty());
    assert!(
        !kitbag_testkit::process_alive(pid),
        "the sandbox of a deleted pod still runs"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    watcher.start_kill().unwrap();
    let w = watcher.wait_with_output().await.unwrap();
    let (w_out, w_err) = (
        String::from_utf8_lossy(&w.stdout),
        String::from_utf8_lossy(&w.stderr),
    );
    let phases: Vec<String> = json_stream(&w_out)
        .iter()
        .map(|p| p["status"]["phase"].as_str().unwrap_or("-").to_string())
        .collect();
    assert!(
        phases.contains(&"Pending".into()) && phases.contains(&"Running".into()),
        "{phases:?} {w_err}"
    );
    assert!(
        json_stream(&w_out).last().unwrap()["metadata"]["deletionTimestamp"].is_string(),
        "{w_out}"
    );
    let reqs = env.f.requests();
    assert!(reqs.iter().any(|r| r == "POST /api/v1/namespaces/default/pods?fieldManager=kubectl-create&fieldValidation=Ignore"), "{reqs:#?}");
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("GET /api/v1/namespaces/default/pods/hello/exec?command=cat")),
        "{reqs:#?}"
    );
    finish(env).await;
}

/// exec (stdout, stderr, exit code; stdin), the pod's environment, emptyDir and hostname;
/// logs.
async fn exec_and_logs(env: &Env) {
    let o = env
        .kubectl(&[
            "exec",
            "hello",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ])
        .await;
    assert_eq!((o.code, o.stdout.as_str()), (3, "out\n"), "{}", o.stderr);
    assert!(
        o.stderr.contains("err\n") && o.stderr.contains("exit code 3"),
        "{}",
        o.stderr
    );
    let o = kubectl_in(
        &env.kubeconfig,
        &["exec", "-i", "hello", "--", "cat"],
        Some("piped\nstdin\n"),
    )
    .await;
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, "piped\nstdin\n"),
        "{}",
        o.stderr
    );
    let o = env
        .kubectl_ok(&[
            "exec",
            "hello",
            "--",
            "sh",
            "-c",
            "echo $GREETING; touch /scratch/f && echo rw; hostname",
        ])
        .await;
    assert_eq!(o, "hello-env\nrw\nhello\n");
    assert_eq!(env.kubectl_ok(&["logs", "hello"]).await, "hi\n");
}

/// Errors as kubectl prints them: 404, 409, 422.
async fn kubectl_errors(env: &Env, pod: &str) {
    // Errors as kubectl prints them.
    let o = env.kubectl(&["get", "pods", "nope"]).await;
    assert!(
        o.stderr
            .contains("Error from server (NotFound): pods \"nope\" not found"),
        "{}",
        o.stderr
    );
    let o = env
        .kubectl(&["create", "--validate=false", "-f", pod])
        .await;
    assert!(
        o.stderr.contains("(AlreadyExists)") && o.stderr.contains("pods \"hello\" already exists"),
        "{}",
        o.stderr
    );
    let bad = env.file(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: []}\n",
    );
    let o = env
        .kubectl(&["create", "--validate=false", "-f", &bad])
        .await;
    assert!(
        o.stderr
            .contains("The Pod \"bad\" is invalid: spec.containers: Required value"),
        "{}",
        o.stderr
    );
}

/// The bwrap process of a pod's sandbox (its command line names the pod's directory).
fn process_of(env: &Env, _pod: &str) -> u32 {
    let state = env.dir.path().join("state");
    let pids = kitbag_testkit::pids_with_cmdline(state.to_str().unwrap());
    *pids.first().expect("a sandbox process")
}

const SANDBOX: &str = "apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: sb1
spec:
  podTemplate:
    metadata:
      labels: {role: agent}
    spec:
      containers:
      - name: main
        image: python:3.12
        command: [\"sleep\", \"600\"]
";

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_drives_sandboxes() {
    if !prerequisites(true) {
        return;
    }
    let env = start(true).await;
    let sb = env.file("sb.yaml", SANDBOX);
    env.kubectl_ok(&["create", "--validate=false", "-f", &sb])
        .await;
    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "sandbox/sb1",
        "--timeout=30s",
    ])
    .await;
    let s = env.f.object("sandboxes", "default", "sb1").unwrap();
    assert_eq!(s["status"]["podIPs"], json!(["127.0.0.1"]));
    assert_eq!(s["status"]["conditions"][0]["reason"], "DependenciesReady");
    let pod = env.f.object("pods", "default", "sb1").unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["uid"],
        s["metadata"]["uid"]
    );
    assert_eq!(pod["metadata"]["labels"]["role"], "agent");

    env.kubectl_ok(&[
        "patch",
        "sandbox",
        "sb1",
        "--type",
        "merge",
        "-p",
        "{\"spec\":{\"operatingMode\":\"Suspended\"}}",
    ])
    .await;
    env.wait_for("the suspended sandbox's pod to go", 20, |f| {
        f.object("pods", "default", "sb1").is_none() && f.live_pods().is_empty()
    })
    .await;
    env.wait_for("Ready=False SandboxSuspended", 5, |f| {
        f.object("sandboxes", "default", "sb1").unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["reason"] == "SandboxSuspended")
    })
    .await;
    env.kubectl_ok(&[
        "patch",
        "sandbox",
        "sb1",
        "--type",
        "merge",
        "-p",
        "{\"spec\":{\"operatingMode\":\"Running\"}}",
    ])
    .await;
    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "sandbox/sb1",
        "--timeout=30s",
    ])
    .await;
    assert_eq!(env.f.live_pods(), vec!["sb1".to_string()]);
    env.kubectl_ok(&["delete", "sandbox", "sb1"]).await;
    env.wait_for("the deleted sandbox's pod to go", 20, |f| {
        f.object("pods", "default", "sb1").is_none() && f.live_pods().is_empty()
    })
    .await;

    expiry(&env).await;
    claim(&env).await;
    finish(env).await;
}

impl Env {
    /// A request with the token, off the runtime's threads.
    async fn call(&self, m: &'static str, p: String, ct: &'static str, b: String) -> (u16, String) {
        let url = self.f.url.clone();
        tokio::task::spawn_blocking(move || http(&url, m, &p, Some(TOKEN), ct, &b))
            .await
            .unwrap()
    }
}

const TEMPLATES: &str =
    "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxtemplates";

/// shutdownTime: Delete removes the pod, then the Sandbox; Retain keeps it, expired.
async fn expiry(env: &Env) {
    // shutdownTime: Delete removes the pod, then the Sandbox; Retain keeps it, expired.
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for (name, policy) in [("exp-del", "Delete"), ("exp-ret", "Retain")] {
        let y = SANDBOX
            .replace("name: sb1", &format!("name: {name}"))
            .replace(
                "spec:\n  podTemplate",
                &format!(
                    "spec:\n  shutdownTime: \"{soon}\"\n  shutdownPolicy: {policy}\n  podTemplate"
                ),
            );
        let p = env.file(&format!("{name}.yaml"), &y);
        env.kubectl_ok(&["create", "--validate=false", "-f", &p])
            .await;
    }
    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "sandbox/exp-del",
        "sandbox/exp-ret",
        "--timeout=30s",
    ])
    .await;
    env.wait_for("expiry", 30, |f| {
        f.object("sandboxes", "default", "exp-del").is_none()
            && f.object("pods", "default", "exp-ret").is_none()
            && f.object("sandboxes", "default", "exp-ret")
                .is_some_and(|s| s["status"]["conditions"][0]["reason"] == "SandboxExpired")
    })
    .await;
}

/// A claim on a warm pool gets a Sandbox from the pool's template.
async fn claim(env: &Env) {
    // A claim on a warm pool gets a Sandbox from the pool's template.
    let tpl = SANDBOX
        .replace("kind: Sandbox\n", "kind: SandboxTemplate\n")
        .replace(
            "agents.x-k8s.io/v1beta1",
            "extensions.agents.x-k8s.io/v1beta1",
        )
        .replace("name: sb1", "name: tpl");
    let objs = format!(
        "{tpl}---\napiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata: {{name: pool}}\nspec: {{replicas: 1, sandboxTemplateRef: {{name: tpl}}}}\n---\napiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxClaim\nmetadata: {{name: claim1}}\nspec: {{warmPoolRef: {{name: pool}}, env: [{{name: FROM_CLAIM, value: \"yes\"}}]}}\n"
    );
    let p = env.file("claim.yaml", &objs);
    env.kubectl_ok(&["create", "--validate=false", "-f", &p])
        .await;
    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "sandboxclaim/claim1",
        "--timeout=30s",
    ])
    .await;
    let c = env.f.object("sandboxclaims", "default", "claim1").unwrap();
    assert_eq!(c["status"]["sandbox"]["name"], "claim1");
    assert_eq!(c["status"]["sandbox"]["podIPs"], json!(["127.0.0.1"]));
    assert_eq!(
        c["metadata"]["annotations"]["agents.x-k8s.io/sandbox-name"],
        "claim1"
    );
    assert_eq!(
        env.kubectl_ok(&["exec", "claim1", "--", "sh", "-c", "echo $FROM_CLAIM"])
            .await,
        "yes\n"
    );
    env.kubectl_ok(&["delete", "sandboxclaim", "claim1"]).await;
    env.wait_for("the claim's sandbox and pod to go", 20, |f| {
        f.object("sandboxes", "default", "claim1").is_none() && f.live_pods().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_http_semantics() {
    if !prerequisites(false) {
        return;
    }
    let env = start(true).await;
    let (code, body) = http(
        &env.f.url,
        "GET",
        "/api/v1/pods",
        None,
        "application/json",
        "",
    );
    assert_eq!(
        (code, json_of(&body)["reason"].clone()),
        (401, json!("Unauthorized"))
    );
    let (code, body) = env
        .call("GET", "/apis/nope.example/v1".into(), "", String::new())
        .await;
    assert_eq!(
        (code, json_of(&body)["kind"].clone()),
        (404, json!("Status"))
    );

    crud_and_selectors(&env).await;
    status_subresource(&env).await;
    watch_points(&env).await;
    finish(env).await;
}

/// Create (uid, timestamps, generateName), selectors, JSON patch, a stale PUT's 409.
async fn crud_and_selectors(env: &Env) {
    let cm = |name: &str, labels: Value| {
        json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate", "metadata": {"name": name, "labels": labels}, "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}).to_string()
    };
    let base = TEMPLATES;
    let (code, body) = env
        .call(
            "POST",
            base.into(),
            "application/json",
            cm("a", json!({"tier": "one"})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let a = json_of(&body);
    assert!(a["metadata"]["uid"].is_string() && a["metadata"]["creationTimestamp"].is_string());
    env.call(
        "POST",
        base.into(),
        "application/json",
        cm("b", json!({"tier": "two"})),
    )
    .await;
    let (_, body) = env
        .call(
            "POST",
            base.into(),
            "application/json",
            json!({"kind": "SandboxTemplate", "metadata": {"generateName": "gen-"}, "spec": {}})
                .to_string(),
        )
        .await;
    assert!(
        json_of(&body)["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
    for (sel, want) in [
        ("tier%3Done", 1),
        ("tier!%3Done", 2),
        ("tier", 2),
        ("tier,tier%3Dtwo", 1),
    ] {
        let (_, body) = env
            .call(
                "GET",
                format!("{base}?labelSelector={sel}"),
                "",
                String::new(),
            )
            .await;
        assert_eq!(
            json_of(&body)["items"].as_array().unwrap().len(),
            want,
            "{sel}"
        );
    }
    let (_, body) = env
        .call(
            "GET",
            format!("{base}?fieldSelector=metadata.name%3Db"),
            "",
            String::new(),
        )
        .await;
    assert_eq!(json_of(&body)["items"][0]["metadata"]["name"], "b");

    // PUT with a stale resourceVersion: 409 Conflict; JSON patch replaces.
    let mut stale = a.clone();
    stale["metadata"]["labels"]["tier"] = json!("three");
    env.call(
        "PATCH",
        format!("{base}/a"),
        "application/json-patch+json",
        json!([{"op": "replace", "path": "/metadata/labels/tier", "value": "uno"}]).to_string(),
    )
    .await;
    let (code, body) = env
        .call(
            "PUT",
            format!("{base}/a"),
            "application/json",
            stale.to_string(),
        )
        .await;
    assert_eq!(
        (code, json_of(&body)["reason"].clone()),
        (409, json!("Conflict"))
    );
}

/// Spec via /status and status via the object are ignored; a 422 names the fields.
async fn status_subresource(env: &Env) {
    // The status subresource: spec via /status and status via the object are ignored.
    let sb = json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": "st"}, "spec": {"operatingMode": "Suspended", "podTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}, "status": {"service": "from-create"}});
    let sbase = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes";
    let (_, body) = env
        .call("POST", sbase.into(), "application/json", sb.to_string())
        .await;
    assert!(json_of(&body)["status"].get("service").is_none(), "{body}");
    env.call(
        "PATCH",
        format!("{sbase}/st/status"),
        "application/merge-patch+json",
        json!({"spec": {"operatingMode": "Running"}, "status": {"service": "svc"}}).to_string(),
    )
    .await;
    env.call(
        "PATCH",
        format!("{sbase}/st"),
        "application/merge-patch+json",
        json!({"status": {"service": "ignored"}}).to_string(),
    )
    .await;
    let s = env.f.object("sandboxes", "default", "st").unwrap();
    assert_eq!(
        (
            s["spec"]["operatingMode"].clone(),
            s["status"]["service"].clone()
        ),
        (json!("Suspended"), json!("svc"))
    );
    let (code, body) = env.call("POST", sbase.into(), "application/json", json!({"kind": "Sandbox", "metadata": {"name": "bad"}, "spec": {"operatingMode": "Paused"}}).to_string()).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("spec.operatingMode") && body.contains("spec.podTemplate.spec"),
        "{body}"
    );
}

/// Watch: replay from a resourceVersion, bookmarks, 410 once the history is trimmed.
async fn watch_points(env: &Env) {
    // Watch: replay from a resourceVersion, bookmarks, 410 once the history is trimmed.
    let (_, body) = env
        .call(
            "GET",
            format!(
                "{TEMPLATES}?watch=true&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=3"
            ),
            "",
            String::new(),
        )
        .await;
    let kinds: Vec<String> = body
        .lines()
        .map(|l| json_of(l)["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        &kinds[..4],
        ["ADDED", "ADDED", "ADDED", "MODIFIED"],
        "{body}"
    );
    assert_eq!(kinds.last().unwrap(), "BOOKMARK", "{body}");
    env.f.set_history_limit(2);
    let (code, body) = env
        .call(
            "GET",
            format!("{TEMPLATES}?watch=1&resourceVersion=1"),
            "",
            String::new(),
        )
        .await;
    let ev = json_of(body.lines().next().unwrap());
    assert_eq!(
        (
            code,
            ev["type"].clone(),
            ev["object"]["code"].clone(),
            ev["object"]["reason"].clone()
        ),
        (200, json!("ERROR"), json!(410), json!("Expired"))
    );
}

/// How pods end: exit 0 → Succeeded, else Failed with the code; `activeDeadlineSeconds`
/// → Failed/DeadlineExceeded; deleting an ended pod removes it at once.
#[tokio::test(flavor = "multi_thread")]
async fn pod_endings() {
    if !prerequisites(false) {
        return;
    }
    let env = start(false).await;
    let pods = "/api/v1/namespaces/default/pods";
    for (name, cmd, deadline) in [
        ("ok", "true", None),
        ("fail", "exit 4", None),
        ("late", "sleep 300", Some(1)),
    ] {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "command": ["sh", "-c", cmd]}]}});
        if let Some(d) = deadline {
            p["spec"]["activeDeadlineSeconds"] = json!(d);
        }
        let (code, body) = env
            .call("POST", pods.into(), "application/json", p.to_string())
            .await;
        assert_eq!(code, 201, "{body}");
    }
    let phase = |f: &Fixture, n: &str| {
        f.object("pods", "default", n)
            .map(|p| p["status"].clone())
            .unwrap_or_default()
    };
    env.wait_for("three ended pods", 30, |f| {
        ["ok", "fail", "late"]
            .iter()
            .all(|n| matches!(phase(f, n)["phase"].as_str(), Some("Succeeded" | "Failed")))
    })
    .await;
    let term = |n: &str| phase(&env.f, n)["containerStatuses"][0]["state"]["terminated"].clone();
    assert_eq!(phase(&env.f, "ok")["phase"], "Succeeded");
    assert_eq!(
        (term("ok")["exitCode"].clone(), term("ok")["reason"].clone()),
        (json!(0), json!("Completed"))
    );
    assert_eq!(
        (
            phase(&env.f, "fail")["phase"].clone(),
            term("fail")["exitCode"].clone()
        ),
        (json!("Failed"), json!(4))
    );
    assert_eq!(
        (
            phase(&env.f, "late")["phase"].clone(),
            phase(&env.f, "late")["reason"].clone()
        ),
        (json!("Failed"), json!("DeadlineExceeded"))
    );
    assert!(env.f.live_pods().is_empty());
    let (code, body) = env
        .call(
            "GET",
            format!("{pods}/fail/exec?command=true&stdout=true"),
            "",
            String::new(),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    let (code, _) = env
        .call(
            "DELETE",
            format!("{pods}/fail"),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(code, 200);
    assert!(env.f.object("pods", "default", "fail").is_none());
    finish(env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crds_off_means_404() {
    let env = start(false).await;
    let (code, body) = http(
        &env.f.url,
        "GET",
        "/apis/agents.x-k8s.io/v1beta1",
        Some(TOKEN),
        "",
        "",
    );
    assert_eq!(code, 404, "{body}");
    // Only the built-in group the backend uses (NetworkPolicies) is left.
    let (_, body) = http(&env.f.url, "GET", "/apis", Some(TOKEN), "", "");
    let groups = serde_json::from_str::<Value>(&body).unwrap()["groups"].clone();
    let names: Vec<&str> = groups
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(names, ["networking.k8s.io"], "{body}");
    finish(env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_client_exec_portforward_watch() {
    if !prerequisites(false) {
        return;
    }
    let py = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("kube-py/.venv/bin/python");
    if !require(
        py.exists(),
        "the Python kubernetes client is not installed (scripts/test installs it in testkit/kube-py/.venv)",
    ) {
        return;
    }
    let env = start(false).await;
    let script = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("kube-py/portforward_check.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&py)
            .arg(script)
            .arg(&env.kubeconfig)
            .arg("default")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("portforward_check.py hung")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(r["list_kind"], "PodList");
    assert_eq!(r["watch_events"][0], json!(["ADDED", "Pending"]), "{r}");
    assert_eq!(
        r["watch_events"].as_array().unwrap().last().unwrap(),
        &json!(["MODIFIED", "Running"]),
        "{r}"
    );
    assert_eq!(
        (
            r["read_phase"].clone(),
            r["pod_ip"].clone(),
            r["container_running"].clone()
        ),
        (json!("Running"), json!("127.0.0.1"), json!(true))
    );
    assert_eq!(r["exec_output"], "from-exec\nto-err\n");
    assert_eq!(r["exec_returncode"], 7);
    assert_eq!(r["portforward_status_line"], "HTTP/1.0 200 OK");
    // The client's proxy thread prints to stderr if it dies; show it with the report.
    assert!(
        r["refused_error"]
            .as_str()
            .is_some_and(|e| e.contains("Connection refused")),
        "{r}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_for("the python pod to go", 20, |f| {
        f.object("pods", "default", "py-web").is_none()
    })
    .await;
    finish(env).await;
}
