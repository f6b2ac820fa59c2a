//! kitbag-vm end to end: the real binary over stdio, real bubblewrap sandboxes, real cgroups,
//! real sockets (vm.md §4). Skips loudly without bwrap unless CI=true.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kitbag_testkit::{
    Era, McpClient, assert_catalog_matches, process_alive, wait_until, workspace_root,
};
use serde_json::{Value, json};

/// The attacks on the trust boundary (issue #42), with this file's helpers.
#[path = "vm/attacks.rs"]
mod attacks;

/// `/work`'s size limit and streamed copies (issue #42, N9).
#[path = "vm/disk.rs"]
mod disk;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
}

/// `KITBAG_VM_TEST_USER=<uid>` (scripts/test sets 65534 when it runs as root) runs every
/// test's server as that user through setpriv: the whole suite again without privileges.
fn test_user() -> Option<String> {
    std::env::var("KITBAG_VM_TEST_USER")
        .ok()
        .filter(|u| !u.is_empty())
}

/// A project directory the server's user can write: with a test user, world-writable, and
/// what the test creates in it too (umask 0).
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if test_user().is_some() {
        use std::os::unix::fs::PermissionsExt;
        nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

fn server(dir: &Path, args: &[&str], era: Era) -> McpClient {
    let mut c = match test_user() {
        None => McpClient::spawn(bin(), args, dir, era),
        Some(uid) => {
            use std::os::unix::fs::PermissionsExt;
            // The binary where that user can run it (the build directory may be private).
            let exe = dir.join(".kitbag-vm-under-test");
            if !exe.exists() {
                std::fs::copy(bin(), &exe).unwrap();
                std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={uid}"));
            let mut full = vec![reuid.as_str(), regid.as_str(), "--clear-groups"];
            full.push(exe.to_str().unwrap());
            full.extend_from_slice(args);
            McpClient::spawn(Path::new("setpriv"), &full, dir, era)
        }
    };
    c.timeout = Duration::from_secs(60);
    c
}

fn spawn(c: &mut McpClient, args: Value) -> Value {
    c.call_ok("instance_spawn", args).structured
}

fn exec(c: &mut McpClient, instance: &str, cmd: &[&str]) -> Value {
    c.call_ok(
        "instance_exec",
        json!({"instance": instance, "command": cmd}),
    )
    .structured
}

fn sh(c: &mut McpClient, instance: &str, script: &str) -> Value {
    exec(c, instance, &["sh", "-c", script])
}

fn http_get(url: &str) -> std::io::Result<String> {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn state_of(c: &mut McpClient, instance: &str) -> String {
    let l = c.call_ok("instance_list", json!({"instance": instance}));
    l.structured["instances"][0]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Processes whose pid namespace is `ns` (a `pid:[…]` link text).
fn in_pid_ns(ns: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path().join("ns/pid")).is_ok_and(|l| l.to_string_lossy() == ns)
            && process_alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn catalog_and_bad_input() {
    let dir = project();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = server(dir.path(), &[], era);
        let tools = c.list_tools();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "expose_port",
                "instance_copy",
                "instance_exec",
                "instance_list",
                "instance_logs",
                "instance_spawn",
                "instance_stop",
                "keepalive_acquire",
                "keepalive_release",
                "self_info",
                "self_restart",
                "unexpose_port"
            ]
        );
        for t in &tools {
            assert_eq!(t["outputSchema"]["type"], "object", "{}", t["name"]);
        }
        if era == Era::Handshake {
            assert_catalog_matches(
                &mut c,
                &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/vm/tools.json"),
            );
        }
        // Unknown fields and bad values name the field; nothing is started.
        c.call_err("instance_spawn", json!({"nmae": "x"}), "invalid_params");
        c.call_err(
            "instance_spawn",
            json!({"name": "Bad Name"}),
            "invalid_params",
        )
        .expect_field("name");
        c.call_err(
            "instance_spawn",
            json!({"command": "ls -la"}),
            "invalid_params",
        );
        c.call_err(
            "instance_spawn",
            json!({"env": {"KITBAG_X": "1"}}),
            "invalid_params",
        )
        .expect_field("env");
        c.call_err(
            "instance_spawn",
            json!({"resources": {"memory_mb": 1}}),
            "invalid_params",
        )
        .expect_field("resources.memory_mb");
        c.call_err(
            "instance_spawn",
            json!({"backend": "docker"}),
            "backend_unavailable",
        );
        c.call_err(
            "instance_spawn",
            json!({"mounts": [{"host": "/etc", "guest": "/data/etc"}]}),
            "capability_denied",
        )
        .expect_field("mounts[0].host");
        c.call_err(
            "instance_exec",
            json!({"instance": "nope", "command": ["true"]}),
            "instance_not_found",
        );
        c.call_err(
            "keepalive_release",
            json!({"lease_id": "l-0"}),
            "lease_not_found",
        );
        c.call_err("expose_port", json!({"port": 80}), "unsupported");
        // Standalone: no host above, no instance around.
        c.call_err("self_restart", json!({}), "unsupported");
        let info = c.call_ok("self_info", json!({})).structured;
        assert_eq!(info["server"]["mode"], "host");
        assert!(info["host"].is_null());
        let l = c.call_ok("instance_list", json!({})).structured;
        assert_eq!(l["total"], 0);
        assert!(c.stdout_garbage().is_empty());
        c.shutdown();
    }
}

#[test]
fn isolation_exec_and_files() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    // A host service on loopback the instance must not reach.
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_service.local_addr().unwrap().port();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let inst = spawn(&mut c, json!({}));
    let id = inst["id"].as_str().unwrap().to_string();
    assert_eq!(inst["state"], "running");
    assert_eq!(inst["backend"], "bwrap");
    let r = sh(&mut c, &id, "echo hi; hostname");
    assert_eq!(r["stdout"], format!("hi\n{id}\n"));
    assert_eq!(r["exit_code"], 0);
    // Only loopback; the host's loopback services are unreachable; the host root is read-only.
    let r = sh(
        &mut c,
        &id,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    );
    assert_eq!(r["stdout"], "lo\n");
    let probe = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {host_port}), 2)'"
    );
    let r = sh(&mut c, &id, &probe);
    assert_ne!(r["exit_code"], 0, "host loopback reachable: {r}");
    let r = sh(&mut c, &id, "touch /etc/kitbag-x 2>/dev/null; echo $?");
    assert_eq!(r["stdout"], "1\n");
    // /work is shared with the host.
    sh(&mut c, &id, "echo data > /work/f");
    let work = dir.path().join(inst["work_dir"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(work.join("f")).unwrap(), "data\n");
    // stdin, stderr, exit codes.
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["cat"], "stdin": "abc"}),
        )
        .structured;
    assert_eq!(r["stdout"], "abc");
    let r = sh(&mut c, &id, "echo oops >&2; exit 3");
    assert_eq!(
        (r["exit_code"].as_i64(), r["stderr"].as_str()),
        (Some(3), Some("oops\n"))
    );
    c.call_err(
        "instance_exec",
        json!({"instance": id, "command": ["no-such-program-x"]}),
        "invalid_params",
    );
    // A timeout kills the whole process group inside: no sleep survives.
    let r = c.call_err(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c", "echo started; sleep 37 & sleep 37"], "timeout_seconds": 1}),
        "timeout",
    );
    assert!(
        r.structured["error"]["detail"]["stdout"]
            .as_str()
            .unwrap()
            .contains("started")
    );
    wait_until("the timed-out group to die", 5, || {
        let r = sh(&mut c, &id, "ps -eo args | grep -c '^sleep 37' || true");
        r["stdout"] == "0\n"
    });
    // Background jobs and their logs, paged.
    let j = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "for i in 1 2 3; do echo line$i; done"], "background": true}),
        )
        .structured;
    let job = j["job_id"].as_str().unwrap().to_string();
    wait_until("the job to end", 10, || {
        let l = c.call_ok(
            "instance_logs",
            json!({"instance": id, "source": format!("job:{job}")}),
        );
        l.structured["running"] == false
    });
    let l = c
        .call_ok(
            "instance_logs",
            json!({"instance": id, "source": format!("job:{job}"), "max_bytes": 6}),
        )
        .structured;
    assert_eq!(
        (l["text"].as_str(), l["next_offset"].as_u64()),
        (Some("line1\n"), Some(6))
    );
    let l = c
        .call_ok(
            "instance_logs",
            json!({"instance": id, "source": format!("job:{job}"), "offset": 6}),
        )
        .structured;
    assert_eq!(
        (l["text"].as_str(), l["eof"].as_bool()),
        (Some("line2\nline3\n"), Some(true))
    );
    // Copies: content in, file out inline, to a host path, and the refusals.
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "content": "hello", "guest_path": "/tmp/h.txt"}),
    );
    let o = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/tmp/h.txt"}),
        )
        .structured;
    assert_eq!(o["content"], "hello");
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "in", "content": "x", "guest_path": "/tmp/h.txt"}),
        "file_exists",
    );
    std::fs::write(dir.path().join("src.bin"), [0u8, 1, 2, 255]).unwrap();
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "host_path": "src.bin", "guest_path": "/tmp/b"}),
    );
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/b", "host_path": "out/b"}),
    );
    assert_eq!(
        std::fs::read(dir.path().join("out/b")).unwrap(),
        [0u8, 1, 2, 255]
    );
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/b", "host_path": "/etc/kitbag-x"}),
        "capability_denied",
    );
    sh(&mut c, &id, "head -c 300000 /dev/zero > /tmp/big");
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/big"}),
        "output_too_large",
    )
    .expect_field("host_path");
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/none"}),
        "file_not_found",
    );
    // Directories, recursively, both ways; links travel as links into the instance and are
    // not recreated on the host; a conflict writes nothing.
    std::fs::create_dir_all(dir.path().join("tree/a")).unwrap();
    std::fs::write(dir.path().join("tree/a/b.txt"), "bee").unwrap();
    std::fs::write(dir.path().join("tree/c"), "sea").unwrap();
    std::os::unix::fs::symlink("a/b.txt", dir.path().join("tree/link")).unwrap();
    let r = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "in", "host_path": "tree", "guest_path": "/tmp/t"}),
        )
        .structured;
    assert_eq!(
        (r["files"].as_u64(), r["bytes"].as_u64()),
        (Some(2), Some(6))
    );
    let r = sh(
        &mut c,
        &id,
        "cat /tmp/t/a/b.txt /tmp/t/c /tmp/t/link; readlink /tmp/t/link",
    );
    assert_eq!(r["stdout"], "beeseabeea/b.txt\n");
    sh(&mut c, &id, "echo new > /tmp/t/a/new.txt");
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/t"}),
        "not_a_file",
    );
    let r = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/tmp/t", "host_path": "back"}),
        )
        .structured;
    assert_eq!(
        (r["files"].as_u64(), r["skipped_links"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("back/a/new.txt")).unwrap(),
        "new\n"
    );
    std::fs::write(dir.path().join("back/c"), "mine").unwrap();
    sh(&mut c, &id, "echo changed > /tmp/t/a/b.txt");
    c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/t", "host_path": "back"}),
        "file_exists",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("back/a/b.txt")).unwrap(),
        "bee"
    );
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/tmp/t", "host_path": "back", "overwrite": true}),
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("back/a/b.txt")).unwrap(),
        "changed\n"
    );
    // Host directories bound in: read-only by default, writable with mode rw.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/in.txt"), "from host").unwrap();
    let m = spawn(
        &mut c,
        json!({"mounts": [{"host": "data", "guest": "/data/ro"}, {"host": "data", "guest": "/tmp/rw", "mode": "rw"}]}),
    );
    let mid = m["id"].as_str().unwrap().to_string();
    let r = sh(
        &mut c,
        &mid,
        "cat /data/ro/in.txt; touch /data/ro/x 2>/dev/null; echo $?; echo out > /tmp/rw/out.txt",
    );
    assert_eq!(r["stdout"], "from host1\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data/out.txt")).unwrap(),
        "out\n"
    );
    c.call_ok("instance_stop", json!({"instance": mid}));
    // Remove deletes the record and /work.
    let s = c
        .call_ok("instance_stop", json!({"instance": id}))
        .structured;
    assert_eq!(
        (s["state"].as_str(), s["removed"].as_bool()),
        (Some("stopped"), Some(true))
    );
    assert!(!work.exists());
    c.call_err(
        "instance_exec",
        json!({"instance": id, "command": ["true"]}),
        "instance_not_found",
    );
    drop(host_service);
    c.shutdown();
}

