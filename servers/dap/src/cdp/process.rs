//! Starting Node.js or Bun with its inspector on a loopback port of its own choosing, and
//! finding an already running one's WebSocket address for attach.

use kitbag_shared::lock::LockExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use super::Inspector;
use super::failure::{AdapterFailure, AdapterResult};
use crate::config;

/// How long a runtime may take to print its inspector address.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The runtime binary: `KITBAG_DAP_NODE` / `KITBAG_DAP_BUN`, else `node` / `bun` on PATH.
pub fn binary(runtime: Inspector) -> AdapterResult<PathBuf> {
    let (var, name, install) = match runtime {
        Inspector::Bun => ("KITBAG_DAP_BUN", "bun", "npm install -g bun"),
        Inspector::Node => ("KITBAG_DAP_NODE", "node", "install Node.js 22 or later"),
    };
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(AdapterFailure::NotAFile { var, path: p })
        };
    }
    config::locate(name).ok_or(AdapterFailure::NotInstalled { name, install })
}

/// A started runtime, paused before the program's first line, and its inspector address.
pub struct Started {
    pub child: Child,
    pub ws_url: String,
    /// The rest of its stderr (the program's), after the inspector's banner.
    pub stderr: BufReader<ChildStderr>,
}

/// Whether `script` needs TypeScript support from the runtime.
fn is_typescript(script: &Path) -> bool {
    matches!(
        script.extension().and_then(|e| e.to_str()),
        Some("ts" | "mts" | "cts")
    )
}

/// `node --version` as (major, minor), read once per binary.
fn node_version(node: &Path) -> Option<(u32, u32)> {
    static SEEN: std::sync::Mutex<BTreeMap<PathBuf, (u32, u32)>> =
        std::sync::Mutex::new(BTreeMap::new());
    if let Some(v) = SEEN.locked().get(node).copied() {
        return Some(v);
    }
    let out = std::process::Command::new(node)
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    SEEN.locked().insert(node.to_path_buf(), (major, minor));
    Some((major, minor))
}

/// The runtime's own flags for a script: the inspector paused at start, and TypeScript type
/// stripping where this Node needs asking (22.6–22.17; later versions strip by default).
pub fn flags(runtime: Inspector, bin: &Path, script: &Path) -> AdapterResult<Vec<String>> {
    let mut flags = Vec::new();
    match runtime {
        Inspector::Bun => flags.push("--inspect-brk=127.0.0.1:0".to_string()),
        Inspector::Node => {
            flags.push("--inspect-brk=127.0.0.1:0".to_string());
            if is_typescript(script) {
                match node_version(bin) {
                    Some((major, minor)) if major < 22 || (major == 22 && minor < 6) => {
                        return Err(AdapterFailure::NoTypeScript {
                            bin: bin.to_path_buf(),
                            major,
                            minor,
                        });
                    }
                    Some((22, minor)) if minor < 18 => {
                        flags.push("--experimental-strip-types".into());
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(flags)
}

/// Start `script` under the runtime's inspector, paused, and read its WebSocket address.
/// The runtime gets a parent-death signal so it cannot outlive this server even when the
/// server is killed outright.
pub async fn start(
    runtime: Inspector,
    script: &Path,
    args: &[String],
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> AdapterResult<Started> {
    let bin = binary(runtime)?;
    let flags = flags(runtime, &bin, script)?;
    let mut cmd = Command::new(&bin);
    kitbag_shared::process::die_with_parent(&mut cmd);
    cmd.args(&flags)
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| AdapterFailure::Spawn {
        bin: bin.clone(),
        source,
    })?;
    let Some(stderr) = child.stderr.take() else {
        return Err(AdapterFailure::NoStderr);
    };
    let mut stderr = BufReader::new(stderr);
    let mut seen = String::new();
    let found = tokio::time::timeout(START_TIMEOUT, async {
        let mut line = String::new();
        loop {
            line.clear();
            match stderr.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if let Some(url) = line
                .split_whitespace()
                .find(|w| w.starts_with("ws://"))
                .map(String::from)
            {
                return Some(url);
            }
            if seen.len() < 8000 {
                seen.push_str(&line);
            }
        }
    })
    .await;
    match found {
        Ok(Some(ws_url)) => Ok(Started {
            child,
            ws_url,
            stderr,
        }),
        Ok(None) => {
            let status = child
                .wait()
                .await
                .map(|s| s.to_string())
                .unwrap_or_default();
            Err(AdapterFailure::ExitedEarly {
                bin,
                status,
                output: seen.trim().to_string(),
            })
        }
        Err(_) => Err(AdapterFailure::NoInspector {
            bin,
            secs: START_TIMEOUT.as_secs(),
        }),
    }
}

/// Lines the inspector prints on the program's stderr: not program output.
pub fn inspector_chatter(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("Debugger listening on ")
        || l.starts_with("For help, see: https://nodejs.org")
        || l == "Debugger attached."
        || l == "Waiting for the debugger to disconnect..."
        || l.starts_with("Debugger ending on ws://")
        // Bun's banner.
        || l.contains("Bun Inspector")
        || l == "Listening:"
        || l == "Inspect in browser:"
        || l.starts_with("https://debug.bun.sh/")
        || (l.starts_with("ws://") && !l.contains(' '))
}

/// The WebSocket address of the inspector listening on `host:port` (`/json/list`). Bun's
/// inspector has no list (it answers 404): it serves only the path it printed, so its
/// `/json/version` is asked to tell that case, and on this machine the path is looked up where
/// the program's output went (see [`super::printed`]).
pub async fn discover(host: &str, port: u16) -> AdapterResult<String> {
    let list = http_get(host, port, "/json/list").await?;
    let Ok(list) = serde_json::from_str::<serde_json::Value>(list.trim()) else {
        let version = http_get(host, port, "/json/version")
            .await
            .unwrap_or_default();
        if serde_json::from_str::<serde_json::Value>(version.trim())
            .is_ok_and(|v| v["Browser"] == "Bun")
        {
            let local = matches!(
                host,
                "localhost" | "127.0.0.1" | "::1" | "[::1]" | "0.0.0.0"
            );
            let printed = if local {
                kitbag_shared::blocking::unblock(move || Ok(super::printed::printed_address(port)))
                    .await
                    .ok()
                    .flatten()
            } else {
                None
            };
            return printed.ok_or(AdapterFailure::BunNeedsUrl);
        }
        return Err(AdapterFailure::NotAnInspector);
    };
    list.as_array()
        .and_then(|a| a.iter().find_map(|t| t["webSocketDebuggerUrl"].as_str()))
        .map(String::from)
        .ok_or(AdapterFailure::NoTarget)
}

/// The body of `GET path` on `host:port` (empty when there is none).
async fn http_get(host: &str, port: u16, path: &str) -> AdapterResult<String> {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    .map_err(|_| AdapterFailure::NoAnswer)??;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // Read the headers, then Content-Length bytes of body: the inspector keeps the
    // connection open.
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<Vec<u8>, AdapterFailure>(buf);
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                });
                if length.is_some_and(|n| body.len() >= n) {
                    return Ok(buf);
                }
            }
        }
    };
    let body = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| AdapterFailure::NoListAnswer)??;
    let text = String::from_utf8_lossy(&body);
    Ok(text.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}
