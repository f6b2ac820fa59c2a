//! The Docker backend (cargo feature `backend-docker`): each instance a container of a Docker
//! Engine API (dockerd, or `podman system service`), local images only (vm.md §2.3, §3.10).
//!
//! The container's first process is this binary as the agent, mounted read-only with the
//! host's loader and C library (as in a sandbox's foreign root), serving on a socket in the
//! instance's control directory, which is bind-mounted from the host: exec, copies and ports
//! are the sandbox's own agent operations, and no engine exec session is ever opened (podman
//! was seen leaving `conmon` processes behind them). The engine does create, start, pause,
//! removal. A container belongs to the engine's daemon, not to this server: the server holds
//! a connection open to the agent (`hold`) and the agent stops the instance when it closes,
//! so a container ends with its server however the server ends; `AutoRemove` deletes it; the
//! labels (owner, deadline) let a later server remove what is left anyway.

pub mod api;
pub mod tar;

use crate::backend::Backend;
use crate::disk::{DiskInfo, DiskMethod};
use futures::future::BoxFuture;
use kitbag_shared::lock::LockExt;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::agent_link::{AgentPeer, connect_agent, open_ctl};
use crate::bwrap::{AGENT_EXE, AGENT_LIB, host_loader};
use crate::cgroup::Limits;
use crate::error::{VmError, VmResult};
use crate::owner::{owner, owner_alive};
use crate::proto::{self, Answer, CTL_DIR, ExitStatus, Request, Stream};
use api::{ApiResult, Docker, query};

/// The image kitbag-vm imports itself when a spawn names none: busybox and a few directories.
pub const DEFAULT_IMAGE: &str = "kitbag-vm/busybox:1";
const LABEL_OWNER: &str = "kitbag.vm.owner";
const LABEL_INSTANCE: &str = "kitbag.vm.instance";
const LABEL_DEADLINE: &str = "kitbag.vm.deadline";

#[derive(Debug, Clone)]
pub struct Probe {
    pub available: bool,
    pub detail: String,
    /// Whether containers can have outbound networking (the engine has a `bridge` network).
    pub bridge: bool,
}

/// The engine, its probe (once), and one import of the default image at a time.
pub struct DockerEngine {
    pub api: Docker,
    probe: tokio::sync::OnceCell<Probe>,
    import: tokio::sync::Mutex<()>,
}

impl DockerEngine {
    pub fn new(host: &str) -> VmResult<DockerEngine> {
        Ok(DockerEngine {
            api: Docker::from_host(host).map_err(|e| VmError::Invalid {
                field: "--docker-host",
                message: e.to_string(),
            })?,
            probe: tokio::sync::OnceCell::new(),
            import: tokio::sync::Mutex::new(()),
        })
    }

    /// The probe, if it has run (self_info does not wait for an engine).
    pub fn probed(&self) -> Option<&Probe> {
        self.probe.get()
    }

    /// Probe once: the engine, its version and what it runs with; then remove containers a
    /// dead server of this machine left behind.
    pub async fn probe(&self) -> &Probe {
        self.probe
            .get_or_init(|| async {
                match self.describe().await {
                    Ok((detail, bridge)) => {
                        let swept = self.sweep().await.unwrap_or(0);
                        let detail = if swept > 0 {
                            format!("{detail}; removed {swept} containers a dead server left")
                        } else {
                            detail
                        };
                        Probe {
                            available: true,
                            detail,
                            bridge,
                        }
                    }
                    Err(e) => Probe {
                        available: false,
                        detail: format!(
                            "no Docker Engine API at {}: {e} (start dockerd, or `podman system service`, or pass --docker-host)",
                            self.api.socket.display()
                        ),
                        bridge: false,
                    },
                }
            })
            .await
    }

