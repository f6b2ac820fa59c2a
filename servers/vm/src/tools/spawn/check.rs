//! `instance_spawn`'s arguments checked before anything starts: each step names the field it
//! refuses and what is accepted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kitbag_shared::rustix::fs::OFlags;
use kitbag_shared::{Access, CallCtx, ErrorCode, ToolError, ToolResult};
use serde_json::json;

use super::{Backend, MountMode, MountParam, ReadyParam, ResourcesParam, SpawnParams};
use crate::VmState;
use crate::cgroup::Limits;
use crate::instance::{Network, OnIdle};
use crate::tools::validate;

/// A mount resolved on the host: (host path, guest path, writable, (device, inode)).
pub type Mount = (PathBuf, String, bool, (u64, u64));
/// `ready`: the guest port, the log pattern, the deadline.
pub type Ready = (Option<u16>, Option<regex::Regex>, Duration);

pub struct Checked {
    pub backend: Backend,
    pub name: Option<String>,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub ports: Vec<u16>,
    pub network: Network,
    pub limits: Limits,
    pub ttl: u64,
    pub idle: u64,
    pub on_idle: OnIdle,
    pub ready: Option<Ready>,
    pub labels: BTreeMap<String, String>,
    pub image: String,
    pub rootfs: Option<PathBuf>,
}

/// The image a `kube` spawn gets when it names none: any image with `/bin/sh` works (the
/// agent brings its own C library); this one has a package manager.
pub const DEFAULT_KUBE_IMAGE: &str = "debian:bookworm-slim";

pub fn check(state: &VmState, p: SpawnParams, ctx: &CallCtx) -> ToolResult<Checked> {
    validate::writable(state)?;
    let backend = p.backend.unwrap_or(Backend::Bwrap);
    check_backend(state, backend, &p)?;
    if let Some(n) = &p.name {
        validate::name("name", n)?;
    }
    if let Some(c) = &p.command {
        validate::argv("command", c)?;
    }
    let cwd = p.cwd.unwrap_or_else(|| "/work".into());
    validate::guest_path("cwd", &cwd)?;
    let env = validate::env("env", &p.env.unwrap_or_default())?;
    let image = p.image.clone().unwrap_or_else(|| match backend {
        Backend::Qemu => "default".into(),
        Backend::Docker => default_docker_image().into(),
        Backend::Kube => DEFAULT_KUBE_IMAGE.into(),
        _ => "host".into(),
    });
    let rootfs = check_image(state, backend, &image)?;
    let mounts = check_mounts(ctx, &state.state_dir, p.mounts.unwrap_or_default())?;
    let ports = p.ports.unwrap_or_default();
    for (i, port) in ports.iter().enumerate() {
        validate::range(&format!("ports[{i}]"), *port, 1, 65535)?;
    }
    let network = p.network.unwrap_or_default();
    if network == Network::Outbound && !state.opts.allow_network {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "network: \"outbound\" is refused: this server was started with --no-network",
        ));
    }
    let limits = check_limits(state, p.resources.unwrap_or_default())?;
    let ttl = validate::range(
        "ttl_seconds",
        p.ttl_seconds.unwrap_or(state.opts.default_ttl),
        0,
        state.opts.max_ttl,
    )?;
    let idle = validate::range(
        "idle_timeout_seconds",
        p.idle_timeout_seconds
            .unwrap_or(state.opts.default_idle_timeout),
        0,
        30 * 86_400,
    )?;
    let ready = match p.ready {
        None => None,
        Some(r) => Some(check_ready(r, p.command.is_some())?),
    };
    let labels = p.labels.unwrap_or_default();
    validate::labels("labels", &labels)?;
    Ok(Checked {
        backend,
        name: p.name,
        command: p.command,
        cwd,
        env,
        mounts,
        ports,
        network,
        limits,
        ttl,
        idle,
        on_idle: p.on_idle.unwrap_or_default(),
        ready,
        labels,
        image,
        rootfs,
    })
}

/// The engine is available here, and the spawn asks nothing of it that it cannot do.
fn check_backend(state: &VmState, backend: Backend, p: &SpawnParams) -> ToolResult<()> {
    backend_available(state, backend)?;
    backend_supports(state, backend, p)
}

/// `backend_unavailable` naming the backend.
fn unavailable(backend: &str, message: String) -> ToolError {
    ToolError::new(ErrorCode::BackendUnavailable, message)
        .with_detail(json!({ "field": "backend", "backend": backend }))
}

