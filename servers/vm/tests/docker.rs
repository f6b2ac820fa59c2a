//! kitbag-vm's Docker backend end to end (`--features backend-docker`): the real binary over
//! stdio, one scenario run against two engines this test starts on private sockets — a real
//! dockerd (its own data and exec roots, no bridge, no iptables) and podman's Docker-compatible
//! service (its own root, runroot and tmpdir, runc, every container on `none` networking):
//! nothing global changes. Needs root; each skips loudly without it or without its engine
//! unless CI=true.
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

/// `program` is installed and this is root; else SKIP (a failure under CI=true, where
/// scripts/test installs `package`).
fn engine_usable(program: &str, package: &str) -> bool {
    let have = Command::new(program).arg("--version").output().is_ok();
    if !have || !is_root() {
        assert!(
            !ci(),
            "{program} and root are required under CI=true (scripts/test installs {package})"
        );
        eprintln!("SKIP: {program} is not installed or this is not root");
        return false;
    }
    true
}

/// A private dockerd, stopped (with its containerd) when dropped.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Option<Daemon> {
        if !engine_usable("dockerd", "docker.io") {
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
        while engine_get(&d.socket(), "/_ping").is_err() {
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
        kill_left(self.dir.path());
    }
}

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// SIGKILL every process whose command line names `dir` (an engine's private directory: its
/// shims, conmon, runc), never by a process name.
fn kill_left(dir: &Path) {
    for pid in kitbag_testkit::pids_with_cmdline(&dir.display().to_string()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A private podman API service (`podman system service`), stopped when dropped with any
/// conmon or runc it left, its storage's mounts undone and its directory removed.
struct Podman {
    child: Child,
    dir: tempfile::TempDir,
    /// The cgroups podman (cgroupfs manager) makes on first use, and runc's state directory,
    /// as they were before: what it made is removed again.
    cgroups: Vec<PathBuf>,
    run_runc: bool,
}

/// runc's default state root, which podman 4.3 leaves it (its `--runtime-flag root=` is not
/// passed on to the cleanup podman that conmon runs, so that one would miss the container).
const RUNC_ROOT: &str = "/run/runc";

/// `libpod_parent` (the containers' and conmon's parent cgroup) in every hierarchy mounted
/// (v1: one per controller; v2: the root), the ones that exist.
fn libpod_cgroups() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    let mut roots = vec![base.to_path_buf()];
    roots.extend(
        std::fs::read_dir(base)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path()),
    );
    roots
        .into_iter()
        .map(|r| r.join("libpod_parent"))
        .filter(|p| p.is_dir())
        .collect()
}

