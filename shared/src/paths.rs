//! Path policy: every path a tool touches is confined to the root and its ro/rw mounts.
//!
//! Resolution is physical: each component is looked up on disk and symlinks are followed
//! as the kernel would, so `..` after a link, a link whose target leaves the root, a dangling
//! link, or a file created through a linked parent directory are all caught. Components that
//! do not exist yet (a file about to be created) are appended lexically.
//!
//! Resolving is not enough: another process may swap a directory for a link between the check
//! and the use. So tools do not open the resolved path string; they ask the policy to *act*:
//! [`PathPolicy::open_file`], [`PathPolicy::open_dir`], [`PathPolicy::parent`] and
//! [`PathPolicy::entry_parent`] resolve, then open the real root-relative path beneath the
//! root's directory descriptor refusing every symbolic link (see [`fd`]). A link that appeared
//! since the resolution makes the open fail; the policy resolves again (a link that stays
//! inside the root is fine, one leading out is refused) and gives up after a few tries with
//! `file_busy`.

pub mod fd;

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode as FileMode, OFlags};

use serde_json::json;

use crate::error::{ErrorCode, ToolError};
pub use fd::{Beneath, EntryKind, EntryStat, ParentDir};

/// Longest path (in bytes) an argument may carry.
pub const MAX_PATH_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ro,
    Rw,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ro => "ro",
            Mode::Rw => "rw",
        }
    }
}

/// One `--allow MODE:PATH` entry as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub mode: Mode,
    pub path: String,
}

/// Why an `--allow` entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountSpecError {
    #[error("`{0}`: expected ro:PATH or rw:PATH")]
    NoMode(String),
    #[error("`{0}`: mode must be ro or rw")]
    BadMode(String),
    #[error("empty PATH in --allow; use . for the whole root")]
    EmptyPath,
}

impl std::str::FromStr for MountSpec {
    type Err = MountSpecError;
    fn from_str(s: &str) -> Result<Self, MountSpecError> {
        let (mode, path) = s
            .split_once(':')
            .ok_or_else(|| MountSpecError::NoMode(s.to_string()))?;
        let mode = match mode {
            "ro" => Mode::Ro,
            "rw" => Mode::Rw,
            other => return Err(MountSpecError::BadMode(other.to_string())),
        };
        if path.is_empty() {
            return Err(MountSpecError::EmptyPath);
        }
        Ok(MountSpec {
            mode,
            path: path.to_string(),
        })
    }
}

#[derive(Debug, Clone)]
struct Mount {
    path: PathBuf,
    mode: Mode,
}

/// A path that passed the policy: its real absolute location and its root-relative spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub abs: PathBuf,
    pub rel: String,
}

/// The confinement rules for one server instance.
#[derive(Debug, Clone)]
pub struct PathPolicy {
    root: PathBuf,
    /// The root as given (absolute, maybe through a symlink): accepted as a prefix too.
    root_alias: PathBuf,
    specs: Vec<MountSpec>,
    read_only: bool,
    mounts: Vec<Mount>,
    /// The root directory, opened once (`O_PATH | O_DIRECTORY`): every open starts here.
    root_fd: Arc<OwnedFd>,
}

/// Whether missing parent directories of an entry are made (`mkdir -p`, through descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parents {
    MustExist,
    Create,
}

/// How often a path is resolved again when a link appeared on it between resolving and
/// opening. A one-off rename settles within one retry; only a tight swapping loop exhausts it.
const ATTEMPTS: usize = 3;