/// The engine answered its probe (every engine is probed before this check: run awaits it).
fn backend_available(state: &VmState, backend: Backend) -> ToolResult<()> {
    match backend {
        Backend::Bwrap => {
            let (ok, detail) = state.probe().clone();
            if !ok {
                return Err(unavailable("bwrap", format!("bwrap: {detail}")));
            }
        }
        #[cfg(feature = "backend-docker")]
        Backend::Docker => match state.docker.as_ref().and_then(|d| d.probed()) {
            Some(p) if p.available => {}
            Some(p) => {
                return Err(unavailable(
                    "docker",
                    format!("backend: docker is not available here: {}", p.detail),
                ));
            }
            None => {
                return Err(unavailable(
                    "docker",
                    "backend: docker has no engine address (--docker-host)".into(),
                ));
            }
        },
        #[cfg(feature = "backend-kube")]
        Backend::Kube => match state.kube.probed() {
            Some(p) if p.available => {}
            _ => {
                let detail = match &state.kube.api {
                    Err(e) => e.to_string(),
                    Ok(api) => format!("{} did not answer", api.cfg.server),
                };
                return Err(unavailable(
                    "kube",
                    format!("backend: kube is not available here: {detail}"),
                ));
            }
        },
        Backend::Qemu => {
            let probe = state.qemu_probe();
            if !probe.available {
                return Err(unavailable(
                    "qemu",
                    format!("backend: qemu is not available here: {}", probe.detail),
                ));
            }
        }
        // Unreachable in a build with every backend feature.
        #[allow(unreachable_patterns)]
        other => {
            return Err(ToolError::new(
                ErrorCode::BackendUnavailable,
                format!(
                    "backend: {} is not available in this build of kitbag-vm; use \"bwrap\" or \"qemu\" (self_info lists the backends)",
                    format!("{other:?}").to_lowercase()
                ),
            )
            .with_detail(json!({ "field": "backend", "available": ["bwrap", "qemu"] })));
        }
    }
    Ok(())
}

/// The image a docker instance runs when the call names none (none without the backend).
#[cfg(feature = "backend-docker")]
fn default_docker_image() -> &'static str {
    crate::docker::DEFAULT_IMAGE
}
#[cfg(not(feature = "backend-docker"))]
fn default_docker_image() -> &'static str {
    ""
}

/// Whether the Docker engine has a bridge network (for `network: "outbound"`).
#[cfg(feature = "backend-docker")]
fn docker_bridge(state: &VmState) -> bool {
    state
        .docker
        .as_ref()
        .and_then(|d| d.probed())
        .is_some_and(|p| p.bridge)
}
#[cfg(not(feature = "backend-docker"))]
fn docker_bridge(_: &VmState) -> bool {
    false
}

/// What the spawn asks of the engine beyond running: outbound network, host mounts.
fn backend_supports(state: &VmState, backend: Backend, p: &SpawnParams) -> ToolResult<()> {
    if backend == Backend::Docker && p.network == Some(Network::Outbound) && !docker_bridge(state) {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            "network: \"outbound\" needs the engine's bridge network, which it does not have",
        )
        .with_detail(json!({ "field": "network", "backend": "docker" })));
    }
    if backend != Backend::Bwrap && p.mounts.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(ToolError::new(
            ErrorCode::Unsupported,
            format!(
                "mounts: backend {} cannot mount host paths{}; copy files in with instance_copy",
                format!("{backend:?}").to_lowercase(),
                if backend == Backend::Qemu {
                    " (Debian's cloud kernel has no 9p and bookworm no virtiofsd)"
                } else {
                    ""
                }
            ),
        )
        .with_detail(
            json!({ "field": "mounts", "backend": format!("{backend:?}").to_lowercase() }),
        ));
    }
    Ok(())
}

/// The image for the engine: a root file system directory for a named bwrap image.
fn check_image(state: &VmState, backend: Backend, image: &str) -> ToolResult<Option<PathBuf>> {
    Ok(match image {
        _ if backend == Backend::Docker || backend == Backend::Kube => {
            // An engine's image name; whether it exists is the engine's to say at start.
            if image.is_empty()
                || image.len() > 255
                || image.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(ToolError::invalid_field(
                    "image",
                    format!("{image:?} is not an image name"),
                ));
            }
            None
        }
        "default" if backend == Backend::Qemu => None,
        other if backend == Backend::Qemu => {
            return Err(ToolError::invalid_field(
                "image",
                format!(
                    "{other:?} is not a QEMU image; backend qemu boots \"default\" (Debian's cloud kernel, busybox, the kitbag agent)"
                ),
            ));
        }
        "host" => None,
        name => {
            let dir = state.images_dir.join("rootfs").join(name);
            if validate::name("image", name).is_err() || !dir.is_dir() {
                return Err(ToolError::invalid_field(
                    "image",
                    format!(
                        "{name:?} is not available; images: \"host\" (the host's root){}",
                        available_images(&state.images_dir)
                    ),
                ));
            }
            Some(dir)
        }
    })
}

