//! The `default` QEMU image, built once from Debian's packages into the images cache:
//! Debian's cloud kernel, the virtio modules it needs (loaded in dependency order), busybox
//! as the userland, and this very kitbag-vm binary (with its libraries and loader) as the
//! guest's agent. vm.md §3.6.
//!
//! Layout under `<images>/qemu/default/`: `vmlinuz`, `modules/<name>.ko`, `modules/order`
//! (the kernel part, downloaded once), and `initrd-<agent key>.cpio` (one per kitbag-vm
//! build, so a rebuilt server never boots an old agent).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::cpio::Cpio;
use crate::error::{VmError, VmResult};

/// Boot files for one VM.
#[derive(Debug, Clone)]
pub struct Image {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// The kernel modules a guest needs for its network (virtio-net on PCI); their dependencies
/// are found in the modules themselves.
const WANTED_MODULES: &[&str] = &["virtio_pci", "virtio_net"];
/// Debian's meta-package that names the current cloud kernel.
const KERNEL_META: &str = "linux-image-cloud-amd64";
/// Where the agent sits in the guest.
pub const GUEST_AGENT: &str = "/run/kitbag-bin/kitbag-vm";
/// The guest port the agent listens on (forwarded from the host's loopback).
pub const AGENT_PORT: u16 = 1023;

/// The image's directory.
pub fn dir(images_dir: &Path) -> PathBuf {
    images_dir.join("qemu").join("default")
}

/// The boot files, building what is missing. Slow only the first time (a kernel download,
/// ~2 s) and after kitbag-vm was rebuilt (a new initramfs, ~0.3 s).
pub fn ensure(images_dir: &Path, exe: &Path) -> VmResult<Image> {
    let dir = dir(images_dir);
    if !kernel_present(&dir) {
        fetch_kernel(&dir)?;
    }
    let agent = crate::agent_link::agent_binary(exe);
    let key = agent_key(&agent)?;
    let initrd = dir.join(format!("initrd-{key}.cpio"));
    if !initrd.is_file() {
        build_initrd(&dir, &agent, &initrd)?;
        remove_other_initrds(&dir, &initrd);
    }
    Ok(Image {
        kernel: dir.join("vmlinuz"),
        initrd,
    })
}

/// Initramfs files of earlier builds (~2–30 MB each). A VM that booted one keeps running
/// without it (QEMU reads it once); a server of an older build would build its own again.
/// One made in the last ten minutes stays: a server of another build may be about to boot
/// from it.
fn remove_other_initrds(dir: &Path, keep: &Path) {
    const RECENT: std::time::Duration = std::time::Duration::from_secs(600);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let recent = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < RECENT);
        if p != keep && name.starts_with("initrd-") && name.ends_with(".cpio") && !recent {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Identifies a kitbag-vm build without reading all of it: size, modification time, inode.
fn agent_key(exe: &Path) -> VmResult<String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(exe).map_err(|e| VmError::io(exe.display(), e))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (m.len(), m.mtime(), m.mtime_nsec(), m.ino(), m.dev()).hash(&mut h);
    Ok(format!("{:016x}", h.finish()))
}

fn run(cmd: &mut Command, what: &str) -> VmResult<String> {
    let out = cmd.output().map_err(|e| {
        VmError::missing(format!("{what}: cannot run {:?}: {e}", cmd.get_program()))
    })?;
    if !out.status.success() {
        return Err(VmError::missing(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Download Debian's cloud kernel package and keep the kernel and the modules the guest needs.
fn fetch_kernel(dir: &Path) -> VmResult<()> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(|e| VmError::io(parent.display(), e))?;
    let work = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(parent)
        .map_err(|e| VmError::io(parent.display(), e))?;
    let deps = run(
        Command::new("apt-cache").args(["depends", KERNEL_META]),
        "apt-cache depends",
    )?;
    let package = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            VmError::missing(format!(
                "{KERNEL_META} names no kernel package (apt-get update?)"
            ))
        })?
        .to_string();
    run(
        Command::new("apt-get")
            .args(["download", "-q", &package])
            .current_dir(work.path()),
        "apt-get download of the kernel",
    )?;
    let deb = std::fs::read_dir(work.path())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| VmError::missing("apt-get download left no .deb"))?;
    let tree = work.path().join("x");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree),
        "dpkg-deb -x",
    )?;
    let abi = package.trim_start_matches("linux-image-");
    let staged = work.path().join("image");
    let modules = staged.join("modules");
    std::fs::create_dir_all(&modules)?;
    std::fs::copy(
        tree.join("boot").join(format!("vmlinuz-{abi}")),
        staged.join("vmlinuz"),
    )
    .map_err(|e| VmError::io(format!("the kernel image in {package}"), e))?;
    let found = index_modules(&tree.join("lib/modules").join(abi))?;
    let order = load_order(&found, WANTED_MODULES)?;
    for name in &order {
        std::fs::copy(&found[name].0, modules.join(format!("{name}.ko")))
            .map_err(|e| VmError::io(format!("{name}.ko"), e))?;
    }
    std::fs::write(modules.join("order"), order.join("\n") + "\n")?;
    std::fs::write(staged.join("kernel-package"), format!("{package}\n"))?;
    // Into place in one step. A complete image is never replaced: a concurrent builder that
    // got there first keeps its copy, and with it the initramfs it may have built beside it
    // and booted from already.
    let mut last = None;
    for _ in 0..3 {
        if kernel_present(dir) {
            return Ok(());
        }
        match std::fs::rename(&staged, dir) {
            Ok(()) => return Ok(()),
            Err(_) if kernel_present(dir) => return Ok(()),
            // An incomplete directory (an interrupted build, an older layout): set aside.
            Err(e) => {
                last = Some(e);
                let _ = std::fs::rename(dir, work.path().join("incomplete"));
            }
        }
    }
    Err(VmError::io(
        dir.display(),
        last.unwrap_or_else(|| std::io::Error::other("cannot put the image in place")),
    ))
}

