//! Mutual TLS between a gateway and its runner (issue #19): a runner served with
//! `--tls-cert/--tls-key/--tls-client-ca` lets in only clients whose certificate its CA signed;
//! a host reaches it as a remote entry with `tls: {ca, cert, key}`. `curl` (an independent
//! client) checks the server side; the process table is checked at the end.

use std::path::Path;
use std::process::Command;

use kitbag_testkit::clients::require;
use kitbag_testkit::http::HttpServer;
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn openssl_installed() -> bool {
    require(
        Command::new("openssl").arg("version").output().is_ok(),
        "openssl is not installed (scripts/test installs it)",
    )
}

fn call(dir: &Path, config: &Path, tool: &str, args: &str) -> std::process::Output {
    Command::new(bin())
        .current_dir(dir)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .args([
            "--config",
            config.to_str().expect("utf-8"),
            "call",
            tool,
            args,
        ])
        .output()
        .expect("kitbag call")
}

#[test]
fn a_runner_with_a_client_ca_serves_only_gateways_holding_its_certificate() {
    if !openssl_installed() {
        return;
    }
    let certs = tempfile::tempdir().expect("tmp");
    let other = tempfile::tempdir().expect("tmp");
    kitbag_testkit::test_certificates(certs.path());
    kitbag_testkit::client_certificate(certs.path(), "gateway");
    // A certificate from another CA: a client the runner must refuse.
    kitbag_testkit::test_certificates(other.path());
    kitbag_testkit::client_certificate(other.path(), "stranger");
    let c = |name: &str| certs.path().join(name).display().to_string();

    let project = tempfile::tempdir().expect("tmp");
    std::fs::write(project.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    let runner_cfg = project.path().join("runner.json");
    std::fs::write(
        &runner_cfg,
        json!({"mcp": {"files": {"command": bin(), "args": ["server", "files", "--root", project.path()]}}}).to_string(),
    )
    .expect("w");
    let (cert, key, ca) = (c("server.crt"), c("server.key"), c("ca.crt"));
    let runner = HttpServer::start(
        bin(),
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--config",
            runner_cfg.to_str().expect("utf-8"),
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
        ],
        project.path(),
        &[],
    );
    let url = runner.url().replacen("http://", "https://", 1);

    // A gateway host with the client certificate reads the runner's file.
    let gateway = tempfile::tempdir().expect("tmp");
    let gateway_cfg = |tls: serde_json::Value| {
        let p = gateway.path().join("agent.json");
        std::fs::write(
            &p,
            json!({"mcp": {"runner": {"url": url, "tls": tls}}}).to_string(),
        )
        .expect("w");
        p
    };
    let cfg = gateway_cfg(json!({"ca": ca, "cert": c("gateway.crt"), "key": c("gateway.key")}));
    let out = call(gateway.path(), &cfg, "file_read", r#"{"path": "a.txt"}"#);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("alpha"), "{stdout}");

    // Without a client certificate, or with another CA's, the runner is not reached.
    for (what, tls) in [
        ("no client certificate", json!({"ca": ca})),
        (
            "another CA's certificate",
            json!({"ca": ca, "cert": other.path().join("stranger.crt"), "key": other.path().join("stranger.key")}),
        ),
    ] {
        let cfg = gateway_cfg(tls);
        let out = call(gateway.path(), &cfg, "file_read", r#"{"path": "a.txt"}"#);
        assert_ne!(out.status.code(), Some(0), "{what}: the runner answered");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("alpha"),
            "{what}"
        );
    }
    // A half-given client certificate is refused by name.
    let cfg = gateway_cfg(json!({"ca": ca, "cert": c("gateway.crt")}));
    let out = Command::new(bin())
        .current_dir(gateway.path())
        .env_remove("KITBAG_HOST_DEPTH")
        .args(["--config", cfg.to_str().expect("utf-8"), "doctor"])
        .output()
        .expect("doctor");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("`cert` and `key` go together"), "{report}");

    // curl, an independent client, agrees: in with the certificate, out without.
    if !require(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed",
    ) {
        return;
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
    .to_string();
    let curl = |extra: &[&str]| {
        Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                &ca,
            ])
            .args(extra)
            .args([
                "-H",
                "content-type: application/json",
                "-H",
                "accept: application/json, text/event-stream",
                "-d",
                &init,
                &url,
            ])
            .output()
            .expect("curl")
    };
    let with = curl(&["--cert", &c("gateway.crt"), "--key", &c("gateway.key")]);
    assert_eq!(
        String::from_utf8_lossy(&with.stdout),
        "200",
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let without = curl(&[]);
    assert!(
        !without.status.success(),
        "curl without a certificate got in"
    );
    drop(runner);
}

#[test]
fn tls_flags_are_checked_before_anything_starts() {
    let d = tempfile::tempdir().expect("tmp");
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .current_dir(d.path())
            .env_remove("KITBAG_HOST_DEPTH")
            .args(args)
            .output()
            .expect("kitbag");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A missing file is named with its flag.
    let (code, err) = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
    ]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--tls-cert c.pem"), "{err}");
    // Beyond loopback, HTTPS alone is not authentication (a client CA is).
    if openssl_installed() {
        kitbag_testkit::test_certificates(d.path());
        let (code, err) = run(&[
            "serve",
            "--http",
            "0.0.0.0:0",
            "--tls-cert",
            "server.crt",
            "--tls-key",
            "server.key",
        ]);
        assert_ne!(code, Some(0));
        assert!(err.contains("--tls-client-ca"), "{err}");
    }
    let (code, err) = run(&["serve", "--http", "127.0.0.1:0", "--tls-key", "k.pem"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--tls-cert"), "{err}");
}
