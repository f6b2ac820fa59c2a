//! What bwrap is told: the instance's spec, the mounts and environment it gets (the host's
//! root entry by entry, `/work`, the control directory, the agent), and the command line —
//! with `unshare` and a mount step first when an overlay root or a `/work` image needs one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cgroup::Limits;
use crate::disk::{DiskInfo, DiskMethod};
use crate::error::{VmError, VmResult};
use crate::instance_dir::{self, work_dir};
use crate::proto::{self, CTL_DIR, MAIN_SPEC};
use kitbag_shared::proc_stat::is_root;

/// Where the agent binary is mounted inside (outside the bound control directory, so the
/// instance cannot replace it on the host).
pub const AGENT_EXE: &str = "/run/kitbag-bin/kitbag-vm";
/// Where the agent alone (`kitbag-vm-agent`) is mounted, when it was installed beside the
/// server; the whole server stays at [`AGENT_EXE`] for guests that run it.
pub const AGENT_ALONE: &str = "/run/kitbag-bin/kitbag-vm-agent";
/// Where the host's loader and C library are mounted for the agent in a foreign root.
pub const AGENT_LIB: &str = "/run/kitbag-lib";
/// The PATH every instance starts with.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to start.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub id: String,
    pub hostname: String,
    /// The instance's directory on the host (`<state>/instances/<id>`).
    pub dir: PathBuf,
    /// The state directory, hidden inside every instance.
    pub state_dir: PathBuf,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub outbound: bool,
    pub limits: Limits,
    /// Host paths (already resolved) bound into the instance: (host, guest, writable), and
    /// the (device, inode) the resolution found, checked inside before anything runs.
    pub mounts: Vec<(PathBuf, String, bool, (u64, u64))>,
    pub exe: PathBuf,
    /// The agent alone, when installed beside the server: it is ready in ~1.3 ms where the
    /// whole server takes ~2 ms (and holds less memory for the instance's life).
    pub agent: Option<PathBuf>,
    /// A root file system directory (`image` other than `host`); None: the host's root.
    pub rootfs: Option<PathBuf>,
}

/// Where a named root is mounted copy-on-write for one instance (`<dir>/overlay/…`), when
/// this server may mount: as root, in a private mount namespace that only bwrap inherits
/// (so nothing is left mounted on the host, whatever happens to the server).
pub fn overlay_dirs(spec: &SandboxSpec) -> Option<(PathBuf, PathBuf, PathBuf)> {
    spec.rootfs.as_ref()?;
    if !is_root() {
        return None;
    }
    let o = spec.dir.join("overlay");
    Some((o.join("upper"), o.join("work"), o.join("merged")))
}