impl PathPolicy {
    /// Build a policy. No specs means `rw:.`; `read_only` turns every mount ro.
    pub fn new(root: &Path, specs: &[MountSpec], read_only: bool) -> std::io::Result<Self> {
        let root_alias = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir()?.join(root)
        };
        let root_real = std::fs::canonicalize(&root_alias)?;
        if !root_real.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("root {} is not a directory", root_alias.display()),
            ));
        }
        let root_fd = rustix::fs::open(
            &root_real,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            FileMode::empty(),
        )?;
        let mut policy = PathPolicy {
            root_fd: Arc::new(root_fd),
            root: root_real,
            root_alias: lexical_normalize(&root_alias),
            specs: specs.to_vec(),
            read_only,
            mounts: Vec::new(),
        };
        let specs: Vec<MountSpec> = if specs.is_empty() {
            vec![MountSpec {
                mode: Mode::Rw,
                path: ".".into(),
            }]
        } else {
            specs.to_vec()
        };
        for spec in specs {
            let real = policy.physical(&spec.path).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "--allow {}:{}: {}",
                        spec.mode.as_str(),
                        spec.path,
                        e.message
                    ),
                )
            })?;
            let mode = if read_only { Mode::Ro } else { spec.mode };
            policy.mounts.push(Mount { path: real, mode });
        }
        // Longest mount first, so the most specific rule wins.
        policy
            .mounts
            .sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
        Ok(policy)
    }

    /// The same mount rules over a different root (used when a client names its roots).
    pub fn with_root(&self, root: &Path) -> std::io::Result<Self> {
        PathPolicy::new(root, &self.specs, self.read_only)
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn is_read_only(&self) -> bool {
        self.mounts.iter().all(|m| m.mode == Mode::Ro)
    }

    /// Resolve a path argument for the given access, or explain why not.
    pub fn resolve(&self, input: &str, field: &str, access: Access) -> Result<Resolved, ToolError> {
        validate_path_arg(input, field)?;
        let abs = self.physical(input).map_err(|e| {
            let mut e = e.with_detail(json!({ "field": field, "path": input }));
            e.message = format!("{field}: {}", e.message);
            e
        })?;
        self.check_mode(&abs, input, access)?;
        Ok(Resolved {
            rel: self.display(&abs),
            abs,
        })
    }

    /// Resolve a path inside the root without a mount check: for searches, which may walk
    /// outside the caller's mounts but must mark (not show) what they find there.
    pub fn resolve_in_root(&self, input: &str, field: &str) -> Result<Resolved, ToolError> {
        validate_path_arg(input, field)?;
        let abs = self.physical(input).map_err(|e| {
            let mut e = e.with_detail(json!({ "field": field, "path": input }));
            e.message = format!("{field}: {}", e.message);
            e
        })?;
        Ok(Resolved {
            rel: self.display(&abs),
            abs,
        })
    }

    /// Resolve a directory entry without following a final symbolic link: the parent is
    /// resolved physically and the last name appended. For deleting or moving a link itself.
    pub fn resolve_entry(
        &self,
        input: &str,
        field: &str,
        access: Access,
    ) -> Result<Resolved, ToolError> {
        validate_path_arg(input, field)?;
        let trimmed = input.trim_end_matches('/');
        let path = Path::new(trimmed);
        let name = match path.components().next_back() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => return self.resolve(input, field, access),
        };
        let parent = path
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = if parent.is_empty() {
            ".".to_string()
        } else {
            parent
        };
        let parent_abs = self.physical(&parent).map_err(|e| {
            let mut e = e.with_detail(json!({ "field": field, "path": input }));
            e.message = format!("{field}: {}", e.message);
            e
        })?;
        let abs = parent_abs.join(name);
        self.check_mode(&abs, input, access)?;
        Ok(Resolved {
            rel: self.display(&abs),
            abs,
        })
    }

    /// The root directory's descriptor (`O_PATH`): the start of every open.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Resolve `input` and open it for reading: a regular file or a directory (`O_RDONLY`;
    /// `O_NONBLOCK` so a FIFO cannot hang the call). Opened beneath the root without following
    /// links; `fstat` the file to tell which it is.
    pub fn open_file(
        &self,
        input: &str,
        field: &str,
        access: Access,
    ) -> Result<(Resolved, File), ToolError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        self.act(
            input,
            field,
            || self.resolve(input, field, access),
            |r| self.open_real(&r.abs, flags).map(File::from),
        )
    }

    /// Resolve `input` and open it as a directory (`O_PATH | O_DIRECTORY`), for `*at` calls
    /// and [`fd::list_dir`].
    pub fn open_dir(
        &self,
        input: &str,
        field: &str,
        access: Access,
    ) -> Result<(Resolved, OwnedFd), ToolError> {
        self.act(
            input,
            field,
            || self.resolve(input, field, access),
            |r| self.open_real(&r.abs, OFlags::PATH | OFlags::DIRECTORY),
        )
    }

    /// Resolve `input` (following a final link, like [`Self::resolve`]) and open its parent
    /// directory: the handle to create, write, rename or remove the file with `*at` calls.
    /// With [`Parents::Create`] missing directories are made one by one beneath the root.
    pub fn parent(
        &self,
        input: &str,
        field: &str,
        access: Access,
        parents: Parents,
    ) -> Result<(Resolved, ParentDir), ToolError> {
        self.act(
            input,
            field,
            || self.not_root(self.resolve(input, field, access)?, field),
            |r| self.parent_real(&r.abs, parents),
        )
    }

    /// [`Self::parent`] for the directory entry itself: a final link is kept (moved or
    /// removed as a link), like [`Self::resolve_entry`].
    pub fn entry_parent(
        &self,
        input: &str,
        field: &str,
        access: Access,
        parents: Parents,
    ) -> Result<(Resolved, ParentDir), ToolError> {
        self.act(
            input,
            field,
            || self.not_root(self.resolve_entry(input, field, access)?, field),
            |r| self.parent_real(&r.abs, parents),
        )
    }

    /// Opens real paths a walker found (see [`Beneath`]): searches walk by path with the
    /// `ignore` crate, then read each file through this.
    pub fn beneath(&self) -> Beneath<'_> {
        Beneath::new(&self.root, self.root_fd())
    }

    /// Open a real (resolved, symlink-free) absolute path beneath the root, refusing links.
    pub fn open_real(&self, abs: &Path, flags: OFlags) -> std::io::Result<OwnedFd> {
        fd::open_beneath(
            self.root_fd(),
            self.rel_path(abs)?,
            flags,
            FileMode::empty(),
        )
    }

    /// Open a real absolute path beneath the root for reading (`O_RDONLY | O_NONBLOCK`), for
    /// callers holding a real path rather than the caller's string: resolved earlier, or named
    /// by a language server or debug adapter. A link on the way means the path changed since
    /// it was resolved; tried again, at most [`ATTEMPTS`] times, then that error (`ELOOP`) is
    /// the answer and nothing outside is read. Outside the root: `EXDEV`.
    pub fn open_real_read(&self, abs: &Path) -> std::io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let mut tries = 1;
        loop {
            match self.open_real(abs, flags) {
                Ok(fd) => return Ok(File::from(fd)),
                Err(e) if fd::is_swapped(&e) && tries < ATTEMPTS => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// The parent directory of a real absolute path, opened beneath the root, and its name.
    pub fn parent_real(&self, abs: &Path, parents: Parents) -> std::io::Result<ParentDir> {
        let rel = self.rel_path(abs)?;
        let Some(name) = rel.file_name() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the root itself has no parent directory",
            ));
        };
        let dir_rel = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = fd::open_dirs(self.root_fd(), dir_rel, parents == Parents::Create)?;
        ParentDir::new(dir, OsString::from(name))
    }

    /// The root has no parent: it cannot be replaced, moved or deleted.
    fn not_root(&self, r: Resolved, field: &str) -> Result<Resolved, ToolError> {
        if r.abs == self.root {
            return Err(ToolError::invalid_field(
                field,
                "is the root itself, which cannot be replaced, moved or deleted",
            ));
        }
        Ok(r)
    }

    /// `abs` relative to the root (`.` for the root), or `EXDEV` when it is not under it.
    fn rel_path<'a>(&self, abs: &'a Path) -> std::io::Result<&'a Path> {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => Ok(Path::new(".")),
            Ok(rel) => Ok(rel),
            Err(_) => Err(rustix::io::Errno::XDEV.into()),
        }
    }

    /// Resolve, then act on the result through descriptors. When the act finds a link where
    /// the resolution saw none, the path changed in between: resolve again (the new answer
    /// may be a refusal), at most [`ATTEMPTS`] times.
    fn act<T>(
        &self,
        input: &str,
        field: &str,
        resolve: impl Fn() -> Result<Resolved, ToolError>,
        act: impl Fn(&Resolved) -> std::io::Result<T>,
    ) -> Result<(Resolved, T), ToolError> {
        for _ in 0..ATTEMPTS {
            let r = resolve()?;
            match act(&r) {
                Ok(v) => return Ok((r, v)),
                Err(e) if fd::is_swapped(&e) => continue,
                Err(e) => {
                    return Err(ToolError::io(input, &e).with_detail(json!({ "field": field })));
                }
            }
        }
        Err(ToolError::new(
            ErrorCode::FileBusy,
            format!(
                "{input}: a directory on this path was replaced by a symbolic link while it was \
                 being opened ({ATTEMPTS} times); nothing was read or changed, try again"
            ),
        )
        .with_detail(json!({ "field": field, "path": input })))
    }

    /// Whether a real absolute path lies in a mount allowing `access`.
    pub fn allows(&self, abs: &Path, access: Access) -> bool {
        match self.mount_for(abs) {
            Some(m) => access == Access::Read || m.mode == Mode::Rw,
            None => false,
        }
    }

    /// `path` relative to the root (spelled through the real root or the root as given), when
    /// it lies under it lexically; `.` for the root itself. Nothing is resolved on disk.
    pub fn rel_in_root(&self, path: &Path) -> Option<PathBuf> {
        let abs = lexical_normalize(path);
        let rel = abs
            .strip_prefix(&self.root)
            .or_else(|_| abs.strip_prefix(&self.root_alias))
            .ok()?;
        if rel.as_os_str().is_empty() {
            return Some(PathBuf::from("."));
        }
        Some(rel.to_path_buf())
    }

    /// Root-relative spelling with `/` separators; the root itself is `.`.
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => abs.display().to_string(),
        }
    }

    fn mount_for(&self, abs: &Path) -> Option<&Mount> {
        self.mounts.iter().find(|m| abs.starts_with(&m.path))
    }

    fn check_mode(&self, abs: &Path, input: &str, access: Access) -> Result<(), ToolError> {
        let needed = match access {
            Access::Read => "ro",
            Access::Write => "rw",
        };
        match self.mount_for(abs) {
            Some(m) if access == Access::Read || m.mode == Mode::Rw => Ok(()),
            Some(m) => Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!(
                    "{input}: writing needs rw access, but this path is mounted {}",
                    m.mode.as_str()
                ),
            )
            .with_detail(json!({
                "path": input, "needed": needed, "mount": self.display(&m.path), "mode": m.mode.as_str()
            }))),
            None => Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("{input}: outside every allowed mount; {needed} access is needed"),
            )
            .with_detail(json!({ "path": input, "needed": needed, "mounts": self.mount_summary() }))),
        }
    }

    /// The mounts as `mode:path` strings, for error detail and status output.
    pub fn mount_summary(&self) -> Vec<String> {
        self.mounts
            .iter()
            .map(|m| format!("{}:{}", m.mode.as_str(), self.display(&m.path)))
            .collect()
    }

    /// Physical resolution inside the root (no mount check).
    fn physical(&self, input: &str) -> Result<PathBuf, ToolError> {
        let input_path = Path::new(input);
        let relative: PathBuf = if input_path.is_absolute() {
            let normalized = lexical_normalize(input_path);
            if let Ok(rest) = normalized.strip_prefix(&self.root) {
                rest.to_path_buf()
            } else if let Ok(rest) = normalized.strip_prefix(&self.root_alias) {
                rest.to_path_buf()
            } else {
                return Err(outside_root(input));
            }
        } else {
            input_path.to_path_buf()
        };

        let mut current = self.root.clone();
        let mut missing = false; // once a component does not exist, the rest is lexical
        let components: Vec<Component> = relative.components().collect();
        for comp in components {
            match comp {
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return Err(outside_root(input)),
                Component::ParentDir => {
                    if current == self.root {
                        return Err(outside_root(input));
                    }
                    current.pop();
                    // Back in existing territory the next component must be checked on disk.
                    missing = std::fs::symlink_metadata(&current).is_err();
                }
                Component::Normal(name) => {
                    let candidate = current.join(name);
                    if missing {
                        current = candidate;
                        continue;
                    }
                    match std::fs::symlink_metadata(&candidate) {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            match std::fs::canonicalize(&candidate) {
                                Ok(real) => current = real,
                                Err(_) => {
                                    return Err(ToolError::new(
                                        ErrorCode::CapabilityDenied,
                                        format!(
                                            "{input}: goes through a dangling symbolic link ({})",
                                            self.display(&candidate)
                                        ),
                                    ));
                                }
                            }
                        }
                        Ok(_) => current = candidate,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            missing = true;
                            current = candidate;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                            missing = true;
                            current = candidate;
                        }
                        Err(e) => return Err(ToolError::io(input, &e)),
                    }
                    if !current.starts_with(&self.root) {
                        return Err(ToolError::new(
                            ErrorCode::CapabilityDenied,
                            format!(
                                "{input}: resolves through a symbolic link to a place outside the root"
                            ),
                        ));
                    }
                }
            }
        }
        if !current.starts_with(&self.root) {
            return Err(outside_root(input));
        }
        Ok(current)
    }
}