#[test]
fn ports_pause_and_resume_from_a_connection() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Modern);
    let inst = spawn(
        &mut c,
        json!({"name": "web", "command": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
               "ports": [8080], "ready": {"port": 8080}}),
    );
    let url = inst["ports"][0]["url"].as_str().unwrap().to_string();
    assert!(http_get(&url).unwrap().starts_with("HTTP/1.0 200"));
    // Same port again: same mapping. A taken fixed host port: port_in_use.
    let again = c
        .call_ok("expose_port", json!({"instance": "web", "port": 8080}))
        .structured;
    assert_eq!(again["url"], url);
    assert_eq!(again["listening"], true);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    c.call_err(
        "expose_port",
        json!({"instance": "web", "port": 9000, "host_port": taken_port}),
        "port_in_use",
    )
    .expect_field("host_port");
    c.call_err(
        "expose_port",
        json!({"instance": "web", "port": 8080, "bind": "0.0.0.0"}),
        "capability_denied",
    );
    // Paused: the relay resumes it before dialing.
    c.call_ok("instance_stop", json!({"instance": "web", "pause": true}));
    assert_eq!(state_of(&mut c, "web"), "paused");
    assert!(http_get(&url).unwrap().starts_with("HTTP/1.0 200"));
    assert_eq!(state_of(&mut c, "web"), "running");
    // Unexposed: refused; exposed again: a new port answers.
    c.call_ok("unexpose_port", json!({"instance": "web", "port": 8080}));
    wait_until("the listener to close", 5, || http_get(&url).is_err());
    c.call_err(
        "unexpose_port",
        json!({"instance": "web", "port": 8080}),
        "port_not_exposed",
    );
    let new = c
        .call_ok("expose_port", json!({"instance": "web", "port": 8080}))
        .structured;
    assert!(
        http_get(new["url"].as_str().unwrap())
            .unwrap()
            .starts_with("HTTP/1.0 200")
    );
    c.shutdown();
}