fn bwrap_args(spec: &SandboxSpec, disk: Option<&WorkDisk>) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&[
        "--die-with-parent",
        "--unshare-all",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]);
    push(&["--hostname", &spec.hostname, "--clearenv"]);
    // The host's root (or the image's), read-only, entry by entry: the sandbox's own root
    // stays a tmpfs where mount points such as /work can be made, and is made read-only at
    // the end.
    let base = spec.rootfs.clone().unwrap_or_else(|| PathBuf::from("/"));
    // Copy-on-write: the entries of the image, bound writable from the overlay.
    let overlay = overlay_dirs(spec);
    let (from, bind) = match &overlay {
        Some((_, _, merged)) => (merged.clone(), "--bind"),
        None => (base.clone(), "--ro-bind"),
    };
    for (name, kind) in root_entries(&base) {
        let path = format!("/{name}");
        let src = from.join(&name).to_string_lossy().into_owned();
        match kind {
            RootEntry::Dir | RootEntry::File => push(&[bind, &src, &path]),
            RootEntry::Symlink(target) => push(&["--symlink", &target, &path]),
        }
    }
    // A foreign root may have no C library our agent can use: bring the host's loader and
    // libraries along, out of the way (vm.md §2.1, "host binary in any rootfs").
    let loader = spec.rootfs.as_ref().and_then(|_| host_loader());
    push(&["--dev", "/dev", "--proc", "/proc"]);
    push(&["--tmpfs", "/tmp", "--tmpfs", "/run"]);
    // /var/tmp needs a mount point: there when /var is bound and has it, or made when the
    // root has no /var at all.
    if base.join("var/tmp").is_dir() || !base.join("var").exists() {
        push(&["--tmpfs", "/var/tmp"]);
    }
    // The state directory holds every instance's sockets and files: invisible inside.
    if spec.state_dir.is_dir() && !spec.state_dir.starts_with("/tmp") {
        let s = spec.state_dir.to_string_lossy().into_owned();
        push(&["--tmpfs", &s]);
    }
    let work = work_dir(&spec.dir).to_string_lossy().into_owned();
    let ctl = spec.dir.join("ctl").to_string_lossy().into_owned();
    let exe = spec.exe.to_string_lossy().into_owned();
    match disk {
        Some(WorkDisk::Tmpfs { mb, .. }) => {
            let bytes = (mb << 20).to_string();
            push(&["--size", &bytes, "--tmpfs", "/work"]);
        }
        // An image is mounted on the work directory before bwrap starts (see bwrap_command).
        Some(WorkDisk::Image { .. }) | None => push(&["--bind", &work, "/work"]),
    }
    push(&["--bind", &ctl, CTL_DIR]);
    push(&["--ro-bind", &exe, AGENT_EXE]);
    if let Some(agent) = &spec.agent {
        push(&["--ro-bind", &agent.to_string_lossy(), AGENT_ALONE]);
    }
    if let Some((lib_dir, _)) = &loader {
        let l = lib_dir.to_string_lossy().into_owned();
        push(&["--ro-bind", &l, AGENT_LIB]);
    }
    for (host, guest, rw, _) in &spec.mounts {
        let bind = if *rw { "--bind" } else { "--ro-bind" };
        let h = host.to_string_lossy().into_owned();
        push(&[bind, &h, guest]);
        // A mount holding the state directory (the project root, mounted the ordinary way)
        // must not show it: every instance's files, sockets and records are there. It is
        // covered by an empty tmpfs, and each directory on the way is bound onto itself so
        // it is a mount point the instance cannot rename or remove — moving the state
        // directory's path would point the server at directories the instance made.
        if let Some(rel) = state_cover(&spec.state_dir, host) {
            let mut on_the_way = PathBuf::new();
            let names: Vec<_> = rel.components().collect();
            for c in &names[..names.len() - 1] {
                on_the_way.push(c);
                let (src, dst) = (host.join(&on_the_way), guest_join(guest, &on_the_way));
                push(&[bind, &src.to_string_lossy(), &dst]);
            }
            push(&["--tmpfs", &guest_join(guest, &rel)]);
        }
    }
    push(&["--remount-ro", "/"]);
    for (k, v) in &instance_env(&spec.id, &spec.hostname, &spec.env) {
        push(&["--setenv", k, v]);
    }
    push(&[
        "--chdir",
        "/work",
        "--json-status-fd",
        "1",
        "--block-fd",
        "0",
    ]);
    if let Some((_, loader_name)) = &loader {
        let ld = format!("{AGENT_LIB}/{loader_name}");
        push(&[&ld, "--library-path", AGENT_LIB]);
    }
    match &spec.agent {
        Some(_) => push(&[AGENT_ALONE, "--ctl", CTL_DIR]),
        None => push(&[AGENT_EXE, "__agent", "--ctl", CTL_DIR]),
    }
    a
}

/// Where the state directory lies inside a mount of `host` (relative), when it does.
pub fn state_cover(state_dir: &Path, host: &Path) -> Option<PathBuf> {
    let rel = state_dir.strip_prefix(host).ok()?;
    (rel.components().next().is_some()).then(|| rel.to_path_buf())
}

pub(super) fn guest_join(guest: &str, rel: &Path) -> String {
    format!("{}/{}", guest.trim_end_matches('/'), rel.display())
}

enum RootEntry {
    Dir,
    File,
    Symlink(String),
}

