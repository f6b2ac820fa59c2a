//! SQLite databases in a [`StateDir`], opened through its descriptor.
//!
//! SQLite opens files by path, and its unix VFS turns every path into a canonical one first,
//! following each symbolic link it meets — `/proc/self/fd/N/memory.db` would become
//! `/work/project/.kitbag/memory.db` again, a string a concurrent rename can redirect (and the
//! `-wal`/`-shm` files are opened later by that string). So databases are opened through a VFS
//! named `kitbag-state`: SQLite's own unix VFS, copied, with one method replaced —
//! `xFullPathname` keeps a `/proc/self/fd/N/…` path as it is (everything else is delegated).
//! The kernel then resolves every open, including the journal files, through the held
//! directory. Every SQLite open already uses `O_NOFOLLOW` on the file itself, and
//! `SQLITE_OPEN_NOFOLLOW` is added so a link anywhere in a fallback path is refused.
//!
//! A side effect worth having: SQLite notices a database file that was renamed while open
//! (it compares the inode at its path) and then refuses writes; through the descriptor path a
//! renamed `.kitbag` is still the same file, so the server keeps working.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::StateDir;

/// Open (per `flags`) the database `name` in `dir`. The connection must not outlive `dir`:
/// keep both in one struct, the connection declared first so it drops first.
pub fn open(dir: &StateDir, name: &str, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let flags = flags | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    if dir.through_descriptor() && vfs::register() {
        return Connection::open_with_flags_and_vfs(dir.path(name), flags, vfs::NAME);
    }
    Connection::open_with_flags(dir.shown_path(name), flags)
}

/// A connection and the directory it was opened through, which must stay open as long as the
/// connection (its files are reached through the directory's descriptor). Dereferences to the
/// connection.
#[derive(Debug)]
pub struct StateDb {
    // Declared first: dropped (closed, WAL checkpointed) before the directory is closed.
    conn: Connection,
    dir: std::sync::Arc<StateDir>,
}

impl StateDb {
    /// [`open`] `name` in `dir`, keeping `dir` for as long as the connection lives.
    pub fn open(
        dir: std::sync::Arc<StateDir>,
        name: &str,
        flags: OpenFlags,
    ) -> rusqlite::Result<Self> {
        Ok(StateDb {
            conn: open(&dir, name, flags)?,
            dir,
        })
    }

    /// Open the database file `path`: its directory is opened as a [`StateDir`] (made when
    /// `flags` has `SQLITE_OPEN_CREATE`), then the file through it. Errors name the path.
    pub fn open_path(
        policy: &crate::paths::PathPolicy,
        path: &Path,
        flags: OpenFlags,
    ) -> Result<Self, OpenError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| OpenError::Name(path.to_path_buf()))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let create = flags.contains(OpenFlags::SQLITE_OPEN_CREATE);
        let held = StateDir::open(policy, dir, create).map_err(|e| OpenError::Dir {
            dir: dir.to_path_buf(),
            source: e,
        })?;
        StateDb::open(std::sync::Arc::new(held), name, flags).map_err(|e| OpenError::Db {
            path: path.to_path_buf(),
            source: e,
        })
    }

    /// The directory, to open more connections to this database or others beside it.
    pub fn dir(&self) -> &std::sync::Arc<StateDir> {
        &self.dir
    }
}

impl std::ops::Deref for StateDb {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for StateDb {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// Why [`StateDb::open_path`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{}: not a database file name", .0.display())]
    Name(std::path::PathBuf),
    #[error("cannot open the directory {}: {source}", dir.display())]
    Dir {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {}: {source}", path.display())]
    Db {
        path: std::path::PathBuf,
        source: rusqlite::Error,
    },
}

/// The flags `Connection::open` uses: read, write, create.
pub fn read_write_create() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Whether `path` is one this module hands to SQLite (for tests and messages).
pub fn is_descriptor_path(path: &Path) -> bool {
    path.starts_with("/proc/self/fd/")
}

// Registering a VFS is a C interface: raw pointers and `extern "C"` callbacks. One of the three
// places kitbag uses `unsafe` (the others: kitbag-vm's `nsfd.rs`, the parent-death signal in
// `process.rs`), for exactly that.
#[allow(unsafe_code)]
mod vfs {
    use std::ffi::{CStr, c_char, c_int};
    use std::ptr;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicPtr, Ordering};