impl Podman {
    fn start() -> Option<Podman> {
        if !engine_usable("podman", "podman") {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("kb-podman-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let existed = libpod_cgroups();
        let run_runc = Path::new(RUNC_ROOT).exists();
        let p = |n: &str| dir.path().join(n).display().to_string();
        // runc, not crun (crun 1.8 fails on this host's hybrid cgroups), lowered ulimits (the
        // defaults cannot be set here), events to a file under the tmpdir (vm.md §2.3).
        std::fs::write(
            p("containers.conf"),
            "[engine]\nruntime = \"runc\"\nevents_logger = \"file\"\n\
             [containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n",
        )
        .unwrap();
        let child = Command::new("podman")
            .env("CONTAINERS_CONF", p("containers.conf"))
            .args(["--root", &p("root"), "--runroot", &p("run")])
            .args(["--tmpdir", &p("tmp"), "--network-config-dir", &p("net")])
            .args(["--cgroup-manager", "cgroupfs"])
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", p("p.sock")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(p("podman.log")).unwrap())
            .spawn()
            .unwrap();
        let d = Podman {
            child,
            dir,
            cgroups: existed,
            run_runc,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while engine_get(&d.socket(), "/_ping").is_err() {
            assert!(
                Instant::now() < deadline,
                "podman's service did not start: {}",
                std::fs::read_to_string(d.dir.path().join("podman.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(d)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("p.sock")
    }
}

impl Drop for Podman {
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
        let prefix = self.dir.path().display().to_string();
        // Containers runc still holds (a scenario that failed half-way): their bundle is under
        // this directory; `runc delete --force` kills them and removes their cgroups.
        for e in std::fs::read_dir(RUNC_ROOT).into_iter().flatten().flatten() {
            if std::fs::read_to_string(e.path().join("state.json"))
                .is_ok_and(|s| s.contains(&prefix))
            {
                let _ = Command::new("runc")
                    .args(["--root", RUNC_ROOT, "delete", "--force"])
                    .arg(e.file_name())
                    .status();
            }
        }
        kill_left(self.dir.path());
        // The overlay driver bind-mounts its own directory (and a container's layers while it
        // runs): undone, deepest first, so the directory can go.
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
        // The empty parent cgroups podman made, if they were not there before (rmdir refuses
        // one that is in use).
        for cg in libpod_cgroups() {
            if !self.cgroups.contains(&cg) {
                let _ = std::fs::remove_dir(cg.join("conmon"));
                let _ = std::fs::remove_dir(&cg);
            }
        }
        if !self.run_runc {
            let _ = std::fs::remove_dir(RUNC_ROOT);
        }
    }
}

/// GET through an engine's API: the body (HTTP/1.0, so never chunked: podman's chunks split
/// a JSON array anywhere).
fn engine_get(socket: &Path, path: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(socket)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: d\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// kitbag's containers on an engine (any state).
fn kitbag_containers(socket: &Path) -> usize {
    let body = engine_get(
        socket,
        "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22kitbag.vm.owner%22%5D%7D",
    )
    .unwrap();
    serde_json::from_str::<Value>(body.trim())
        .unwrap()
        .as_array()
        .unwrap()
        .len()
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

/// Where engines differ, as the scenario sees them.
struct Expect {
    /// Words the probe's detail must hold.
    detail: &'static [&'static str],
    /// The engine's init, PID 1 of a container.
    init: &'static str,
    /// Whether the engine has no bridge network (then `outbound` is refused; with one, it is
    /// not tried: it would create a host bridge and iptables rules).
    no_bridge: bool,
}

#[test]
fn containers_run_commands_serve_ports_pause_and_end_with_their_server() {
    let Some(daemon) = Daemon::start() else {
        return;
    };
    let t = Instant::now();
    scenario(
        &daemon.socket(),
        &Expect {
            detail: &["Docker Engine", "API 1.", "no bridge network"],
            init: "docker-init",
            no_bridge: true,
        },
    );
    eprintln!("dockerd scenario: {:?}", t.elapsed());
}

#[test]
fn the_same_against_podmans_docker_compatible_service() {
    let t = Instant::now();
    let Some(podman) = Podman::start() else {
        return;
    };
    eprintln!("podman service up: {:?}", t.elapsed());
    let t = Instant::now();
    scenario(
        &podman.socket(),
        &Expect {
            detail: &[
                "Podman Engine",
                "(API 1.41)",
                "libpod API 4.",
                "runtime runc",
                "runc version",
                "podman's default network",
            ],
            init: "podman-init",
            no_bridge: false,
        },
    );
    eprintln!("podman scenario: {:?}", t.elapsed());
    let t = Instant::now();
    let dir = podman.dir.path().to_path_buf();
    drop(podman);
    eprintln!("podman stopped and cleaned: {:?}", t.elapsed());
    assert!(
        kitbag_testkit::pids_with_cmdline(&dir.display().to_string()).is_empty(),
        "a process of the podman service was left"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(
        !Path::new("/sys/class/net/cni-podman0").exists(),
        "podman made its bridge"
    );
}

/// The scenario, against the engine API at `socket`.
fn scenario(socket: &Path, expect: &Expect) {
    let dir = tempfile::tempdir().unwrap();
    let host = format!("unix://{}", socket.display());
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
                "resources": {"memory_mb": 256, "pids": 64, "disk_mb": 64},
                "ready": {"port": 8080}
            }),
        )
        .structured;
    let id = vm["id"].as_str().unwrap().to_string();
    assert_eq!(vm["backend"], "docker");
    assert_eq!(vm["resources"]["pause"], "engine_pause");
    assert_eq!(vm["capabilities"]["work_on_host"], true);
    // A size limit for /work is not held with Docker, and says so.
    assert_eq!(vm["resources"]["disk"]["enforced"], false, "{vm}");
    assert!(
        vm["resources"]["disk"]["note"]
            .as_str()
            .unwrap()
            .contains("docker"),
        "{vm}"
    );
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
    eprintln!("probe: {}", d["detail"]);
    for word in expect.detail {
        assert!(d["detail"].as_str().unwrap().contains(word), "{word}: {d}");
    }

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
        out.contains(expect.init),
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
    let before = kitbag_containers(socket);
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
    if expect.no_bridge {
        c.call_err(
            "instance_spawn",
            json!({"backend": "docker", "network": "outbound"}),
            "unsupported",
        );
    }
    assert_eq!(kitbag_containers(socket), before);

    // Stop: the container ends and the engine removes it.
    c.call_ok("instance_stop", json!({"instance": id}));
    wait_until("the container to be removed", 15, || {
        kitbag_containers(socket) == 0
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
        kitbag_containers(socket) == 0
    });

    // No orphans: the server SIGKILLed, its containers stop and are removed.
    c.call_ok(
        "instance_spawn",
        json!({"backend": "docker", "command": ["sleep", "1000"]}),
    );
    c.call_ok("instance_spawn", json!({"backend": "docker"}));
    assert_eq!(kitbag_containers(socket), 2);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("the containers of a killed server to go", 20, || {
        kitbag_containers(socket) == 0
    });
}
