//! kubectl's own `port-forward` against the fixture (the test, and its pieces: the pod's
//! server, connections through the forwarded port, kubectl run as a process that must end
//! cleanly).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::fuzz::Xorshift;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The pod's server (python3, port 8080): per connection a line `SEED N`, then bytes until
/// the client's half-close; it answers with those bytes and N bytes of SEED's pattern, then
/// closes. `/work/ready` says it listens.
const SERVER: &str = r#"
import socket, threading

def pattern(seed, n):
    p = bytes((i * 7 + seed) % 256 for i in range(251))
    return (p * (n // 251 + 1))[:n]

def serve(c):
    with c, c.makefile("rb") as f:
        seed, n = map(int, f.readline().split())
        data = f.read()
        c.sendall(data + pattern(seed, n))

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8080))
s.listen(16)
open("/work/ready", "w").close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The pod that runs [`SERVER`], as JSON for `kubectl create -f -`.
pub fn server_pod(name: &str) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "python:3.12-slim", "command": ["python3", "-c", SERVER]}]
        }
    })
    .to_string()
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    let p: Vec<u8> = (0..251u32)
        .map(|i| ((i * 7 + u32::from(seed)) % 256) as u8)
        .collect();
    p.iter().copied().cycle().take(n).collect()
}

fn noise(seed: u8, n: usize) -> Vec<u8> {
    let mut x = Xorshift(0x9e37_79b9_7f4a_7c15 ^ u64::from(seed));
    (0..n).map(|_| x.next_u64() as u8).collect()
}

/// One connection through the forwarded `port`: `up` bytes out (then a half-close), and
/// back those bytes followed by `down` bytes of the seed's pattern. The bytes it sent and
/// received.
pub async fn exchange(port: u16, seed: u8, up: usize, down: usize) -> (usize, usize) {
    let line = format!("{seed} {down}\n");
    let run = async {
        let c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let (mut r, mut w) = c.into_split();
        let sent = noise(seed, up);
        let write = async {
            w.write_all(line.as_bytes()).await?;
            w.write_all(&sent).await?;
            w.shutdown().await
        };
        let mut got = Vec::new();
        let (wrote, read) = tokio::join!(write, r.read_to_end(&mut got));
        wrote?;
        read?;
        Ok::<_, std::io::Error>((sent, got))
    };
    let (sent, got) = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("connection {seed} through the forward hung"))
        .unwrap_or_else(|e| panic!("connection {seed}: {e}"));
    assert_eq!(got.len(), up + down, "connection {seed}: bytes back");
    assert!(got[..up] == sent[..], "connection {seed}: the echo differs");
    assert!(
        got[up..] == pattern(seed, down)[..],
        "connection {seed}: the pod's bytes differ"
    );
    (line.len() + up, got.len())
}

/// A running `kubectl port-forward`.
pub struct PortForward {
    child: tokio::process::Child,
    pid: u32,
    kubeconfig: PathBuf,
    /// The local port kubectl listens on.
    pub port: u16,
}

