//! Atomic writes: a temp file in the same directory, fsync, rename over the target.
//!
//! A crash at any instant leaves the old or the new content, never a mix. The file's
//! permission bits are kept; a new file gets 0666 minus the process umask, as `open` would.
//!
//! Everything happens relative to the target's open parent directory ([`ParentDir`]): the temp
//! file is made there with `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` and renamed with `renameat`,
//! so a directory swapped for a link after the parent was opened changes nothing. Tools get
//! the parent from [`PathPolicy::parent`](crate::PathPolicy::parent) (`*_at` functions);
//! callers with their own state files pass a path (the parent is then opened by that path).

use std::borrow::Borrow;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, linkat, openat, renameat, unlinkat};
use rustix::io::Errno;

use crate::paths::ParentDir;

/// Write `bytes` to `path` atomically, creating parent directories when `create_parents`.
pub fn write_atomic(path: &Path, bytes: &[u8], create_parents: bool) -> io::Result<()> {
    write_atomic_at(&ParentDir::of_path(path, create_parents)?, bytes)
}

/// Write `bytes` to `path` atomically but not durably: other processes see the old or the new
/// content, never a mix, but a power cut may lose the write. For records that a reboot makes
/// moot anyway (process ids, cgroup paths): it saves the file's and the directory's fsync,
/// ~3 ms of an instance's start on this project's machine.
pub fn write_atomic_volatile(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = ParentDir::of_path(path, false)?;
    let (staged, mut file) = begin(&target, None)?;
    file.write_all(bytes)?;
    file.set_permissions(fs::Permissions::from_mode(staged.mode))?;
    staged.commit_volatile()
}

/// Write `bytes` to `target`'s name in its open directory, atomically.
pub fn write_atomic_at(target: &ParentDir, bytes: &[u8]) -> io::Result<()> {
    stage(target, bytes, None)?.commit()
}

/// Write several files all-or-nothing: every file is staged first; if any rename fails,
/// the files already replaced are put back as they were.
pub fn write_all_atomic(files: &[(PathBuf, Vec<u8>)], create_parents: bool) -> io::Result<()> {
    let mut targets = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        targets.push((ParentDir::of_path(path, create_parents)?, bytes.clone()));
    }
    write_all_atomic_at(&targets)
}

/// [`write_all_atomic`] over open parent directories.
pub fn write_all_atomic_at(files: &[(ParentDir, Vec<u8>)]) -> io::Result<()> {
    let each: Vec<(&ParentDir, &[u8])> = files.iter().map(|(t, b)| (t, b.as_slice())).collect();
    commit_all(stage_all(&each)?)
}

/// From this many files on, [`stage_all`] makes them durable with one `syncfs` per
/// filesystem instead of an fsync each.
const ONE_SYNC_FROM: usize = 8;

/// Stage several files (modes as [`begin`]): each written to a sealed temp file beside its
/// target. A few are fsynced one by one; many are made durable together — one `syncfs` per
/// filesystem they are on —, since an fsync costs about a millisecond on a virtual disk and
/// a 100-file change spent most of its time in them. Either way every byte is on disk
/// before anything is renamed.
pub fn stage_all<'a>(files: &[(&'a ParentDir, &[u8])]) -> io::Result<Vec<Staged<&'a ParentDir>>> {
    if files.len() < ONE_SYNC_FROM {
        // Dropping the staged files on error removes every temp file written so far.
        return files.iter().map(|(t, b)| stage(t, b, None)).collect();
    }
    let mut staged = Vec::with_capacity(files.len());
    // One open file per filesystem: `syncfs` needs a real descriptor (the parents are O_PATH).
    let mut filesystems: Vec<(_, File)> = Vec::new();
    for (target, bytes) in files {
        let (s, mut file) = begin(*target, None)?;
        file.write_all(bytes)?;
        file.set_permissions(fs::Permissions::from_mode(s.mode))?;
        let dev = rustix::fs::fstat(&file)?.st_dev;
        if !filesystems.iter().any(|(d, _)| *d == dev) {
            filesystems.push((dev, file));
        }
        staged.push(s);
    }
    for (_, file) in &filesystems {
        rustix::fs::syncfs(file)?;
    }
    Ok(staged)
}

