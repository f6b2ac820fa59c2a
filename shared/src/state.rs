//! A server's own state directory (`<root>/.kitbag`, `.kitbag/shell/logs`, …), held by its
//! descriptor (issue #22 §1).
//!
//! The state lives inside the root, where any program the agent runs can rename entries: a
//! `.kitbag` swapped for a symbolic link to `~/.ssh` between two opens would make a server
//! create, append to or delete files there. So the directory is opened once, beneath the
//! root's descriptor without following links (a link that stays inside the root is resolved
//! by the policy first), and everything after goes through that descriptor:
//!
//! - files: [`StateDir::open_file`] (`openat` with `O_NOFOLLOW`), [`StateDir::remove`],
//!   [`StateDir::rename`], [`StateDir::subdir`];
//! - code that needs a path string (SQLite, `std::fs` helpers): [`StateDir::path`] gives
//!   `/proc/self/fd/N/<name>`. The kernel resolves that through the held descriptor, wherever
//!   the directory is now and whatever took its old name — so no rename can redirect it.
//!   SQLite canonicalises paths through links, which would undo this: [`sqlite`] opens its
//!   files through a VFS that keeps the descriptor path as it is.
//!
//! A directory outside the root (`--db /var/lib/…`, chosen by whoever starts the server) is
//! opened as given, links followed, and then held the same way.
//!
//! The stores kept in it, and on a shared PostgreSQL, are built from:
//! - [`sqlite`]: opening a database through the held directory;
//! - [`schema`]: the one opening sequence and versioned migrations of a SQLite store;
//! - [`pg`] (and [`pg_tls`]): the reconnecting PostgreSQL connection and its migrations;
//! - [`sql`]: one store on either engine, so a family writes each query once.

#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "postgres")]
pub mod pg_tls;
#[cfg(feature = "sqlite")]
pub mod schema;
#[cfg(feature = "sql")]
pub mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, openat, renameat, unlinkat};
/// The flags of [`StateDir::open_file`] and what [`StateDir::stat`] returns.
pub use rustix::fs::{OFlags, Stat};
use rustix::io::Errno;

use crate::paths::{PathPolicy, fd};

/// An open state directory and the path it was opened as (for messages and for clients).
#[derive(Debug)]
pub struct StateDir {
    fd: OwnedFd,
    shown: PathBuf,
    /// Whether `/proc/self/fd/N` reaches the directory (no `/proc` in some containers: then
    /// [`StateDir::path`] falls back to the path string, and says so once in the log).
    via_proc: bool,
}

impl StateDir {
    /// Open `dir`, making it (and missing parents) when `create`. Inside the policy's root it
    /// is walked from the root's descriptor; see the module documentation.
    ///
    /// Made under `<root>/.kitbag`, it also gives `.kitbag` its [`KITBAG_GITIGNORE`] when it has
    /// none, so the first state kitbag writes in a project leaves `git status` clean.
    pub fn open(policy: &PathPolicy, dir: &Path, create: bool) -> io::Result<Self> {
        let fd = match policy.rel_in_root(dir) {
            Some(rel) => {
                let fd = open_in_root(policy, &rel, create)?;
                if create && rel.components().next() == Some(Component::Normal(KITBAG.as_ref())) {
                    mark_kitbag_dir(policy);
                }
                fd
            }
            None => open_outside(dir, create)?,
        };
        Ok(Self::held(fd, dir.to_path_buf()))
    }

    /// Give this directory a `.gitignore` that ignores all of it, unless it has one: for state
    /// directories that hold nothing to share (a shell's logs, kitbag-vm's instances), wherever
    /// the operator put them.
    pub fn ignore_all(&self) {
        write_new(self.fd.as_fd(), GITIGNORE, b"*\n");
    }

    fn held(fd: OwnedFd, shown: PathBuf) -> Self {
        let via_proc = proc_reaches(&fd);
        static WARNED: std::sync::Once = std::sync::Once::new();
        if !via_proc {
            WARNED.call_once(|| {
                tracing::warn!(
                    dir = %shown.display(),
                    "/proc/self/fd is not available: state files are opened by path, which a \
                     concurrent rename inside the root could redirect"
                )
            });
        }
        StateDir {
            fd,
            shown,
            via_proc,
        }
    }