    use rusqlite::ffi;

    pub const NAME: &CStr = c"kitbag-state";
    const PREFIX: &[u8] = b"/proc/self/fd/";

    /// SQLite's default VFS, which ours copies and delegates to.
    static BASE: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());
    static REGISTERED: OnceLock<bool> = OnceLock::new();

    /// Register `kitbag-state` once per process; false when SQLite has no default VFS.
    pub fn register() -> bool {
        *REGISTERED.get_or_init(|| {
            // SAFETY: `sqlite3_vfs_find(NULL)` returns SQLite's default VFS (or null), which
            // lives for the whole process. The copy is leaked, so the pointer SQLite keeps
            // stays valid; `pNext` is SQLite's to manage and starts null.
            unsafe {
                let base = ffi::sqlite3_vfs_find(ptr::null());
                if base.is_null() {
                    return false;
                }
                BASE.store(base, Ordering::Release);
                let mut ours: ffi::sqlite3_vfs = *base;
                ours.zName = NAME.as_ptr();
                ours.pNext = ptr::null_mut();
                ours.xFullPathname = Some(full_pathname);
                let ours = Box::into_raw(Box::new(ours));
                ffi::sqlite3_vfs_register(ours, 0) == ffi::SQLITE_OK
            }
        })
    }

    /// `xFullPathname`: a descriptor path without `.` or `..` is already absolute and must not
    /// be resolved; anything else is the default VFS's business.
    unsafe extern "C" fn full_pathname(
        _vfs: *mut ffi::sqlite3_vfs,
        z_path: *const c_char,
        n_out: c_int,
        z_out: *mut c_char,
    ) -> c_int {
        // SAFETY: SQLite passes a NUL-terminated path and an output buffer of `n_out` bytes.
        unsafe {
            let path = CStr::from_ptr(z_path).to_bytes_with_nul();
            let plain = !path.windows(2).any(|w| w == b"/.");
            if path.starts_with(PREFIX) && plain {
                if path.len() > usize::try_from(n_out).unwrap_or(0) {
                    return ffi::SQLITE_CANTOPEN;
                }
                ptr::copy_nonoverlapping(path.as_ptr().cast::<c_char>(), z_out, path.len());
                return ffi::SQLITE_OK;
            }
            let base = BASE.load(Ordering::Acquire);
            match base.as_ref().and_then(|b| b.xFullPathname) {
                Some(f) => f(base, z_path, n_out, z_out),
                None => ffi::SQLITE_CANTOPEN,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::PathPolicy;
    use std::os::unix::fs::symlink;

    #[test]
    fn the_database_and_its_wal_follow_the_held_directory() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        let p = PathPolicy::new(root.path(), &[], false).expect("policy");
        let dir = StateDir::open(&p, &p.root().join(".kitbag"), true).expect("dir");
        let conn = open(&dir, "t.db", read_write_create()).expect("open");
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .expect("create");
        // Swap: the state directory moves away and a link to the outside takes its name.
        std::fs::rename(root.path().join(".kitbag"), root.path().join("moved")).expect("mv");
        symlink(outside.path(), root.path().join(".kitbag")).expect("ln");
        conn.execute("INSERT INTO t VALUES (2)", [])
            .expect("insert after the swap");
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 2);
        // A second connection opened after the swap reaches the same database.
        let again = open(&dir, "t.db", read_write_create()).expect("reopen");
        let n: i64 = again
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 2);
        drop((conn, again));
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 0);
        assert!(root.path().join("moved/t.db").exists());
    }

    #[test]
    fn a_link_planted_as_the_database_is_refused() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        let p = PathPolicy::new(root.path(), &[], false).expect("policy");
        let dir = StateDir::open(&p, &p.root().join(".kitbag"), true).expect("dir");
        symlink(
            outside.path().join("x.db"),
            root.path().join(".kitbag/t.db"),
        )
        .expect("ln");
        assert!(open(&dir, "t.db", read_write_create()).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 0);
    }
}
