//! The QEMU backend: each instance a real virtual machine (vm.md §3.6).
//!
//! The guest boots Debian's cloud kernel with an initramfs holding busybox and this binary,
//! which runs as the agent and listens on a TCP port that QEMU's user-mode network forwards
//! from the host's loopback; every connection first presents the instance's token. QEMU is
//! this server's direct child (never `-daemonize`), started from the spawner thread with a
//! parent-death signal, its monitor (QMP) on a socket pair. When the main command ends the
//! agent says so (`wait_main`); the server copies the logs out, then the guest powers off.

pub mod cpio;
pub mod image;
pub mod qmp;

use crate::backend::Backend;
use futures::future::BoxFuture;
use kitbag_shared::lock::LockExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::bwrap::Record;
use crate::disk::{DiskInfo, DiskMethod};
use crate::error::{VmError, VmResult};
use crate::proto::{ExitStatus, LOGS_DIR, Stream};
use crate::remote;
use crate::spawner::Spawner;
use kitbag_shared::proc_stat::start_time;
use std::path::Path;

/// The accelerator a server asks for (`--qemu-accel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    Auto,
    Kvm,
    Tcg,
}

/// How guests run: hardware virtualisation or QEMU's emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub available: bool,
    pub kvm: bool,
    pub detail: String,
}

/// Whether QEMU runs here and with which accelerator. KVM needs `/dev/kvm` to open and the
/// CPU to advertise virtualisation; on a machine where `/dev/kvm` opens but the CPU has no
/// vmx/svm flags a KVM guest never reaches init (vm.md §2.2), so that case is TCG. A KVM
/// candidate must still boot a guest within 20 s the first time (see [`QemuVm::start`]).
pub fn probe(want: Accel) -> Probe {
    let version = match Command::new("qemu-system-x86_64")
        .arg("--version")
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("QEMU")
            .trim()
            .to_string(),
        _ => {
            return Probe {
                available: false,
                kvm: false,
                detail: "qemu-system-x86_64 is not installed (apt-get install --no-install-recommends qemu-system-x86)".into(),
            };
        }
    };
    let kvm_opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let cpu_flags = std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| {
            c.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        })
        .unwrap_or(false);
    let (kvm, why) = match (want, kvm_opens, cpu_flags) {
        (Accel::Tcg, _, _) => (false, "TCG emulation (--qemu-accel tcg)".to_string()),
        (_, true, true) => (true, "KVM (/dev/kvm opens, the CPU has vmx/svm)".to_string()),
        (Accel::Kvm, true, false) => (
            true,
            "KVM asked for (--qemu-accel kvm) though /proc/cpuinfo has no vmx/svm flag".to_string(),
        ),
        (_, true, false) => (
            false,
            "TCG emulation: /dev/kvm opens but /proc/cpuinfo has no vmx/svm flag (a KVM guest would never boot)".to_string(),
        ),
        (_, false, _) => (false, "TCG emulation: /dev/kvm cannot be opened".to_string()),
    };
    Probe {
        available: true,
        kvm,
        detail: format!("{version}; {why}"),
    }
}

/// What to boot.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub id: String,
    pub hostname: String,
    pub dir: PathBuf,
    pub images_dir: PathBuf,
    pub exe: PathBuf,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub outbound: bool,
    pub memory_mb: u64,
    pub cpus: f64,
    /// `/work`'s size (a tmpfs in the guest); None: no limit.
    pub work_mb: Option<u64>,
    pub kvm: bool,
    /// Once the main command has ended: stop the VM (the instance ends with its command).
    pub main_ended: remote::MainEnded<QemuVm>,
}

