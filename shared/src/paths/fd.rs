//! Acting on paths through file descriptors.
//!
//! [`PathPolicy`](super::PathPolicy) decides *which* real path a request means; this module
//! makes sure the file system object that is then read or changed is the one at that path
//! *inside the root*, even if another process renames things in between (issue #22: a directory
//! swapped for a symbolic link to `/` between the check and the open).
//!
//! The rule: nothing is opened by a path string from `/`. Every open starts at the root's
//! directory descriptor and walks the (already symlink-free) root-relative path with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; the kernel refuses with `ELOOP`/`EXDEV`
//! if a link appeared on the way. Where `openat2` is missing (Linux < 5.6, or a seccomp filter
//! answering `ENOSYS`/`EPERM`) the same walk is done one component at a time with
//! `openat(O_NOFOLLOW)`. Changes to an entry go through its open parent directory
//! ([`ParentDir`]) with `*at` calls, so the parent is looked up once.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::{
    AtFlags, CWD, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, openat, openat2,
    renameat, renameat_with, statat, unlinkat,
};
use rustix::io::Errno;

/// Set once `openat2` turned out to be missing, so later opens go straight to the walk.
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// Whether an error means "a symbolic link (or a moved directory) was in the way": the path
/// changed after it was resolved, and resolving it again may give a different answer.
pub fn is_swapped(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::LOOP | Errno::XDEV | Errno::AGAIN)
    )
}

/// Open `rel` beneath `dir` without following any symbolic link, on the way or at the end
/// (unless `flags` has `O_PATH | O_NOFOLLOW`, which opens a final link itself).
///
/// `rel` must be a plain relative path (`.` or normal components only); what the policy
/// resolved always is. `O_CLOEXEC` is added.
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC;
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        match openat2(dir, rel, flags, mode, resolve) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOSYS) => OPENAT2_MISSING.store(true, Ordering::Relaxed),
            // A seccomp filter may answer EPERM for a system call it does not know. The walk
            // below reproduces a genuine EPERM (it is the same open), so nothing is masked.
            Err(Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    walk_nofollow(dir, rel, flags, mode)
}

/// The `openat2` fallback: one `openat(O_NOFOLLOW)` per component, each from the directory
/// opened just before, so the kernel never follows a link.
fn walk_nofollow(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let mut names: Vec<&OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => names.push(n),
            // The policy never produces these; refuse rather than guess.
            _ => return Err(Errno::XDEV.into()),
        }
    }
    let Some((last, intermediate)) = names.split_last() else {
        return Ok(openat(dir, ".", flags, mode)?);
    };
    let mut held: Option<OwnedFd> = None;
    for name in intermediate {
        let at = held.as_ref().map_or(dir, |f| f.as_fd());
        let next = openat(at, *name, dir_path_flags(), Mode::empty())
            .map_err(|e| link_in_way(at, name, e))?;
        held = Some(next);
    }
    let at = held.as_ref().map_or(dir, |f| f.as_fd());
    let fd =
        openat(at, *last, flags | OFlags::NOFOLLOW, mode).map_err(|e| link_in_way(at, last, e))?;
    // `O_PATH | O_NOFOLLOW` opens a final link itself instead of failing: only right when the
    // caller asked for exactly that.
    if flags.contains(OFlags::PATH) && !flags.contains(OFlags::NOFOLLOW) {
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode as _) == FileType::Symlink {
            return Err(Errno::LOOP.into());
        }
    }
    Ok(fd)
}

/// `O_DIRECTORY | O_NOFOLLOW` on a link fails with `ENOTDIR`; say `ELOOP` when it was one, so
/// both walks report a swapped-in link the same way.
fn link_in_way(at: BorrowedFd<'_>, name: &OsStr, e: Errno) -> io::Error {
    if e == Errno::NOTDIR
        && statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode as _) == FileType::Symlink)
    {
        return Errno::LOOP.into();
    }
    e.into()
}