#[test]
fn limits_pause_and_main_command_exit() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &["--max-instances", "2"], Era::Handshake);
    let m = spawn(&mut c, json!({"resources": {"memory_mb": 64, "pids": 16}}));
    let id = m["id"].as_str().unwrap().to_string();
    if test_user().is_some() {
        // No writable cgroup for that user: said, not pretended.
        assert_eq!(m["resources"]["enforced"], false, "{m}");
        assert!(m["resources"]["note"].is_string());
    } else {
        assert_eq!(m["resources"]["enforced"], true, "{m}");
        let r = exec(&mut c, &id, &["python3", "-c", "bytearray(200*1024*1024)"]);
        assert_eq!(
            (r["exit_code"].as_i64(), r["signal"].as_i64()),
            (Some(137), Some(9)),
            "{r}"
        );
        let r = sh(&mut c, &id, "for i in $(seq 40); do sleep 3 & done; wait");
        assert!(r["stderr"].as_str().unwrap().contains("fork"), "{r}");
        // The sleeps that did start hold the pids limit for 3 s (dash exits when it cannot fork).
        exec(&mut c, &id, &["sleep", "3.2"]);
    }
    // Pause freezes a counter; exec resumes it.
    c.call_ok(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /work/n; sleep 0.05; done"], "background": true}),
    );
    let n = dir.path().join(m["work_dir"].as_str().unwrap()).join("n");
    wait_until("the counter", 10, || n.exists());
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    let before = std::fs::read_to_string(&n).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        std::fs::read_to_string(&n).unwrap(),
        before,
        "paused but counting"
    );
    exec(&mut c, &id, &["true"]);
    wait_until("the counter to move again", 10, || {
        std::fs::read_to_string(&n).unwrap() != before
    });
    // A main command's end ends the instance; its record and logs stay until removed.
    let e = spawn(&mut c, json!({"command": ["sh", "-c", "echo bye; exit 3"]}));
    let eid = e["id"].as_str().unwrap().to_string();
    wait_until("the instance to exit", 10, || {
        state_of(&mut c, &eid) == "exited"
    });
    let l = c
        .call_ok("instance_list", json!({"instance": eid}))
        .structured;
    assert_eq!(l["instances"][0]["exit"]["code"], 3);
    let logs = c
        .call_ok("instance_logs", json!({"instance": eid}))
        .structured;
    assert_eq!(logs["text"], "bye\n");
    // Two alive at most: the third is refused and nothing starts.
    spawn(&mut c, json!({}));
    c.call_err("instance_spawn", json!({}), "instance_limit");
    c.call_ok("instance_stop", json!({"instance": eid}));
    c.shutdown();
}