/// A running VM.
pub struct QemuVm {
    pub id: String,
    pub dir: PathBuf,
    pub pid: i32,
    /// The host's loopback port QEMU forwards to the agent.
    port: u16,
    token: String,
    qmp: qmp::Qmp,
    exit: watch::Receiver<Option<ExitStatus>>,
    /// The main command's end, as the agent reported it (the VM's own exit says nothing).
    main_exit: Arc<Mutex<Option<ExitStatus>>>,
    paused: Mutex<bool>,
    /// Held while the guest's logs are copied.
    log_sync: tokio::sync::Mutex<()>,
    pub accel: &'static str,
    disk: Option<DiskInfo>,
}

/// One build of the image at a time (two first spawns would both download the kernel).
static IMAGE_BUILD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The boot probe's verdict on KVM, once a first VM has tried it: `Ok` it booted, `Err` why
/// not. Held across that first boot so concurrent spawns wait for the verdict.
static KVM_BOOT: tokio::sync::Mutex<Option<KvmVerdict>> = tokio::sync::Mutex::const_new(None);

#[derive(Debug, Clone)]
enum KvmVerdict {
    Boots,
    /// Why the probe's guest did not reach its agent.
    Fails(String),
}
/// How long a KVM guest may take to reach its agent before KVM is judged unusable.
const KVM_PROBE_DEADLINE: Duration = Duration::from_secs(20);

/// What the boot probe found, for self_info: empty until a VM has tried KVM.
pub fn kvm_boot_note() -> String {
    match KVM_BOOT.try_lock().ok().and_then(|g| g.clone()) {
        Some(KvmVerdict::Boots) => "; the KVM boot probe reached the guest's agent".into(),
        Some(KvmVerdict::Fails(e)) => {
            format!("; the KVM boot probe failed ({e}): guests run under TCG")
        }
        None => String::new(),
    }
}