/// Flags for a directory used only as the starting point of `*at` calls.
fn dir_path_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Open (and when `create`, make) every directory of `rel` beneath `dir`, one component at a
/// time with `mkdirat` + `openat(O_NOFOLLOW)`: a link planted on the way stops the walk.
pub fn open_dirs(dir: BorrowedFd<'_>, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    if !create {
        return open_beneath(dir, rel, OFlags::PATH | OFlags::DIRECTORY, Mode::empty());
    }
    // The common case: everything exists already; one call.
    match open_beneath(dir, rel, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut held: Option<OwnedFd> = None;
    for c in rel.components() {
        let name = match c {
            Component::CurDir => continue,
            Component::Normal(n) => n,
            _ => return Err(Errno::XDEV.into()),
        };
        let at = held.as_ref().map_or(dir, |f| f.as_fd());
        match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let next = openat(at, name, dir_path_flags(), Mode::empty())
            .map_err(|e| link_in_way(at, name, e))?;
        held = Some(next);
    }
    match held {
        Some(fd) => Ok(fd),
        None => Ok(openat(dir, ".", dir_path_flags(), Mode::empty())?),
    }
}

/// What an entry is, as `lstat` sees it (a link is reported as a link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// The metadata tools need of an entry, read with `fstatat(AT_SYMLINK_NOFOLLOW)` or `fstat`.
#[derive(Debug, Clone, Copy)]
pub struct EntryStat {
    pub kind: EntryKind,
    pub len: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub modified: SystemTime,
}

impl EntryStat {
    // The field widths of `struct stat` differ between architectures; `as` converts all of them.
    #[allow(clippy::unnecessary_cast)]
    fn from_stat(st: &rustix::fs::Stat) -> Self {
        let kind = match FileType::from_raw_mode(st.st_mode as _) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        let (secs, nanos) = (st.st_mtime as i64, st.st_mtime_nsec as u32);
        let modified = if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nanos)
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        };
        EntryStat {
            kind,
            len: st.st_size as u64,
            mode: st.st_mode as u32 & 0o7777,
            modified,
        }
    }

    /// `fstat` of an open descriptor.
    pub fn of_fd(fd: impl AsFd) -> io::Result<Self> {
        Ok(Self::from_stat(&rustix::fs::fstat(fd)?))
    }

    pub fn is_dir(&self) -> bool {
        self.kind == EntryKind::Dir
    }
}

/// An open directory and one name in it: the handle for creating, replacing, renaming,
/// removing or inspecting that entry with `*at` calls. The directory was reached without
/// following links (see [`PathPolicy::parent`](super::PathPolicy::parent)); the name is
/// never followed either, so a link at the name is acted on as the link itself.
#[derive(Debug)]
pub struct ParentDir {
    /// `O_PATH | O_DIRECTORY`: enough for every `*at` call; no read permission needed.
    dir: OwnedFd,
    name: OsString,
}