#[test]
fn idle_ttl_and_leases() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let i = spawn(&mut c, json!({"idle_timeout_seconds": 2}));
    let id = i["id"].as_str().unwrap().to_string();
    // A foreground exec longer than the timeout holds it.
    exec(&mut c, &id, &["sleep", "3"]);
    assert_eq!(state_of(&mut c, &id), "running");
    // Nothing running: paused after ~2 s.
    wait_until("the idle pause", 10, || state_of(&mut c, &id) == "paused");
    // It was announced (a warning ahead of the idle action).
    let warned = c.take_notifications().iter().any(|n| {
        n["method"] == "notifications/message"
            && n["params"]["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&id) && m.contains("paused"))
    });
    assert!(warned, "no warning before the idle pause");
    // A lease holds it (and acquiring resumes it); releasing lets it pause again.
    let lease = c
        .call_ok(
            "keepalive_acquire",
            json!({"instance": id, "reason": "test"}),
        )
        .structured;
    assert_eq!(state_of(&mut c, &id), "running");
    let info = c.call_ok("self_info", json!({})).structured;
    assert_eq!(info["leases"][0]["instance"], id);
    assert_eq!(info["leases"][0]["lease_id"], lease["lease_id"]);
    std::thread::sleep(Duration::from_secs(3));
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "running");
    assert_eq!(l["instances"][0]["idle"]["blocked_by"], json!(["lease"]));
    let r = c
        .call_ok("keepalive_release", json!({"lease_id": lease["lease_id"]}))
        .structured;
    assert_eq!(r["released"], true);
    wait_until("the pause after release", 10, || {
        state_of(&mut c, &id) == "paused"
    });
    // A lease expires by itself.
    let short = c
        .call_ok(
            "keepalive_acquire",
            json!({"instance": id, "ttl_seconds": 1}),
        )
        .structured;
    std::thread::sleep(Duration::from_millis(1600));
    let r = c
        .call_ok("keepalive_release", json!({"lease_id": short["lease_id"]}))
        .structured;
    assert_eq!(r["released"], false);
    assert!(r["expired_at"].is_string());
    // TTL is hard: a lease does not extend it.
    let t = spawn(&mut c, json!({"ttl_seconds": 2}));
    let tid = t["id"].as_str().unwrap().to_string();
    c.call_ok("keepalive_acquire", json!({"instance": tid}));
    wait_until("the TTL stop", 10, || state_of(&mut c, &tid) == "stopped");
    let l = c
        .call_ok("instance_list", json!({"instance": tid}))
        .structured;
    assert_eq!(l["instances"][0]["stop_reason"], "ttl");
    // An open relayed connection holds the idle timer.
    let w = spawn(
        &mut c,
        json!({"command": ["python3", "-m", "http.server", "8081", "--bind", "127.0.0.1"], "ports": [8081],
               "ready": {"port": 8081}, "idle_timeout_seconds": 2}),
    );
    let wid = w["id"].as_str().unwrap().to_string();
    let url = w["ports"][0]["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let conn = TcpStream::connect(&url).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state_of(&mut c, &wid), "running");
    drop(conn);
    wait_until("the pause after the connection closed", 10, || {
        state_of(&mut c, &wid) == "paused"
    });
    c.shutdown();
}

#[test]
fn no_orphans_after_kill_and_sweep_on_restart() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let a = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let b = spawn(&mut c, json!({"ports": [8082]}));
    let url = b["ports"][0]["url"].as_str().unwrap().to_string();
    let namespaces: Vec<String> = [&a, &b]
        .iter()
        .map(|inst| instance_ns(dir.path(), inst["id"].as_str().unwrap()))
        .collect();
    for ns in &namespaces {
        assert!(!in_pid_ns(ns).is_empty(), "the instances run");
    }
    // SIGKILL: no chance to clean up. Everything must go with it.
    let pid = c.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("every instance process to die", 5, || {
        namespaces.iter().all(|ns| in_pid_ns(ns).is_empty())
    });
    assert!(
        http_get(&url).is_err(),
        "the exposed port survived the server"
    );
    // A new server sweeps: the records are marked lost, their cgroups removed.
    let mut c = server(dir.path(), &[], Era::Handshake);
    let l = c.call_ok("instance_list", json!({})).structured;
    assert_eq!(l["total"], 2);
    for i in l["instances"].as_array().unwrap() {
        assert_eq!(i["state"], "lost");
    }
    let stale = format!("kitbag-vm-{pid}");
    for m in ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer"] {
        let found = walk_for(Path::new(m), &stale, 4);
        assert!(found.is_none(), "{found:?} survived the sweep");
    }
    // Lost records are removed on request.
    let id = l["instances"][0]["id"].as_str().unwrap().to_string();
    c.call_ok("instance_stop", json!({"instance": id}));
    // Graceful exit (stdin closed): every instance stopped, no socket left.
    let g = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let gdir = dir
        .path()
        .join(".kitbag/vm/instances")
        .join(g["id"].as_str().unwrap());
    // The instance's own processes (its pid namespace), not every `sleep` on a machine
    // running other tests.
    let gns = instance_ns(dir.path(), g["id"].as_str().unwrap());
    assert!(!in_pid_ns(&gns).is_empty(), "the instance runs");
    c.shutdown();
    assert!(!gdir.join("ctl/agent.sock").exists());
    wait_until("the instance's sleep to die with a clean exit", 5, || {
        in_pid_ns(&gns).is_empty()
    });
}