/// A root's top-level entries to show inside, minus what the sandbox makes itself.
fn root_entries(base: &Path) -> Vec<(String, RootEntry)> {
    const SKIP: [&str; 7] = ["proc", "dev", "tmp", "run", "work", "lost+found", "sys"];
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(base) else {
        return out;
    };
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if SKIP.contains(&name.as_str()) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        let kind = if meta.file_type().is_symlink() {
            match std::fs::read_link(e.path()) {
                Ok(t) => RootEntry::Symlink(t.to_string_lossy().into_owned()),
                Err(_) => continue,
            }
        } else if meta.is_dir() {
            RootEntry::Dir
        } else if meta.is_file() {
            RootEntry::File
        } else {
            continue;
        };
        out.push((name, kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The host's dynamic loader: (the directory holding it and the C library, its file name).
pub fn host_loader() -> Option<(PathBuf, String)> {
    let candidates = [
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/ld-linux-aarch64.so.1",
        "/lib/ld-linux-x86-64.so.2",
    ];
    candidates.iter().find_map(|c| {
        let real = std::fs::canonicalize(c).ok()?;
        let name = real.file_name()?.to_string_lossy().into_owned();
        Some((real.parent()?.to_path_buf(), name))
    })
}

/// The environment every instance's commands start with (any engine): a PATH, HOME=/work,
/// its identity, then the caller's variables over those.
pub fn instance_env(id: &str, hostname: &str, extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), "/work".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("HOSTNAME".into(), hostname.to_string()),
        ("KITBAG_INSTANCE_ID".into(), id.to_string()),
    ];
    for (k, v) in extra {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// The sandbox's work and control directories, and the main command's spec when it has one.
/// Returns the control directory.
pub(super) fn prepare_dirs(spec: &SandboxSpec) -> VmResult<PathBuf> {
    instance_dir::prepare(&spec.dir).map_err(|e| VmError::io(spec.dir.display(), e))?;
    let ctl = instance_dir::ctl_dir(&spec.dir);
    if let Some(argv) = &spec.command {
        write_main_spec(&ctl, argv, &spec.cwd)?;
    }
    Ok(ctl)
}

/// The main command's spec, for the agent to read — written before anything runs in the
/// instance, never through a link.
pub fn write_main_spec(ctl: &Path, argv: &[String], cwd: &str) -> VmResult<()> {
    let main = proto::MainSpec {
        argv: argv.to_vec(),
        cwd: cwd.to_string(),
    };
    let bytes = serde_json::to_vec(&main)?;
    let mut f = instance_dir::create_server_file(&ctl.join(MAIN_SPEC))
        .map_err(|e| VmError::io(MAIN_SPEC, e))?;
    f.write_all(&bytes).map_err(|e| VmError::io(MAIN_SPEC, e))
}

/// How `/work` is limited in size (`resources.disk_mb`; see [`crate::disk`]).
#[derive(Clone)]
pub(super) enum WorkDisk {
    /// An ext4 image, loop-mounted on the work directory in the sandbox's mount namespace.
    Image { mb: u64, image: PathBuf },
    /// A tmpfs of that size; `why`: why not an image.
    Tmpfs { mb: u64, why: String },
}

impl WorkDisk {
    /// The best way to hold `mb` MiB here: an image when root can loop-mount one.
    pub(super) async fn choose(dir: &Path, mb: u64) -> WorkDisk {
        let why = match crate::disk::loop_image_unusable() {
            None => match crate::disk::make_image(dir, mb).await {
                Ok(image) => return WorkDisk::Image { mb, image },
                Err(e) => e.to_string(),
            },
            Some(why) => why,
        };
        WorkDisk::Tmpfs { mb, why }
    }

    pub(super) fn info(&self) -> DiskInfo {
        match self {
            WorkDisk::Image { mb, .. } => DiskInfo::new(*mb, DiskMethod::LoopImage, None),
            WorkDisk::Tmpfs { mb, why } => DiskInfo::new(
                *mb,
                DiskMethod::Tmpfs,
                Some(format!(
                    "held in memory (counted in memory_mb where cgroups are enforced): {why}"
                )),
            ),
        }
    }
}

/// The bwrap command line, wrapped in `unshare` when something must be mounted first — an
/// overlay over a root file system, `/work`'s image — in a mount namespace of bwrap's own:
/// those mounts go away with the sandbox, and nothing is ever mounted on the host.
pub(super) fn bwrap_command(spec: &SandboxSpec, disk: Option<&WorkDisk>) -> VmResult<Command> {
    let mut script = String::new();
    let mut script_args: Vec<std::ffi::OsString> = Vec::new();
    if let (Some((upper, work, merged)), Some(lower)) = (overlay_dirs(spec), &spec.rootfs) {
        for d in [&upper, &work, &merged] {
            std::fs::create_dir_all(d).map_err(|e| VmError::io(d.display(), e))?;
        }
        script.push_str(r#"mount -t overlay kitbag-vm -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && shift 4 && "#);
        script_args.extend([lower.into(), upper.into(), work.into(), merged.into()]);
    }
    if let Some(WorkDisk::Image { image, .. }) = disk {
        script.push_str(crate::disk::MOUNT_STEP);
        script_args.extend([image.into(), work_dir(&spec.dir).into()]);
    }
    if script.is_empty() {
        let mut c = Command::new("bwrap");
        c.args(bwrap_args(spec, disk));
        return Ok(c);
    }
    script.push_str(r#"exec "$@""#);
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(script)
        .arg("sh")
        .args(script_args)
        .arg("bwrap")
        .args(bwrap_args(spec, disk));
    Ok(c)
}
