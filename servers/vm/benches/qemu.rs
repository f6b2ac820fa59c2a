//! kitbag-vm's QEMU backend against bare QEMU, side by side in one run (issue #17):
//! - `instance_spawn {"backend":"qemu"}` until running (the agent answers) vs the bare
//!   `qemu-system-x86_64` boot of the same kernel and initramfs until the same agent answers
//!   a ping through the same forwarded port;
//! - `instance_exec ["true"]` in a VM vs in a bubblewrap sandbox.
//!
//! Run: `cargo bench -p kitbag-vm --bench qemu`. Prints medians; no assertions on time.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The default image the server built: its kernel and newest initramfs.
fn image() -> (PathBuf, PathBuf) {
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"))
        .join("kitbag/vm/qemu/default");
    let initrd = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cpio"))
        .max_by_key(|e| e.metadata().unwrap().modified().unwrap())
        .unwrap()
        .path();
    (dir.join("vmlinuz"), initrd)
}

/// One bare boot: launch, then ping the agent through the forwarded port until it answers.
fn bare_boot(kernel: &Path, initrd: &Path) -> Duration {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "0123456789abcdef0123456789abcdef";
    let t = Instant::now();
    let mut qemu = std::process::Command::new("qemu-system-x86_64")
        .args([
            "-M",
            "q35,accel=tcg",
            "-cpu",
            "max",
            "-m",
            "1024",
            "-smp",
            "2",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 loglevel=4 kitbag.token={token} kitbag.hostname=bare"
        ))
        .args(["-serial", "null", "-netdev"])
        .arg(format!(
            "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:1023"
        ))
        .args(["-device", "virtio-net-pci,netdev=n0,romfile="])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let took = loop {
        if ping(port, token) {
            break t.elapsed();
        }
        assert!(Instant::now() < deadline, "the bare VM never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = qemu.kill();
    let _ = qemu.wait();
    took
}

fn ping(port: u16, token: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "{{\"token\":\"{token}\"}}\n{{\"op\":\"ping\"}}\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).is_ok() && line.contains("\"ok\":true")
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
    c.timeout = Duration::from_secs(240);
    // The first spawn builds the image (timed apart: a kernel download, once).
    let t = Instant::now();
    let first = c.call_ok("instance_spawn", json!({"backend": "qemu"}));
    println!(
        "first instance_spawn (image build + boot):                   {}",
        ms(t.elapsed())
    );
    c.call_ok(
        "instance_stop",
        json!({"instance": first.structured["id"], "grace_seconds": 0}),
    );
    let (kernel, initrd) = image();
    let runs = 5;
    let mut served = Vec::new();
    let mut bare = Vec::new();
    for _ in 0..runs {
        bare.push(bare_boot(&kernel, &initrd));
        let t = Instant::now();
        let r = c.call_ok("instance_spawn", json!({"backend": "qemu"}));
        served.push(t.elapsed());
        c.call_ok(
            "instance_stop",
            json!({"instance": r.structured["id"], "grace_seconds": 0}),
        );
    }
    println!(
        "bare qemu-system-x86_64 boot → agent ping, median of {runs}:     {}",
        ms(median(bare.clone()))
    );
    println!(
        "instance_spawn qemu → running (round trip), median of {runs}:    {}",
        ms(median(served.clone()))
    );
    println!(
        "  added over the bare boot:                                 {}",
        ms(median(served).saturating_sub(median(bare)))
    );

    for backend in ["qemu", "bwrap"] {
        let id = c
            .call_ok("instance_spawn", json!({"backend": backend}))
            .structured["id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut execs = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            let r = c.call_ok(
                "instance_exec",
                json!({"instance": id, "command": ["true"]}),
            );
            execs.push(t.elapsed());
            assert_eq!(r.structured["exit_code"], 0);
        }
        println!(
            "instance_exec [\"true\"] in {backend:5}, median of 50:               {}",
            ms(median(execs))
        );
        let mut pauses = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
            c.call_ok(
                "instance_exec",
                json!({"instance": id, "command": ["true"]}),
            );
            pauses.push(t.elapsed());
        }
        println!(
            "pause + exec (resumes first) in {backend:5}, median of 10:         {}",
            ms(median(pauses))
        );
        c.call_ok("instance_stop", json!({"instance": id, "grace_seconds": 0}));
    }
    c.shutdown();
}
