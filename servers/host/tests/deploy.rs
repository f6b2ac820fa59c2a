//! `kitbag deploy render`: the manifests pass kubernetes-validate --strict (offline, Kubernetes
//! 1.32 schemas), read back with PyYAML, hold the team invariants (≥ 2 gateway replicas, no
//! session affinity, only the gateway reaches the runner), and their command lines, env and
//! agent.json really wire a gateway to a runner: both are started here as rendered (addresses
//! and file paths swapped for local ones) and a tool call goes through.
//! The Python tools come from testkit/py/.venv (scripts/test); absent, a loud skip unless
//! CI=true.

use std::path::{Path, PathBuf};

use kitbag_testkit::clients::{require, testkit_dir};
use kitbag_testkit::http::HttpServer;
use serde_json::{Value, json};

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn venv_bin(name: &str) -> Option<PathBuf> {
    let p = testkit_dir(env!("CARGO_MANIFEST_DIR"))
        .join("py/.venv/bin")
        .join(name);
    p.exists().then_some(p)
}

fn render(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(kitbag())
        .args(["deploy", "render"])
        .args(args)
        .arg("--output")
        .arg(dir)
        .output()
        .expect("kitbag deploy render")
}

/// Every manifest in `dir`, parsed by PyYAML.
fn load(python: &Path, dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let script = "import sys, json, yaml\nprint(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f))]))";
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(&files)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
        })
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}*"))
}

fn container(o: &Value) -> &Value {
    &o["spec"]["template"]["spec"]["containers"][0]
}

/// A rendered command line run here: the pod's address and files swapped for local ones.
fn local_args(rendered: &Value, files: &[(&str, &Path)]) -> Vec<String> {
    rendered
        .as_array()
        .expect("args")
        .iter()
        .map(|a| {
            let a = a.as_str().expect("string arg");
            if a == "0.0.0.0:8080" {
                return "127.0.0.1:0".to_string();
            }
            files
                .iter()
                .find(|(pod, _)| *pod == a)
                .map_or_else(|| a.to_string(), |(_, local)| local.display().to_string())
        })
        .collect()
}

