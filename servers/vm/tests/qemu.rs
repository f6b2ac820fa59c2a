//! kitbag-vm's QEMU backend end to end: the real binary over stdio booting real virtual
//! machines (TCG here: vm.md §2.2) from the default image built from Debian's packages.
//! Skips loudly without qemu-system-x86_64 unless CI=true.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use kitbag_testkit::{Era, McpClient, pids_with_cmdline, process_alive, wait_until};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
}

/// Whether QEMU runs here. Under `CI=true` its absence fails (scripts/test installs it).
fn qemu_usable() -> bool {
    let ok = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "qemu-system-x86_64 is required under CI=true (scripts/test installs it)"
        );
        eprintln!("SKIP: qemu-system-x86_64 is not installed");
    }
    ok
}

fn server(dir: &Path) -> McpClient {
    let mut c = McpClient::spawn(bin(), &[], dir, Era::Handshake);
    // A first boot builds the image (a kernel download) and boots under emulation.
    c.timeout = Duration::from_secs(240);
    c
}

fn sh(c: &mut McpClient, instance: &str, script: &str) -> Value {
    c.call_ok(
        "instance_exec",
        json!({"instance": instance, "command": ["sh", "-c", script]}),
    )
    .structured
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

/// The QEMU processes this test's server started: its direct children (never daemonized).
fn qemus_of(c: &McpClient) -> Vec<u32> {
    pids_with_cmdline("qemu-system-x86_64")
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(c.pid())
            })
        })
        .collect()
}

