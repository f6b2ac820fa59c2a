//! Starting an instance on its engine: a bubblewrap sandbox, a QEMU VM or a container; and
//! waiting until it is ready.

use std::sync::Arc;
#[cfg(feature = "backend-docker")]
use std::time::SystemTime;
use std::time::{Duration, Instant};

use kitbag_shared::{CallCtx, ErrorCode, ToolError, ToolResult};

use super::check::Checked;
use crate::VmState;
use crate::bwrap::{Sandbox, SandboxSpec};
use crate::engine::Engine;
use crate::instance::Network;
use crate::qemu::{QemuVm, VmSpec};

/// A bubblewrap sandbox, with its own line to this server for a kitbag-vm started inside.
pub async fn start_sandbox(state: &Arc<VmState>, id: &str, c: &Checked) -> ToolResult<Arc<Engine>> {
    let ctl = state.state_dir.join("instances").join(id).join("ctl");
    tokio::fs::create_dir_all(&ctl)
        .await
        .map_err(|e| ToolError::io(&ctl.display().to_string(), &e))?;
    let guest_close = crate::tools::guest_socket::listen(state.clone(), id.to_string(), &ctl)
        .map_err(|e| {
            ToolError::new(
                ErrorCode::SpawnFailed,
                format!("the instance's control socket: {e}"),
            )
        })?;
    if let Some(inst) = state.lock().get_mut(id) {
        inst.guest_close = Some(guest_close);
    }
    let mut env = c.env.clone();
    env.push((
        kitbag_shared::vmlink::SOCKET_VAR.to_string(),
        format!(
            "{}/{}",
            crate::proto::CTL_DIR,
            crate::tools::guest_socket::GUEST_SOCKET
        ),
    ));
    // The agent alone is checked once (it is run with --version), off the runtime.
    let agent = match crate::agent_link::known_agent_alone(&state.exe) {
        Some(known) => known,
        None => {
            let exe = state.exe.clone();
            tokio::task::spawn_blocking(move || crate::agent_link::agent_alone(&exe))
                .await
                .ok()
                .flatten()
        }
    };
    let spec = SandboxSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        state_dir: state.state_dir.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env,
        outbound: c.network == Network::Outbound,
        limits: c.limits,
        mounts: c.mounts.clone(),
        exe: state.exe.clone(),
        agent,
        rootfs: c.rootfs.clone(),
    };
    let sandbox = Sandbox::start(spec, &state.spawner, Duration::from_secs(20))
        .await
        .map_err(|e| e.spawn_error("bwrap", "the sandbox"))?;
    Ok(Arc::new(Engine::new(sandbox)))
}

/// A container of the Docker engine.
#[cfg(feature = "backend-docker")]
pub async fn start_container(
    state: &Arc<VmState>,
    id: &str,
    c: &Checked,
) -> ToolResult<Arc<Engine>> {
    let Some(engine) = &state.docker else {
        return Err(ToolError::new(
            ErrorCode::BackendUnavailable,
            "backend: docker has no engine",
        ));
    };
    let spec = crate::docker::BoxSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        exe: state.exe.clone(),
        image: c.image.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env: c.env.clone(),
        outbound: c.network == Network::Outbound,
        limits: c.limits,
        deadline: (c.ttl > 0).then(|| SystemTime::now() + Duration::from_secs(c.ttl)),
    };
    let container = crate::docker::Container::start(engine, spec, Duration::from_secs(60))
        .await
        .map_err(|e| e.spawn_error("docker", "the container"))?;
    Ok(Arc::new(Engine::new(container)))
}

/// A pod (or agent-sandbox Sandbox) of the Kubernetes cluster.
#[cfg(feature = "backend-kube")]
pub async fn start_pod(state: &Arc<VmState>, id: &str, c: &Checked) -> ToolResult<Arc<Engine>> {
    let spec = crate::kube::pod::PodSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        image: c.image.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env: c.env.clone(),
        limits: c.limits,
        ttl_seconds: c.ttl,
        outbound: c.network == Network::Outbound,
        main_ended: Engine::kube_main_ended,
    };
    let pod = crate::kube::pod::KubePod::start(&state.kube, spec, KUBE_START_TIMEOUT)
        .await
        .map_err(|e| e.spawn_error("kube", "the pod"))?;
    Ok(Arc::new(Engine::new(Arc::new(pod))))
}