#[test]
fn team_manifests_validate_and_wire_a_gateway_to_its_runner() {
    let (Some(python), Some(validate)) = (venv_bin("python"), venv_bin("kubernetes-validate"))
    else {
        require(
            false,
            "kubernetes-validate is not installed in testkit/py/.venv (run scripts/test)",
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = tmp.path().join("manifests");
    let out = render(
        &out_dir,
        &[
            "--profile",
            "team",
            "--namespace",
            "agents",
            "--replicas",
            "3",
            "--database-secret",
            "kitbag-db",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Offline schema validation, strict (unknown fields refused).
    let mut files: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let checked = std::process::Command::new(&validate)
        .args(["--strict", "-k", "1.32.0"])
        .args(&files)
        .output()
        .expect("kubernetes-validate");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(checked.status.success(), "{report}");
    assert_eq!(report.matches("passed").count(), files.len(), "{report}");

    let objects = load(&python, &out_dir);
    for o in &objects {
        assert_eq!(o["metadata"]["namespace"], "agents", "{o}");
        if o["kind"] == "Service" {
            assert!(
                o["spec"].get("sessionAffinity").is_none(),
                "no session affinity: {o}"
            );
        }
    }
    let gateway = find(&objects, "Deployment", "kitbag-gateway");
    assert_eq!(gateway["spec"]["replicas"], 3);
    assert_eq!(
        find(&objects, "HorizontalPodAutoscaler", "kitbag-gateway")["spec"]["minReplicas"],
        3
    );
    assert_eq!(
        container(gateway)["readinessProbe"]["httpGet"]["path"],
        "/healthz"
    );
    // Graceful drain fits in the pod's termination grace: 5 s drain + 25 s for calls.
    let args: Vec<&str> = container(gateway)["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let flag = |name: &str| -> u64 {
        let at = args.iter().position(|a| *a == name).expect(name);
        args[at + 1].parse().expect("secs")
    };
    let grace = gateway["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(flag("--drain-secs") + flag("--shutdown-grace-secs") < grace);
    let policy = find(&objects, "NetworkPolicy", "kitbag-runner-from-gateway");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "gateway"
    );
    let secret = &find(&objects, "Secret", "kitbag-auth")["stringData"];
    let config: Value = serde_json::from_str(
        find(&objects, "ConfigMap", "kitbag-config")["data"]["agent.json"]
            .as_str()
            .expect("agent.json"),
    )
    .expect("agent.json parses");

    // Shared memory: served by the gateways, on the database the named Secret points at.
    assert_eq!(config["mcp"]["memory"]["args"], json!(["server", "memory"]));
    assert_eq!(
        config["mcp"]["workspace"]["disabled_tools"],
        json!(["memory_*"]),
        "one memory_store: the gateway's"
    );
    let db_env = container(gateway)["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "KITBAG_DATABASE_URL")
        .expect("KITBAG_DATABASE_URL");
    assert_eq!(
        db_env["valueFrom"]["secretKeyRef"],
        json!({"name": "kitbag-db", "key": "url"})
    );

    // The mTLS material: an independent parser (openssl) agrees the runner's certificate is a
    // server certificate of the deployment's CA for the pod's DNS name, the gateway's a client
    // one.
    let tls = &find(&objects, "Secret", "kitbag-tls")["stringData"];
    let tls_dir = tmp.path().join("tls");
    std::fs::create_dir_all(&tls_dir).expect("tls dir");
    for key in [
        "ca.crt",
        "runner.crt",
        "runner.key",
        "gateway.crt",
        "gateway.key",
    ] {
        std::fs::write(tls_dir.join(key), tls[key].as_str().expect(key)).expect("write");
    }
    let verify = |purpose: &str, cert: &str, extra: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(["verify", "-purpose", purpose, "-CAfile"])
            .arg(tls_dir.join("ca.crt"))
            .args(extra)
            .arg(tls_dir.join(cert))
            .output()
            .expect("openssl");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains(": OK"),
            "{cert}: {text}"
        );
    };
    let pod_dns = "kitbag-runner-default-0.kitbag-runner-default.agents.svc.cluster.local";
    verify("sslserver", "runner.crt", &["-verify_hostname", pod_dns]);
    verify("sslclient", "gateway.crt", &[]);
    // Each pod mounts only its own key.
    let items = |o: &Value| -> Vec<String> {
        let volumes = o["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes");
        let tls = volumes
            .iter()
            .find(|v| v["name"] == "tls")
            .expect("tls volume");
        tls["secret"]["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["key"].as_str().expect("key").to_string())
            .collect()
    };

    // The runner as rendered: its token file, its certificate, every local family, the
    // workspace.
    let runner = find(&objects, "StatefulSet", "kitbag-runner-default");
    assert_eq!(items(runner), ["ca.crt", "runner.crt", "runner.key"]);
    assert_eq!(items(gateway), ["ca.crt", "gateway.crt", "gateway.key"]);
    let workspace = tmp.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("hello.txt"), "hello from the runner\n").expect("write");
    let runner_token = tmp.path().join("runner-token");
    std::fs::write(
        &runner_token,
        secret["runner-token"].as_str().expect("runner token"),
    )
    .expect("write");
    let pod_tls = |name: &str| format!("/var/run/kitbag-tls/{name}");
    let local_tls = |name: &str| tls_dir.join(name);
    let (ca, runner_crt, runner_key) = (
        local_tls("ca.crt"),
        local_tls("runner.crt"),
        local_tls("runner.key"),
    );
    let runner_args = local_args(
        &container(runner)["args"],
        &[
            ("/var/run/kitbag/runner-token", &runner_token),
            (&pod_tls("ca.crt"), &ca),
            (&pod_tls("runner.crt"), &runner_crt),
            (&pod_tls("runner.key"), &runner_key),
        ],
    );
    let runner_args: Vec<&str> = runner_args.iter().map(String::as_str).collect();
    let runner_server = HttpServer::start(kitbag(), &runner_args, &workspace, &[]);
    // Without the gateway's certificate the runner is not reachable at all.
    let plain = runner_server.connect().try_post_mcp(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        &[],
    );
    assert!(
        plain.as_ref().map_or(true, |r| r.status != 200),
        "plain HTTP reached the runner"
    );

    // The gateway as rendered: its agent.json (the runner reached as `localhost`, a name its
    // certificate carries for port-forwards, and the pod's TLS files made local), the runner
    // token in the env variable the manifest names, the client token and session key files.
    let mut config = config;
    let runner_port = runner_server
        .url()
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    config["mcp"]["workspace"]["url"] = json!(format!("https://localhost:{runner_port}"));
    for key in ["ca", "cert", "key"] {
        let pod = config["mcp"]["workspace"]["tls"][key]
            .as_str()
            .expect("tls file");
        let file = pod.rsplit('/').next().expect("name");
        config["mcp"]["workspace"]["tls"][key] = json!(local_tls(file));
    }
    // The image's `kitbag` is this build's.
    for entry in config["mcp"].as_object_mut().expect("mcp").values_mut() {
        if entry["command"] == "kitbag" {
            entry["command"] = json!(kitbag().to_str().expect("utf8"));
        }
    }
    let config_file = tmp.path().join("agent.json");
    std::fs::write(&config_file, config.to_string()).expect("write");
    let client_token = tmp.path().join("token");
    std::fs::write(&client_token, secret["token"].as_str().expect("token")).expect("write");
    let session_keys = tmp.path().join("session-keys");
    std::fs::write(
        &session_keys,
        secret["session-keys"].as_str().expect("session keys"),
    )
    .expect("write");
    let gateway_args = local_args(
        &container(gateway)["args"],
        &[
            ("/etc/kitbag/agent.json", &config_file),
            ("/var/run/kitbag/token", &client_token),
            ("/var/run/kitbag/session-keys", &session_keys),
        ],
    );
    let gateway_args: Vec<&str> = gateway_args.iter().map(String::as_str).collect();
    let env_name = container(gateway)["env"][0]["name"].as_str().expect("env");
    let state = tmp.path().join("gateway");
    std::fs::create_dir_all(&state).expect("state");
    let runner_secret = secret["runner-token"].as_str().expect("runner token");
    // The database the Secret would name: a private PostgreSQL here (when installed).
    let pg = kitbag_testkit::pg::PgServer::start();
    let db_url = pg
        .as_ref()
        .map(|p| p.database("kitbag"))
        .unwrap_or_default();
    let gateway_server = HttpServer::start(
        kitbag(),
        &gateway_args,
        &state,
        &[(env_name, runner_secret), ("KITBAG_DATABASE_URL", &db_url)],
    );

    let bearer = format!("Bearer {}", secret["token"].as_str().expect("token"));
    let auth = ("authorization", bearer.as_str());
    let mut conn = gateway_server.connect();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "deploy-test", "version": "1"}}});
    let r = conn.post_mcp(&init, &[auth]);
    assert_eq!(r.status, 200, "{}", r.text());
    // The gateways seal handshake-era sessions (any replica opens them).
    let session = r
        .header("mcp-session-id")
        .expect("a sealed session")
        .to_string();
    assert!(session.starts_with("ks1."), "{session}");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "file_read", "arguments": {"path": "hello.txt"}}});
    let in_session = ("mcp-session-id", session.as_str());
    let r = conn.post_mcp(
        &call,
        &[auth, ("mcp-protocol-version", "2025-11-25"), in_session],
    );
    assert!(
        r.text().contains("hello from the runner"),
        "a call through the gateway reaches the runner's workspace: {}\ngateway: {}\nrunner: {}",
        r.text(),
        gateway_server.stderr(),
        runner_server.stderr()
    );
    // A memory stored through the gateway lands in the shared database.
    let store = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "memory_store", "arguments": {"content": "stored through the gateway"}}});
    let r = conn.post_mcp(&store, &[auth, ("mcp-protocol-version", "2025-11-25")]);
    assert!(
        r.text().contains("\"duplicate\":false"),
        "{}\n{}",
        r.text(),
        gateway_server.stderr()
    );
    if let Some(pg) = &pg {
        assert_eq!(
            pg.psql_in("kitbag", "SELECT content FROM memories")
                .as_deref(),
            Ok("stored through the gateway")
        );
    }
    // Without the client token the gateway refuses.
    assert_eq!(conn.post_mcp(&init, &[]).status, 401);
}

