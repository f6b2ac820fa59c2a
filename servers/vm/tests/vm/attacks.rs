//! The trust boundary between the server and its instances, tested as the attacks that broke
//! it (issue #42, findings N1–N4 and N13; `../shared/security-probes.md`): each test does
//! from inside an instance (or to the server's records) what an attacker did, and checks that
//! nothing on the host moved. scripts/test runs them as root and again as uid 65534.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kitbag_testkit::{Era, process_alive, wait_until};
use serde_json::json;

use super::{exec, project, server, sh, spawn, test_user};

/// The state directory of a server started on `dir`.
fn state_dir(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir.join(".kitbag/vm")).unwrap()
}

/// A file outside the root, outside every mount, that the server's user could write.
fn victim(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, "VICTIM-ORIGINAL\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    p
}

/// N1: links planted in the control directory (exec logs, the main log, a FIFO) make the
/// server write, read or hang on nothing of the host's.
#[test]
fn planted_links_in_the_control_directory_reach_no_host_file() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let outside = project();
    let target = victim(outside.path(), "target");
    let secret = victim(outside.path(), "secret");
    std::fs::write(&secret, "HOST-SECRET-LINE\n").unwrap();
    let dangling = outside.path().join("created-through-a-link");
    let mut c = server(dir.path(), &[], Era::Handshake);
    let i = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let id = i["id"].as_str().unwrap().to_string();
    let plant = format!(
        "for n in $(seq 1 40); do ln -sf {t} /run/kitbag/logs/exec-$n.log; done; \
         ln -sf {d} /run/kitbag/logs/exec-41.log; \
         ln -sf {s} /run/kitbag/logs/main.log; ln -sf {s} /run/kitbag/logs/job-j99.exit; \
         mkfifo /run/kitbag/logs/job-jf.log; echo planted",
        t = target.display(),
        d = dangling.display(),
        s = secret.display()
    );
    assert_eq!(sh(&mut c, &id, &plant)["stdout"], "planted\n");
    let mut log_paths = Vec::new();
    for _ in 0..3 {
        let r = sh(&mut c, &id, "echo ATTACKER-CONTROLLED-LINE");
        assert_eq!(r["stdout"], "ATTACKER-CONTROLLED-LINE\n");
        log_paths.push(r["log_path"].as_str().unwrap().to_string());
    }
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "VICTIM-ORIGINAL\n",
        "the exec log was written through a planted link"
    );
    assert!(
        !dangling.exists(),
        "a file was created through a dangling link"
    );
    // The full output is in the server's own directory, which the instance cannot see.
    assert!(
        log_paths[2].contains(&format!("instances/{id}/logs/exec-")),
        "{log_paths:?}"
    );
    let logged = dir.path().join(&log_paths[2]);
    assert_eq!(
        std::fs::read_to_string(&logged).unwrap(),
        "ATTACKER-CONTROLLED-LINE\n"
    );
    // Reading the agent's logs follows no link and never blocks on a FIFO.
    let e = c.call_err(
        "instance_logs",
        json!({"instance": id, "source": "main"}),
        "io_error",
    );
    assert!(!e.text.contains("HOST-SECRET"), "{}", e.text);
    let e = c.call_err(
        "instance_logs",
        json!({"instance": id, "source": "job:jf"}),
        "io_error",
    );
    assert!(!e.text.contains("HOST-SECRET"), "{}", e.text);
    let e = c.call_err(
        "instance_logs",
        json!({"instance": id, "source": "job:j99"}),
        "not_found",
    );
    assert!(!e.text.contains("HOST-SECRET"), "{}", e.text);
    // A main command that links its own log to a host file and ends: the spawn's error
    // shows none of the file.
    let e = c.call_err(
        "instance_spawn",
        json!({"command": ["sh", "-c", format!("ln -sf {} /run/kitbag/logs/main.log; exit 3", secret.display())],
               "ready": {"log": "never", "timeout_seconds": 5}}),
        "spawn_failed",
    );
    assert!(!e.text.contains("HOST-SECRET"), "{}", e.text);
    c.shutdown();
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "VICTIM-ORIGINAL\n"
    );
}