#[test]
fn a_vm_runs_commands_serves_ports_pauses_and_stops() {
    if !qemu_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = server(dir.path());

    let info = c.call_ok("self_info", json!({})).structured;
    let q = info["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "qemu")
        .unwrap()
        .clone();
    assert_eq!(q["available"], true, "{q}");
    assert!(q["detail"].as_str().unwrap().contains("QEMU"), "{q}");

    // Bad input changes nothing and names the field.
    let r = c.call_err(
        "instance_spawn",
        json!({"backend": "qemu", "mounts": [{"host": ".", "guest": "/mnt/x"}]}),
        "unsupported",
    );
    assert!(r.text.contains("instance_copy"), "{}", r.text);
    let r = c.call_err(
        "instance_spawn",
        json!({"backend": "qemu", "image": "host"}),
        "invalid_params",
    );
    assert!(r.text.contains("image"), "{}", r.text);
    assert_eq!(c.call_ok("instance_list", json!({})).structured["total"], 0);

    // A VM serving its /work over HTTP: the main command is the guest's busybox httpd.
    let vm = c
        .call_ok(
            "instance_spawn",
            json!({
                "backend": "qemu",
                "name": "web",
                "command": ["httpd", "-f", "-p", "8080", "-h", "/work"],
                "env": {"GREETING": "hello from the guest"},
                "ports": [8080],
                "resources": {"memory_mb": 512, "cpus": 1, "disk_mb": 32},
                "ready": {"port": 8080, "timeout_seconds": 200}
            }),
        )
        .structured;
    let id = vm["id"].as_str().unwrap().to_string();
    assert_eq!(vm["backend"], "qemu");
    assert!(vm["work_dir"].is_null(), "{vm}");
    assert_eq!(vm["resources"]["pause"], "qmp_stop");
    assert_eq!(vm["resources"]["disk"]["method"], "tmpfs", "{vm}");
    assert_eq!(vm["resources"]["disk"]["limit_mb"], 32, "{vm}");
    assert_eq!(vm["capabilities"]["own_kernel"], true);
    assert_eq!(vm["capabilities"]["mounts"], false);
    assert_eq!(qemus_of(&c).len(), 1, "one QEMU process");

    // It is a different kernel: the guest's own, not the host's.
    let uname = sh(
        &mut c,
        &id,
        "uname -r; echo $GREETING; hostname; cat /proc/1/comm",
    );
    let out = uname["stdout"].as_str().unwrap();
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(out.contains("cloud-amd64"), "{out}");
    assert_ne!(out.lines().next().unwrap(), host_kernel.trim());
    assert!(out.contains("hello from the guest"), "{out}");
    assert!(out.contains("web"), "hostname: {out}");

    // /work holds disk_mb and no more (a tmpfs of that size in the guest).
    let fill = sh(
        &mut c,
        &id,
        "df -m /work | tail -1; dd if=/dev/zero of=/work/fill bs=1M count=64 2>&1; rm -f /work/fill",
    );
    let filled = fill["stdout"].as_str().unwrap();
    let df = filled
        .lines()
        .find(|l| l.ends_with(" /work"))
        .unwrap_or_default();
    assert_eq!(df.split_whitespace().nth(1), Some("32"), "{filled}");
    assert!(filled.contains("No space left on device"), "{filled}");

    // Files in and out, over the agent.
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "guest_path": "/work/hello.txt", "content": "served by a VM\n"}),
    );
    let url = vm["ports"][0]["url"].as_str().unwrap().to_string();
    let page = http_get(&url).unwrap();
    assert!(page.contains("served by a VM"), "{page}");
    let back = c
        .call_ok(
            "instance_copy",
            json!({"instance": id, "direction": "out", "guest_path": "/work/hello.txt"}),
        )
        .structured;
    assert_eq!(back["content"], "served by a VM\n");

    // A failing command's exit code and stderr come back as they are.
    let bad = sh(&mut c, &id, "echo oops >&2; exit 3");
    assert_eq!(bad["exit_code"], 3);
    assert_eq!(bad["stderr"], "oops\n");

    // Pause halts the VM's CPUs; a connection to the port resumes it first.
    c.call_ok("instance_stop", json!({"instance": id, "pause": true}));
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "paused");
    let page = http_get(&url).unwrap();
    assert!(page.contains("served by a VM"), "{page}");
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "running");

    // Background jobs and their logs, read back through the agent.
    let job = c
        .call_ok(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done; exit 4"], "background": true}),
        )
        .structured;
    let job_id = job["job_id"].as_str().unwrap().to_string();
    wait_until("the job's log", 30, || {
        let l = c
            .call_ok(
                "instance_logs",
                json!({"instance": id, "source": format!("job:{job_id}")}),
            )
            .structured;
        // Each read copies only the log's new bytes: read while it grows, it must still come
        // back whole and once.
        l["exit"]["code"] == 4 && {
            assert_eq!(l["text"], "line 1\nline 2\nline 3\nline 4\nline 5\n", "{l}");
            true
        }
    });

    // Stop: the guest powers off and QEMU is gone.
    let qemu = qemus_of(&c);
    c.call_ok("instance_stop", json!({"instance": id}));
    wait_until("QEMU to exit", 15, || {
        qemu.iter().all(|p| !process_alive(*p))
    });

    // A VM whose main command ends by itself ends with it; its log outlives it.
    let short = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "qemu", "command": ["sh", "-c", "echo bye from $(uname -m); exit 7"]}),
        )
        .structured;
    let sid = short["id"].as_str().unwrap().to_string();
    wait_until("the short VM to end", 60, || {
        let l = c
            .call_ok("instance_list", json!({"instance": sid}))
            .structured;
        l["instances"][0]["state"] == "exited"
    });
    let l = c
        .call_ok("instance_list", json!({"instance": sid}))
        .structured;
    assert_eq!(l["instances"][0]["exit"]["code"], 7, "{l}");
    let log = c
        .call_ok("instance_logs", json!({"instance": sid}))
        .structured;
    assert_eq!(log["text"], "bye from x86_64\n", "{log}");
    let backend = c
        .call_ok(
            "instance_logs",
            json!({"instance": sid, "source": "backend"}),
        )
        .structured;
    assert!(
        backend["text"]
            .as_str()
            .unwrap()
            .contains("kitbag: starting the agent"),
        "the console is the backend log: {backend}"
    );
    assert!(qemus_of(&c).is_empty());

    // No orphans: a VM whose server is SIGKILLed dies with it.
    c.call_ok("instance_spawn", json!({"backend": "qemu"}));
    let left = qemus_of(&c);
    assert_eq!(left.len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = c.shutdown();
    wait_until("QEMU to die with its server", 10, || {
        left.iter().all(|p| !process_alive(*p))
    });
}