impl PortForward {
    /// Start kubectl and wait for its `Forwarding from 127.0.0.1:PORT -> …` line.
    /// `websockets: false` sets `KUBECTL_PORT_FORWARD_WEBSOCKETS=false` (a plain SPDY upgrade
    /// instead of SPDY tunnelled in a WebSocket).
    pub async fn start(kubeconfig: &Path, pod: &str, ports: &str, websockets: bool) -> Self {
        let mut child = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["port-forward", "--address", "127.0.0.1", pod, ports])
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl port-forward");
        let pid = child.id().expect("kubectl's pid");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("kubectl port-forward did not say where it listens")
            .expect("kubectl's stdout")
            .unwrap_or_default();
        let port = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from kubectl: {line:?}"));
        // Keep draining stdout ("Handling connection for …") so kubectl never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        PortForward {
            child,
            pid,
            kubeconfig: kubeconfig.to_path_buf(),
            port,
        }
    }

    /// Wait for kubectl to end by itself: its exit code and stderr.
    pub async fn ended(mut self) -> (i32, String) {
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("kubectl port-forward did not end")
            .expect("wait for kubectl");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err).await;
        }
        self.check_gone();
        (status.code().unwrap_or(-1), err)
    }

    /// Ctrl-C, as a user ends it: kubectl must exit 0, promptly, leaving no process.
    pub async fn interrupt(self) -> String {
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT to kubectl");
        let (code, err) = self.ended().await;
        assert_eq!(code, 0, "kubectl port-forward after SIGINT: {err}");
        err
    }

    /// Nothing of this kubectl is left in the process table.
    fn check_gone(&self) {
        assert!(
            !kitbag_testkit::process_alive(self.pid),
            "kubectl {} still runs",
            self.pid
        );
        let needle = self.kubeconfig.to_str().expect("utf-8 path");
        let left: Vec<u32> = kitbag_testkit::pids_with_cmdline(needle)
            .into_iter()
            .filter(|p| cmdline(*p).contains("port-forward"))
            .collect();
        assert!(
            left.is_empty(),
            "kubectl port-forward processes left: {left:?}"
        );
    }
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// kubectl's own port-forward, on both transports: several connections at once through
/// the forwarded port, each moving hundreds of KiB up and MiBs down (far past SPDY's 64 KiB
/// windows), then Ctrl-C — kubectl exits 0 and leaves no process; a port nothing listens on
/// ends kubectl with the kubelet's message.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_port_forward() {
    if !super::prerequisites(true) {
        return;
    }
    let env = super::start(false).await;
    let o = super::kubectl_in(
        &env.kubeconfig,
        &["create", "--validate=false", "-f", "-"],
        Some(&server_pod("pf")),
    )
    .await;
    assert!(o.ok, "{}", o.stderr);
    env.kubectl_ok(&["wait", "--for=condition=Ready", "pod/pf", "--timeout=30s"])
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !env
        .kubectl(&["exec", "pf", "--", "test", "-e", "/work/ready"])
        .await
        .ok
    {
        assert!(Instant::now() < deadline, "the pod's server never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut up, mut down) = (0, 0);
    for websockets in [true, false] {
        let pf = PortForward::start(&env.kubeconfig, "pod/pf", "0:8080", websockets).await;
        // Four at once (one stream pair each, interleaved in one session), then two more.
        let sizes = [
            (300 << 10, 2 << 20),
            (1 << 20, 1 << 20),
            (0, 3 << 20),
            (700 << 10, 0),
        ];
        let at_once = sizes
            .iter()
            .enumerate()
            .map(|(i, (u, d))| exchange(pf.port, i as u8, *u, *d));
        let mut moved = futures::future::join_all(at_once).await;
        moved.push(exchange(pf.port, 10, 5, 5).await);
        moved.push(exchange(pf.port, 11, 200 << 10, 200 << 10).await);
        up += moved.iter().map(|m| m.0).sum::<usize>();
        down += moved.iter().map(|m| m.1).sum::<usize>();
        let err = pf.interrupt().await;
        assert!(!err.contains("error"), "kubectl's stderr: {err}");
    }
    env.wait_for("the SPDY sessions to end", 10, |f| {
        f.portforward_stats().live == 0
    })
    .await;
    let st = env.f.portforward_stats();
    assert_eq!(st.transports, ["websocket", "upgrade"], "{st:?}");
    assert_eq!(st.pairs, 12, "{st:?}");
    assert_eq!(
        (st.bytes_up, st.bytes_down),
        (up as u64, down as u64),
        "{st:?}"
    );
    // The fixture acknowledged what kubectl sent (every 32 KiB, stream and session);
    // kubectl said GOAWAY when interrupted. (kubectl does no flow control of its own: it
    // sends past the windows — `window_overruns` — and never sends WINDOW_UPDATE.)
    assert!(
        st.frames_out.get("WINDOW_UPDATE") >= Some(&((up >> 15) as u64)),
        "{st:?}"
    );
    assert_eq!(st.frames_in.get("GOAWAY"), Some(&2), "{st:?}");
    eprintln!("SPDY sessions: {st:?}");

    // Nothing listens on port 9: kubectl prints the kubelet's error and gives up.
    let pf = PortForward::start(&env.kubeconfig, "pod/pf", "0:9", true).await;
    let _ = tokio::net::TcpStream::connect(("127.0.0.1", pf.port)).await;
    let (code, err) = pf.ended().await;
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("error forwarding port 9 to pod pf, uid ")
            && err.contains("Connection refused"),
        "{err}"
    );
    env.kubectl_ok(&["delete", "pod", "pf"]).await;
    super::finish(env).await;
}