impl QemuVm {
    /// Build the image if needed, boot, wait for the agent (at most `timeout`), hand it the
    /// environment and the main command. `progress` hears each stage.
    pub async fn start(
        spec: VmSpec,
        spawner: &Spawner,
        timeout: Duration,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> VmResult<Arc<QemuVm>> {
        tokio::fs::create_dir_all(spec.dir.join("ctl").join(LOGS_DIR))
            .await
            .map_err(|e| VmError::io(spec.dir.display(), e))?;
        let image = {
            let _one = IMAGE_BUILD.lock().await;
            let (images, exe) = (spec.images_dir.clone(), spec.exe.clone());
            if !image::dir(&images).join("vmlinuz").is_file() {
                progress("building the QEMU image (kernel download, once)");
            }
            tokio::task::spawn_blocking(move || image::ensure(&images, &exe))
                .await
                .map_err(|e| VmError::engine(format!("the image build: {e}")))??
        };
        let mut spec = spec;
        if spec.kvm {
            let mut verdict = KVM_BOOT.lock().await;
            match verdict.clone() {
                Some(KvmVerdict::Boots) => {}
                Some(KvmVerdict::Fails(_)) => spec.kvm = false,
                None => {
                    // The boot probe: this first VM itself, under KVM, with a short deadline.
                    progress("booting (KVM boot probe)");
                    match Self::boot_with_retries(
                        &spec,
                        &image,
                        spawner,
                        KVM_PROBE_DEADLINE,
                        progress,
                    )
                    .await
                    {
                        Ok(vm) => {
                            *verdict = Some(KvmVerdict::Boots);
                            return Ok(vm);
                        }
                        Err(e) => {
                            tracing::warn!("KVM did not boot a guest: {e}; falling back to TCG");
                            *verdict = Some(KvmVerdict::Fails(first_line(&e.to_string())));
                            spec.kvm = false;
                        }
                    }
                }
            }
        }
        progress("booting");
        Self::boot_with_retries(&spec, &image, spawner, timeout, progress).await
    }

    async fn boot_with_retries(
        spec: &VmSpec,
        image: &image::Image,
        spawner: &Spawner,
        timeout: Duration,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> VmResult<Arc<QemuVm>> {
        let token = random_token()?;
        // The forwarded port is picked free, then bound by QEMU: another process may take
        // it in between, so a refused bind is retried with a new one.
        let mut last = None;
        for _ in 0..3 {
            let port = free_port().map_err(|e| VmError::io("no free loopback port", e))?;
            match Self::boot(spec, image, spawner, port, &token).await {
                Ok(vm) => return vm.until_ready(spec, timeout, progress).await,
                Err(e) if e.to_string().contains("host forwarding") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| VmError::engine("no port could be forwarded")))
    }

    async fn boot(
        spec: &VmSpec,
        image: &image::Image,
        spawner: &Spawner,
        port: u16,
        token: &str,
    ) -> VmResult<QemuVm> {
        let log_path = crate::instance_dir::backend_log(&spec.dir);
        let log = tokio::fs::File::create(&log_path)
            .await
            .map_err(|e| VmError::io("backend.log", e))?
            .into_std()
            .await;
        let log2 = log.try_clone()?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| VmError::io("the monitor's socket pair", e))?;
        let accel = if spec.kvm { "kvm" } else { "tcg" };
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args(qemu_args(spec, image, accel, port, token))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let theirs = std::os::fd::OwnedFd::from(theirs);
        pass_monitor_and_die_with_parent(&mut cmd, &theirs);
        let spawned = spawner.spawn(cmd).await;
        drop(theirs); // QEMU has its copy as fd 3
        let mut child = spawned.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                VmError::missing("qemu-system-x86_64 is not installed")
            } else {
                VmError::io("cannot run qemu-system-x86_64", e)
            }
        })?;
        let pid = child.id() as i32;
        let main_exit: Arc<Mutex<Option<ExitStatus>>> = Arc::default();
        let (exit_tx, exit_rx) = watch::channel(None);
        let main_seen = main_exit.clone();
        std::thread::Builder::new()
            .name(format!("vm-{}", spec.id))
            .spawn(move || {
                let waited = child
                    .wait()
                    .map(ExitStatus::from_std)
                    .unwrap_or(ExitStatus {
                        code: -1,
                        signal: None,
                    });
                let main = *main_seen.locked();
                let _ = exit_tx.send(Some(main.unwrap_or(waited)));
            })
            .map_err(|e| VmError::io("the monitor thread", e))?;
        let kill = || {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        };
        let qmp = match tokio::task::spawn_blocking(move || {
            qmp::Qmp::open(ours, Duration::from_secs(15))
        })
        .await
        {
            Ok(Ok(q)) => q,
            Ok(Err(e)) => {
                kill();
                std::thread::sleep(Duration::from_millis(50));
                return Err(VmError::engine(format!(
                    "QEMU's monitor: {e}: {}",
                    crate::instance_dir::tail_server_file(&log_path, 2048)
                )));
            }
            Err(e) => {
                kill();
                return Err(VmError::engine(e.to_string()));
            }
        };
        let vm = QemuVm {
            id: spec.id.clone(),
            dir: spec.dir.clone(),
            pid,
            port,
            token: token.to_string(),
            qmp,
            exit: exit_rx,
            main_exit,
            paused: Mutex::new(false),
            log_sync: tokio::sync::Mutex::new(()),
            accel: if spec.kvm { "kvm" } else { "tcg" },
            disk: spec.work_mb.map(|mb| {
                DiskInfo::new(
                    mb,
                    DiskMethod::Tmpfs,
                    Some("a tmpfs in the VM: its memory".into()),
                )
            }),
        };
        vm.write_record();
        Ok(vm)
    }

    /// Wait for the agent, then set the guest up and start its main command.
    async fn until_ready(
        self,
        spec: &VmSpec,
        timeout: Duration,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> VmResult<Arc<QemuVm>> {
        let vm = Arc::new(self);
        let deadline = Instant::now() + timeout;
        let fail = |vm: &QemuVm, why: String| {
            vm.kill();
            vm.cleanup();
            let log = crate::instance_dir::tail_server_file(
                &crate::instance_dir::backend_log(&vm.dir),
                2048,
            );
            VmError::Engine(format!("{why}; console: {log}"))
        };
        // Until the guest listens, user-mode networking accepts and then drops each
        // connection at once: polling often costs little.
        let alive = || vm.exit_status().is_none();
        if let Err(why) =
            remote::until_answers(|| vm.agent(), deadline, Duration::from_millis(25), alive).await
        {
            let why = if vm.exit_status().is_some() {
                "the VM ended while it booted".to_string()
            } else {
                format!(
                    "{why}: the guest's agent did not answer within {} s",
                    timeout.as_secs()
                )
            };
            return Err(fail(&vm, why));
        }
        progress("agent ready");
        let setup = remote::Setup {
            id: spec.id.clone(),
            hostname: spec.hostname.clone(),
            env: spec.env.clone(),
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
        };
        match remote::set_up(|| vm.agent(), &setup).await {
            Ok(true) => {
                tokio::spawn(watch_main(vm.clone(), spec.main_ended));
            }
            Ok(false) => {}
            Err(why) => return Err(fail(&vm, why.to_string())),
        }
        Ok(vm)
    }

    fn write_record(&self) {
        let record = Record {
            id: self.id.clone(),
            server_pid: std::process::id(),
            server_start: start_time(std::process::id() as i32).unwrap_or(0),
            processes: vec![(self.pid, start_time(self.pid).unwrap_or(0))],
            cgroups: Vec::new(),
            lost: false,
        };
        if let Ok(bytes) = serde_json::to_vec_pretty(&record) {
            let _ =
                kitbag_shared::atomic::write_atomic_volatile(&self.dir.join("record.json"), &bytes);
        }
    }
}