/// Scheduling, an image pull and the agent's upload: minutes on a busy cluster.
#[cfg(feature = "backend-kube")]
const KUBE_START_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a VM may take to boot: TCG emulation on a loaded machine is slow (vm.md §2.2:
/// 2 s idle, 3.5 s under a build).
const VM_BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A QEMU virtual machine; boot stages go out as progress notifications when the caller
/// asked for them.
pub async fn start_vm(
    state: &Arc<VmState>,
    id: &str,
    c: &Checked,
    ctx: &CallCtx,
) -> ToolResult<Arc<Engine>> {
    let probe = state.qemu_probe().clone();
    let spec = VmSpec {
        id: id.to_string(),
        hostname: c.name.clone().unwrap_or_else(|| id.to_string()),
        dir: state.state_dir.join("instances").join(id),
        images_dir: state.images_dir.clone(),
        exe: state.exe.clone(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        env: c.env.clone(),
        outbound: c.network == Network::Outbound,
        memory_mb: c.limits.memory_mb,
        cpus: c.limits.cpus,
        work_mb: c.limits.disk_mb,
        kvm: probe.kvm,
        main_ended: Engine::qemu_main_ended,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let forward = {
        let ctx = ctx.clone();
        async move {
            let mut step = 0.0;
            while let Some(stage) = rx.recv().await {
                step += 1.0;
                ctx.progress(step, None, Some(stage)).await;
            }
        }
    };
    let report = move |stage: &str| {
        let _ = tx.send(stage.to_string());
    };
    let started = async {
        let vm = QemuVm::start(spec, &state.spawner, VM_BOOT_TIMEOUT, &report).await;
        drop(report);
        vm
    };
    let (vm, ()) = tokio::join!(started, forward);
    let vm = vm.map_err(|e| e.spawn_error("qemu", "the VM"))?;
    Ok(Arc::new(Engine::new(vm)))
}

pub async fn wait_ready(
    sandbox: &Engine,
    port: Option<u16>,
    re: Option<&regex::Regex>,
    timeout: Duration,
    ctx: &CallCtx,
) -> ToolResult<()> {
    let deadline = Instant::now() + timeout;
    // The main command's log is the instance's to replace: read as untrusted, bounded.
    let dir = sandbox.dir().to_path_buf();
    let log_text = || {
        let bytes = crate::instance_dir::read_guest_log(&dir, "main.log", 8 << 20);
        String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned()
    };
    let log_tail = || crate::instance_dir::tail_guest_log(&dir, "main.log", 2048);
    loop {
        if re.is_some() {
            sandbox.sync_logs().await;
        }
        let port_ok = match port {
            Some(p) => crate::ports::guest_listening(sandbox, p).await,
            None => true,
        };
        let log_ok = match re {
            Some(re) => re.is_match(&log_text()),
            None => true,
        };
        if port_ok && log_ok {
            return Ok(());
        }
        if let Some(exit) = sandbox.exit_status() {
            return Err(ToolError::new(
                ErrorCode::SpawnFailed,
                format!(
                    "the main command ended (exit code {}) before the instance was ready: {}",
                    exit.code,
                    log_tail()
                ),
            ));
        }
        ctx.check_cancelled()?;
        if Instant::now() > deadline {
            return Err(ToolError::new(
                ErrorCode::Timeout,
                format!(
                    "the instance was not ready within {} s ({}); it was stopped and removed. Output: {}",
                    timeout.as_secs(),
                    match (port, re) {
                        (Some(p), _) => format!("nothing accepted on guest port {p}"),
                        _ => "the log did not match".to_string(),
                    },
                    log_tail()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