/// Whether `dir` holds the kernel part of the image.
fn kernel_present(dir: &Path) -> bool {
    dir.join("vmlinuz").is_file() && dir.join("modules").join("order").is_file()
}

/// Every module under a kernel's module tree: name → (path, its `depends=`).
/// Module name → (its file, the modules it depends on).
type Modules = std::collections::BTreeMap<String, (PathBuf, Vec<String>)>;

fn index_modules(root: &Path) -> VmResult<Modules> {
    let mut found = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| VmError::io(d.display(), e))?;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(name) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ko"))
            {
                let bytes = std::fs::read(&p).map_err(|e| VmError::io(p.display(), e))?;
                found.insert(name.replace('-', "_"), (p.clone(), depends(&bytes)));
            }
        }
    }
    if found.is_empty() {
        return Err(VmError::missing(format!(
            "no kernel modules under {} (compressed modules are not supported)",
            root.display()
        )));
    }
    Ok(found)
}

/// The `depends=` entry of a module's `.modinfo` section (NUL-separated `key=value` strings).
fn depends(ko: &[u8]) -> Vec<String> {
    ko.split(|b| *b == 0)
        .find_map(|s| s.strip_prefix(b"depends="))
        .map(|d| {
            String::from_utf8_lossy(d)
                .split(',')
                .filter(|m| !m.is_empty())
                .map(|m| m.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// `wanted` and everything they depend on, dependencies first.
fn load_order(found: &Modules, wanted: &[&str]) -> VmResult<Vec<String>> {
    fn visit(
        name: &str,
        found: &Modules,
        order: &mut Vec<String>,
        path: &mut Vec<String>,
    ) -> VmResult<()> {
        if order.iter().any(|o| o == name) {
            return Ok(());
        }
        if path.iter().any(|p| p == name) {
            return Err(VmError::engine(format!(
                "modules depend on each other in a circle: {path:?}"
            )));
        }
        let (_, deps) = found.get(name).ok_or_else(|| {
            VmError::missing(format!("the kernel has no module {name} (built in?)"))
        })?;
        path.push(name.to_string());
        for d in deps {
            visit(d, found, order, path)?;
        }
        path.pop();
        order.push(name.to_string());
        Ok(())
    }
    let mut order = Vec::new();
    for w in wanted {
        visit(w, found, &mut order, &mut Vec::new())?;
    }
    Ok(order)
}

/// The guest's `/init`: busybox sets up the machine, then runs the agent as its child (the
/// shell, PID 1, reaps orphans) and powers off when the agent ends.
fn init_script() -> String {
    format!(
        r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /var/tmp /work /run/kitbag/logs /usr/bin /usr/sbin /sbin /root
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
for m in $(cat /lib/modules/kitbag/order); do
  insmod /lib/modules/kitbag/$m.ko || echo "kitbag: insmod $m failed"
done
token=
host=kitbag
work_mb=
for w in $(cat /proc/cmdline); do
  case "$w" in
    kitbag.token=*) token="${{w#kitbag.token=}}" ;;
    kitbag.hostname=*) host="${{w#kitbag.hostname=}}" ;;
    kitbag.work_mb=*) work_mb="${{w#kitbag.work_mb=}}" ;;
  esac
done
[ -n "$work_mb" ] && mount -t tmpfs -o "size=${{work_mb}}m,mode=0755" tmpfs /work
hostname "$host"
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
echo "nameserver 10.0.2.3" > /etc/resolv.conf
echo "kitbag: starting the agent"
{agent} __agent --ctl /run/kitbag --listen 0.0.0.0:{port} --token "$token"
echo "kitbag: the agent ended ($?); powering off"
poweroff -f
"#,
        agent = GUEST_AGENT,
        port = AGENT_PORT,
    )
}

/// The initramfs: busybox, the modules, the agent with its libraries, `/init`.
fn build_initrd(dir: &Path, exe: &Path, initrd: &Path) -> VmResult<()> {
    let busybox = kitbag_shared::process::locate("busybox").ok_or_else(|| {
        VmError::missing(
            "busybox is needed for the QEMU image's userland (apt-get install busybox-static)",
        )
    })?;
    let tmp = initrd.with_extension(format!("tmp{}", std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(|e| VmError::io(tmp.display(), e))?;
    let result = (|| -> VmResult<()> {
        let mut c = Cpio::new(std::io::BufWriter::new(file));
        let io = |e: std::io::Error| VmError::io("the initramfs", e);
        for d in [
            "bin",
            "etc",
            "lib",
            "lib/modules",
            "lib/modules/kitbag",
            "run",
        ] {
            c.dir(d).map_err(io)?;
        }
        c.dir("run/kitbag-bin").map_err(io)?;
        c.file("init", 0o755, init_script().as_bytes())
            .map_err(io)?;
        c.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
            .map_err(io)?;
        c.file("etc/group", 0o644, b"root:x:0:\n").map_err(io)?;
        c.file("etc/hosts", 0o644, b"127.0.0.1 localhost\n")
            .map_err(io)?;
        let modules = dir.join("modules");
        let order = std::fs::read_to_string(modules.join("order"))?;
        c.file("lib/modules/kitbag/order", 0o644, order.as_bytes())
            .map_err(io)?;
        for m in order.lines().filter(|l| !l.is_empty()) {
            let bytes = std::fs::read(modules.join(format!("{m}.ko")))
                .map_err(|e| VmError::io(format!("{m}.ko"), e))?;
            c.file(&format!("lib/modules/kitbag/{m}.ko"), 0o644, &bytes)
                .map_err(io)?;
        }
        let agent = stripped(exe)?;
        c.file(GUEST_AGENT, 0o755, &agent).map_err(io)?;
        let bb = std::fs::read(&busybox).map_err(|e| VmError::io(busybox.display(), e))?;
        c.file("bin/busybox", 0o755, &bb).map_err(io)?;
        // The dynamic libraries of both, at the paths they were linked against.
        let mut libs = std::collections::BTreeSet::new();
        for bin in [exe, busybox.as_path()] {
            libs.extend(shared_libraries(bin)?);
        }
        let mut dirs = std::collections::BTreeSet::new();
        for lib in &libs {
            let mut partial = PathBuf::new();
            if let Some(parent) = lib.parent() {
                for comp in parent.components().skip(1) {
                    partial.push(comp);
                    if dirs.insert(partial.clone())
                        && !["lib", "run"].contains(&partial.to_string_lossy().as_ref())
                    {
                        c.dir(&partial.to_string_lossy()).map_err(io)?;
                    }
                }
            }
            let bytes = std::fs::read(lib).map_err(|e| VmError::io(lib.display(), e))?;
            c.file(&lib.to_string_lossy(), 0o755, &bytes).map_err(io)?;
        }
        let mut out = c.finish().map_err(io)?;
        use std::io::Write;
        out.flush().map_err(io)?;
        out.get_ref().sync_all().map_err(io)
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, initrd).map_err(|e| VmError::io(initrd.display(), e)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The agent without its debug information (a debug build is ten times larger), or as it is
/// when `strip` is missing.
pub fn stripped(exe: &Path) -> VmResult<Vec<u8>> {
    let tmp = tempfile::NamedTempFile::new()?;
    let ok = Command::new("strip")
        .arg("-o")
        .arg(tmp.path())
        .arg(exe)
        .output()
        .is_ok_and(|o| o.status.success());
    let from = if ok { tmp.path() } else { exe };
    std::fs::read(from).map_err(|e| VmError::io(from.display(), e))
}

/// The libraries (and loader) `ldd` lists for a binary; none for a static one.
pub fn shared_libraries(bin: &Path) -> VmResult<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| VmError::missing(format!("ldd: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn module_order_puts_dependencies_first() {
        let mut found = std::collections::BTreeMap::new();
        let m = |deps: &[&str]| {
            (
                PathBuf::new(),
                deps.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            )
        };
        found.insert("virtio_ring".to_string(), m(&[]));
        found.insert("virtio".to_string(), m(&[]));
        found.insert("virtio_pci".to_string(), m(&["virtio_ring", "virtio"]));
        found.insert("failover".to_string(), m(&[]));
        found.insert("net_failover".to_string(), m(&["failover"]));
        found.insert(
            "virtio_net".to_string(),
            m(&["net_failover", "virtio_ring", "virtio"]),
        );
        let order = load_order(&found, &["virtio_pci", "virtio_net"]).unwrap();
        let pos = |n: &str| order.iter().position(|o| o == n).unwrap();
        assert!(pos("virtio_ring") < pos("virtio_pci"));
        assert!(pos("failover") < pos("net_failover"));
        assert!(pos("net_failover") < pos("virtio_net"));
        assert_eq!(order.len(), 6);
        assert!(
            load_order(&found, &["nope"])
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
    }

    #[test]
    fn depends_reads_the_modinfo_entry() {
        let ko = b"\x7fELF junk\0license=GPL\0depends=virtio_ring,virtio\0intree=Y\0";
        assert_eq!(depends(ko), vec!["virtio_ring", "virtio"]);
        assert!(depends(b"license=GPL\0depends=\0").is_empty());
    }
}
