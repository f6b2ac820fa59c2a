//! Walking a tree by directory descriptors (`search_glob`): every directory is opened with
//! `openat(parent, name, O_DIRECTORY | O_NOFOLLOW)` from its parent's descriptor, starting at
//! the search directory opened beneath the root without links, and listed with `getdents`.
//!
//! So every name the walk reports is a real entry of a directory reached from the root
//! without following a symbolic link: a directory swapped for a link (to anywhere) fails to
//! open (`ELOOP`/`ENOTDIR`) and is skipped, and no per-file check is needed afterwards. The
//! entry types come from `getdents` (`d_type`); a file is `fstatat`'d only when the file system
//! leaves the type unknown, or when the caller wants its metadata (sorting by time).
//!
//! What is walked is what the `ignore` crate's walker (`crate::walk::builder`, used by the
//! other tools) walks with the same options: hidden entries skipped unless `hidden`;
//! `.ignore`, `.gitignore`, `.git/info/exclude` and the global git excludes applied (outside
//! git repositories too), with the crate's precedence, in the walked directories and in those
//! above the search directory; symbolic links neither followed nor reported. Ignore files in
//! walked directories are read beneath their directory's descriptor without following links
//! (as git does not follow a symbolic `.gitignore`); those above the search directory, and a
//! worktree's `gitdir:` target, are read by path as the crate reads them.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use ignore::Match;
use ignore::gitignore::Gitignore;
use kitbag_shared::lock::LockExt;
use kitbag_shared::rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, openat, statat};

mod rules;
use rules::{Present, Rules, ancestor_rules, dir_rules, matched};

/// What a walk shows and skips.
#[derive(Debug, Clone, Copy)]
pub struct DirWalkOptions {
    /// Show hidden (dot) entries.
    pub hidden: bool,
    /// Apply no ignore file.
    pub no_ignore: bool,
    /// Walker threads (at least one; the calling thread is one of them).
    pub threads: usize,
}

/// A regular file the walk came across.
pub struct FileEntry<'a> {
    /// Its directory, open (reached from the search directory without links): for `*at` calls.
    pub dir: BorrowedFd<'a>,
    pub name: &'a OsStr,
    /// The directory below the search directory (empty for the search directory itself).
    pub dir_sub: &'a Path,
    /// The directory's real absolute path.
    pub dir_abs: &'a Path,
    /// The directory as the root's policy displays it (`/`-separated, `.` for the root).
    pub dir_display: &'a str,
}