impl Backend for QemuVm {
    fn name(&self) -> &'static str {
        "qemu"
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
        "qmp_stop"
    }

    fn disk(&self) -> Option<DiskInfo> {
        self.disk.clone()
    }

    fn limits_enforced(&self) -> (bool, Option<String>) {
        (
            true,
            Some(format!(
                "a {} virtual machine: memory and CPUs are its size (-m, -smp); processes are limited only by the guest kernel",
                self.accel.to_uppercase()
            )),
        )
    }

    /// A connection to the agent, past its token check.
    fn agent(&self) -> BoxFuture<'_, std::io::Result<Stream>> {
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
            tcp.set_nodelay(true)?;
            crate::remote::hello(Box::new(tcp), &self.token).await
        })
    }

    /// Copy the guest's logs to the instance's directory on the host, where instance_logs
    /// reads them (and finds them after the VM is gone).
    fn sync_logs(&self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            if self.exit_status().is_some() {
                return Ok(());
            }
            // One sync at a time: two would append the same bytes twice.
            let _one = self.log_sync.lock().await;
            crate::remote::pull_logs(&self.dir, self.agent().await?).await
        })
    }

    fn is_frozen(&self) -> bool {
        *self.paused.locked()
    }

    /// QMP `stop`: the virtual CPUs halt, and with them everything in the guest.
    fn pause(&self) -> VmResult<()> {
        self.qmp
            .execute("stop", None)
            .map_err(|e| VmError::io("QMP stop", e))?;
        *self.paused.locked() = true;
        Ok(())
    }

    fn resume(&self) -> VmResult<()> {
        self.qmp
            .execute("cont", None)
            .map_err(|e| VmError::io("QMP cont", e))?;
        *self.paused.locked() = false;
        Ok(())
    }

    /// QEMU's own use: resident memory and CPU time of its process.
    fn usage(&self) -> crate::cgroup::Usage {
        let cpu_ticks = kitbag_shared::proc_stat::read(self.pid).map(|s| s.utime + s.stime);
        crate::cgroup::Usage {
            memory_bytes: u32::try_from(self.pid)
                .ok()
                .and_then(kitbag_shared::proc_stat::resident_bytes),
            cpu_seconds: cpu_ticks.map(|t| t as f64 / 100.0),
            pids: None,
        }
    }

    /// When the guest did not power off by itself: QMP `quit`, then SIGKILL.
    fn force_end(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.qmp.execute("quit", None);
            if tokio::time::timeout(Duration::from_secs(2), self.wait())
                .await
                .is_err()
            {
                self.kill();
            }
        })
    }

    fn kill(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(self.dir.join("record.json"));
    }
}