#[test]
fn single_and_oauth_profiles_validate_and_bad_flags_are_refused() {
    let (Some(_), Some(validate)) = (venv_bin("python"), venv_bin("kubernetes-validate")) else {
        require(
            false,
            "kubernetes-validate is not installed in testkit/py/.venv (run scripts/test)",
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    for (name, args) in [
        ("single", vec!["--profile", "single"]),
        (
            "oauth",
            vec![
                "--oauth-issuer",
                "https://login.example.com",
                "--oauth-resource",
                "https://kitbag.example.com/mcp",
            ],
        ),
    ] {
        let dir = tmp.path().join(name);
        let out = render(&dir, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        let checked = std::process::Command::new(&validate)
            .args(["--strict", "-k", "1.32.0"])
            .args(&files)
            .output()
            .expect("kubernetes-validate");
        assert!(
            checked.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&checked.stdout)
        );
        let all: String = files
            .iter()
            .map(|f| std::fs::read_to_string(f).expect("read"))
            .collect();
        if name == "oauth" {
            // The gateway takes OAuth tokens and no static token (the runner keeps its own).
            let gateway = std::fs::read_to_string(
                files
                    .iter()
                    .find(|f| {
                        f.to_string_lossy()
                            .ends_with("deployment-kitbag-gateway.yaml")
                    })
                    .expect("gateway manifest"),
            )
            .expect("read");
            assert!(gateway.contains("\"--oauth-issuer\""), "{gateway}");
            assert!(!gateway.contains("--auth-token-file"), "{gateway}");
            assert!(
                !all.contains("  token: "),
                "no client token in the Secret: {all}"
            );
        }
    }
    for (args, want) in [
        (vec!["--replicas", "1"], "at least 2"),
        (vec!["--namespace", "Bad_Name"], "--namespace"),
        (
            vec![
                "--oauth-issuer",
                "https://i",
                "--oauth-resource",
                "http://plain/mcp",
            ],
            "https://",
        ),
    ] {
        let out = render(&tmp.path().join("bad"), &args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !tmp.path().join("bad").exists(),
            "nothing is written when refused"
        );
    }
}

#[test]
fn a_sandbox_runner_renders_an_agent_sandbox_sandbox() {
    let (Some(python), Some(validate)) = (venv_bin("python"), venv_bin("kubernetes-validate"))
    else {
        require(
            false,
            "kubernetes-validate is not installed in testkit/py/.venv (run scripts/test)",
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("manifests");
    let out = render(&dir, &["--runner", "sandbox", "--workspace", "api"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = load(&python, &dir);
    let sandbox = find(&objects, "Sandbox", "kitbag-runner-api");
    assert_eq!(sandbox["apiVersion"], "agents.x-k8s.io/v1beta1");
    assert!(
        !objects.iter().any(|o| o["kind"] == "StatefulSet"
            || o["metadata"]["name"] == "kitbag-runner-api" && o["kind"] == "Service"),
        "the Sandbox's controller makes the pod and its Service"
    );
    // Only fields of agent-sandbox's Sandbox CRD (api/v1beta1/sandbox_types.go).
    let keys =
        |v: &Value| -> Vec<String> { v.as_object().expect("object").keys().cloned().collect() };
    for k in keys(&sandbox["spec"]) {
        assert!(
            [
                "podTemplate",
                "volumeClaimTemplates",
                "service",
                "shutdownTime",
                "shutdownPolicy"
            ]
            .contains(&k.as_str()),
            "Sandbox.spec.{k}"
        );
    }
    // The gateways reach it by the Sandbox's Service name, which its certificate carries.
    let config: Value = serde_json::from_str(
        find(&objects, "ConfigMap", "kitbag-config")["data"]["agent.json"]
            .as_str()
            .expect("agent.json"),
    )
    .expect("json");
    assert_eq!(
        config["mcp"]["workspace"]["url"],
        "https://kitbag-runner-api.kitbag.svc.cluster.local:8080/mcp"
    );

    // kubernetes-validate has no schema for the CRD: the Sandbox's pod template is checked as
    // the Pod it becomes, its claim as a PersistentVolumeClaim; every other file as it is.
    let derived = tmp.path().join("derived");
    std::fs::create_dir_all(&derived).expect("dir");
    let template = &sandbox["spec"]["podTemplate"];
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kitbag-runner-api", "namespace": "kitbag", "labels": template["metadata"]["labels"]},
        "spec": template["spec"]});
    let claim = &sandbox["spec"]["volumeClaimTemplates"][0];
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "workspace-kitbag-runner-api", "namespace": "kitbag"},
        "spec": claim["spec"]});
    // The pod mounts the claim by its template name, as the controller wires it.
    assert!(
        template["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == claim["metadata"]["name"])
    );
    std::fs::write(derived.join("pod.json"), pod.to_string()).expect("write");
    std::fs::write(derived.join("pvc.json"), pvc.to_string()).expect("write");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.to_string_lossy().contains("-sandbox-"))
        .collect();
    files.extend([derived.join("pod.json"), derived.join("pvc.json")]);
    let checked = std::process::Command::new(&validate)
        .args(["--strict", "-k", "1.32.0"])
        .args(&files)
        .output()
        .expect("kubernetes-validate");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