    async fn describe(&self) -> ApiResult<(String, bool)> {
        let version: Value = self.api.json("GET", "/version", None).await?;
        let info: Value = self.api.json("GET", "/info", None).await?;
        let first = version["Components"]
            .as_array()
            .and_then(|c| c.first())
            .cloned()
            .unwrap_or(Value::Null);
        // dockerd calls its component "Engine"; podman "Podman Engine".
        let engine = match first["Name"].as_str() {
            None | Some("Engine") => "Docker Engine",
            Some(name) => name,
        };
        let podman = engine.to_ascii_lowercase().contains("podman");
        let networks: Value = self.api.json("GET", "/networks", None).await?;
        let bridge = networks
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["Name"] == "bridge"));
        let mut notes = Vec::new();
        if info["MemoryLimit"] == false {
            notes.push("the engine cannot limit memory".to_string());
        }
        if !bridge {
            notes.push("no bridge network: network \"outbound\" is unavailable".into());
        } else if podman {
            notes.push(
                "network \"outbound\" is podman's default network (its first use creates a host bridge and iptables rules)"
                    .into(),
            );
        }
        if podman {
            // Its own API beside the Docker-compatible one, and the OCI runtime it runs.
            if let Some(libpod) = first["Details"]["APIVersion"].as_str() {
                notes.insert(0, format!("libpod API {libpod}"));
            }
            let oci = version["Components"].as_array().and_then(|c| {
                c.iter().find(|c| {
                    c["Name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("OCI Runtime"))
                })
            });
            if let Some(v) = oci.and_then(|c| c["Version"].as_str())
                && let Some(line) = v.lines().next()
            {
                notes.insert(1.min(notes.len()), line.to_string());
            }
        }
        Ok((
            format!(
                "{engine} {} (API {}) at {}; runtime {}; cgroups v{} ({}){}",
                version["Version"].as_str().unwrap_or("?"),
                version["ApiVersion"].as_str().unwrap_or("?"),
                self.api.socket.display(),
                info["DefaultRuntime"].as_str().unwrap_or("?"),
                info["CgroupVersion"].as_str().unwrap_or("1"),
                info["CgroupDriver"].as_str().unwrap_or("?"),
                if notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", notes.join("; "))
                }
            ),
            bridge,
        ))
    }

    /// Containers of this machine's dead servers, and any past their deadline, removed.
    async fn sweep(&self) -> ApiResult<usize> {
        let filters = query(&json!({ "label": [LABEL_OWNER] }).to_string());
        let list: Value = self
            .api
            .json(
                "GET",
                &format!("/containers/json?all=1&filters={filters}"),
                None,
            )
            .await?;
        let now = unix_now();
        let mut removed = 0;
        for c in list.as_array().into_iter().flatten() {
            let labels = &c["Labels"];
            let dead = !owner_alive(labels[LABEL_OWNER].as_str().unwrap_or(""));
            let expired = labels[LABEL_DEADLINE]
                .as_str()
                .and_then(|d| d.parse::<u64>().ok())
                .is_some_and(|d| d > 0 && d < now);
            if (dead || expired)
                && let Some(id) = c["Id"].as_str()
                && self.api.remove(id).await.is_ok()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The image, imported first when it is the default one and missing. Another missing
    /// image is an error naming the local images (no registry is assumed).
    pub async fn ensure_image(&self, image: &str) -> VmResult<()> {
        let _one = self.import.lock().await;
        let path = format!("/images/{}/json", image);
        match self.api.call("GET", &path, None).await {
            Ok(_) => return Ok(()),
            Err(e) if e.status != 404 => return Err(VmError::engine(e.to_string())),
            Err(_) => {}
        }
        if image != DEFAULT_IMAGE {
            return Err(VmError::Invalid {
                field: "image",
                message: format!(
                    "{image:?} is not an image of this engine (no registry is used: import one with `docker import rootfs.tar NAME`); local images: {}",
                    self.local_images().await.join(", ")
                ),
            });
        }
        let tarball = tokio::task::spawn_blocking(default_image_tar)
            .await
            .map_err(|e| VmError::engine(e.to_string()))??;
        // The tag inside `repo`: podman ignores a separate `tag` (it would import `:latest`),
        // dockerd reads it from either.
        let out = self
            .api
            .call(
                "POST",
                &format!("/images/create?fromSrc=-&repo={}", query(DEFAULT_IMAGE)),
                Some(("application/x-tar", &tarball)),
            )
            .await
            .map_err(|e| VmError::engine(format!("importing {DEFAULT_IMAGE}: {e}")))?;
        let text = String::from_utf8_lossy(&out);
        if text.contains("\"error\"") {
            return Err(VmError::engine(format!(
                "importing {DEFAULT_IMAGE}: {text}"
            )));
        }
        Ok(())
    }

    async fn local_images(&self) -> Vec<String> {
        let list: Value = self
            .api
            .json("GET", "/images/json", None)
            .await
            .unwrap_or(Value::Null);
        let mut names: Vec<String> = list
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|i| i["RepoTags"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(|s| format!("{s:?}")))
            .filter(|t| t != "\"<none>:<none>\"")
            .collect();
        names.sort();
        if names.is_empty() {
            names.push(format!(
                "none (the default {DEFAULT_IMAGE:?} is imported on first use)"
            ));
        }
        names
    }
}

/// What to do when the engine has no init binary for `Init: true`: podman 4.3 looks for
/// /usr/libexec/podman/catatonit, and Debian's package recommends "catatonit | tini", so a
/// host with docker.io's tini gets no catatonit.
fn init_hint(e: &api::ApiError) -> &'static str {
    if e.message.contains("container-init binary not found") {
        " (podman needs its init: install catatonit, or set `init_path` in containers.conf's [containers])"
    } else {
        ""
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The default image: the host's static busybox with a link per applet, and the directories
/// an instance expects.
fn default_image_tar() -> VmResult<Vec<u8>> {
    let busybox = kitbag_shared::process::locate("busybox").ok_or_else(|| {
        VmError::missing(
            "busybox is needed for the default container image (apt-get install busybox-static)",
        )
    })?;
    let bytes = std::fs::read(&busybox).map_err(|e| VmError::io(busybox.display(), e))?;
    let list = std::process::Command::new(&busybox)
        .arg("--list")
        .output()
        .map_err(|e| VmError::io("busybox --list", e))?;
    let mut t = tar::Tar::default();
    for (d, mode) in [
        ("bin", 0o755),
        ("etc", 0o755),
        ("tmp", 0o1777),
        ("var", 0o755),
        ("var/tmp", 0o1777),
        ("work", 0o755),
        ("run", 0o755),
        ("root", 0o700),
    ] {
        t.dir(d, mode)?;
    }
    t.file("bin/busybox", 0o755, &bytes)?;
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet != "busybox"
            && applet.bytes().all(|b| {
                b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' || b == b'['
            })
        {
            t.symlink(&format!("bin/{applet}"), "busybox")?;
        }
    }
    t.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")?;
    t.file("etc/group", 0o644, b"root:x:0:\n")?;
    Ok(t.finish())
}

/// What to start.
#[derive(Debug, Clone)]
pub struct BoxSpec {
    pub id: String,
    pub hostname: String,
    pub dir: PathBuf,
    pub exe: PathBuf,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub outbound: bool,
    pub limits: Limits,
    /// The TTL's end, as a label a later server honours.
    pub deadline: Option<SystemTime>,
}

/// A running container.
pub struct Container {
    pub id: String,
    pub dir: PathBuf,
    /// The engine's id for it.
    pub container: String,
    /// Its first process (the agent) as the host sees it.
    pub pid: i32,
    api: Docker,
    ctl_fd: OwnedFd,
    /// The agent, pinned on first contact (before the main command runs). The engine's pid
    /// namespace may not be ours, so no parent is checked.
    peer: AgentPeer,
    exit: watch::Receiver<Option<ExitStatus>>,
    paused: Mutex<bool>,
    disk: Option<DiskInfo>,
}

impl Container {
    pub async fn start(
        engine: &DockerEngine,
        spec: BoxSpec,
        timeout: Duration,
    ) -> VmResult<Arc<Container>> {
        let ctl = spec.dir.join("ctl");
        let work = crate::instance_dir::work_dir(&spec.dir);
        crate::instance_dir::prepare(&spec.dir).map_err(|e| VmError::io(spec.dir.display(), e))?;
        if let Some(argv) = &spec.command {
            crate::bwrap::write_main_spec(&ctl, argv, &spec.cwd)?;
        }
        let ctl_fd = open_ctl(&ctl)?;
        engine.ensure_image(&spec.image).await?;
        let body = create_body(&spec, &ctl, &work)?;
        let created: Value = engine
            .api
            .json(
                "POST",
                &format!("/containers/create?name=kitbag-vm-{}", spec.id),
                Some(&body),
            )
            .await
            .map_err(|e| {
                VmError::engine(format!("creating the container: {e}{}", init_hint(&e)))
            })?;
        let container = created["Id"]
            .as_str()
            .ok_or_else(|| VmError::engine("the engine answered no container id"))?
            .to_string();
        let api = engine.api.clone();
        if let Err(e) = api
            .call("POST", &format!("/containers/{container}/start"), None)
            .await
        {
            let _ = api.remove(&container).await;
            return Err(VmError::engine(format!("starting the container: {e}")));
        }
        let inspected: Value = api
            .json("GET", &format!("/containers/{container}/json"), None)
            .await
            .unwrap_or(Value::Null);
        let pid = inspected["State"]["Pid"].as_i64().unwrap_or(0) as i32;
        // Ready when the agent answers; then the line that ends the container with us.
        let deadline = Instant::now() + timeout;
        let peer = AgentPeer::new(None);
        let hold = loop {
            if let Ok(stream) = connect_agent(&ctl_fd, &peer).await {
                let mut s = tokio::io::BufReader::new(stream);
                if proto::write_line(&mut s, &Request::Hold).await.is_ok()
                    && let Ok(a) = proto::read_line::<_, Answer>(&mut s).await
                    && a.ok
                {
                    break s;
                }
            }
            if Instant::now() > deadline {
                let _ = api.remove(&container).await;
                return Err(VmError::engine(format!(
                    "the agent did not answer within {} s",
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(watch_exit(hold, exit_tx, spec.dir.clone()));
        let c = Arc::new(Container {
            id: spec.id.clone(),
            dir: spec.dir.clone(),
            container,
            pid,
            api,
            ctl_fd,
            peer,
            exit: exit_rx,
            paused: Mutex::new(false),
            disk: spec.limits.disk_mb.map(|mb| {
                DiskInfo::new(
                    mb,
                    DiskMethod::None,
                    Some("not enforced with docker: /work is a host directory bound in (a size limit needs a storage driver with quotas)".into()),
                )
            }),
        });
        if spec.command.is_some() {
            match c.request(&Request::StartMain).await {
                Ok(a) if a.ok => {}
                other => {
                    c.kill();
                    return Err(VmError::engine(format!(
                        "the main command did not start: {other:?}"
                    )));
                }
            }
        }
        Ok(c)
    }
}

impl Backend for Container {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn exit(&self) -> &watch::Receiver<Option<ExitStatus>> {
        &self.exit
    }

    fn pause_method(&self) -> &'static str {
        "engine_pause"
    }

    fn disk(&self) -> Option<DiskInfo> {
        self.disk.clone()
    }

    fn limits_enforced(&self) -> (bool, Option<String>) {
        (
            true,
            Some("the engine's cgroups (Memory, NanoCpus, PidsLimit)".into()),
        )
    }

    fn agent(&self) -> BoxFuture<'_, std::io::Result<Stream>> {
        Box::pin(async move { connect_agent(&self.ctl_fd, &self.peer).await })
    }

    fn is_frozen(&self) -> bool {
        *self.paused.locked()
    }

    /// The engine's pause (its freezer).
    fn pause(&self) -> VmResult<()> {
        self.api
            .call_blocking("POST", &format!("/containers/{}/pause", self.container))
            .map_err(|e| VmError::engine(e.to_string()))?;
        *self.paused.locked() = true;
        Ok(())
    }

    fn resume(&self) -> VmResult<()> {
        self.api
            .call_blocking("POST", &format!("/containers/{}/unpause", self.container))
            .map_err(|e| VmError::engine(e.to_string()))?;
        *self.paused.locked() = false;
        Ok(())
    }

    fn usage(&self) -> crate::cgroup::Usage {
        crate::cgroup::usage_of(self.pid)
    }

    /// When the agent did not end it: the engine kills and removes it.
    fn force_end(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.api.remove(&self.container).await;
        })
    }

    /// Kill and remove at once (the engine does both), blocking: for the synchronous paths.
    fn kill(&self) {
        let _ = self
            .api
            .call_blocking("DELETE", &api::remove_path(&self.container));
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(self.dir.join("ctl").join(proto::AGENT_SOCKET));
    }
}

/// The container ended when the agent's end of the `hold` line closes: publish the main
/// command's status (the agent writes it before it exits) or the agent's.
async fn watch_exit(
    mut hold: tokio::io::BufReader<Stream>,
    exit_tx: watch::Sender<Option<ExitStatus>>,
    dir: PathBuf,
) {
    let mut sink = [0u8; 64];
    while matches!(hold.read(&mut sink).await, Ok(n) if n > 0) {}
    // The container writes its control directory: read as untrusted.
    let main = crate::instance_dir::read_guest_log(&dir, "main.exit", 4096)
        .ok()
        .and_then(|b| serde_json::from_slice::<ExitStatus>(&b).ok());
    let _ = exit_tx.send(Some(main.unwrap_or(ExitStatus {
        code: 0,
        signal: None,
    })));
}

/// The engine's container: the agent as its command through the host's loader, the binary,
/// the loader's directory, the control directory and /work bound in; limits; labels.
fn create_body(spec: &BoxSpec, ctl: &std::path::Path, work: &std::path::Path) -> VmResult<Value> {
    let (lib_dir, loader) =
        host_loader().ok_or_else(|| VmError::missing("the host's dynamic loader was not found"))?;
    let env: Vec<String> = crate::bwrap::instance_env(&spec.id, &spec.hostname, &spec.env)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let deadline = spec
        .deadline
        .and_then(|d| d.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let cpus = (spec.limits.cpus * 1e9) as u64;
    Ok(json!({
        "Image": spec.image,
        "Cmd": [
            format!("{AGENT_LIB}/{loader}"), "--library-path", AGENT_LIB,
            AGENT_EXE, "__agent", "--ctl", CTL_DIR
        ],
        "Env": env,
        "WorkingDir": "/work",
        "Hostname": spec.hostname,
        "Labels": {
            LABEL_OWNER: owner(),
            LABEL_INSTANCE: spec.id,
            LABEL_DEADLINE: deadline.to_string(),
        },
        "HostConfig": {
            "Binds": [
                format!("{}:{AGENT_EXE}:ro", spec.exe.display()),
                format!("{}:{AGENT_LIB}:ro", lib_dir.display()),
                format!("{}:{CTL_DIR}", ctl.display()),
                format!("{}:/work", work.display()),
            ],
            "NetworkMode": if spec.outbound { "bridge" } else { "none" },
            "Memory": spec.limits.memory_mb * 1024 * 1024,
            "NanoCpus": cpus,
            "PidsLimit": spec.limits.pids,
            "Init": true,
            "AutoRemove": true,
        },
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_init_names_its_fix() {
        // podman 4.3's answer to `Init: true` without catatonit (seen on Debian bookworm).
        let e = api::ApiError {
            status: 500,
            message: "container create: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory".into(),
        };
        assert!(init_hint(&e).contains("catatonit"));
        assert!(init_hint(&e).contains("init_path"));
        let other = api::ApiError {
            status: 409,
            message: "Conflict".into(),
        };
        assert_eq!(init_hint(&other), "");
    }
}