/// An instance's pid namespace: its sandbox's first process is bwrap's child.
fn instance_ns(project: &Path, id: &str) -> String {
    let record: Value = serde_json::from_slice(
        &std::fs::read(
            project
                .join(".kitbag/vm/instances")
                .join(id)
                .join("record.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let bwrap = record["processes"][0][0].as_u64().unwrap();
    let inner = kitbag_testkit::child_pids(bwrap as u32)[0];
    std::fs::read_link(format!("/proc/{inner}/ns/pid"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn walk_for(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    if depth == 0 {
        return None;
    }
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if e.file_name().to_string_lossy() == name {
                return Some(e.path());
            }
            if let Some(p) = walk_for(&e.path(), name, depth - 1) {
                return Some(p);
            }
        }
    }
    None
}

#[test]
fn outbound_network_keeps_host_loopback_closed() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    if std::process::Command::new("slirp4netns")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "slirp4netns is required under CI=true (scripts/test installs it)"
        );
        eprintln!("SKIP: slirp4netns is not installed");
        return;
    }
    let dir = project();
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_service.local_addr().unwrap().port();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let tun_open_to_all = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata("/dev/net/tun")
            .map(|m| m.permissions())
            .unwrap(),
    ) & 0o006
        == 0o006;
    if test_user().is_some() && !tun_open_to_all {
        // This machine keeps /dev/net/tun to root: an ordinary user gets a clear refusal.
        let e = c.call_err(
            "instance_spawn",
            json!({"network": "outbound"}),
            "spawn_failed",
        );
        assert!(e.text.contains("/dev/net/tun"), "{}", e.text);
        return;
    }
    let i = spawn(&mut c, json!({"network": "outbound"}));
    let id = i["id"].as_str().unwrap().to_string();
    let r = sh(
        &mut c,
        &id,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort",
    );
    assert_eq!(r["stdout"], "lo\ntap0\n");
    // The host's loopback, through slirp's gateway address: refused.
    let probe =
        format!("python3 -c 'import socket; socket.create_connection((\"10.0.2.2\", {port}), 2)'");
    let r = sh(&mut c, &id, &probe);
    assert_ne!(r["exit_code"], 0, "host loopback reachable: {r}");
    let record: Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join(".kitbag/vm/instances")
                .join(&id)
                .join("record.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let slirp = record["processes"][1][0].as_u64().unwrap() as u32;
    assert!(process_alive(slirp));
    // Killed server: slirp4netns goes too (its exit pipe closes).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("slirp4netns to exit", 5, || !process_alive(slirp));
    drop(host_service);
}

/// The same essentials as an ordinary user (uid 65534 through setpriv when the tests run as
/// root): no writable cgroups, so limits are reported unenforced and pause uses SIGSTOP.
#[test]
fn unprivileged_user() {
    use std::os::unix::fs::PermissionsExt;
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    if uid != 0 {
        eprintln!("SKIP: not root; the other tests already run unprivileged");
        return;
    }
    let dir = project();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // The binary where uid 65534 can run it (the build directory may be private).
    let exe = dir.path().join("kitbag-vm");
    std::fs::copy(bin(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe_s = exe.to_str().unwrap();
    let mut c = McpClient::spawn(
        Path::new("setpriv"),
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe_s,
            "--root",
            root.to_str().unwrap(),
        ],
        &root,
        Era::Handshake,
    );
    c.timeout = Duration::from_secs(60);
    let info = c.call_ok("self_info", json!({})).structured;
    assert_eq!(info["backends"][0]["available"], true, "{info}");
    let i = spawn(
        &mut c,
        json!({"command": ["python3", "-m", "http.server", "8083", "--bind", "127.0.0.1"], "ports": [8083], "ready": {"port": 8083}}),
    );
    let id = i["id"].as_str().unwrap().to_string();
    assert_eq!(i["resources"]["enforced"], false);
    assert!(i["resources"]["note"].is_string());
    assert_eq!(i["resources"]["pause"], "sigstop");
    let r = sh(
        &mut c,
        &id,
        "hostname; id -u; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo w > /work/w",
    );
    assert_eq!(r["stdout"], format!("{id}\n65534\nlo\n"));
    assert!(
        root.join(i["work_dir"].as_str().unwrap())
            .join("w")
            .exists()
    );
    let url = i["ports"][0]["url"].as_str().unwrap().to_string();
    assert!(http_get(&url).unwrap().starts_with("HTTP/1.0 200"));
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    assert!(
        http_get(&url).unwrap().starts_with("HTTP/1.0 200"),
        "resume from the connection"
    );
    c.call_err(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c", "sleep 39 & sleep 39"], "timeout_seconds": 1}),
        "timeout",
    );
    wait_until("the timed-out group to die", 5, || {
        sh(&mut c, &id, "ps -eo args | grep -c '^sleep 39' || true")["stdout"] == "0\n"
    });
    let record: Value = serde_json::from_slice(
        &std::fs::read(
            root.join(".kitbag/vm/instances")
                .join(&id)
                .join("record.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let bwrap = record["processes"][0][0].as_u64().unwrap() as u32;
    let inner = kitbag_testkit::child_pids(bwrap)[0];
    let ns = std::fs::read_link(format!("/proc/{inner}/ns/pid"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // setpriv execs the server: its pid is the client's child.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("every instance process to die", 5, || {
        in_pid_ns(&ns).is_empty()
    });
}

/// A cancelled spawn leaves nothing: no instance, no record, no sandbox process.
#[test]
fn a_cancelled_spawn_leaves_nothing() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let marker = format!("cancel-{}", std::process::id());
    let id = c.send_request(
        "tools/call",
        json!({"name": "instance_spawn", "arguments": {
            "command": ["sh", "-c", format!("sleep 100; : {marker}")],
            "ready": {"port": 9, "timeout_seconds": 20}}}),
    );
    // The sandbox is up (its main command runs) while the spawn waits for readiness.
    wait_until("the main command to start", 15, || {
        !kitbag_testkit::pids_with_cmdline(&marker).is_empty()
    });
    c.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    wait_until("the sandbox to go", 10, || {
        kitbag_testkit::pids_with_cmdline(&marker).is_empty()
    });
    wait_until("the instance to be forgotten", 10, || {
        c.call_ok("instance_list", json!({})).structured["total"] == 0
    });
    let instances = dir.path().join(".kitbag/vm/instances");
    wait_until("its directory to go", 10, || {
        let left: Vec<_> = std::fs::read_dir(&instances)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        if !left.is_empty() {
            eprintln!("left: {left:?}");
        }
        left.is_empty()
    });
    c.shutdown();
}

/// bwrap's parent-death signal follows the thread that forked it: instances must survive the
/// runtime's idle threads retiring (tokio's blocking pool keeps them 10 s).
#[test]
fn instances_outlive_idle_runtime_threads() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let i = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let id = i["id"].as_str().unwrap().to_string();
    // Blocking-pool work (copies, logs) to make the runtime start threads that then retire.
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "content": "x", "guest_path": "/tmp/x"}),
    );
    std::thread::sleep(Duration::from_secs(13));
    assert_eq!(state_of(&mut c, &id), "running");
    let r = exec(&mut c, &id, &["true"]);
    assert_eq!(r["exit_code"], 0);
    c.shutdown();
}