/// A listener of the instance's own in place of the agent's socket, answering a copy out
/// with a size far past `max_bytes`: the server refuses to talk to it before it sends a
/// request, allocates nothing and writes nothing.
#[test]
fn a_swapped_agent_socket_is_refused() {
    if !kitbag_testkit::bwrap_usable() || !Path::new("/usr/bin/python3").exists() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let i = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let id = i["id"].as_str().unwrap().to_string();
    let work = dir.path().join(i["work_dir"].as_str().unwrap());
    let fake = r#"
import os, socket
os.rename("/run/kitbag/agent.sock", "/run/kitbag/real.sock")
s = socket.socket(socket.AF_UNIX)
s.bind("/run/kitbag/agent.sock")
s.listen(8)
open("/work/fake-ready", "w").close()
while True:
    conn, _ = s.accept()
    got = conn.recv(65536)
    if got:
        with open("/work/fake-got", "ab") as f:
            f.write(got + b"\n")
    try:
        conn.sendall(b'{"ok":true,"kind":"file","size":3221225472}\n' + b"A" * (1 << 20))
        conn.sendall(b"\x78\x00\x00\x00\x08{\"code\":0}")
    except OSError:
        pass
    conn.close()
"#;
    std::fs::write(work.join("fake.py"), fake).unwrap();
    let r = c.call_ok(
        "instance_exec",
        json!({"instance": id, "background": true, "command": ["python3", "/work/fake.py"]}),
    );
    assert!(r.structured["job_id"].is_string());
    wait_until("the fake agent to listen", 10, || {
        work.join("fake-ready").exists()
    });
    let out = dir.path().join("out.bin");
    let e = c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/etc/hostname",
               "host_path": "out.bin", "max_bytes": 1048576}),
        "internal",
    );
    assert!(e.text.contains("not the instance's agent"), "{}", e.text);
    let e = c.call_err(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c", "exit 3"], "env": {"API_KEY": "sk-secret"}}),
        "instance_not_running",
    );
    assert!(e.text.contains("not the instance's agent"), "{}", e.text);
    assert!(!out.exists(), "a file was written from the fake's answer");
    assert!(
        !work.join("fake-got").exists(),
        "the fake agent received a request: {:?}",
        std::fs::read_to_string(work.join("fake-got"))
    );
    let peak = kitbag_testkit::fuzz::peak_rss_mb(c.pid());
    assert!(peak < 200, "the server's memory peaked at {peak} MB");
    c.shutdown();
}

/// The project root mounted the ordinary way, read-only and read-write: the state directory
/// is an empty tmpfs inside, cannot be moved away, and nothing inside it can be mounted.
#[test]
fn a_root_mount_shows_no_sibling_and_no_state() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let victim = spawn(
        &mut c,
        json!({"name": "victim", "command": ["sleep", "1000"]}),
    );
    let vid = victim["id"].as_str().unwrap().to_string();
    sh(&mut c, &vid, "echo VICTIM-PRIVATE > /work/private.txt");
    let state = state_dir(dir.path());
    for mode in ["ro", "rw"] {
        let a = spawn(
            &mut c,
            json!({"command": ["sleep", "1000"],
                   "mounts": [{"host": ".", "guest": "/proj", "mode": mode}]}),
        );
        let aid = a["id"].as_str().unwrap().to_string();
        let r = sh(
            &mut c,
            &aid,
            &format!(
                "ls -A /proj/.kitbag/vm | wc -l; cat /proj/.kitbag/vm/instances/{vid}/work/private.txt 2>&1; \
                 ls /proj/.kitbag/vm/instances/{vid}/ctl/agent.sock 2>&1; \
                 mv /proj/.kitbag /proj/moved 2>&1 && echo MOVED; \
                 mv /proj/.kitbag/vm /proj/.kitbag/vm2 2>&1 && echo MOVED; \
                 rmdir /proj/.kitbag/vm 2>&1 && echo REMOVED; \
                 mkdir -p /proj/.kitbag/vm/instances/zz-forged 2>&1; \
                 echo '{{\"id\":\"zz-forged\",\"server_pid\":999999}}' > /proj/.kitbag/vm/instances/zz-forged/record.json 2>&1; \
                 echo done"
            ),
        );
        let out = r["stdout"].as_str().unwrap();
        assert!(
            out.starts_with("0\n"),
            "{mode}: the state directory shows: {out}"
        );
        for leak in ["VICTIM-PRIVATE", "MOVED", "REMOVED"] {
            assert!(!out.contains(leak), "{mode}: {leak} in {out}");
        }
        assert!(
            state
                .join("instances")
                .join(&vid)
                .join("work/private.txt")
                .exists()
        );
        assert!(!state.join("instances/zz-forged").exists(), "{mode}: {out}");
        assert!(dir.path().join(".kitbag/vm").is_dir());
        c.call_ok("instance_stop", json!({"instance": aid}));
    }
    for host in [
        ".kitbag/vm".to_string(),
        format!(".kitbag/vm/instances/{vid}/work"),
    ] {
        c.call_err(
            "instance_spawn",
            json!({"mounts": [{"host": host, "guest": "/x", "mode": "ro"}]}),
            "capability_denied",
        );
    }
    // A mount of .kitbag itself still covers vm inside it.
    let a = spawn(
        &mut c,
        json!({"mounts": [{"host": ".kitbag", "guest": "/kb", "mode": "rw"}]}),
    );
    let aid = a["id"].as_str().unwrap().to_string();
    let r = sh(&mut c, &aid, "ls -A /kb/vm | wc -l");
    assert_eq!(r["stdout"], "0\n");
    c.shutdown();
}