/// `--qemu-accel kvm` on a machine whose /dev/kvm opens but whose CPU has no vmx/svm (this
/// kind of machine: a KVM guest never reaches init, vm.md §2.2): the first VM is the boot
/// probe, it fails within its deadline, and the VM boots under TCG instead. Where KVM works
/// the probe passes; where /dev/kvm does not open there is nothing to probe.
#[test]
fn the_kvm_boot_probe_falls_back_to_tcg() {
    if !qemu_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = McpClient::spawn(bin(), &["--qemu-accel", "kvm"], dir.path(), Era::Handshake);
    c.timeout = Duration::from_secs(240);
    let kvm_opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    // Boot stages go out as progress notifications when the call carries a token.
    let r = c.call_with_progress("instance_spawn", json!({"backend": "qemu"}), "boot-1");
    assert!(!r.is_error, "{}", r.text);
    let vm = r.structured;
    let stages: Vec<Value> = c
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"].clone())
        .collect();
    assert!(
        stages.iter().all(|p| p["progressToken"] == "boot-1"),
        "{stages:?}"
    );
    let messages: Vec<&str> = stages
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(messages.contains(&"booting"), "{messages:?}");
    assert_eq!(messages.last(), Some(&"agent ready"), "{messages:?}");
    let steps: Vec<f64> = stages
        .iter()
        .filter_map(|p| p["progress"].as_f64())
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "progress only grows: {steps:?}"
    );
    let note = vm["resources"]["note"].as_str().unwrap().to_string();
    let info = c.call_ok("self_info", json!({})).structured;
    let detail = info["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "qemu")
        .unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    let cpu_virt = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .split_whitespace()
        .any(|f| f == "vmx" || f == "svm");
    eprintln!("qemu: {detail}; instance: {note}");
    match (kvm_opens, cpu_virt) {
        (true, false) => {
            assert!(detail.contains("boot probe failed"), "{detail}");
            assert!(note.contains("TCG"), "{note}");
        }
        (true, true) if detail.contains("reached the guest") => assert!(note.contains("KVM")),
        (true, true) => assert!(note.contains("TCG"), "{detail} / {note}"),
        (false, _) => assert!(detail.contains("cannot be opened") && note.contains("TCG")),
    }
    let id = vm["id"].as_str().unwrap();
    let r = sh(&mut c, id, "echo up");
    assert_eq!(r["stdout"], "up\n");

    // Network "none": the host's loopback (10.0.2.2 in user-mode networking) is out of reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // busybox nc exits 1 when refused; a dropped connection is cut by `timeout` (143); 0
    // would be a connection, 127 no nc. (Debian's busybox-static 1.35 wget segfaults here,
    // which a `wget … || echo refused` probe once mistook for isolation.) The control: nc
    // does connect to the agent's own port inside the guest.
    let control = sh(
        &mut c,
        id,
        "nc -w 3 127.0.0.1 1023 </dev/null; echo \"nc exit $?\"",
    );
    assert_eq!(control["stdout"], "nc exit 0\n", "{control}");
    let probe = format!("timeout 5 nc 10.0.2.2 {port} </dev/null; echo \"nc exit $?\"");
    let cut_off = |r: &Value| {
        let out = r["stdout"].as_str().unwrap_or("");
        ["nc exit 1\n", "nc exit 143\n"]
            .iter()
            .any(|e| out.ends_with(e))
    };
    let r = sh(&mut c, id, &probe);
    assert!(cut_off(&r), "{r}");
    assert!(
        listener.accept().is_err(),
        "a connection reached the host's loopback"
    );

    // Network "outbound": the guest resolves names through user-mode networking's DNS. A known
    // gap, stated in the README and the tool's description: QEMU 7.2's user networking maps
    // 10.0.2.2 to the host's loopback and has no switch against it (slirp4netns has
    // --disable-host-loopback, QEMU does not expose it), so an outbound VM reaches host
    // loopback services. Asserted as it is, so a fix has to update what users are told.
    let out = c
        .call_ok(
            "instance_spawn",
            json!({"backend": "qemu", "network": "outbound"}),
        )
        .structured;
    let oid = out["id"].as_str().unwrap();
    let r = sh(&mut c, oid, &probe);
    assert!(
        !r["stdout"].as_str().unwrap().contains("nc exit 127"),
        "{r}"
    );
    assert!(
        listener.accept().is_ok(),
        "an outbound VM no longer reaches the host's loopback: update the README and DEF"
    );
    let r = sh(
        &mut c,
        oid,
        "nslookup deb.debian.org 10.0.2.3 >/dev/null 2>&1 && echo resolved",
    );
    assert!(r["stdout"].as_str().unwrap().contains("resolved"), "{r}");
    c.shutdown();
}