/// Run a kitbag-vm inside `instance` as an MCP server over an exec's stdin (guest mode, auto
/// from $KITBAG_VM_SOCKET), call `calls` in order, return each call's result.
fn guest_session(c: &mut McpClient, instance: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut input = String::new();
    input.push_str(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "guest-test", "version": "1"}}})
        .to_string(),
    );
    input.push('\n');
    input.push_str(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    input.push('\n');
    for (i, (tool, args)) in calls.iter().enumerate() {
        input.push_str(
            &json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                    "params": {"name": tool, "arguments": args}})
            .to_string(),
        );
        input.push('\n');
    }
    // Keep stdin open a little after the last line, so every answer is written before EOF.
    let r = c
        .call_ok(
            "instance_exec",
            json!({"instance": instance, "stdin": input, "timeout_seconds": 60,
                   "command": ["sh", "-c", "(cat; sleep 2) | /run/kitbag-bin/kitbag-vm"]}),
        )
        .structured;
    let mut results = vec![Value::Null; calls.len()];
    for line in r["stdout"].as_str().unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        if let Some(id) = v["id"].as_u64().filter(|id| *id >= 1) {
            results[id as usize - 1] = v["result"].clone();
        }
    }
    for (i, res) in results.iter().enumerate() {
        assert!(res.is_object(), "no answer to {:?}: {r}", calls[i]);
    }
    results
}

#[test]
fn nesting_guests_see_only_their_descendants() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let a = spawn(
        &mut c,
        json!({"name": "outer", "command": ["sh", "-c", "echo $$ > /work/pid; exec sleep 1000"]}),
    );
    let aid = a["id"].as_str().unwrap().to_string();
    let b = spawn(&mut c, json!({"name": "sibling"}));
    let bid = b["id"].as_str().unwrap().to_string();
    // Calls of one session run concurrently: dependent steps go in separate sessions.
    let mut r = guest_session(
        &mut c,
        &aid,
        &[
            ("self_info", json!({})),
            ("keepalive_acquire", json!({"reason": "guest"})),
            ("instance_spawn", json!({"name": "inner"})),
        ],
    );
    r.extend(guest_session(
        &mut c,
        &aid,
        &[
            ("instance_list", json!({})),
            ("instance_stop", json!({"instance": bid})),
            (
                "instance_exec",
                json!({"instance": "inner", "command": ["hostname"]}),
            ),
            ("instance_spawn", json!({"network": "outbound"})),
        ],
    ));
    assert_eq!(r[0]["structuredContent"]["server"]["mode"], "guest");
    assert_eq!(r[0]["structuredContent"]["instance"]["id"], aid);
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    let inner = r[2]["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(r[2]["structuredContent"]["owner"], aid);
    assert_eq!(r[2]["structuredContent"]["depth"], 1);
    let listed: Vec<&str> = r[3]["structuredContent"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [inner.as_str()],
        "a guest lists only its descendants"
    );
    assert_eq!(
        r[4]["structuredContent"]["error"]["code"],
        "instance_not_found"
    );
    assert_eq!(r[5]["structuredContent"]["stdout"], "inner\n", "{}", r[5]);
    assert_eq!(
        r[6]["structuredContent"]["error"]["code"],
        "capability_denied"
    );
    // The parent sees the guest's lease and child.
    let l = c
        .call_ok("instance_list", json!({"instance": aid}))
        .structured;
    assert_eq!(l["instances"][0]["leases"].as_array().unwrap().len(), 1);
    let l = c
        .call_ok("instance_list", json!({"instance": inner}))
        .structured;
    assert_eq!(l["instances"][0]["owner"], aid);
    // self_restart {scope: instance} restarts the main command; /work stays.
    let pid_file = dir.path().join(a["work_dir"].as_str().unwrap()).join("pid");
    let first = std::fs::read_to_string(&pid_file).unwrap();
    std::fs::write(
        dir.path()
            .join(a["work_dir"].as_str().unwrap())
            .join("keep"),
        "x",
    )
    .unwrap();
    let r = guest_session(
        &mut c,
        &aid,
        &[("self_restart", json!({"scope": "instance"}))],
    );
    assert_eq!(
        r[0]["structuredContent"]["action"], "restart_main",
        "{}",
        r[0]
    );
    wait_until("the main command to restart", 15, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p != first)
    });
    assert!(
        dir.path()
            .join(a["work_dir"].as_str().unwrap())
            .join("keep")
            .exists()
    );
    assert_eq!(state_of(&mut c, &aid), "running");
    // Stopping the guest's instance stops what it spawned.
    let s = c
        .call_ok("instance_stop", json!({"instance": aid}))
        .structured;
    assert_eq!(s["stopped_descendants"], json!([inner]));
    c.call_err(
        "instance_list",
        json!({"instance": inner}),
        "instance_not_found",
    );
    c.shutdown();
}