/// Put several complete staged files in place, all or nothing: if any rename fails, the
/// files already replaced are put back as they were (from hard-link backups taken first).
pub fn commit_all<D: Borrow<ParentDir>>(staged: Vec<Staged<D>>) -> io::Result<()> {
    commit_changes(Changes {
        replace: staged,
        create: Vec::new(),
        remove: Vec::new(),
    })
}

/// A change to several files, made all or nothing by [`commit_changes`].
pub struct Changes<'a, D: Borrow<ParentDir>> {
    /// Sealed files put over their targets (or at a free name).
    pub replace: Vec<Staged<D>>,
    /// Sealed files given names nothing holds: a file created meanwhile is never clobbered.
    pub create: Vec<Staged<D>>,
    /// Files removed.
    pub remove: Vec<&'a ParentDir>,
}

/// One step [`commit_changes`] has taken, and how to take it back.
enum Done<'a> {
    /// A name that did not exist was given a file: remove it.
    Created(&'a ParentDir),
    /// A name was replaced or removed; `backup` holds what it had (`None`: nothing).
    Changed(&'a ParentDir, Option<OsString>),
}

/// Make every change of `changes` or none: files are created first, then replaced, then
/// removed; if any step fails, the steps taken are undone in reverse (replaced and removed
/// files come back from hard-link backups taken before the first step).
pub fn commit_changes<D: Borrow<ParentDir>>(mut changes: Changes<'_, D>) -> io::Result<()> {
    let mut backups: Vec<(&ParentDir, Option<OsString>)> = Vec::new();
    let targets = changes
        .replace
        .iter()
        .map(|s| s.target.borrow())
        .chain(changes.remove.iter().copied());
    for t in targets {
        match backup(t) {
            Ok(name) => backups.push((t, name)),
            Err(e) => {
                cleanup(&backups);
                return Err(e);
            }
        }
    }
    let backup_of = |t: &ParentDir| {
        backups
            .iter()
            .find(|(b, _)| std::ptr::eq(*b, t))
            .and_then(|(_, n)| n.clone())
    };
    let mut done: Vec<Done<'_>> = Vec::new();
    let mut failure = None;
    for s in &changes.create {
        match s.link_new_unsynced() {
            Ok(()) => done.push(Done::Created(s.target.borrow())),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let mut renamed = 0;
    if failure.is_none() {
        for s in &changes.replace {
            let t = s.target.borrow();
            match s.rename_unsynced() {
                Ok(()) => {
                    renamed += 1;
                    done.push(Done::Changed(t, backup_of(t)));
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    if failure.is_none() {
        for t in &changes.remove {
            match unlinkat(t.dir(), t.name(), AtFlags::empty()) {
                Ok(()) => {
                    done.push(Done::Changed(t, backup_of(t)));
                }
                Err(e) => {
                    failure = Some(e.into());
                    break;
                }
            }
        }
    }
    if let Some(e) = &failure {
        tracing::debug!(error = %e, done = done.len(), "a step failed; undoing the steps taken");
        for step in done.iter().rev() {
            match step {
                Done::Created(t) | Done::Changed(t, None) => {
                    let _ = unlinkat(t.dir(), t.name(), AtFlags::empty());
                }
                Done::Changed(t, Some(name)) => {
                    let _ = renameat(t.dir(), name, t.dir(), t.name());
                }
            }
        }
    }
    cleanup(&backups);
    if failure.is_none() {
        // Make the names durable: each directory touched, once (a 100-file change synced its
        // directory 100 times).
        sync_dirs(done.iter().map(|d| match d {
            Done::Created(t) | Done::Changed(t, _) => *t,
        }));
    }
    drop((done, backups));
    // The renamed temp names are gone: nothing for their drop to remove. (Created names hold
    // their content now; their temp names still go on drop.)
    for s in changes.replace.iter_mut().take(renamed) {
        s.temp = None;
    }
    failure.map_or(Ok(()), Err)
}

/// Sync each distinct directory of `targets` once.
fn sync_dirs<'a>(targets: impl Iterator<Item = &'a ParentDir>) {
    let mut seen = Vec::new();
    for t in targets {
        let id = rustix::fs::fstat(t.dir())
            .map(|st| (st.st_dev, st.st_ino))
            .ok();
        if let Some(id) = id {
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
        }
        t.sync_dir();
    }
}

/// A hard link to `t`'s current file under a backup name, or `None` when there is none.
fn backup(t: &ParentDir) -> io::Result<Option<OsString>> {
    if t.stat()?.is_none() {
        return Ok(None);
    }
    let name = unique_sibling(t, "bak");
    linkat(t.dir(), t.name(), t.dir(), &name, AtFlags::empty())?;
    Ok(Some(name))
}

/// Create `target` with `bytes`, never replacing anything: a complete temp file is hard-linked
/// to the name (`linkat` fails if the name exists, so a file created meanwhile by someone else
/// is never clobbered), then the temp name is removed.
pub fn create_new_at(target: &ParentDir, bytes: &[u8]) -> io::Result<()> {
    stage(target, bytes, Some(0o666 & !process_umask()))?.commit_new()
}

/// Remove the backup hard links (`None`: the target had no file to back up).
fn cleanup(backups: &[(&ParentDir, Option<OsString>)]) {
    for (t, name) in backups {
        if let Some(name) = name {
            let _ = unlinkat(t.dir(), name, AtFlags::empty());
        }
    }
}

/// A temp file beside its target (`D`: the target's [`ParentDir`], owned or borrowed),
/// removed on drop unless put in place. Made by [`begin`], which also hands out the file to
/// write — piece by piece, so a large file never has to be held in memory; [`Staged::seal`]
/// then gives it its mode and makes it durable, and [`Staged::commit`] (replace) or
/// [`Staged::commit_new`] (never replace) puts it in place.
pub struct Staged<D: Borrow<ParentDir>> {
    target: D,
    temp: Option<OsString>,
    mode: u32,
}

/// Start a file that will replace (or create) `target`'s name when complete. Its mode:
/// `mode`, else the target's (when it is a regular file), else 0666 minus the umask.
pub fn begin<D: Borrow<ParentDir>>(target: D, mode: Option<u32>) -> io::Result<(Staged<D>, File)> {
    let t = target.borrow();
    let existing = t.stat()?;
    if existing.is_some_and(|s| s.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    let mode = mode.unwrap_or_else(|| match existing {
        // A link is replaced by a file: give it a new file's mode, not the link's 0777.
        Some(s) if s.kind == crate::paths::EntryKind::File => s.mode,
        _ => 0o666 & !process_umask(),
    });
    sweep_stale_siblings(t);
    let temp = unique_sibling(t, "tmp");
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = openat(t.dir(), &temp, flags, Mode::from_raw_mode(0o600))?;
    let staged = Staged {
        target,
        temp: Some(temp),
        mode,
    };
    Ok((staged, File::from(fd)))
}

impl<D: Borrow<ParentDir>> Staged<D> {
    /// Where the file goes.
    pub fn target(&self) -> &ParentDir {
        self.target.borrow()
    }

    /// The file [`begin`] handed out is complete: give it its mode and make it durable.
    pub fn seal(&self, file: File) -> io::Result<()> {
        file.set_permissions(fs::Permissions::from_mode(self.mode))?;
        file.sync_all()
    }

    /// Rename the temp file over the target (the temp name is then gone), durably.
    fn rename_into_place(&self) -> io::Result<()> {
        self.rename_unsynced()?;
        // Make the rename itself durable.
        self.target.borrow().sync_dir();
        Ok(())
    }

    /// [`Self::rename_into_place`] without the directory's sync (the caller syncs it).
    fn rename_unsynced(&self) -> io::Result<()> {
        if let Some(temp) = &self.temp {
            let t = self.target.borrow();
            renameat(t.dir(), temp, t.dir(), t.name())?;
        }
        Ok(())
    }

    /// Link the temp file to the target's name if nothing holds it (the temp name stays,
    /// removed on drop), durably.
    fn link_new(&self) -> io::Result<()> {
        self.link_new_unsynced()?;
        self.target.borrow().sync_dir();
        Ok(())
    }

    /// [`Self::link_new`] without the directory's sync (the caller syncs it).
    fn link_new_unsynced(&self) -> io::Result<()> {
        let t = self.target.borrow();
        let temp = self.temp.as_ref().ok_or(io::ErrorKind::NotFound)?;
        linkat(t.dir(), temp, t.dir(), t.name(), AtFlags::empty())?;
        Ok(())
    }

    /// Replace the target with the sealed file.
    pub fn commit(mut self) -> io::Result<()> {
        self.rename_into_place()?;
        self.temp = None;
        Ok(())
    }

    /// Replace the target without making the rename durable ([`write_atomic_volatile`]).
    fn commit_volatile(mut self) -> io::Result<()> {
        if let Some(temp) = &self.temp {
            let t = self.target.borrow();
            renameat(t.dir(), temp, t.dir(), t.name())?;
        }
        self.temp = None;
        Ok(())
    }

    /// Give the sealed file the target's name only if nothing has it: `linkat` fails if the
    /// name exists (even one created meanwhile by someone else); then the temp name goes.
    pub fn commit_new(self) -> io::Result<()> {
        // Dropping `self` removes the temp name; the content lives on as the target.
        self.link_new()
    }
}

impl<D: Borrow<ParentDir>> Drop for Staged<D> {
    fn drop(&mut self) {
        if let Some(t) = &self.temp {
            let _ = unlinkat(self.target.borrow().dir(), t, AtFlags::empty());
        }
    }
}

/// Write `bytes` to a new, sealed temp file beside `target` (mode as [`begin`]).
pub fn stage<'a>(
    target: &'a ParentDir,
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<Staged<&'a ParentDir>> {
    let (staged, mut file) = begin(target, mode)?;
    file.write_all(bytes)?;
    staged.seal(file)?;
    Ok(staged)
}

/// `.NAME.kitbag-KIND-PID-N`: hidden, unique within the process, never a valid user name clash.
fn unique_sibling(target: &ParentDir, kind: &str) -> OsString {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = sibling_prefix(target);
    name.extend_from_slice(format!("{kind}-{}-{n}", std::process::id()).as_bytes());
    OsString::from(std::ffi::OsStr::from_bytes(&name))
}

/// `.NAME.kitbag-`: what every temp or backup name of `target` starts with.
fn sibling_prefix(target: &ParentDir) -> Vec<u8> {
    let mut name = Vec::with_capacity(target.name().len() + 32);
    name.push(b'.');
    // Keep temp names well under NAME_MAX even for a long target name.
    let base = target.name().as_bytes();
    name.extend_from_slice(&base[..base.len().min(200)]);
    name.extend_from_slice(b".kitbag-");
    name
}

/// Remove the temp and backup files of earlier writes of `target` whose process is gone: a
/// write cut short by `kill -9` leaves `.NAME.kitbag-tmp-PID-N` behind (300 kills left 118 MB).
/// Files of a live process (this one included) are left alone; best effort throughout.
fn sweep_stale_siblings(target: &ParentDir) {
    let prefix = sibling_prefix(target);
    let Ok(entries) = crate::paths::fd::list_dir(target.dir()) else {
        return;
    };
    for (name, kind) in entries {
        if kind != crate::paths::EntryKind::File {
            continue;
        }
        let Some(rest) = name.as_bytes().strip_prefix(prefix.as_slice()) else {
            continue;
        };
        if let Some(pid) = stale_owner(rest) {
            tracing::debug!(pid, "removing a temp file left by a process that is gone");
            let _ = unlinkat(target.dir(), name.as_os_str(), AtFlags::empty());
        }
    }
}

/// Remove, anywhere under `dir`, the temp and backup files (`.NAME.kitbag-tmp-PID-N`,
/// `.NAME.kitbag-bak-PID-N`) whose process is gone — for a server's own state directory
/// (e.g. `<root>/.kitbag`) at start, since a write cut short by `kill -9` leaves its temp file
/// behind and nothing might write that same file again. Not meant for a user's tree: the walk
/// stops at 4 levels and 20 000 entries, never follows symbolic links, and leaves files of live
/// processes alone. Best effort; returns how many files were removed.
pub fn sweep_stale_temps(dir: &Path) -> usize {
    let mut budget = 20_000usize;
    let mut removed = 0;
    sweep_dir(dir, 4, &mut budget, &mut removed);
    if removed > 0 {
        tracing::info!(removed, dir = %dir.display(), "removed temp files left by processes that are gone");
    }
    removed
}

fn sweep_dir(dir: &Path, depth: usize, budget: &mut usize, removed: &mut usize) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if depth > 1 {
                sweep_dir(&e.path(), depth - 1, budget, removed);
            }
            continue;
        }
        if !ft.is_file() {
            continue;
        }
        let name = e.file_name();
        let bytes = name.as_bytes();
        if bytes.first() != Some(&b'.') {
            continue;
        }
        let Some(at) = bytes.windows(8).rposition(|w| w == b".kitbag-") else {
            continue;
        };
        if at == 0 {
            continue;
        }
        if stale_owner(&bytes[at + 8..]).is_some() && fs::remove_file(e.path()).is_ok() {
            *removed += 1;
        }
    }
}

/// For `KIND-PID-N` with KIND `tmp` or `bak`: the PID when that process no longer exists.
fn stale_owner(rest: &[u8]) -> Option<u32> {
    let rest = std::str::from_utf8(rest).ok()?;
    let mut parts = rest.split('-');
    let (kind, pid, n) = (parts.next()?, parts.next()?, parts.next()?);
    if !matches!(kind, "tmp" | "bak") || parts.next().is_some() || n.parse::<u64>().is_err() {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    let gone = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
    gone.then_some(pid)
}

/// The process umask, read from /proc so nothing has to change it to find out.
pub fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Whether an error is "the name exists already" (for `create_new_at` callers).
pub fn is_exists(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::AlreadyExists || Errno::from_io_error(e) == Some(Errno::EXIST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volatile_write_replaces_whole_keeps_the_mode_and_leaves_no_temp() {
        let d = tempfile::tempdir().expect("tmp");
        let target = d.path().join("record.json");
        std::fs::write(&target, "old").expect("w");
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_atomic_volatile(&target, b"new").expect("write");
        assert_eq!(std::fs::read(&target).expect("r"), b"new");
        let mode = fs::metadata(&target).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let names: Vec<_> = fs::read_dir(d.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("record.json")]);
        // A link planted at the name is replaced, not followed.
        let outside = d.path().join("outside");
        std::fs::write(&outside, "keep").expect("w");
        fs::remove_file(&target).expect("rm");
        std::os::unix::fs::symlink(&outside, &target).expect("ln");
        write_atomic_volatile(&target, b"again").expect("write");
        assert_eq!(std::fs::read(&outside).expect("r"), b"keep");
        assert!(
            !fs::symlink_metadata(&target)
                .expect("stat")
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn stale_temp_files_of_dead_writers_are_swept_before_the_next_write() {
        let d = tempfile::tempdir().expect("tmp");
        let target = d.path().join("a.txt");
        std::fs::write(&target, "old").expect("w");
        // A pid that cannot exist (above the kernel's pid_max limit) and our own.
        let dead = d.path().join(".a.txt.kitbag-tmp-4194305-0");
        let dead_bak = d.path().join(".a.txt.kitbag-bak-4194305-3");
        let live = d
            .path()
            .join(format!(".a.txt.kitbag-tmp-{}-99", std::process::id()));
        let other_file = d.path().join(".b.txt.kitbag-tmp-4194305-0");
        let look_alike = d.path().join(".a.txt.kitbag-tmp-notes");
        for p in [&dead, &dead_bak, &live, &other_file, &look_alike] {
            std::fs::write(p, "x").expect("w");
        }
        let parent = ParentDir::of_path(&target, false).expect("parent");
        write_atomic_at(&parent, b"new").expect("write");
        assert_eq!(std::fs::read(&target).expect("r"), b"new");
        assert!(!dead.exists() && !dead_bak.exists(), "stale temps removed");
        assert!(live.exists(), "a live writer's temp is left alone");
        assert!(other_file.exists(), "only this file's temps are swept");
        assert!(look_alike.exists(), "names not ours are left alone");
    }

    #[test]
    fn stale_temp_files_are_swept_from_a_state_tree_at_start() {
        let d = tempfile::tempdir().expect("tmp");
        let sub = d.path().join("shell/logs");
        fs::create_dir_all(&sub).expect("mkdir");
        let dead = [
            d.path().join(".cron.json.kitbag-tmp-4194305-0"),
            sub.join(".x.log.kitbag-bak-4194305-7"),
            d.path().join("shell/.a.b.kitbag-tmp-4194305-12"),
        ];
        let keep = [
            d.path()
                .join(format!(".cron.json.kitbag-tmp-{}-1", std::process::id())),
            d.path().join("cron.json"),
            d.path().join(".kitbag-tmp-4194305-0"),
            sub.join(".x.log.kitbag-tmp-notes"),
            sub.join("x.kitbag-tmp-4194305-0"),
        ];
        for p in dead.iter().chain(&keep) {
            fs::write(p, "x").expect("w");
        }
        // Too deep for the walk: left alone.
        let deep = d.path().join("a/b/c/d");
        fs::create_dir_all(&deep).expect("mkdir");
        let too_deep = deep.join(".f.kitbag-tmp-4194305-0");
        fs::write(&too_deep, "x").expect("w");
        // A link to another tree is not followed.
        let other = tempfile::tempdir().expect("tmp");
        let outside = other.path().join(".o.kitbag-tmp-4194305-0");
        fs::write(&outside, "x").expect("w");
        std::os::unix::fs::symlink(other.path(), d.path().join("link")).expect("ln");
        assert_eq!(sweep_stale_temps(d.path()), 3);
        for p in &dead {
            assert!(!p.exists(), "{}", p.display());
        }
        for p in &keep {
            assert!(p.exists(), "{}", p.display());
        }
        assert!(too_deep.exists() && outside.exists());
        assert_eq!(sweep_stale_temps(&d.path().join("missing")), 0);
    }

    /// Creates, replacements and removals land together; a step that fails late (a removal
    /// whose file went meanwhile) takes back every step before it.
    #[test]
    fn changes_land_all_or_none() {
        let d = tempfile::tempdir().expect("tmp");
        let at = |n: &str| d.path().join(n);
        let parent = |n: &str| ParentDir::of_path(&at(n), false).expect("parent");
        let listing = || {
            let mut names: Vec<String> = fs::read_dir(d.path())
                .expect("ls")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        fs::write(at("keep.txt"), "old").expect("w");
        fs::write(at("gone.txt"), "bye").expect("w");
        let (new, kept, gone) = (parent("new.txt"), parent("keep.txt"), parent("gone.txt"));
        commit_changes(Changes {
            replace: vec![stage(&kept, b"changed", None).expect("stage")],
            create: vec![stage(&new, b"fresh", None).expect("stage")],
            remove: vec![&gone],
        })
        .expect("commit");
        assert_eq!(listing(), ["keep.txt", "new.txt"], "no temp or backup left");
        assert_eq!(fs::read_to_string(at("keep.txt")).expect("r"), "changed");
        assert_eq!(fs::read_to_string(at("new.txt")).expect("r"), "fresh");

        // The removal fails (its file is missing): the create and the replace are undone.
        let (other, missing) = (parent("other.txt"), parent("missing.txt"));
        let err = commit_changes(Changes {
            replace: vec![stage(&kept, b"again", None).expect("stage")],
            create: vec![stage(&other, b"x", None).expect("stage")],
            remove: vec![&new, &missing],
        })
        .expect_err("a removal fails");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert_eq!(listing(), ["keep.txt", "new.txt"], "as before the call");
        assert_eq!(fs::read_to_string(at("keep.txt")).expect("r"), "changed");
        assert_eq!(fs::read_to_string(at("new.txt")).expect("r"), "fresh");

        // A create whose name is taken changes nothing and says so.
        let err = commit_changes(Changes::<&ParentDir> {
            replace: vec![],
            create: vec![stage(&kept, b"clobber", None).expect("stage")],
            remove: vec![],
        })
        .expect_err("exists");
        assert!(is_exists(&err), "{err}");
        assert_eq!(fs::read_to_string(at("keep.txt")).expect("r"), "changed");
        assert_eq!(listing(), ["keep.txt", "new.txt"]);
    }

    #[test]
    fn keeps_mode_and_replaces() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("f.sh");
        fs::write(&p, "old").expect("w");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o751)).expect("chmod");
        write_atomic(&p, b"new", false).expect("write");
        assert_eq!(fs::read_to_string(&p).expect("r"), "new");
        assert_eq!(
            fs::metadata(&p).expect("m").permissions().mode() & 0o777,
            0o751
        );
        assert_eq!(
            fs::read_dir(d.path()).expect("ls").count(),
            1,
            "no temp left behind"
        );
    }

    #[test]
    fn creates_parents() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("a/b/c.txt");
        write_atomic(&p, b"x", true).expect("write");
        assert_eq!(fs::read(&p).expect("r"), b"x");
    }

    #[test]
    fn many_rolls_back_on_failure() {
        let d = tempfile::tempdir().expect("tmp");
        let a = d.path().join("a.txt");
        fs::write(&a, "A").expect("w");
        // The second target is a directory: its staging fails before anything is renamed.
        let b = d.path().join("b");
        fs::create_dir(&b).expect("mkdir");
        fs::write(b.join("inner"), "x").expect("w");
        let err = write_all_atomic(
            &[(a.clone(), b"A2".to_vec()), (b.clone(), b"B2".to_vec())],
            false,
        );
        assert!(err.is_err());
        assert_eq!(fs::read_to_string(&a).expect("r"), "A");
        let names: Vec<_> = fs::read_dir(d.path())
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp or backup left: {names:?}");
    }

    /// From `ONE_SYNC_FROM` files on, staging makes them durable together (`syncfs`): the
    /// same all-or-nothing outcome, modes kept, no temp left — and a target that cannot take
    /// a file still changes nothing.
    #[test]
    fn many_files_staged_together_land_or_roll_back_as_one() {
        let d = tempfile::tempdir().expect("tmp");
        let n = ONE_SYNC_FROM + 4;
        let files: Vec<(PathBuf, Vec<u8>)> = (0..n)
            .map(|i| {
                (
                    d.path().join(format!("{i}.txt")),
                    format!("v1 {i}").into_bytes(),
                )
            })
            .collect();
        fs::write(&files[0].0, "old").expect("w");
        fs::set_permissions(&files[0].0, fs::Permissions::from_mode(0o600)).expect("chmod");
        write_all_atomic(&files, false).expect("write");
        for (p, b) in &files {
            assert_eq!(&fs::read(p).expect("r"), b);
        }
        let mode = fs::metadata(&files[0].0).expect("m").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a replaced file keeps its mode");
        assert_eq!(
            fs::read_dir(d.path()).expect("ls").count(),
            n,
            "no temp left"
        );

        // The last target is a directory: nothing of the second write lands.
        let mut again: Vec<(PathBuf, Vec<u8>)> = files
            .iter()
            .map(|(p, _)| (p.clone(), b"v2".to_vec()))
            .collect();
        let dir = d.path().join("a-dir");
        fs::create_dir(&dir).expect("mkdir");
        again.push((dir, b"x".to_vec()));
        write_all_atomic(&again, false).expect_err("a directory cannot be replaced");
        for (p, b) in &files {
            assert_eq!(&fs::read(p).expect("r"), b, "{}", p.display());
        }
        assert_eq!(fs::read_dir(d.path()).expect("ls").count(), n + 1);
    }

    #[test]
    fn many_all_written() {
        let d = tempfile::tempdir().expect("tmp");
        let files: Vec<(PathBuf, Vec<u8>)> = (0..3)
            .map(|i| {
                (
                    d.path().join(format!("{i}.txt")),
                    format!("{i}").into_bytes(),
                )
            })
            .collect();
        write_all_atomic(&files, false).expect("write");
        for (p, b) in &files {
            assert_eq!(&fs::read(p).expect("r"), b);
        }
    }

    #[test]
    fn create_new_never_clobbers() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("n.txt");
        let t = ParentDir::of_path(&p, false).expect("parent");
        create_new_at(&t, b"one").expect("create");
        let e = create_new_at(&t, b"two").expect_err("exists");
        assert!(is_exists(&e), "{e}");
        assert_eq!(fs::read(&p).expect("r"), b"one");
        assert_eq!(
            fs::read_dir(d.path()).expect("ls").count(),
            1,
            "no temp left"
        );
    }
}
