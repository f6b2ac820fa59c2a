//! kitbag-vm's Docker backend end to end (`--features backend-docker`): the real binary over
//! stdio against a real dockerd this test starts on a private socket (its own data and exec
//! roots, no bridge, no iptables: nothing global changes). Needs root for dockerd; skips
//! loudly without it or without dockerd unless CI=true.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, process_alive, wait_until};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
}

/// A private dockerd, stopped (with its containerd) when dropped.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Option<Daemon> {
        let ci = std::env::var("CI").as_deref() == Ok("true");
        let have = Command::new("dockerd").arg("--version").output().is_ok();
        let root = std::fs::metadata("/proc/self")
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
        if !have || !root {
            assert!(
                !ci,
                "dockerd and root are required under CI=true (scripts/test installs docker.io)"
            );
            eprintln!("SKIP: dockerd is not installed or this is not root");
            return None;
        }
        // Under /var/tmp: overlay2 wants a real file system below it.
        let dir = tempfile::Builder::new()
            .prefix("kb-dockerd-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let p = |n: &str| dir.path().join(n).display().to_string();
        let child = Command::new("dockerd")
            .args(["--host", &format!("unix://{}", p("d.sock"))])
            .args([
                "--data-root",
                &p("data"),
                "--exec-root",
                &p("exec"),
                "--pidfile",
                &p("pid"),
            ])
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(p("dockerd.log")).unwrap())
            .spawn()
            .unwrap();
        let d = Daemon { child, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while d.get("/_ping").is_err() {
            assert!(
                Instant::now() < deadline,
                "dockerd did not start: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(d)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("d.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
    }

    /// GET through the engine API: the body.
    fn get(&self, path: &str) -> std::io::Result<String> {
        let mut s = UnixStream::connect(self.socket())?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    }

    /// kitbag's containers (any state).
    fn kitbag_containers(&self) -> usize {
        let body = self
            .get("/containers/json?all=1&filters=%7B%22label%22%3A%5B%22kitbag.vm.owner%22%5D%7D")
            .unwrap();
        // A chunked body: the JSON array is on its own line.
        let json = body.lines().find(|l| l.starts_with('[')).unwrap_or("[]");
        serde_json::from_str::<Value>(json)
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while process_alive(self.child.id()) && Instant::now() < deadline {
            let _ = self.child.try_wait();
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever the engine left (a container shim of a test that failed half-way) goes too:
        // its command line names this daemon's directory.
        for pid in kitbag_testkit::pids_with_cmdline(&self.dir.path().display().to_string()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn http_get(url: &str) -> std::io::Result<String> {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET /hello.txt HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn containers_run_commands_serve_ports_pause_and_end_with_their_server() {
    let Some(daemon) = Daemon::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = format!("unix://{}", daemon.socket().display());
    let mut c = McpClient::spawn(bin(), &["--docker-host", &host], dir.path(), Era::Handshake);
    c.timeout = Duration::from_secs(120);

    // The probe (run at start, or by the first docker spawn) names the engine.
    let vm = c
        .call_ok(
            "instance_spawn",
            json!({
                "backend": "docker",
                "name": "web",
                "command": ["httpd", "-f", "-p", "8080", "-h", "/work"],
                "env": {"GREETING": "hello from a container"},
                "ports": [8080],
                "resources": {"memory_mb": 256, "pids": 64},
                "ready": {"port": 8080}
            }),
        )
        .structured;
    let id = vm["id"].as_str().unwrap().to_string();
    assert_eq!(vm["backend"], "docker");
    assert_eq!(vm["resources"]["pause"], "engine_pause");
    assert_eq!(vm["capabilities"]["work_on_host"], true);
    assert_eq!(vm["capabilities"]["mounts"], false);
    let info = c.call_ok("self_info", json!({})).structured;
    let d = info["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "docker")
        .unwrap()
        .clone();
    assert_eq!(d["available"], true, "{d}");
    assert!(d["detail"].as_str().unwrap().contains("API 1."), "{d}");
    assert!(
        d["detail"].as_str().unwrap().contains("no bridge network"),
        "{d}"
    );

    // /work is a host directory: a file written there is served from inside.
    let work = dir.path().join(vm["work_dir"].as_str().unwrap());
    std::fs::write(work.join("hello.txt"), "served by a container\n").unwrap();
    let url = vm["ports"][0]["url"].as_str().unwrap().to_string();
    assert!(http_get(&url).unwrap().contains("served by a container"));

    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "echo $GREETING; hostname; cat /proc/1/comm; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"]}),
        )
        .structured;
    let out = r["stdout"].as_str().unwrap();
    assert!(out.contains("hello from a container"), "{out}");
    assert!(out.contains("web"), "{out}");
    assert!(
        out.contains("docker-init"),
        "the engine's init is PID 1: {out}"
    );
    assert_eq!(out.lines().last(), Some("64"), "the pids limit: {out}");

    // Pause through the engine; a connection to the port resumes it.
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "paused");
    assert!(http_get(&url).unwrap().contains("served by a container"));
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "running");
    assert!(
        l["instances"][0]["resources"]["usage"]["memory_bytes"]
            .as_u64()
            .unwrap()
            > 0,
        "{l}"
    );

    // Bad input names the field and changes nothing.
    let before = daemon.kitbag_containers();
    let r = c.call_err(
        "instance_spawn",
        json!({"backend": "docker", "image": "nope:1"}),
        "invalid_params",
    );
    assert!(
        r.text.contains("image") && r.text.contains("kitbag-vm/busybox:1"),
        "{}",
        r.text
    );
    c.call_err(
        "instance_spawn",
        json!({"backend": "docker", "mounts": [{"host": ".", "guest": "/mnt/x"}]}),
        "unsupported",
    );
    c.call_err(
        "instance_spawn",
        json!({"backend": "docker", "network": "outbound"}),
        "unsupported",
    );
    assert_eq!(daemon.kitbag_containers(), before);

    // Stop: the container ends and the engine removes it.
    c.call_ok("instance_stop", json!({"instance": id}));
    wait_until("the container to be removed", 15, || {
        daemon.kitbag_containers() == 0
    });

    // A main command that ends ends the container, with its code and its log.
    let short = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "docker", "command": ["sh", "-c", "echo bye; exit 5"]}),
        )
        .structured;
    let sid = short["id"].as_str().unwrap().to_string();
    wait_until("the short container to end", 30, || {
        let l = c
            .call_ok("instance_list", json!({"instance": sid}))
            .structured;
        l["instances"][0]["state"] == "exited"
    });
    let l = c
        .call_ok("instance_list", json!({"instance": sid}))
        .structured;
    assert_eq!(l["instances"][0]["exit"]["code"], 5, "{l}");
    let log = c
        .call_ok("instance_logs", json!({"instance": sid}))
        .structured;
    assert_eq!(log["text"], "bye\n");
    wait_until("the short container to be removed", 15, || {
        daemon.kitbag_containers() == 0
    });

    // No orphans: the server SIGKILLed, its containers stop and are removed.
    c.call_ok(
        "instance_spawn",
        json!({"backend": "docker", "command": ["sleep", "1000"]}),
    );
    c.call_ok("instance_spawn", json!({"backend": "docker"}));
    assert_eq!(daemon.kitbag_containers(), 2);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("the containers of a killed server to go", 20, || {
        daemon.kitbag_containers() == 0
    });
}