/// A named root file system (a directory under --images-dir/rootfs): the instance sees it, not
/// the host's root, read-only; the agent runs there with the host's loader brought along.
#[test]
fn a_named_root_file_system() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let Some(busybox) = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "busybox is required under CI=true (scripts/test installs busybox-static)"
        );
        eprintln!("SKIP: no busybox to build a root file system from");
        return;
    };
    let dir = project();
    let images = dir.path().join("images");
    let rootfs = images.join("rootfs/mini");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::copy(busybox, rootfs.join("bin/busybox")).unwrap();
    for tool in ["sh", "cat", "echo", "ls", "touch", "hostname"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(tool)).unwrap();
    }
    std::fs::write(rootfs.join("etc/os-release"), "NAME=mini\n").unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let mut c = server(
        &project,
        &["--images-dir", images.to_str().unwrap()],
        Era::Handshake,
    );
    c.call_err("instance_spawn", json!({"image": "nope"}), "invalid_params")
        .expect_field("image");
    let i = spawn(&mut c, json!({"image": "mini", "env": {"PATH": "/bin"}}));
    assert_eq!(i["image"], "mini");
    let id = i["id"].as_str().unwrap().to_string();
    let r = sh(
        &mut c,
        &id,
        "cat /etc/os-release; ls /usr 2>/dev/null || echo no-usr; touch /etc/z 2>/dev/null || echo ro; echo w > /work/w; hostname",
    );
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    if uid == 0 && test_user().is_none() {
        // As root the image is mounted copy-on-write: writes land in the instance's overlay.
        assert_eq!(r["stdout"], format!("NAME=mini\nno-usr\n{id}\n"), "{r}");
        let r = sh(
            &mut c,
            &id,
            "echo changed > /etc/os-release; cat /etc/os-release",
        );
        assert_eq!(r["stdout"], "changed\n");
        assert_eq!(
            std::fs::read_to_string(rootfs.join("etc/os-release")).unwrap(),
            "NAME=mini\n"
        );
        // Another instance of the same image starts from the image, not from that change.
        let j = spawn(&mut c, json!({"image": "mini", "env": {"PATH": "/bin"}}));
        let r = exec(
            &mut c,
            j["id"].as_str().unwrap(),
            &["cat", "/etc/os-release"],
        );
        assert_eq!(r["stdout"], "NAME=mini\n");
        // Nothing of the overlays is mounted on the host.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains("kitbag-vm"),
            "an overlay is mounted on the host"
        );
    } else {
        assert_eq!(r["stdout"], format!("NAME=mini\nno-usr\nro\n{id}\n"), "{r}");
    }
    assert!(
        project
            .join(i["work_dir"].as_str().unwrap())
            .join("w")
            .exists()
    );
    c.shutdown();
}