impl ParentDir {
    /// `name` must be a single, plain file name (no `/`, not `.` or `..`).
    pub fn new(dir: OwnedFd, name: OsString) -> io::Result<Self> {
        let b = name.as_bytes();
        if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a plain file name", name.to_string_lossy()),
            ));
        }
        Ok(ParentDir { dir, name })
    }

    /// The parent directory of `path` opened by its path (links followed, as `open` would),
    /// for callers outside any policy (state files under `.kitbag/`, tests).
    pub fn of_path(path: &Path, create_parents: bool) -> io::Result<Self> {
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if create_parents {
            std::fs::create_dir_all(dir)?;
        }
        let fd = openat(
            CWD,
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        ParentDir::new(fd, name.to_os_string())
    }

    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// The entry's metadata without following a link; `None` when nothing is there.
    pub fn stat(&self) -> io::Result<Option<EntryStat>> {
        match statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(EntryStat::from_stat(&st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Open the entry for reading; a link at the name is refused (`ELOOP`). `O_NONBLOCK` so a
    /// FIFO cannot hang the call; it changes nothing for regular files.
    pub fn open_read(&self) -> io::Result<File> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        Ok(File::from(openat(
            &self.dir,
            &self.name,
            flags,
            Mode::empty(),
        )?))
    }

    /// The entry's whole content.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let mut f = self.open_read()?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Remove a file or link (never a directory).
    pub fn remove_file(&self) -> io::Result<()> {
        Ok(unlinkat(&self.dir, &self.name, AtFlags::empty())?)
    }

    /// Remove a directory and everything in it, walking by descriptors: each subdirectory is
    /// opened `O_NOFOLLOW | O_DIRECTORY` from its parent, so a link swapped in for one is
    /// removed as a link, never followed.
    pub fn remove_dir_all(&self) -> io::Result<()> {
        remove_tree(self.dir.as_fd(), &self.name)
    }

    /// Rename the entry to `to`'s name in `to`'s directory. Without `replace`, an existing
    /// destination is an `AlreadyExists` error decided by the kernel (`RENAME_NOREPLACE`), not
    /// by an earlier check.
    pub fn rename_to(&self, to: &ParentDir, replace: bool) -> io::Result<()> {
        if replace {
            return Ok(renameat(&self.dir, &self.name, &to.dir, &to.name)?);
        }
        match renameat_with(
            &self.dir,
            &self.name,
            &to.dir,
            &to.name,
            RenameFlags::NOREPLACE,
        ) {
            // File systems without RENAME_NOREPLACE: fall back to check-then-rename.
            Err(Errno::INVAL | Errno::NOSYS) => {
                if to.stat()?.is_some() {
                    return Err(io::ErrorKind::AlreadyExists.into());
                }
                Ok(renameat(&self.dir, &self.name, &to.dir, &to.name)?)
            }
            other => Ok(other?),
        }
    }

    /// Flush the directory itself (a rename or create in it becomes durable). Best effort:
    /// a directory that cannot be opened for reading is left as it is.
    pub fn sync_dir(&self) {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if let Ok(fd) = openat(&self.dir, ".", flags, Mode::empty()) {
            let _ = File::from(fd).sync_all();
        }
    }
}

/// Open a directory beneath the root for listing and return its entries: `(name, kind)` with
/// the kind as the directory entry says (`lstat` when the file system does not say).
pub fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<(OsString, EntryKind)>> {
    let fd = openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    let mut entries = Dir::new(fd)?;
    while let Some(e) = entries.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name).to_os_string();
        let kind = match e.file_type() {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            FileType::Unknown => match statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => EntryStat::from_stat(&st).kind,
                Err(_) => continue, // gone meanwhile
            },
            _ => EntryKind::Other,
        };
        out.push((name, kind));
    }
    Ok(out)
}

fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // Not a directory (any more): a file or a link swapped in; remove the entry itself.
        Err(Errno::NOTDIR | Errno::LOOP) => return Ok(unlinkat(parent, name, AtFlags::empty())?),
        Err(e) => return Err(e.into()),
    };
    for (child, kind) in list_dir(dir.as_fd())? {
        match kind {
            EntryKind::Dir => remove_tree(dir.as_fd(), &child)?,
            _ => match unlinkat(&dir, &child, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                // A directory appeared under the name meanwhile: remove it as a tree.
                Err(Errno::ISDIR | Errno::PERM) => remove_tree(dir.as_fd(), &child)?,
                Err(e) => return Err(e.into()),
            },
        }
    }
    drop(dir);
    Ok(unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// Opens real paths found by a walker (the `ignore` crate walks by path) beneath the root,
/// refusing links: a file the walker reached through a directory swapped for a link fails to
/// open (`ELOOP`, `EXDEV`, `ENOENT`) instead of being read. A file is opened with one `openat2`
/// from the root (as cheap as the plain `open` it replaces); `lstat` and `parent` keep recent
/// directories open, so an entry costs one `fstatat` from its directory.
pub struct Beneath<'a> {
    root: &'a Path,
    root_fd: BorrowedFd<'a>,
    /// Recently used directories (root-relative), most recent last. A walker goes depth
    /// first and comes back to a directory after each subdirectory: one slot thrashed.
    dirs: Vec<(PathBuf, OwnedFd)>,
}