/// A VM nobody holds any more (a spawn abandoned mid-boot, an instance removed) must not
/// keep running.
impl Drop for QemuVm {
    fn drop(&mut self) {
        if self.exit_status().is_none() {
            self.kill();
        }
    }
}

/// Wait for the main command to end; then collect the logs and let the guest power off, so
/// the instance ends with its command as a sandbox does.
async fn watch_main(vm: Arc<QemuVm>, main_ended: remote::MainEnded<QemuVm>) {
    let Some(status) = remote::wait_main(vm.agent().await).await else {
        return; // the VM went away first (stopped or killed): nothing to report
    };
    {
        let mut m = vm.main_exit.locked();
        *m = Some(status);
    }
    main_ended(vm).await;
}

fn qemu_args(
    spec: &VmSpec,
    image: &image::Image,
    accel: &str,
    port: u16,
    token: &str,
) -> Vec<String> {
    let cpus = (spec.cpus.ceil() as u64).max(1);
    let restrict = if spec.outbound { "off" } else { "on" };
    let mut args: Vec<String> = vec![
        "-M".into(),
        format!("q35,accel={accel}"),
        "-cpu".into(),
        if accel == "kvm" { "host" } else { "max" }.into(),
        "-m".into(),
        spec.memory_mb.to_string(),
        "-smp".into(),
        cpus.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        image.kernel.display().to_string(),
        "-initrd".into(),
        image.initrd.display().to_string(),
        "-append".into(),
        format!(
            "console=ttyS0 panic=-1 loglevel=4 kitbag.token={token} kitbag.hostname={}{}",
            spec.hostname,
            spec.work_mb
                .map(|mb| format!(" kitbag.work_mb={mb}"))
                .unwrap_or_default()
        ),
        "-serial".into(),
        "stdio".into(),
        "-netdev".into(),
        format!(
            "user,id=n0,restrict={restrict},hostfwd=tcp:127.0.0.1:{port}-:{}",
            image::AGENT_PORT
        ),
        "-device".into(),
        "virtio-net-pci,netdev=n0,romfile=".into(),
        "-chardev".into(),
        "socket,id=qmp,fd=3".into(),
        "-mon".into(),
        "chardev=qmp,mode=control".into(),
    ];
    args.shrink_to_fit();
    args
}

/// In the child, between fork and exec: the monitor's end of the socket pair becomes fd 3,
/// and the child gets SIGKILL when the spawner thread (which lives as long as the server)
/// ends — QEMU never outlives kitbag-vm.
/// The caller keeps `monitor` open until the command has been spawned.
fn pass_monitor_and_die_with_parent(cmd: &mut Command, monitor: &std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = monitor.as_raw_fd();
    // kitbag-vm's other `unsafe` besides nsfd.rs: `pre_exec` runs between fork and exec, where
    // only async-signal-safe calls are allowed; prctl and dup2 are, and nothing is allocated.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // dup2 onto itself would keep close-on-exec: clear the flag instead.
            let done = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if done < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).chars().take(200).collect()
}

fn random_token() -> VmResult<String> {
    kitbag_shared::random::hex(16).map_err(|e| VmError::io("getrandom", e))
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub fn guest_note() -> &'static str {
    "a QEMU virtual machine: /work is inside the guest (copy files with instance_copy)"
}
