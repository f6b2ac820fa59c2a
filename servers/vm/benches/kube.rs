//! kitbag-vm's Kubernetes backend against the in-repo API fixture, side by side with a
//! bubblewrap sandbox in one run (issue #17). The fixture's pods are bubblewrap sandboxes,
//! so the difference is what the backend adds: the API calls, the watch, the agent's upload
//! through `pods/exec` and every agent connection through `pods/portforward`.
//! - `instance_spawn` until running: bwrap vs kube Pod vs kube Sandbox;
//! - `instance_exec ["true"]`: bwrap vs kube.
//!
//! Run: `cargo bench -p kitbag-vm --features backend-kube --bench kube`. Prints medians; no
//! assertions on time.
#![allow(clippy::unwrap_used)]

// Its unit tests do not run in a bench build: their imports would count as unused.
#[allow(unused_imports)]
#[path = "../tests/kube_fixture/mod.rs"]
mod kube_fixture;

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use kube_fixture::{Fixture, FixtureOptions};
use serde_json::{Value, json};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn spawns(c: &mut McpClient, args: Value, runs: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (mut spawn, mut exec) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let r = c.call_ok("instance_spawn", args.clone()).structured;
        spawn.push(t.elapsed());
        let id = r["id"].clone();
        for _ in 0..5 {
            let t = Instant::now();
            c.call_ok(
                "instance_exec",
                json!({"instance": id, "command": ["true"]}),
            );
            exec.push(t.elapsed());
        }
        c.call_ok("instance_stop", json!({"instance": id, "grace_seconds": 0}));
    }
    (spawn, exec)
}

fn run(sandbox_crds: bool, bin: &Path) -> (Vec<Duration>, Vec<Duration>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fixture = rt.block_on(Fixture::start(FixtureOptions {
        sandbox_crds,
        token: "bench-token-0123456789".into(),
        agent_exe: bin.to_path_buf(),
        state_dir: dir.path().join("fixture"),
    }));
    let kubeconfig = dir.path().join("kubeconfig");
    fixture.write_kubeconfig(&kubeconfig, "default");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let mut c = McpClient::spawn(
        bin,
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &root,
        Era::Handshake,
    );
    c.timeout = Duration::from_secs(120);
    // The first spawn probes the cluster and strips the agent once.
    let first = c.call_ok("instance_spawn", json!({"backend": "kube"}));
    c.call_ok(
        "instance_stop",
        json!({"instance": first.structured["id"], "grace_seconds": 0}),
    );
    let out = spawns(&mut c, json!({"backend": "kube"}), 5);
    let _ = c.shutdown();
    rt.block_on(fixture.shutdown());
    out
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-vm"));
    let dir = tempfile::tempdir().unwrap();
    let mut c = McpClient::spawn(bin, &[], dir.path(), Era::Handshake);
    let (bwrap_spawn, bwrap_exec) = spawns(&mut c, json!({}), 5);
    let _ = c.shutdown();
    let (pod_spawn, pod_exec) = run(false, bin);
    let (sb_spawn, sb_exec) = run(true, bin);
    println!("instance_spawn until running (median of 5):");
    println!(
        "  bwrap sandbox:                 {}",
        ms(median(bwrap_spawn))
    );
    println!("  kube Pod (fixture):            {}", ms(median(pod_spawn)));
    println!("  kube Sandbox (fixture):        {}", ms(median(sb_spawn)));
    println!("instance_exec [\"true\"] (median of 25):");
    println!(
        "  bwrap sandbox:                 {}",
        ms(median(bwrap_exec))
    );
    println!("  kube Pod (fixture):            {}", ms(median(pod_exec)));
    println!("  kube Sandbox (fixture):        {}", ms(median(sb_exec)));
}