/// Directories a [`Beneath`] keeps open (a walker thread holds one `Beneath`).
const CACHED_DIRS: usize = 8;

impl<'a> Beneath<'a> {
    pub(super) fn new(root: &'a Path, root_fd: BorrowedFd<'a>) -> Self {
        Beneath {
            root,
            root_fd,
            dirs: Vec::with_capacity(CACHED_DIRS),
        }
    }

    /// The open parent directory of `abs` (which must lie under the root) and the final name.
    fn parent_of<'p>(&mut self, abs: &'p Path) -> io::Result<(BorrowedFd<'_>, &'p OsStr)> {
        let rel = abs
            .strip_prefix(self.root)
            .map_err(|_| io::Error::from(Errno::XDEV))?;
        let name = rel
            .file_name()
            .ok_or_else(|| io::Error::from(Errno::ISDIR))?;
        let dir_rel = rel.parent().unwrap_or(Path::new(""));
        // Compared as bytes: `Path` equality parses components, measurably slower per file.
        let key = dir_rel.as_os_str().as_bytes();
        if let Some(i) = self
            .dirs
            .iter()
            .rposition(|(p, _)| p.as_os_str().as_bytes() == key)
        {
            let hit = self.dirs.remove(i);
            self.dirs.push(hit);
        } else {
            let rel = if dir_rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir_rel
            };
            let fd = open_beneath(
                self.root_fd,
                rel,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )?;
            if self.dirs.len() == CACHED_DIRS {
                self.dirs.remove(0);
            }
            self.dirs.push((dir_rel.to_path_buf(), fd));
        }
        match self.dirs.last() {
            Some((_, fd)) => Ok((fd.as_fd(), name)),
            None => Err(Errno::NOENT.into()),
        }
    }

    /// Open a file for reading. `abs` is a path the walker produced under the root.
    pub fn open_read(&mut self, abs: &Path) -> io::Result<File> {
        let rel = abs
            .strip_prefix(self.root)
            .map_err(|_| io::Error::from(Errno::XDEV))?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        Ok(File::from(open_beneath(
            self.root_fd,
            rel,
            flags,
            Mode::empty(),
        )?))
    }

    /// The entry's metadata without following it; an error when it is not (or no longer)
    /// reachable beneath the root without links — a name seen through a swapped-in link.
    pub fn lstat(&mut self, abs: &Path) -> io::Result<EntryStat> {
        let (dir, name) = self.parent_of(abs)?;
        Ok(EntryStat::from_stat(&statat(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?))
    }

    /// The open parent directory of `abs` with the final name, for writing it.
    pub fn parent(&mut self, abs: &Path) -> io::Result<ParentDir> {
        let (dir, name) = self.parent_of(abs)?;
        let dir = rustix::io::fcntl_dupfd_cloexec(dir, 0)?;
        ParentDir::new(dir, name.to_os_string())
    }
}

