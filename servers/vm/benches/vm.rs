//! kitbag-vm against the bare engine, side by side in one run (vm.md, issue #16):
//! - `instance_spawn {}` until `running` vs bare `bwrap … true`;
//! - `instance_exec ["true"]` round trip vs `shell_bash "true"` (kitbag-shell, when built);
//! - a relayed port vs a direct loopback connection: bulk throughput and 1-byte echo latency.
//!
//! Run: `cargo bench -p kitbag-vm` (build kitbag-shell first for its row). Prints medians; no
//! assertions on time.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, median, ms, summary};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

/// Bulk sender on 9000 (256 MiB per connection), echo on 9001.
const SERVERS: &str = r#"
import socket, threading
def bulk():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", PORT0)); s.listen()
    chunk = b"\0" * (1 << 20)
    while True:
        c, _ = s.accept()
        for _ in range(256): c.sendall(chunk)
        c.close()
def echo():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", PORT1)); s.listen()
    while True:
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        def serve(c=c):
            while True:
                b = c.recv(1)
                if not b: break
                c.sendall(b)
        threading.Thread(target=serve, daemon=True).start()
threading.Thread(target=bulk, daemon=True).start()
echo()
"#;

fn throughput(addr: &str) -> f64 {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0usize;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert_eq!(total, 256 << 20);
    total as f64 / (1 << 20) as f64 / t.elapsed().as_secs_f64()
}

fn echo_latency(addr: &str) -> Duration {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut b = [0u8; 1];
    let mut v = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        s.write_all(b"x").unwrap();
        s.read_exact(&mut b).unwrap();
        v.push(t.elapsed());
    }
    median(v)
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-vm"));
    let dir = tempfile::tempdir().unwrap();

    let mut c = McpClient::spawn(
        bin,
        &["--default-idle-timeout", "0"],
        dir.path(),
        Era::Handshake,
    );
    // Interleaved: a bare bwrap, then an instance to running and stopped, 30 times.
    let (mut bare, mut round, mut server_side) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..30 {
        let t = Instant::now();
        let ok = std::process::Command::new("bwrap")
            .args([
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
            ])
            .args(["--unshare-all", "--die-with-parent", "true"])
            .status()
            .unwrap()
            .success();
        bare.push(t.elapsed());
        assert!(ok);
        let (r, took) = c.timed_call_ok("instance_spawn", json!({}));
        round.push(took);
        server_side.push(Duration::from_millis(
            r.structured["elapsed_ms"].as_u64().unwrap(),
        ));
        c.call_ok(
            "instance_stop",
            json!({"instance": r.structured["id"], "grace_seconds": 0}),
        );
    }
    println!(
        "bare `bwrap --ro-bind / / … true`, median of 30:          {}",
        ms(median(bare.clone()))
    );
    println!(
        "instance_spawn {{}} → running (round trip), median of 30:  {}",
        ms(median(round.clone()))
    );
    println!(
        "  of which in the server (elapsed_ms), median:            {}",
        ms(median(server_side))
    );
    let added = median(round.clone()).saturating_sub(median(bare.clone()));
    println!(
        "  added over bare bwrap:                                  {}",
        ms(added)
    );
    summary(Summary {
        area: "vm",
        measure: "instance_spawn {} to running, p50",
        kitbag: ms(median(round)),
        reference: format!("bare bwrap {}", ms(median(bare))),
        compared: format!("+{}", ms(added)),
        target: "≤ +5 ms",
        met: Some(added <= Duration::from_millis(5)),
    });

    let id = c.call_ok("instance_spawn", json!({})).structured["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut execs = Vec::new();
    for _ in 0..200 {
        let (r, took) = c.timed_call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["true"]}),
        );
        execs.push(took);
        assert_eq!(r.structured["exit_code"], 0);
    }
    println!(
        "instance_exec [\"true\"] round trip, median of 200:          {}",
        ms(median(execs))
    );
    let shell = kitbag_testkit::sibling_binary("kitbag-shell");
    if shell.exists() {
        let mut s = McpClient::spawn(&shell, &[], dir.path(), Era::Handshake);
        let mut runs = Vec::new();
        for _ in 0..200 {
            runs.push(s.timed_call_ok("shell_bash", json!({"command": "true"})).1);
        }
        println!(
            "shell_bash \"true\" round trip (kitbag-shell), median of 200: {}",
            ms(median(runs))
        );
    } else {
        println!("shell_bash row skipped: build kitbag-shell first (cargo build -p kitbag-shell)");
    }

    // Relayed vs direct: the same Python servers inside an instance and on the host.
    let inst = c.call_ok(
        "instance_spawn",
        json!({"command": ["python3", "-c", SERVERS.replace("PORT0", "9000").replace("PORT1", "9001")],
               "ports": [9000, 9001], "ready": {"port": 9001}}),
    );
    let bulk_relay = inst.structured["ports"][0]["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let echo_relay = inst.structured["ports"][1]["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let mut host = std::process::Command::new("python3")
        .args([
            "-c",
            &SERVERS.replace("PORT0", "19000").replace("PORT1", "19001"),
        ])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect("127.0.0.1:19001").is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let direct_tp = (0..3)
        .map(|_| throughput("127.0.0.1:19000"))
        .fold(0.0, f64::max);
    let relay_tp = (0..3).map(|_| throughput(&bulk_relay)).fold(0.0, f64::max);
    let direct_lat = echo_latency("127.0.0.1:19001");
    let relay_lat = echo_latency(&echo_relay);
    let _ = host.kill();
    let _ = host.wait();
    println!(
        "port throughput, 256 MiB, best of 3: direct {direct_tp:.0} MiB/s, relayed {relay_tp:.0} MiB/s"
    );
    println!(
        "1-byte echo round trip, median of 2000: direct {:.1} µs, relayed {:.1} µs (+{:.1} µs)",
        direct_lat.as_secs_f64() * 1e6,
        relay_lat.as_secs_f64() * 1e6,
        (relay_lat.as_secs_f64() - direct_lat.as_secs_f64()) * 1e6
    );
    c.shutdown();
}