fn outside_root(input: &str) -> ToolError {
    ToolError::new(
        ErrorCode::CapabilityDenied,
        format!("{input}: outside the root; paths must stay inside the server's root directory"),
    )
}

/// Reject empty, NUL-containing and over-long path arguments.
pub fn validate_path_arg(input: &str, field: &str) -> Result<(), ToolError> {
    if input.is_empty() {
        return Err(ToolError::invalid_field(
            field,
            "must not be empty; give a root-relative path such as src/main.rs",
        ));
    }
    if input.contains('\0') {
        return Err(ToolError::invalid_field(
            field,
            "must not contain NUL bytes",
        ));
    }
    if input.len() > MAX_PATH_BYTES {
        return Err(ToolError::invalid_field(
            field,
            format!(
                "is {} bytes long; at most {MAX_PATH_BYTES} bytes are accepted",
                input.len()
            ),
        ));
    }
    Ok(())
}

/// Remove `.` and resolve `..` textually (used only on absolute prefixes, never for policy).
fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, PathPolicy) {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(root.path().join("src")).expect("mkdir");
        std::fs::write(root.path().join("src/a.rs"), "fn a() {}").expect("write");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        let p = PathPolicy::new(root.path(), &[], false).expect("policy");
        (root, outside, p)
    }

    #[test]
    fn relative_and_absolute_inside() {
        let (root, _o, p) = setup();
        assert_eq!(
            p.resolve("src/a.rs", "path", Access::Read).expect("ok").rel,
            "src/a.rs"
        );
        assert_eq!(
            p.resolve("./src/a.rs", "path", Access::Read)
                .expect("ok")
                .rel,
            "src/a.rs"
        );
        let abs = root.path().join("src/a.rs");
        assert_eq!(
            p.resolve(abs.to_str().expect("utf8"), "path", Access::Write)
                .expect("ok")
                .rel,
            "src/a.rs"
        );
        assert_eq!(p.resolve(".", "path", Access::Read).expect("ok").rel, ".");
        assert_eq!(
            p.resolve("src/../src/new.rs", "path", Access::Write)
                .expect("ok")
                .rel,
            "src/new.rs"
        );
    }

    #[test]
    fn escapes_refused() {
        let (_r, outside, p) = setup();
        for bad in ["../x", "src/../../x", "/etc/passwd"] {
            let e = p.resolve(bad, "path", Access::Read).expect_err(bad);
            assert_eq!(e.code, ErrorCode::CapabilityDenied, "{bad}");
        }
        let o = outside.path().join("secret");
        assert!(
            p.resolve(o.to_str().expect("utf8"), "path", Access::Read)
                .is_err()
        );
    }

    #[test]
    fn symlinks_out_refused() {
        let (root, outside, p) = setup();
        symlink(outside.path().join("secret"), root.path().join("link")).expect("ln");
        symlink(outside.path(), root.path().join("dirlink")).expect("ln");
        symlink(root.path().join("nowhere"), root.path().join("dangling")).expect("ln");
        for bad in [
            "link",
            "dirlink/secret",
            "dirlink/newfile",
            "dangling",
            "src/../dirlink/x",
            "nope/../dirlink/secret",
        ] {
            let e = p.resolve(bad, "path", Access::Write).expect_err(bad);
            assert_eq!(e.code, ErrorCode::CapabilityDenied, "{bad}");
        }
        // A link inside the root pointing inside the root is fine.
        symlink(root.path().join("src"), root.path().join("srclink")).expect("ln");
        assert_eq!(
            p.resolve("srclink/a.rs", "path", Access::Read)
                .expect("ok")
                .rel,
            "src/a.rs"
        );
    }

    #[test]
    fn entry_keeps_final_link() {
        let (root, outside, p) = setup();
        symlink(outside.path().join("secret"), root.path().join("link")).expect("ln");
        let r = p
            .resolve_entry("link", "path", Access::Write)
            .expect("the link itself is inside");
        assert_eq!(r.rel, "link");
        assert!(p.resolve_entry("../x", "path", Access::Write).is_err());
    }

    #[test]
    fn symlinked_root_spelling_accepted() {
        let (root, outside, _p) = setup();
        let alias = outside.path().join("rootlink");
        symlink(root.path(), &alias).expect("ln");
        let p = PathPolicy::new(&alias, &[], false).expect("policy");
        let via_alias = alias.join("src/a.rs");
        let via_real = std::fs::canonicalize(root.path())
            .expect("canon")
            .join("src/a.rs");
        assert_eq!(
            p.resolve(via_alias.to_str().expect("u"), "path", Access::Read)
                .expect("ok")
                .rel,
            "src/a.rs"
        );
        assert_eq!(
            p.resolve(via_real.to_str().expect("u"), "path", Access::Read)
                .expect("ok")
                .rel,
            "src/a.rs"
        );
    }

    #[test]
    fn mounts_ro_rw() {
        let (root, _o, _p) = setup();
        std::fs::create_dir_all(root.path().join("out")).expect("mkdir");
        let specs: Vec<MountSpec> = ["ro:src", "rw:out"]
            .iter()
            .map(|s| s.parse().expect("spec"))
            .collect();
        let p = PathPolicy::new(root.path(), &specs, false).expect("policy");
        assert!(p.resolve("src/a.rs", "path", Access::Read).is_ok());
        let e = p
            .resolve("src/a.rs", "path", Access::Write)
            .expect_err("ro");
        assert_eq!(e.code, ErrorCode::CapabilityDenied);
        assert_eq!(e.detail["needed"], "rw");
        assert!(p.resolve("out/x", "path", Access::Write).is_ok());
        assert!(p.resolve("README", "path", Access::Read).is_err());
        let ro = PathPolicy::new(root.path(), &[], true).expect("policy");
        assert!(ro.resolve("src/a.rs", "path", Access::Write).is_err());
        assert!(ro.is_read_only());
    }

    #[test]
    fn acting_goes_through_descriptors() {
        use std::io::Read;
        let (root, outside, p) = setup();
        // A link inside the root that stays inside keeps working: its target is opened.
        symlink(root.path().join("src"), root.path().join("srclink")).expect("ln");
        let (r, mut f) = p
            .open_file("srclink/a.rs", "path", Access::Read)
            .expect("open");
        assert_eq!(r.rel, "src/a.rs");
        let mut s = String::new();
        f.read_to_string(&mut s).expect("read");
        assert_eq!(s, "fn a() {}");
        // Missing parents are made beneath the root.
        let (r, parent) = p
            .parent("new/deep/f.txt", "path", Access::Write, Parents::Create)
            .expect("parent");
        assert_eq!(r.rel, "new/deep/f.txt");
        crate::atomic::write_atomic_at(&parent, b"x").expect("write");
        assert_eq!(
            std::fs::read(root.path().join("new/deep/f.txt")).expect("r"),
            b"x"
        );
        // A final link is kept by entry_parent, followed (and judged) by parent.
        symlink(outside.path().join("secret"), root.path().join("out")).expect("ln");
        let (_, e) = p
            .entry_parent("out", "path", Access::Write, Parents::MustExist)
            .expect("the link itself");
        assert_eq!(
            e.stat().expect("stat").map(|s| s.kind),
            Some(EntryKind::Symlink)
        );
        let err = p
            .parent("out", "path", Access::Write, Parents::MustExist)
            .expect_err("leads out");
        assert_eq!(err.code, ErrorCode::CapabilityDenied);
        // The root has no parent: a typed error naming the field.
        let err = p
            .entry_parent(".", "target", Access::Write, Parents::MustExist)
            .expect_err("root");
        assert_eq!(err.detail["field"], "target");
        let err = p
            .parent("missing/f", "path", Access::Write, Parents::MustExist)
            .expect_err("missing parent");
        assert_eq!(err.code, ErrorCode::FileNotFound);
    }

    #[test]
    fn a_link_appearing_after_resolution_is_refused() {
        let (root, outside, p) = setup();
        let r = p.resolve("src/a.rs", "path", Access::Read).expect("ok");
        // Swap `src` for a link out of the root after the resolution.
        std::fs::rename(root.path().join("src"), root.path().join("src.real")).expect("mv");
        symlink(outside.path(), root.path().join("src")).expect("ln");
        std::fs::write(outside.path().join("a.rs"), "outside").expect("w");
        let e = p
            .open_real(&r.abs, OFlags::RDONLY)
            .expect_err("link on the way");
        assert!(fd::is_swapped(&e), "{e}");
        // Resolving again sees the link and refuses it.
        let err = p
            .open_file("src/a.rs", "path", Access::Read)
            .expect_err("refused");
        assert_eq!(err.code, ErrorCode::CapabilityDenied);
        assert!(p.beneath().open_read(&r.abs).is_err());
    }

    #[test]
    fn bad_arguments() {
        let (_r, _o, p) = setup();
        assert_eq!(
            p.resolve("", "path", Access::Read).expect_err("e").code,
            ErrorCode::InvalidParams
        );
        assert_eq!(
            p.resolve("a\0b", "path", Access::Read).expect_err("e").code,
            ErrorCode::InvalidParams
        );
        let long = "a/".repeat(3000);
        let e = p.resolve(&long, "path", Access::Read).expect_err("e");
        assert_eq!(e.detail["field"], "path");
        assert!("x:y".parse::<MountSpec>().is_err());
    }
}