/// Default answers stay under the result budget (issue #37) and say where the rest is:
/// list pages by `next_offset`, exec's streams are cut with the whole in `log_path`, logs
/// page by `next_offset`, an inline copy too large for a default answer asks for
/// `max_bytes`, a huge command is cut in the records that show it.
#[test]
fn default_answers_fit_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    // Records of ~8 KB each: 16 labels of 250 quotes (500 bytes escaped).
    let labels: serde_json::Map<String, Value> = (0..16)
        .map(|i| (format!("k{i:02}"), json!("\"".repeat(250))))
        .collect();
    let mut ids = Vec::new();
    for _ in 0..7 {
        let i = spawn(&mut c, json!({"labels": labels}));
        ids.push(i["id"].as_str().unwrap().to_string());
    }
    // A command of 30 KB of quotes (60 KB escaped) comes back cut.
    let mut argv = vec![json!("sh"), json!("-c"), json!("exec sleep 600")];
    argv.extend((0..30).map(|_| json!("\"".repeat(1000))));
    let s = spawn(&mut c, json!({ "command": argv }));
    assert!(json_len(&s) < RESULT_BUDGET_BYTES, "{}", json_len(&s));
    let cmd = s["command"].as_array().unwrap();
    assert_eq!(
        cmd[..3],
        [json!("sh"), json!("-c"), json!("exec sleep 600")]
    );
    assert!(
        cmd.last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("command cut")
    );
    ids.push(s["id"].as_str().unwrap().to_string());

    // instance_list: pages under the budget, each starting where the last ended.
    let all: Vec<String> =
        c.call_ok("instance_list", json!({"limit": 200})).structured["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string())
            .collect();
    assert_eq!(all.len(), 8);
    let mut paged = Vec::new();
    let mut args = json!({});
    let mut pages = 0;
    loop {
        let l = c.call_ok("instance_list", args.clone()).structured;
        assert!(json_len(&l) < RESULT_BUDGET_BYTES, "{}", json_len(&l));
        assert_eq!(l["total"], 8);
        let page = l["instances"].as_array().unwrap();
        assert!(!page.is_empty());
        paged.extend(page.iter().map(|i| i["id"].as_str().unwrap().to_string()));
        pages += 1;
        match l["next_offset"].as_u64() {
            Some(n) => {
                assert_eq!(n as usize, paged.len());
                args = json!({"offset": n});
            }
            None => break,
        }
    }
    assert!(pages > 1, "the default list was not cut");
    assert_eq!(paged, all, "pages lost or repeated instances");

    // instance_exec: 30,000 quotes on stdout and 30,000 control bytes on stderr (240 KB
    // escaped) come back cut, whole in the log.
    let id = &ids[0];
    let r = sh(
        &mut c,
        id,
        "head -c 30000 /dev/zero | tr '\\0' '\"'; head -c 30000 /dev/zero | tr '\\0' '\\001' >&2",
    );
    assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
    assert_eq!(r["truncated"], true);
    let (out, err) = (r["stdout"].as_str().unwrap(), r["stderr"].as_str().unwrap());
    assert!(out.starts_with("\"\"\"") && out.ends_with("\"\"\"") && out.contains("log_path"));
    assert!(err.starts_with('\u{1}') && err.ends_with('\u{1}'));
    let log = std::fs::read(dir.path().join(r["log_path"].as_str().unwrap())).unwrap();
    assert_eq!(log.len(), 60_000);
    // Its log through instance_logs, paged by the budget: page two starts where one ended.
    let seq = r["log_path"]
        .as_str()
        .unwrap()
        .rsplit("exec-")
        .next()
        .unwrap();
    let source = format!("exec:{}", seq.trim_end_matches(".log"));
    let l1 = c
        .call_ok("instance_logs", json!({"instance": id, "source": source}))
        .structured;
    assert!(json_len(&l1) < RESULT_BUDGET_BYTES, "{}", json_len(&l1));
    assert_eq!(l1["truncated"], true);
    let next = l1["next_offset"].as_u64().unwrap();
    let t1 = l1["text"].as_str().unwrap();
    assert_eq!(t1.as_bytes(), &log[..next as usize]);
    let l2 = c
        .call_ok(
            "instance_logs",
            json!({"instance": id, "source": source, "offset": next}),
        )
        .structured;
    assert!(json_len(&l2) < RESULT_BUDGET_BYTES, "{}", json_len(&l2));
    assert_eq!(l2["offset"].as_u64(), Some(next));
    let t2 = l2["text"].as_str().unwrap();
    assert_eq!(t2.as_bytes(), &log[next as usize..next as usize + t2.len()]);
    // The tail: its end kept, its start later.
    let lt = c
        .call_ok(
            "instance_logs",
            json!({"instance": id, "source": source, "tail": true}),
        )
        .structured;
    assert!(json_len(&lt) < RESULT_BUDGET_BYTES, "{}", json_len(&lt));
    let off = lt["offset"].as_u64().unwrap() as usize;
    assert_eq!(lt["text"].as_str().unwrap().as_bytes(), &log[off..]);

    // instance_copy out inline: a file that fits comes back; 30,000 quotes (60 KB escaped)
    // ask for max_bytes, which then returns them.
    sh(
        &mut c,
        id,
        "head -c 30000 /dev/zero | tr '\\0' 'a' > /tmp/a",
    );
    let o = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/tmp/a"}),
        )
        .structured;
    assert_eq!(o["content"].as_str().unwrap().len(), 30_000);
    sh(
        &mut c,
        id,
        "head -c 30000 /dev/zero | tr '\\0' '\"' > /tmp/q",
    );
    let e = c
        .call_err(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/tmp/q"}),
            "output_too_large",
        )
        .expect_field("max_bytes");
    assert!(json_len(&e.structured) < RESULT_BUDGET_BYTES);
    let o = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/tmp/q", "max_bytes": 262144}),
        )
        .structured;
    assert_eq!(o["content"].as_str().unwrap(), "\"".repeat(30_000));
    c.shutdown();
}

/// Issue #37: an instance's leases were listed whole — 60 leases with reasons of 200 control
/// characters (~1.3 KB each escaped) made `self_info` and the instance's record ~80 KB. Both
/// now stop under the budget with `leases_total` and `leases_truncated`, and instance_list's
/// `leases_offset` pages one instance's leases.
#[test]
fn lease_lists_fit_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let id = spawn(&mut c, json!({}))["id"].as_str().unwrap().to_string();
    let reason = "\u{1}".repeat(200);
    let mut ids: Vec<String> = (0..60)
        .map(|_| {
            c.call_ok(
                "keepalive_acquire",
                json!({"instance": id, "reason": reason}),
            )
            .structured["lease_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    let lease_ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l["lease_id"].as_str().unwrap().to_string())
            .collect()
    };
    let info = c.call_ok("self_info", json!({})).structured;
    assert!(json_len(&info) < RESULT_BUDGET_BYTES, "{}", json_len(&info));
    assert_eq!(info["leases_total"], 60);
    assert_eq!(info["leases_truncated"], true);
    let shown = lease_ids(&info["leases"]);
    assert!(!shown.is_empty() && shown.len() < 60, "{}", shown.len());
    assert_eq!(shown, ids[..shown.len()]);
    // The record, alone on its page and by default in a list: cut, then paged.
    for args in [json!({}), json!({"instance": id})] {
        let l = c.call_ok("instance_list", args).structured;
        assert!(json_len(&l) < RESULT_BUDGET_BYTES, "{}", json_len(&l));
        assert_eq!(l["instances"][0]["leases_total"], 60);
        assert_eq!(l["instances"][0]["leases_truncated"], true);
    }
    let mut seen: Vec<String> = Vec::new();
    loop {
        let l = c
            .call_ok(
                "instance_list",
                json!({"instance": id, "leases_offset": seen.len()}),
            )
            .structured;
        assert!(json_len(&l) < RESULT_BUDGET_BYTES, "{}", json_len(&l));
        let rec = &l["instances"][0];
        let page = lease_ids(&rec["leases"]);
        assert!(!page.is_empty());
        seen.extend(page);
        if rec["leases_truncated"] != true {
            break;
        }
    }
    assert_eq!(seen, ids, "leases lost or repeated");
    c.call_err(
        "instance_list",
        json!({"leases_offset": 1}),
        "invalid_params",
    )
    .expect_field("leases_offset");
    c.shutdown();
}