/// Whether `e` says the entry is not (or no longer) where a walker saw it: skip it silently.
pub fn is_gone(e: &io::Error) -> bool {
    is_swapped(e)
        || matches!(
            e.raw_os_error().map(Errno::from_raw_os_error),
            Some(Errno::NOENT | Errno::NOTDIR)
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root_fd(p: &Path) -> OwnedFd {
        openat(
            CWD,
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open root")
    }

    #[test]
    fn both_walks_refuse_links() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(root.path().join("d")).expect("mkdir");
        std::fs::write(root.path().join("d/f"), "in").expect("w");
        std::fs::write(outside.path().join("f"), "out").expect("w");
        symlink(outside.path(), root.path().join("l")).expect("ln");
        symlink(outside.path().join("f"), root.path().join("d/lf")).expect("ln");
        let fd = root_fd(root.path());
        let rd = OFlags::RDONLY;
        for walk in [open_beneath, walk_nofollow] {
            let mut s = String::new();
            File::from(walk(fd.as_fd(), Path::new("d/f"), rd, Mode::empty()).expect("open"))
                .read_to_string(&mut s)
                .expect("read");
            assert_eq!(s, "in");
            for bad in ["l/f", "d/lf", "l"] {
                let e = walk(fd.as_fd(), Path::new(bad), rd, Mode::empty()).expect_err(bad);
                assert!(is_swapped(&e), "{bad}: {e}");
                let e =
                    walk(fd.as_fd(), Path::new(bad), OFlags::PATH, Mode::empty()).expect_err(bad);
                assert!(is_swapped(&e), "{bad} O_PATH: {e}");
            }
            // O_PATH | O_NOFOLLOW opens a final link itself, but never one on the way.
            walk(
                fd.as_fd(),
                Path::new("d/lf"),
                OFlags::PATH | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .expect("link itself");
            assert!(
                walk(
                    fd.as_fd(),
                    Path::new("l/f"),
                    OFlags::PATH | OFlags::NOFOLLOW,
                    Mode::empty()
                )
                .is_err()
            );
            walk(
                fd.as_fd(),
                Path::new("."),
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .expect("root");
        }
    }

    #[test]
    fn open_dirs_creates_and_refuses_links() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        symlink(outside.path(), root.path().join("l")).expect("ln");
        let fd = root_fd(root.path());
        open_dirs(fd.as_fd(), Path::new("a/b/c"), true).expect("mkdir -p");
        assert!(root.path().join("a/b/c").is_dir());
        let e = open_dirs(fd.as_fd(), Path::new("l/new"), true).expect_err("through a link");
        assert!(is_swapped(&e), "{e}");
        assert!(!outside.path().join("new").exists());
        assert!(open_dirs(fd.as_fd(), Path::new("missing"), false).is_err());
    }

    #[test]
    fn remove_tree_removes_links_not_targets() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("keep"), "k").expect("w");
        std::fs::create_dir_all(root.path().join("t/sub/deeper")).expect("mkdir");
        std::fs::write(root.path().join("t/sub/deeper/x"), "x").expect("w");
        symlink(outside.path(), root.path().join("t/sub/out")).expect("ln");
        let fd = root_fd(root.path());
        let p = ParentDir::new(
            rustix::io::fcntl_dupfd_cloexec(&fd, 0).expect("dup"),
            "t".into(),
        )
        .expect("parent");
        p.remove_dir_all().expect("rm -r");
        assert!(!root.path().join("t").exists());
        assert!(outside.path().join("keep").exists());
    }

    #[test]
    fn beneath_refuses_swapped_parents() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(root.path().join("d")).expect("mkdir");
        std::fs::write(root.path().join("d/f"), "in").expect("w");
        std::fs::write(outside.path().join("f"), "out").expect("w");
        symlink(outside.path(), root.path().join("l")).expect("ln");
        let fd = root_fd(root.path());
        let mut b = Beneath::new(root.path(), fd.as_fd());
        assert!(b.open_read(&root.path().join("d/f")).is_ok());
        assert_eq!(b.lstat(&root.path().join("d/f")).expect("stat").len, 2);
        let e = b
            .open_read(&root.path().join("l/f"))
            .expect_err("through link");
        assert!(is_gone(&e), "{e}");
        assert!(b.lstat(&root.path().join("l/f")).is_err());
        assert!(b.open_read(&outside.path().join("f")).is_err());
    }
}