/// One walker thread's consumer of files.
pub trait Visitor: Send {
    /// A cheap first test (a name pattern); only wanted files are checked against ignore rules.
    fn wants(&mut self, file: &FileEntry<'_>) -> bool;
    /// A wanted file that no ignore rule hides.
    fn found(&mut self, file: &FileEntry<'_>);
}

/// How a walk ended.
pub struct Walked<V> {
    /// Each thread's visitor.
    pub visitors: Vec<V>,
    /// `stop` answered true: the walk is partial.
    pub stopped: bool,
}

/// Walk the directory `start` (open, readable, beneath the root) whose real path is `abs` and
/// display `display`. `make` builds one visitor per thread; `stop` is asked every 512 entries
/// per thread whether to give up.
pub fn walk<V: Visitor>(
    start: OwnedFd,
    abs: &Path,
    display: &str,
    opts: DirWalkOptions,
    make: impl Fn() -> V + Sync,
    stop: impl Fn() -> bool + Sync,
) -> Walked<V> {
    let (rules, global) = if opts.no_ignore {
        (None, Gitignore::empty())
    } else {
        (ancestor_rules(abs), Gitignore::global().0)
    };
    let shared = Shared {
        queue: Mutex::new(Queue {
            jobs: vec![Job {
                at: At::Open(start),
                abs: abs.to_path_buf(),
                sub: PathBuf::new(),
                display: display.to_string(),
                rules,
            }],
            busy: 0,
            waiting: 0,
        }),
        wake: Condvar::new(),
        quit: AtomicBool::new(false),
        stopped: AtomicBool::new(false),
        global,
        opts,
    };
    let work = || {
        // However the thread ends (a panic too), the others stop waiting for its jobs.
        let _quit = QuitOnDrop(&shared);
        let mut w = Worker::new(&shared, make());
        w.run(&stop);
        w.visitor
    };
    let visitors = if opts.threads <= 1 {
        vec![work()]
    } else {
        std::thread::scope(|s| {
            let others: Vec<_> = (1..opts.threads).map(|_| s.spawn(work)).collect();
            let mut all = vec![work()];
            for t in others {
                match t.join() {
                    Ok(v) => all.push(v),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            all
        })
    };
    Walked {
        visitors,
        stopped: shared.stopped.load(Ordering::Relaxed),
    }
}

/// A directory still to list.
struct Job {
    at: At,
    abs: PathBuf,
    sub: PathBuf,
    display: String,
    /// The ignore rules in force for its entries' parents (its own are added when listed).
    rules: Option<Arc<Rules>>,
}

enum At {
    /// The search directory, opened by the caller.
    Open(OwnedFd),
    /// A subdirectory: its parent's descriptor and its name.
    Child(Arc<OwnedFd>, OsString),
}

struct Queue {
    jobs: Vec<Job>,
    /// Threads listing a directory (which may add jobs).
    busy: usize,
    /// Threads waiting for a job.
    waiting: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Every thread stops taking jobs (the walk stopped, or a thread panicked).
    quit: AtomicBool,
    stopped: AtomicBool,
    global: Gitignore,
    opts: DirWalkOptions,
}

impl Shared {
    /// Hand in the subdirectories found (and, with `done`, the end of a job); take the next
    /// job, waiting while other threads may still add some. `None`: the walk is over.
    fn next(&self, found: &mut Vec<Job>, done: bool) -> Option<Job> {
        let mut q = self.queue.locked();
        if done {
            q.busy -= 1;
        }
        if !found.is_empty() {
            q.jobs.append(found);
            if q.waiting > 0 {
                self.wake.notify_all();
            }
        }
        loop {
            if self.quit.load(Ordering::Relaxed) {
                self.wake.notify_all();
                return None;
            }
            if let Some(job) = q.jobs.pop() {
                q.busy += 1;
                return Some(job);
            }
            if q.busy == 0 {
                self.wake.notify_all();
                return None;
            }
            q.waiting += 1;
            q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
            q.waiting -= 1;
        }
    }

    /// Stop every thread (a walker thread ended: normally there is nothing left anyway; after
    /// a panic the others must not wait for its jobs forever).
    fn quit(&self) {
        self.quit.store(true, Ordering::Relaxed);
        let _q = self.queue.locked();
        self.wake.notify_all();
    }
}

/// The kind of a directory entry that matters to the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    /// Links (never followed), devices, sockets, FIFOs, and entries gone meanwhile.
    Skip,
}

/// The entry's kind from its `d_type`, or from an `fstatat` (not following a link) when the
/// file system does not fill `d_type` in.
pub(crate) fn kind_of(dir: BorrowedFd<'_>, name: &OsStr, d_type: FileType) -> Kind {
    let t = match d_type {
        FileType::Unknown => match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => FileType::from_raw_mode(st.st_mode as _),
            Err(_) => return Kind::Skip,
        },
        t => t,
    };
    match t {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        _ => Kind::Skip,
    }
}

/// The directory buffer of one thread: `getdents` returns as many entries as fit.
const DIRENT_BUF: usize = 32 * 1024;

struct Worker<'s, V> {
    shared: &'s Shared,
    visitor: V,
    buf: Vec<u8>,
    /// The names of the directory being walked, back to back, and each one's span and type.
    names: Vec<u8>,
    entries: Vec<(usize, usize, FileType)>,
    found: Vec<Job>,
    /// Scratch: an entry's absolute path, for ignore rules.
    path: PathBuf,
    seen: u32,
}

struct QuitOnDrop<'s>(&'s Shared);

impl Drop for QuitOnDrop<'_> {
    fn drop(&mut self) {
        self.0.quit();
    }
}