/// Each mount resolved through the root policy and held by its inode, so a link swapped in
/// later is caught when the instance starts. Nothing inside the state directory is mounted
/// (a mount that holds it gets it covered: see `bwrap::state_cover`).
fn check_mounts(
    ctx: &CallCtx,
    state_dir: &std::path::Path,
    params: Vec<MountParam>,
) -> ToolResult<Vec<Mount>> {
    let mut mounts = Vec::new();
    for (i, m) in params.into_iter().enumerate() {
        let field = format!("mounts[{i}].host");
        let rw = m.mode == Some(MountMode::Rw);
        validate::guest_path(&format!("mounts[{i}].guest"), &m.guest)?;
        if ["/", "/work", "/run", "/proc", "/dev"].contains(&m.guest.trim_end_matches('/'))
            || m.guest.starts_with("/run/kitbag")
        {
            return Err(ToolError::invalid_field(
                &format!("mounts[{i}].guest"),
                format!(
                    "{} is managed by kitbag-vm; mount elsewhere (e.g. /mnt/data)",
                    m.guest
                ),
            ));
        }
        if !mount_point_possible(&m.guest) {
            return Err(ToolError::invalid_field(
                &format!("mounts[{i}].guest"),
                format!(
                    "{} cannot be made inside the read-only host root: use a path that exists on the host, a new top-level directory (e.g. /data/x), or a path under /tmp or /work",
                    m.guest
                ),
            ));
        }
        let access = if rw { Access::Write } else { Access::Read };
        let resolved = ctx.policy().resolve(&m.host, &field, access)?;
        if resolved.abs.starts_with(state_dir) {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!(
                    "{field}: {} is inside kitbag-vm's state directory (every instance's files and sockets); it is never mounted into an instance",
                    m.host
                ),
            )
            .with_detail(json!({ "field": field })));
        }
        // Bound through a descriptor: a link swapped in after the check changes nothing.
        let fd = ctx
            .policy()
            .open_real(&resolved.abs, OFlags::PATH | OFlags::CLOEXEC)
            .map_err(|e| ToolError::io(&m.host, &e).with_detail(json!({ "field": field })))?;
        let st = kitbag_shared::rustix::fs::fstat(&fd).map_err(|e| {
            ToolError::io(&m.host, &e.into()).with_detail(json!({ "field": field }))
        })?;
        mounts.push((resolved.abs, m.guest, rw, (st.st_dev, st.st_ino)));
    }
    Ok(mounts)
}

/// 16 TiB: ext4's largest file system with 4 KiB blocks and no `64bit` feature.
const MAX_DISK_MB: u64 = 16 << 20;

fn check_limits(state: &VmState, r: ResourcesParam) -> ToolResult<Limits> {
    let host_mb = host_memory_mb();
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    Ok(Limits {
        memory_mb: validate::range(
            "resources.memory_mb",
            r.memory_mb
                .unwrap_or(state.opts.default_memory_mb.min(host_mb)),
            16,
            host_mb,
        )?,
        cpus: validate::range("resources.cpus", r.cpus.unwrap_or(ncpu), 0.1, ncpu)?,
        pids: validate::range(
            "resources.pids",
            r.pids.unwrap_or(state.opts.default_pids),
            16,
            65536,
        )?,
        disk_mb: r
            .disk_mb
            .map(|mb| validate::range("resources.disk_mb", mb, 16, MAX_DISK_MB))
            .transpose()?,
    })
}

fn check_ready(r: ReadyParam, has_command: bool) -> ToolResult<Ready> {
    let timeout = validate::range(
        "ready.timeout_seconds",
        r.timeout_seconds.unwrap_or(30),
        1,
        600,
    )?;
    let re = match r.log {
        Some(l) => Some(regex::Regex::new(&l).map_err(|e| {
            ToolError::invalid_field("ready.log", format!("not a valid regular expression: {e}"))
        })?),
        None => None,
    };
    if r.port.is_none() && re.is_none() {
        return Err(ToolError::invalid_field("ready", "give port, log or both"));
    }
    if re.is_some() && !has_command {
        return Err(ToolError::invalid_field(
            "ready.log",
            "needs a main command whose output to watch",
        ));
    }
    Ok((r.port, re, Duration::from_secs(timeout)))
}

/// bwrap needs a mount point to exist or be creatable: the sandbox's own root, /tmp, /run,
/// /var/tmp and /work are writable while it is set up; the host's directories are not.
fn mount_point_possible(guest: &str) -> bool {
    let path = std::path::Path::new(guest);
    let top_level_new = path
        .components()
        .nth(1)
        .is_some_and(|c| !std::path::Path::new("/").join(c).exists());
    top_level_new
        || ["/tmp/", "/var/tmp/", "/work/", "/run/"]
            .iter()
            .any(|p| guest.starts_with(p))
        || path.exists()
}

/// `, "a", "b" (under <dir>/rootfs)` — the names a spawn may pass as `image`.
fn available_images(images_dir: &std::path::Path) -> String {
    let dir = images_dir.join("rootfs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(|n| format!("{n:?}")))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        format!(
            "; no named images in {} (a root file system directory there, e.g. from mmdebstrap, becomes one)",
            dir.display()
        )
    } else {
        format!(", {} (in {})", names.join(", "), dir.display())
    }
}

fn host_memory_mb() -> u64 {
    crate::tools::selftools::memory_total_mb().unwrap_or(1024)
}