/// A record of the server's own, forged as the instance of N4 wrote it (a dead server, a
/// live host process with its real start time, a "cgroup" directory of the attacker's):
/// the next server's start-up sweep kills nothing and writes nothing there, and says so.
#[test]
fn a_forged_record_kills_nothing() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    // A sacrificial process of the server's own user.
    let mut sleeper = match test_user() {
        None => std::process::Command::new("sleep").arg("1000").spawn(),
        Some(uid) => std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
            ])
            .args(["sleep", "1000"])
            .spawn(),
    }
    .unwrap();
    let pid = sleeper.id() as i32;
    wait_until("the sleeper to exec", 5, || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    let started = kitbag_shared::proc_stat::start_time(pid).unwrap();
    let fake_cg = dir.path().join("evilcg");
    std::fs::create_dir(&fake_cg).unwrap();
    std::fs::write(fake_cg.join("cgroup.procs"), format!("{pid}\n")).unwrap();
    // Start a server once so the state directory exists, then plant the record.
    server(dir.path(), &[], Era::Handshake).shutdown();
    let forged = state_dir(dir.path()).join("instances/zz-forged");
    std::fs::create_dir_all(&forged).unwrap();
    std::fs::write(
        forged.join("record.json"),
        json!({"id": "zz-forged", "server_pid": 999_999, "server_start": 1,
               "processes": [[pid, started]], "cgroups": [fake_cg]})
        .to_string(),
    )
    .unwrap();
    if test_user().is_some() {
        use std::os::unix::fs::PermissionsExt;
        for p in [&forged, &forged.join("record.json")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
    }
    let mut c = server(dir.path(), &[], Era::Handshake);
    let l = c
        .call_ok("instance_list", json!({"instance": "zz-forged"}))
        .structured;
    let inst = &l["instances"][0];
    assert_eq!(inst["state"], "lost", "{l}");
    let why = inst["failure"].as_str().unwrap_or_default();
    assert!(why.contains("left alone"), "{why}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(process_alive(pid as u32), "the sweep killed a host process");
    let mut names: Vec<String> = std::fs::read_dir(&fake_cg)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["cgroup.procs"],
        "the sweep wrote into a forged cgroup"
    );
    c.shutdown();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// N13: a guest naming its instance like a sibling learns nothing of the sibling.
#[test]
fn a_guest_learns_no_sibling_name() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let sib = spawn(&mut c, json!({"name": "sibling"}));
    let sid = sib["id"].as_str().unwrap().to_string();
    let a = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let aid = a["id"].as_str().unwrap().to_string();
    let r = super::guest_session(
        &mut c,
        &aid,
        &[("instance_spawn", json!({"name": "sibling"}))],
    );
    assert_eq!(r[0]["isError"], false, "{}", r[0]);
    let text = r[0].to_string();
    assert!(!text.contains(&sid), "{text}");
    let inner = r[0]["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The top level's own "sibling" is still the one its name finds.
    let r = exec(&mut c, "sibling", &["hostname"]);
    assert_eq!(r["instance"], sid);
    let l = c
        .call_ok("instance_list", json!({"instance": inner}))
        .structured;
    assert_eq!(l["instances"][0]["name"], "sibling");
    c.shutdown();
}
