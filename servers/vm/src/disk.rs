//! `resources.disk_mb`: a size limit for an instance's `/work`, so a guest cannot fill the
//! host's disk (issue #42, N9).
//!
//! How each engine holds it:
//! - bubblewrap as root: `/work` is an ext4 file system in a sparse image beside the
//!   instance's directory (`work.img`, the server's own), loop-mounted in the sandbox's own
//!   mount namespace — nothing is mounted on the host, and the mount and its loop device go
//!   away with the sandbox whatever happens to the server. A full `/work` is `ENOSPC`.
//! - bubblewrap otherwise (no root, no `mkfs.ext4`, no loop devices): a tmpfs of that size.
//!   Also `ENOSPC` when full, but held in memory (counted in `memory_mb` where cgroups are
//!   enforced); the note says so.
//! - QEMU: a tmpfs of that size inside the VM (its memory).
//! - Kubernetes: the `work` volume's `sizeLimit` (the kubelet evicts the pod past it).
//! - Docker: not enforced (a size limit needs a storage driver with quotas); the note says so.
//!
//! With the limit, `/work` is not a directory on the host (`work_dir` is null): reach it with
//! `instance_copy`.

use std::path::{Path, PathBuf};

use crate::error::{VmError, VmResult};

use schemars::JsonSchema;
use serde::Serialize;

/// How `/work`'s size limit is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiskMethod {
    /// An ext4 image loop-mounted at `/work` (bubblewrap as root).
    LoopImage,
    /// A tmpfs of that size: in memory.
    Tmpfs,
    /// The pod volume's `sizeLimit` (Kubernetes evicts the pod past it).
    VolumeSizeLimit,
    /// Not held.
    None,
}

/// `/work`'s size limit, as the instance has it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DiskInfo {
    /// What was asked (MiB).
    pub limit_mb: u64,
    /// Whether writes past it fail (`ENOSPC`) or end the instance.
    pub enforced: bool,
    pub method: DiskMethod,
    /// What else to know: where the bytes live, or why the limit is not held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// MiB used in `/work` now, when the server can see it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_mb: Option<u64>,
}

impl DiskInfo {
    pub fn new(limit_mb: u64, method: DiskMethod, note: Option<String>) -> DiskInfo {
        DiskInfo {
            limit_mb,
            enforced: method != DiskMethod::None,
            method,
            note,
            used_mb: None,
        }
    }
}

/// The image file of a loop-mounted `/work`: the server's own, never visible inside.
pub fn image_path(dir: &Path) -> PathBuf {
    dir.join("work.img")
}

/// Bytes of image for `mb` MiB usable: ext4's own structures (inode tables, the root's
/// directory, group descriptors) take about 6% of a small file system, which is added so
/// that `df` inside shows at least what was asked.
pub fn image_bytes(mb: u64) -> u64 {
    (mb + mb / 16 + 4) << 20
}

/// Why a loop-mounted image cannot hold the limit here, if it cannot: it needs root (mount
/// and loop devices), `mkfs.ext4` and the loop control device.
pub fn loop_image_unusable() -> Option<String> {
    if !kitbag_shared::proc_stat::is_root() {
        return Some("the server does not run as root (a loop-mounted image needs it)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices here (/dev/loop-control)".into());
    }
    if mkfs().is_none() {
        return Some("mkfs.ext4 is not installed (apt-get install e2fsprogs)".into());
    }
    None
}

fn mkfs() -> Option<PathBuf> {
    [
        "/usr/sbin/mkfs.ext4",
        "/sbin/mkfs.ext4",
        "/usr/bin/mkfs.ext4",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Make `/work`'s image for `mb` MiB: a sparse file (disk is taken only as the guest writes)
/// with an ext4 file system without a journal or reserved blocks (scratch space: all of it
/// the instance's).
pub async fn make_image(dir: &Path, mb: u64) -> VmResult<PathBuf> {
    let image = image_path(dir);
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&image)
        .await
        .map_err(|e| VmError::io(image.display(), e))?;
    file.set_len(image_bytes(mb))
        .await
        .map_err(|e| VmError::io(image.display(), e))?;
    drop(file);
    let mkfs = mkfs().ok_or_else(|| VmError::missing("mkfs.ext4 is not installed"))?;
    let out = tokio::process::Command::new(mkfs)
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-E",
            "nodiscard",
        ])
        .arg(&image)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| VmError::io("mkfs.ext4", e))?;
    if !out.status.success() {
        let _ = tokio::fs::remove_file(&image).await;
        return Err(VmError::engine(format!(
            "mkfs.ext4 failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(image)
}

/// The shell steps that mount the image at the work directory, inside the sandbox's mount
/// namespace (`$1` the image, `$2` the directory; both shifted away after).
pub const MOUNT_STEP: &str =
    r#"mount -o loop,nosuid,nodev "$1" "$2" && rmdir "$2/lost+found" && shift 2 && "#;

/// MiB used in the file system at `path` (a live instance's `/work` seen through
/// `/proc/<pid>/root`).
pub fn used_mb(path: &Path) -> Option<u64> {
    let s = kitbag_shared::rustix::fs::statvfs(path).ok()?;
    Some((s.f_blocks.saturating_sub(s.f_bfree) * s.f_frsize) >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_leaves_room_for_the_file_system() {
        assert_eq!(image_bytes(16), (16 + 1 + 4) << 20);
        assert_eq!(image_bytes(1024), (1024 + 64 + 4) << 20);
    }

    #[test]
    fn an_enforced_limit_is_one_with_a_method() {
        assert!(DiskInfo::new(64, DiskMethod::Tmpfs, None).enforced);
        assert!(!DiskInfo::new(64, DiskMethod::None, Some("why".into())).enforced);
    }
}