impl<'s, V: Visitor> Worker<'s, V> {
    fn new(shared: &'s Shared, visitor: V) -> Self {
        Worker {
            shared,
            visitor,
            buf: Vec::with_capacity(DIRENT_BUF),
            names: Vec::new(),
            entries: Vec::new(),
            found: Vec::new(),
            path: PathBuf::new(),
            seen: 0,
        }
    }

    fn run(&mut self, stop: &(impl Fn() -> bool + Sync)) {
        let mut done = false;
        while let Some(job) = self.shared.next(&mut self.found, done) {
            done = true;
            if !self.list(job, stop) {
                self.shared.stopped.store(true, Ordering::Relaxed);
                self.shared.quit();
            }
        }
    }

    /// List one directory: report its files, queue its subdirectories. False: `stop` said so.
    fn list(&mut self, job: Job, stop: &(impl Fn() -> bool + Sync)) -> bool {
        let Job {
            at,
            abs,
            sub,
            display,
            rules,
        } = job;
        let fd = match at {
            At::Open(fd) => fd,
            At::Child(parent, name) => {
                let flags = OFlags::RDONLY
                    | OFlags::DIRECTORY
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NONBLOCK;
                // A link swapped in for the directory since its parent was listed: ELOOP or
                // ENOTDIR, and nothing under that name is walked.
                match openat(&*parent, name.as_os_str(), flags, Mode::empty()) {
                    Ok(fd) => fd,
                    Err(_) => return true,
                }
            }
        };
        let present = self.read_names(&fd);
        let rules = if self.shared.opts.no_ignore {
            None
        } else {
            dir_rules(fd.as_fd(), &abs, present, rules)
        };
        let fd = Arc::new(fd);
        let entries = std::mem::take(&mut self.entries);
        for &(start, len, d_type) in &entries {
            self.seen = self.seen.wrapping_add(1);
            if self.seen.is_multiple_of(512) && stop() {
                self.entries = entries;
                return false;
            }
            let name = OsStr::from_bytes(&self.names[start..start + len]);
            match kind_of(fd.as_fd(), name, d_type) {
                Kind::File => {
                    let file = FileEntry {
                        dir: fd.as_fd(),
                        name,
                        dir_sub: &sub,
                        dir_abs: &abs,
                        dir_display: &display,
                    };
                    if self.visitor.wants(&file)
                        && !ignored(
                            &mut self.path,
                            self.shared,
                            rules.as_deref(),
                            &abs,
                            name,
                            false,
                        )
                    {
                        self.visitor.found(&file);
                    }
                }
                Kind::Dir => {
                    if ignored(
                        &mut self.path,
                        self.shared,
                        rules.as_deref(),
                        &abs,
                        name,
                        true,
                    ) {
                        continue;
                    }
                    self.found.push(Job {
                        at: At::Child(fd.clone(), name.to_os_string()),
                        abs: abs.join(name),
                        sub: sub.join(name),
                        display: child_display(&display, name),
                        rules: rules.clone(),
                    });
                }
                Kind::Skip => {}
            }
        }
        self.entries = entries;
        true
    }

    /// Read the directory's entries into `names`/`entries`; note its ignore files.
    fn read_names(&mut self, fd: &OwnedFd) -> Present {
        self.names.clear();
        self.entries.clear();
        let mut present = Present::default();
        let mut dir = RawDir::new(fd, self.buf.spare_capacity_mut());
        // An error part way (the directory removed meanwhile) ends the listing, as the
        // `ignore` crate skips an unreadable entry.
        while let Some(Ok(e)) = dir.next() {
            let name = e.file_name().to_bytes();
            match name {
                b"." | b".." => continue,
                b".ignore" => present.ignore = true,
                b".gitignore" => present.gitignore = true,
                b".git" => present.git = true,
                _ => {}
            }
            self.entries
                .push((self.names.len(), name.len(), e.file_type()));
            self.names.extend_from_slice(name);
        }
        present
    }
}

