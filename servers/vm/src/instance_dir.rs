//! An instance's directory on the host, `<state>/instances/<id>/`, and who may write what in it.
//!
//! ```text
//! record.json, backend.log, slirp4netns.log   the server's own
//! logs/exec-<n>.log                            the server's own (foreground exec output)
//! work/                                        bound at /work: the instance writes it
//! ctl/                                         bound at /run/kitbag: the instance writes it
//!   agent.sock, vm.sock, main.json
//!   logs/main.log, main.exit, job-<id>.log, job-<id>.exit   (written by the agent)
//! ```
//!
//! The server's own files are never visible inside an instance (the state directory is hidden
//! in every instance and under every mount), so their paths can be trusted. Everything under
//! `work/` and `ctl/` can be replaced from inside at any moment — a link to a host file, a
//! FIFO, a directory — so the server never writes there once the instance runs, and reads only
//! through [`open_guest_log`]: beneath the directory's descriptor, no link followed on the way
//! or at the end, only a regular file, never blocking, and bounded by the caller.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use kitbag_shared::paths::fd::open_beneath;
use kitbag_shared::rustix::fs::{CWD, Mode, OFlags, openat};

use crate::proto::LOGS_DIR;

/// The instance's `/work` on the host.
pub fn work_dir(dir: &Path) -> PathBuf {
    dir.join("work")
}

/// The control directory (bound at `/run/kitbag`).
pub fn ctl_dir(dir: &Path) -> PathBuf {
    dir.join("ctl")
}

/// The logs the agent writes (main command, background jobs), as the host sees them. For an
/// engine that runs elsewhere (QEMU, containers) the server copies them here.
pub fn guest_logs_dir(dir: &Path) -> PathBuf {
    ctl_dir(dir).join(LOGS_DIR)
}

/// Logs only the server writes (each foreground exec's full output).
pub fn server_logs_dir(dir: &Path) -> PathBuf {
    dir.join("logs")
}

/// A foreground exec's full output.
pub fn exec_log(dir: &Path, seq: u64) -> PathBuf {
    server_logs_dir(dir).join(format!("exec-{seq}.log"))
}

/// The engine's own output (bwrap's or QEMU's messages, the console).
pub fn backend_log(dir: &Path) -> PathBuf {
    dir.join("backend.log")
}

/// Make the directories a new instance needs.
pub fn prepare(dir: &Path) -> io::Result<()> {
    for d in [work_dir(dir), guest_logs_dir(dir), server_logs_dir(dir)] {
        std::fs::create_dir_all(&d)?;
    }
    Ok(())
}

/// Create a file of the server's own: never an existing one, never through a link.
pub fn create_server_file(path: &Path) -> io::Result<File> {
    let fd = openat(
        CWD,
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// Open `<ctl>/logs/<name>` for reading, as a file the instance may have replaced: no link is
/// followed (`logs` itself may be one), a FIFO does not block, only a regular file is read.
pub fn open_guest_log(dir: &Path, name: &str) -> io::Result<File> {
    open_untrusted(&ctl_dir(dir), &Path::new(LOGS_DIR).join(name))
}

/// Open `rel` beneath the directory `base` (which the server made) for reading, trusting
/// nothing beneath it.
pub fn open_untrusted(base: &Path, rel: &Path) -> io::Result<File> {
    let base = openat(
        CWD,
        base,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = open_beneath(
        base.as_fd(),
        rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a regular file", rel.display()),
        ));
    }
    Ok(file)
}

/// At most the first `max` bytes of a guest log.
pub fn read_guest_log(dir: &Path, name: &str, max: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    open_guest_log(dir, name)?.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// The last `max` bytes of a file, as text (for error messages); empty when unreadable.
pub fn tail_of(file: io::Result<File>, max: u64) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut f) = file else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = f.take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// The tail of a guest log (see [`open_guest_log`]).
pub fn tail_guest_log(dir: &Path, name: &str, max: u64) -> String {
    tail_of(open_guest_log(dir, name), max)
}

/// The tail of one of the server's own files.
pub fn tail_server_file(path: &Path, max: u64) -> String {
    tail_of(File::open(path), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_logs_refuse_links_fifos_and_linked_dirs() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path();
        prepare(dir).expect("prepare");
        let secret = dir.join("secret");
        std::fs::write(&secret, "HOST SECRET").expect("write");
        let logs = guest_logs_dir(dir);
        std::fs::write(logs.join("main.log"), "hello").expect("write");
        assert_eq!(
            read_guest_log(dir, "main.log", 100).expect("read"),
            b"hello"
        );
        assert_eq!(read_guest_log(dir, "main.log", 2).expect("read"), b"he");
        std::os::unix::fs::symlink(&secret, logs.join("job-1.log")).expect("link");
        assert!(read_guest_log(dir, "job-1.log", 100).is_err(), "a link");
        nix::unistd::mkfifo(&logs.join("job-2.log"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let err = read_guest_log(dir, "job-2.log", 100).expect_err("a fifo");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // The logs directory itself replaced by a link to elsewhere.
        std::fs::remove_dir_all(&logs).expect("rm");
        std::os::unix::fs::symlink(dir, &logs).expect("link dir");
        std::fs::write(dir.join("main.log"), "outside").expect("write");
        assert!(
            read_guest_log(dir, "main.log", 100).is_err(),
            "a linked dir"
        );
        assert_eq!(tail_guest_log(dir, "main.log", 100), "");
    }

    #[test]
    fn server_files_are_never_written_through_a_link() {
        let d = tempfile::tempdir().expect("tempdir");
        let target = d.path().join("target");
        std::fs::write(&target, "keep").expect("write");
        let planted = d.path().join("exec-1.log");
        std::os::unix::fs::symlink(&target, &planted).expect("link");
        assert!(create_server_file(&planted).is_err());
        let dangling = d.path().join("exec-2.log");
        std::os::unix::fs::symlink(d.path().join("new"), &dangling).expect("link");
        assert!(create_server_file(&dangling).is_err());
        assert!(!d.path().join("new").exists());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
    }
}