    /// The directory's path as configured.
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// `name`'s path as configured: for messages and answers, never for opening.
    pub fn shown_path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.shown.join(name)
    }

    /// A path string that reaches `name` through the held descriptor (`/proc/self/fd/N/name`),
    /// for code that can only open paths. Valid while `self` lives. `name` must be one plain
    /// component; a final link is still followed by whoever opens it, so open with
    /// `O_NOFOLLOW` where a link could be planted.
    pub fn path(&self, name: impl AsRef<Path>) -> PathBuf {
        if self.via_proc {
            PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name)
        } else {
            self.shown.join(name)
        }
    }

    /// The directory itself as a path string through its descriptor (`/proc/self/fd/N`), for
    /// code that joins names to a directory path; see [`StateDir::path`].
    pub fn dir_path(&self) -> PathBuf {
        if self.via_proc {
            PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
        } else {
            self.shown.clone()
        }
    }

    /// Whether [`StateDir::path`] goes through the descriptor.
    pub fn through_descriptor(&self) -> bool {
        self.via_proc
    }

    /// The directory's descriptor (`O_PATH`), for `*at` calls.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Open `name` in this directory, never following a link there. `flags` are the access
    /// and creation flags (`O_RDONLY`, `O_WRONLY | O_CREAT | O_APPEND`, …); files are made
    /// with mode 0600 (state is private to the user running the server).
    pub fn open_file(&self, name: impl AsRef<Path>, flags: OFlags) -> io::Result<File> {
        let name = one_component(name.as_ref())?;
        let fd = openat(
            &self.fd,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// Remove the file `name` (a link is removed, not followed). Missing is not an error.
    pub fn remove(&self, name: impl AsRef<Path>) -> io::Result<()> {
        let name = one_component(name.as_ref())?;
        match unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Rename `from` to `to`, both in this directory (replacing `to`).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        let (from, to) = (one_component(from.as_ref())?, one_component(to.as_ref())?);
        renameat(&self.fd, from, &self.fd, to)?;
        Ok(())
    }

    /// Make `to` a second name for the file `from` (a link is linked, not followed); fails
    /// with `AlreadyExists` rather than replace `to`.
    pub fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        let (from, to) = (one_component(from.as_ref())?, one_component(to.as_ref())?);
        rustix::fs::linkat(&self.fd, from, &self.fd, to, AtFlags::empty())?;
        Ok(())
    }

    /// `lstat` of `name`: `None` when it does not exist.
    pub fn stat(&self, name: impl AsRef<Path>) -> io::Result<Option<Stat>> {
        let name = one_component(name.as_ref())?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `name` exists here (a link counts as existing; it is not followed).
    pub fn exists(&self, name: impl AsRef<Path>) -> io::Result<bool> {
        let name = one_component(name.as_ref())?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The subdirectory `rel` (plain components), made when `create`, walked without links.
    pub fn subdir(&self, rel: impl AsRef<Path>, create: bool) -> io::Result<StateDir> {
        let rel = rel.as_ref();
        plain_relative(rel)?;
        let fd = fd::open_dirs(self.fd.as_fd(), rel, create)?;
        Ok(StateDir {
            fd,
            shown: self.shown.join(rel),
            via_proc: self.via_proc,
        })
    }
}

/// The project's state directory, under the root.
const KITBAG: &str = ".kitbag";
const GITIGNORE: &str = ".gitignore";

/// The `.gitignore` of `<root>/.kitbag`: kitbag's runtime state there (databases, sessions,
/// logs, instances, temp files) is ignored; what people write and share is not — agent packs
/// (`agents/`), skills, workflows and the project prompt. Anchored patterns (`/*`) match only
/// the directory's own entries, so everything inside a kept directory is kept.
pub const KITBAG_GITIGNORE: &str = "\
# Written by kitbag: its runtime state here is ignored; what you write and share is kept.
/*
!/.gitignore
!/agents/
!/skills/
!/workflows/
!/prompt.md
";

/// Write [`KITBAG_GITIGNORE`] into `<root>/.kitbag` unless a `.gitignore` (or anything of that
/// name) is there. Best effort: state works without it.
fn mark_kitbag_dir(policy: &PathPolicy) {
    match fd::open_dirs(policy.root_fd(), Path::new(KITBAG), false) {
        Ok(dir) => write_new(dir.as_fd(), GITIGNORE, KITBAG_GITIGNORE.as_bytes()),
        Err(e) => tracing::debug!("{KITBAG}: not marked with a .gitignore: {e}"),
    }
}

/// Create `name` in `dir` with `bytes`, only if nothing has that name (never through a link,
/// never over a file the user wrote).
fn write_new(dir: BorrowedFd<'_>, name: &str, bytes: &[u8]) {
    use std::io::Write;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match openat(dir, name, flags, Mode::from_raw_mode(0o644)) {
        Ok(fd) => {
            if let Err(e) = File::from(fd).write_all(bytes) {
                tracing::debug!("{name}: {e}");
            }
        }
        Err(Errno::EXIST) => {}
        Err(e) => tracing::debug!("{name}: not written: {e}"),
    }
}

/// Open `rel` beneath the root. A link on the way is allowed only when the policy resolves it
/// to a directory inside the root: then the real path is walked instead. A link that appears
/// or goes between two tries (a rename in progress) is tried again, three times at most,
/// like [`PathPolicy`]'s own opens.
fn open_in_root(policy: &PathPolicy, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut last = None;
    for _ in 0..3 {
        match fd::open_dirs(policy.root_fd(), rel, create) {
            Err(e) if fd::is_swapped(&e) => {} // a link on the way: resolve it below
            other => return other,
        }
        // Refused (a link out of the root) is the answer only if it stays so: a link that is
        // there for an instant during a rename is tried again.
        let input = rel.to_string_lossy();
        let resolved = match policy.resolve_in_root(&input, "state directory") {
            Ok(r) => r,
            Err(te) => {
                last = Some(io::Error::new(io::ErrorKind::PermissionDenied, te.message));
                continue;
            }
        };
        let Some(real_rel) = policy.rel_in_root(&resolved.abs) else {
            last = Some(Errno::XDEV.into());
            continue;
        };
        match fd::open_dirs(policy.root_fd(), &real_rel, create) {
            Err(e) if fd::is_swapped(&e) => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| Errno::LOOP.into()))
}

/// A directory outside the root: the operator's choice, opened as given.
fn open_outside(dir: &Path, create: bool) -> io::Result<OwnedFd> {
    if create {
        std::fs::create_dir_all(dir)?;
    }
    Ok(rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Whether `/proc/self/fd/N` is the directory `fd` (same device and inode).
fn proc_reaches(fd: &OwnedFd) -> bool {
    let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match (rustix::fs::stat(via.as_str()), rustix::fs::fstat(fd)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

fn one_component(name: &Path) -> io::Result<&OsStr> {
    let mut parts = name.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(n)), None) => Ok(n),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a single file name", name.display()),
        )),
    }
}

fn plain_relative(rel: &Path) -> io::Result<()> {
    if rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a plain relative path", rel.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn policy(root: &Path) -> PathPolicy {
        PathPolicy::new(root, &[], false).expect("policy")
    }

    #[test]
    fn files_stay_in_the_held_directory_after_a_swap() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        let p = policy(root.path());
        let dir = StateDir::open(&p, &p.root().join(".kitbag"), true).expect("open");
        assert!(dir.through_descriptor());
        // Swap the state directory for a link to the outside, as a hostile program would.
        std::fs::rename(root.path().join(".kitbag"), root.path().join("moved")).expect("mv");
        symlink(outside.path(), root.path().join(".kitbag")).expect("ln");
        let mut f = dir
            .open_file("a.log", OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND)
            .expect("create");
        f.write_all(b"state").expect("write");
        std::fs::write(dir.path("b.txt"), "by path").expect("write by /proc path");
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 0);
        let moved = root.path().join("moved");
        assert_eq!(std::fs::read(moved.join("a.log")).expect("r"), b"state");
        assert_eq!(std::fs::read(moved.join("b.txt")).expect("r"), b"by path");
        dir.rename("b.txt", "c.txt").expect("rename");
        dir.remove("c.txt").expect("rm");
        assert!(!moved.join("c.txt").exists());
        assert!(dir.exists("a.log").expect("exists"));
    }

    #[test]
    fn a_link_out_of_the_root_is_refused_and_one_inside_is_followed() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        let p = policy(root.path());
        symlink(outside.path(), root.path().join(".kitbag")).expect("ln");
        let err = StateDir::open(&p, &p.root().join(".kitbag/shell"), true).expect_err("out");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 0);

        std::fs::remove_file(root.path().join(".kitbag")).expect("rm");
        std::fs::create_dir(root.path().join("state")).expect("mkdir");
        symlink("state", root.path().join(".kitbag")).expect("ln");
        let dir = StateDir::open(&p, &p.root().join(".kitbag/shell"), true).expect("inside");
        dir.open_file("x", OFlags::WRONLY | OFlags::CREATE)
            .expect("create");
        assert!(root.path().join("state/shell/x").exists());
    }

    #[test]
    fn a_planted_file_link_is_not_followed() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("secret"), "s").expect("w");
        let p = policy(root.path());
        let dir = StateDir::open(&p, &p.root().join(".kitbag"), true).expect("open");
        symlink(
            outside.path().join("secret"),
            root.path().join(".kitbag/run.jsonl"),
        )
        .expect("ln");
        let err = dir
            .open_file("run.jsonl", OFlags::WRONLY | OFlags::APPEND)
            .expect_err("link");
        assert_eq!(err.raw_os_error(), Some(Errno::LOOP.raw_os_error()));
        let mut s = String::new();
        File::open(outside.path().join("secret"))
            .and_then(|mut f| f.read_to_string(&mut s))
            .expect("r");
        assert_eq!(s, "s");
        assert!(dir.open_file("../x", OFlags::RDONLY).is_err());
    }

    #[test]
    fn outside_the_root_the_configured_path_is_used() {
        let root = tempfile::tempdir().expect("tmp");
        let other = tempfile::tempdir().expect("tmp");
        let p = policy(root.path());
        let dir = StateDir::open(&p, &other.path().join("a/b"), true).expect("open");
        dir.open_file("f", OFlags::WRONLY | OFlags::CREATE)
            .expect("create");
        assert!(other.path().join("a/b/f").exists());
        assert_eq!(dir.shown_path("f"), other.path().join("a/b/f"));
    }

    #[test]
    fn the_first_state_in_a_project_leaves_git_status_clean() {
        let root = tempfile::tempdir().expect("tmp");
        let p = policy(root.path());
        let dir = StateDir::open(&p, &p.root().join(".kitbag/shell/logs"), true).expect("open");
        let ignore = root.path().join(".kitbag/.gitignore");
        assert_eq!(
            std::fs::read_to_string(&ignore).expect("written"),
            KITBAG_GITIGNORE
        );
        dir.open_file("1.log", OFlags::WRONLY | OFlags::CREATE)
            .expect("log");
        let kitbag = root.path().join(".kitbag");
        for (name, text) in [
            ("memory.db", "state"),
            ("sessions/s.jsonl", "state"),
            ("agents/reviewer.md", "shared"),
            ("skills/release/SKILL.md", "shared"),
            ("workflows/ship.md", "shared"),
            ("prompt.md", "shared"),
        ] {
            let path = kitbag.join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        // Git itself is the judge, where it is installed.
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(root.path())
                .output()
        };
        if git(&["init", "-q"]).is_ok_and(|o| o.status.success()) {
            let out = git(&["status", "--porcelain", "--untracked-files=all"]).expect("git");
            let mut listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim_start_matches("?? ").to_string())
                .collect();
            listed.sort();
            assert_eq!(
                listed,
                [
                    ".kitbag/.gitignore",
                    ".kitbag/agents/reviewer.md",
                    ".kitbag/prompt.md",
                    ".kitbag/skills/release/SKILL.md",
                    ".kitbag/workflows/ship.md",
                ]
            );
        }
    }

    #[test]
    fn a_gitignore_of_the_user_or_a_planted_link_is_left_alone() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        let p = policy(root.path());
        std::fs::create_dir(root.path().join(".kitbag")).expect("mkdir");
        std::fs::write(root.path().join(".kitbag/.gitignore"), "mine\n").expect("w");
        StateDir::open(&p, &p.root().join(".kitbag/memory"), true).expect("open");
        assert_eq!(
            std::fs::read_to_string(root.path().join(".kitbag/.gitignore")).expect("r"),
            "mine\n"
        );
        std::fs::remove_file(root.path().join(".kitbag/.gitignore")).expect("rm");
        let target = outside.path().join("victim");
        symlink(&target, root.path().join(".kitbag/.gitignore")).expect("ln");
        StateDir::open(&p, &p.root().join(".kitbag/issues"), true).expect("open");
        assert!(
            !target.exists(),
            "nothing is written through a planted link"
        );
        // Opened without creating (a read-only server), nothing is written.
        let other = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(other.path().join(".kitbag")).expect("mkdir");
        let q = policy(other.path());
        StateDir::open(&q, &q.root().join(".kitbag"), false).expect("open");
        assert!(!other.path().join(".kitbag/.gitignore").exists());
    }
}