/// `parent/name` as the policy displays paths.
fn child_display(parent: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if parent == "." {
        name.into_owned()
    } else {
        let mut s = String::with_capacity(parent.len() + 1 + name.len());
        s.push_str(parent);
        s.push('/');
        s.push_str(&name);
        s
    }
}

/// Whether the entry `name` of the directory `dir` (with `rules` in force) is left out: an
/// ignore rule says so, or no rule speaks for it and it is hidden (the `ignore` crate's order:
/// a hidden file whitelisted by `!name` is shown).
fn ignored(
    path: &mut PathBuf,
    shared: &Shared,
    rules: Option<&Rules>,
    dir: &Path,
    name: &OsStr,
    is_dir: bool,
) -> bool {
    let hidden = !shared.opts.hidden && name.as_bytes().first() == Some(&b'.');
    if rules.is_none() && shared.global.is_empty() {
        return hidden;
    }
    path.as_mut_os_string().clear();
    path.push(dir);
    path.push(name);
    match matched(rules, &shared.global, path, is_dir) {
        Match::Ignore(()) => true,
        Match::Whitelist(()) => false,
        Match::None => hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::rules::{first_line, lines};
    use super::*;
    use kitbag_shared::rustix::fs::CWD;
    use std::collections::BTreeSet;
    use std::os::unix::fs::symlink;

    fn open_dir(p: &Path) -> OwnedFd {
        openat(
            CWD,
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open dir")
    }

    type OnFound = Box<dyn FnMut(&FileEntry<'_>) + Send>;

    /// Collects every file's path below the search directory.
    struct Collect {
        files: Vec<String>,
        on_found: Option<OnFound>,
    }

    impl Visitor for Collect {
        fn wants(&mut self, _: &FileEntry<'_>) -> bool {
            true
        }
        fn found(&mut self, f: &FileEntry<'_>) {
            if let Some(cb) = self.on_found.as_mut() {
                cb(f);
            }
            self.files
                .push(f.dir_sub.join(f.name).to_string_lossy().into_owned());
        }
    }

    fn walk_set(root: &Path, hidden: bool, no_ignore: bool, threads: usize) -> BTreeSet<String> {
        let root = std::fs::canonicalize(root).expect("canonical");
        let opts = DirWalkOptions {
            hidden,
            no_ignore,
            threads,
        };
        let w = walk(
            open_dir(&root),
            &root,
            ".",
            opts,
            || Collect {
                files: Vec::new(),
                on_found: None,
            },
            || false,
        );
        assert!(!w.stopped);
        w.visitors.into_iter().flat_map(|v| v.files).collect()
    }

    /// What the `ignore` crate's walker, configured as `crate::walk::builder` does, finds.
    fn crate_set(root: &Path, hidden: bool, no_ignore: bool) -> BTreeSet<String> {
        let root = std::fs::canonicalize(root).expect("canonical");
        let opts = crate::walk::WalkOptions {
            hidden,
            no_ignore,
            globs_field: "pattern",
            ..Default::default()
        };
        crate::walk::builder(&root, &opts)
            .expect("builder")
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| {
                e.path()
                    .strip_prefix(&root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// A tree exercising every kind of ignore file, their precedence, hidden entries and links.
    fn rules_tree() -> (tempfile::TempDir, PathBuf) {
        let top = tempfile::tempdir().expect("tmp");
        // Above the search directory: its rules apply below too.
        write(top.path(), ".gitignore", "*.above\n");
        let root = top.path().join("root");
        for f in [
            "a.rs",
            "b.log",
            "keep.log",
            "x.above",
            ".hidden",
            ".env",
            "sub/c.rs",
            "sub/d.tmp",
            "sub/e.log",
            "sub/deep/f.rs",
            "sub/deep/g.bak",
            "target/out.rs",
            ".dotdir/h.rs",
            "ign/i.rs",
            "ign/j.rs",
            "repo/k.rs",
            "repo/l.secret",
            "repo/m.rs",
            "crlf/n.rs",
            "crlf/o.rs",
            "bom/p.rs",
            "bom/q.rs",
        ] {
            write(&root, f, "x");
        }
        write(&root, ".gitignore", "*.log\n!keep.log\ntarget/\n!.env\n");
        write(&root, "sub/.gitignore", "*.tmp\n!e.log\n");
        write(&root, "sub/deep/.ignore", "*.bak\n!*.log\n");
        // `.ignore` beats `.gitignore` in the same directory.
        write(&root, "ign/.gitignore", "i.rs\n");
        write(&root, "ign/.ignore", "!i.rs\nj.rs\n");
        // A repository inside: its info/exclude applies.
        write(&root, "repo/.git/info/exclude", "*.secret\n");
        write(&root, "repo/.git/HEAD", "ref: x\n");
        write(&root, "crlf/.gitignore", "n.rs\r\n");
        write(&root, "bom/.gitignore", "\u{feff}p.rs\n");
        (top, root)
    }

    #[test]
    fn same_files_as_the_ignore_crate() {
        let (_top, root) = rules_tree();
        let outside = tempfile::tempdir().expect("tmp");
        write(outside.path(), "secret.rs", "s");
        symlink(outside.path(), root.join("out")).expect("ln");
        symlink(root.join("a.rs"), root.join("link.rs")).expect("ln");
        symlink(root.join("sub"), root.join("sublink")).expect("ln");
        for hidden in [false, true] {
            for no_ignore in [false, true] {
                for threads in [1, 2, 4] {
                    let ours = walk_set(&root, hidden, no_ignore, threads);
                    let theirs = crate_set(&root, hidden, no_ignore);
                    assert_eq!(ours, theirs, "hidden {hidden} no_ignore {no_ignore}");
                }
            }
        }
        let shown = walk_set(&root, false, false, 2);
        assert_eq!(
            shown,
            set(&[
                ".env",
                "a.rs",
                "bom/q.rs",
                "crlf/o.rs",
                "ign/i.rs",
                "keep.log",
                "repo/k.rs",
                "repo/m.rs",
                "sub/c.rs",
                "sub/deep/f.rs",
                "sub/e.log",
            ])
        );
        // Links are never reported nor followed, hidden or not, ignored or not.
        let all = walk_set(&root, true, true, 2);
        assert!(
            all.iter()
                .all(|f| !f.starts_with("out") && !f.contains("link"))
        );
        assert!(all.contains(".dotdir/h.rs") && all.contains("repo/.git/HEAD"));
    }

    #[test]
    fn a_search_directory_below_sees_the_rules_above() {
        let (_top, root) = rules_tree();
        let sub = root.join("sub");
        assert_eq!(
            walk_set(&sub, false, false, 2),
            crate_set(&sub, false, false)
        );
        assert_eq!(
            walk_set(&sub, false, false, 1),
            set(&["c.rs", "deep/f.rs", "e.log"])
        );
        // An ignored or hidden directory named as the search directory is walked (its
        // entries are judged on their own), as by the `ignore` crate.
        for dir in ["target", ".dotdir"] {
            let d = root.join(dir);
            assert_eq!(walk_set(&d, false, false, 2), crate_set(&d, false, false));
            assert_eq!(walk_set(&d, false, false, 2).len(), 1, "{dir}");
        }
    }

    #[test]
    fn a_directory_swapped_for_a_link_is_not_entered() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        write(outside.path(), "secret.rs", "s");
        write(root.path(), "a.rs", "a");
        write(root.path(), "d/inside.rs", "i");
        let (d, out) = (root.path().join("d"), outside.path().to_path_buf());
        let swapped = Arc::new(AtomicBool::new(false));
        let flag = swapped.clone();
        let real = std::fs::canonicalize(root.path()).expect("canonical");
        // One thread: the root is listed (files reported, `d` queued) before `d` is opened.
        // The first file found swaps `d` for a link to outside.
        let w = walk(
            open_dir(&real),
            &real,
            ".",
            DirWalkOptions {
                hidden: false,
                no_ignore: true,
                threads: 1,
            },
            || {
                let (d, out, flag) = (d.clone(), out.clone(), flag.clone());
                Collect {
                    files: Vec::new(),
                    on_found: Some(Box::new(move |_| {
                        if !flag.swap(true, Ordering::Relaxed) {
                            std::fs::rename(&d, d.with_extension("old")).expect("mv");
                            symlink(&out, &d).expect("ln");
                        }
                    })),
                }
            },
            || false,
        );
        assert!(swapped.load(Ordering::Relaxed));
        let files: Vec<String> = w.visitors.into_iter().flat_map(|v| v.files).collect();
        assert_eq!(files, vec!["a.rs".to_string()]);
    }

    #[test]
    fn unknown_entry_types_are_looked_up_without_following_links() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        write(root.path(), "f", "f");
        std::fs::create_dir(root.path().join("d")).expect("mkdir");
        symlink(outside.path(), root.path().join("ld")).expect("ln");
        symlink(root.path().join("f"), root.path().join("lf")).expect("ln");
        let fd = open_dir(root.path());
        let k = |n: &str| kind_of(fd.as_fd(), OsStr::new(n), FileType::Unknown);
        assert_eq!(k("f"), Kind::File);
        assert_eq!(k("d"), Kind::Dir);
        assert_eq!(k("ld"), Kind::Skip);
        assert_eq!(k("lf"), Kind::Skip);
        assert_eq!(k("gone"), Kind::Skip);
        // A known type is taken as the directory entry gives it: no lookup.
        let kd = kind_of(fd.as_fd(), OsStr::new("gone"), FileType::Directory);
        assert_eq!(kd, Kind::Dir);
        assert_eq!(
            kind_of(fd.as_fd(), OsStr::new("f"), FileType::Symlink),
            Kind::Skip
        );
    }

    #[test]
    fn stop_ends_the_walk_and_says_so() {
        let root = tempfile::tempdir().expect("tmp");
        for i in 0..2000 {
            write(root.path(), &format!("d{}/f{i}", i % 7), "x");
        }
        let real = std::fs::canonicalize(root.path()).expect("canonical");
        let w = walk(
            open_dir(&real),
            &real,
            ".",
            DirWalkOptions {
                hidden: false,
                no_ignore: false,
                threads: 2,
            },
            || Collect {
                files: Vec::new(),
                on_found: None,
            },
            || true,
        );
        assert!(w.stopped);
        let n: usize = w.visitors.iter().map(|v| v.files.len()).sum();
        assert!(n < 2000, "{n}");
    }

    #[test]
    fn lines_split_as_bufread_does() {
        let split = |b: &[u8]| lines(b).map(|l| l.to_vec()).collect::<Vec<_>>();
        assert_eq!(split(b""), Vec::<Vec<u8>>::new());
        assert_eq!(split(b"a\n"), vec![b"a".to_vec()]);
        assert_eq!(split(b"a\r\nb"), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(
            split(b"\n\nc\r"),
            vec![b"".to_vec(), b"".to_vec(), b"c\r".to_vec()]
        );
        assert_eq!(first_line(b"gitdir: /x/y\n"), Some("gitdir: /x/y".into()));
        assert_eq!(first_line(b"\xff\n"), None);
    }

    #[test]
    fn a_worktree_git_file_leads_to_the_common_exclude_file() {
        let top = tempfile::tempdir().expect("tmp");
        let main_git = top.path().join("main/.git");
        write(&main_git, "info/exclude", "*.wt\n");
        write(&main_git, "worktrees/w/commondir", "../..\n");
        let wt = top.path().join("wt");
        write(
            &wt,
            ".git",
            &format!("gitdir: {}\n", main_git.join("worktrees/w").display()),
        );
        write(&wt, "a.rs", "a");
        write(&wt, "b.wt", "b");
        write(&wt, "sub/c.wt", "c");
        assert_eq!(walk_set(&wt, false, false, 2), set(&["a.rs"]));
        assert_eq!(walk_set(&wt, false, false, 2), crate_set(&wt, false, false));
        // As the search directory's ancestor, too.
        let sub = wt.join("sub");
        assert_eq!(
            walk_set(&sub, false, false, 1),
            crate_set(&sub, false, false)
        );
        assert!(walk_set(&sub, false, false, 1).is_empty());
    }
}
