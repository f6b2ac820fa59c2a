//! The SQLite store: `<root>/.kitbag/cron.db` (WAL) holds the entries; beside it the run
//! history (`history.rs`), the `cron.lock` flock (`file_lock.rs`) and a `cron.json` to import
//! (`legacy.rs`).
//!
//! Every change is one IMMEDIATE transaction (`entries.rs`, the queries both engines share)
//! that touches the rows it changes by key, so a change costs the same with ten entries or ten
//! thousand, and several processes on one store never lose each other's changes; readers never
//! wait for writers (WAL) and never see half a change. The database is opened at the first
//! call that needs it (reading creates nothing), through `.kitbag` held by its descriptor, and
//! opened again when the file was replaced or removed. A `cron.json` lying beside it is
//! imported first.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kitbag_shared::lock::LockExt;
use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::sql::{self, Engine, Sql};
use kitbag_shared::state::{OFlags, Stat, StateDir};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};

use crate::dir::{DB, LEGACY, LOCK, RUNS, StoreDir, io_err};
use crate::entries::{self, Changes, Place};
use crate::file_lock::{FileLock, LOCK_WAIT};
use crate::model::{Doc, RunRecord};
use crate::schema::{self, FAMILY};
use crate::{history, legacy};

/// The store: the entries database, the legacy file it imports, the history files.
#[derive(Clone)]
pub struct Store {
    files: StoreDir,
    /// `<root>/.kitbag`, for messages.
    pub dir: PathBuf,
    /// The entries database, `<root>/.kitbag/cron.db`.
    pub file: PathBuf,
    /// A `cron.json` (the old store, or one written by hand) imported on sight.
    pub legacy: PathBuf,
    pub runs: PathBuf,
    runs_max_bytes: u64,
    writable: bool,
    place: Arc<Place>,
    db: Arc<Mutex<Option<Open>>>,
    /// The last read, keyed by the file's identity, `PRAGMA data_version` (other
    /// connections' commits) and this process's own commits.
    cache: Arc<Mutex<Option<CachedDoc>>>,
    /// Commits made through this store (they do not change `data_version`).
    writes: Arc<AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("file", &self.file).finish()
    }
}

type FileIdent = (u64, u64);
type CacheKey = (FileIdent, i64, u64);
type CachedDoc = (CacheKey, Arc<Doc>);

/// The open database and the identity of the file it was opened on.
struct Open {
    db: sql::Store,
    ident: FileIdent,
}

#[allow(clippy::unnecessary_cast)] // `st_dev`/`st_ino` widths differ between architectures
fn ident_of(st: &Stat) -> FileIdent {
    (st.st_dev as u64, st.st_ino as u64)
}

impl Store {
    pub fn new(policy: &PathPolicy, runs_max_bytes: u64) -> Self {
        let files = StoreDir::new(policy);
        let file = files.shown(DB);
        Self {
            dir: files.path.clone(),
            legacy: files.shown(LEGACY),
            runs: files.shown(RUNS),
            place: Arc::new(Place::new(Engine::Sqlite, file.display().to_string())),
            file,
            files,
            runs_max_bytes: runs_max_bytes.max(1024),
            writable: true,
            db: Arc::new(Mutex::new(None)),
            cache: Arc::new(Mutex::new(None)),
            writes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A store this process must not change (`--read-only`): the database is opened
    /// read-only, never created, and a `cron.json` is read in place instead of imported.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.writable = !read_only;
        self
    }

    /// Take the exclusive `cron.lock` (waits up to 10 s, then `file_busy`). Guards the run
    /// history and imports; entries are guarded by the database's own lock.
    pub fn lock(&self) -> ToolResult<FileLock> {
        let shown = self.files.shown(LOCK);
        let file = self
            .files
            .made()?
            .open_file(LOCK, OFlags::WRONLY | OFlags::CREATE)
            .map_err(|e| io_err("cannot open", &shown, &e))?;
        FileLock::take(file, &shown, LOCK_WAIT)
    }

    /// Run `f` on the open database, opening it first (and reopening it when the file was
    /// replaced or removed). A `cron.json` lying beside it is imported first. Without
    /// `create`, a missing database is `Ok(None)` and nothing is created.
    fn with_db<T>(
        &self,
        create: bool,
        f: impl FnOnce(&mut Open) -> ToolResult<T>,
    ) -> ToolResult<Option<T>> {
        let mut slot = self.db.locked();
        if self.writable {
            let slot = &mut *slot;
            let lock = || self.lock();
            legacy::import(
                &self.files,
                &self.place,
                &self.writes,
                lock,
                move || match self.ensure_open(slot, true)? {
                    Some(open) => Ok(&mut open.db),
                    None => Err(ToolError::internal("the cron store could not be created")),
                },
            )?;
        }
        match self.ensure_open(&mut slot, create && self.writable)? {
            Some(open) => f(open).map(Some),
            None => Ok(None),
        }
    }

    fn ensure_open<'a>(
        &self,
        slot: &'a mut Option<Open>,
        create: bool,
    ) -> ToolResult<Option<&'a mut Open>> {
        let Some(dir) = self.files.open(create)? else {
            *slot = None;
            return Ok(None);
        };
        let ident = |dir: &StateDir| match dir.stat(DB) {
            Ok(st) => Ok(st.as_ref().map(ident_of)),
            Err(e) => Err(io_err("cannot read", &self.file, &e)),
        };
        let current = ident(&dir)?;
        if slot.as_ref().map(|o| o.ident) != current || current.is_none() {
            *slot = None;
            if current.is_none() && !create {
                return Ok(None);
            }
            let conn = schema::open_sqlite(dir, self.writable, &self.file)?;
            let Some(ident) = ident(conn.dir())? else {
                return Err(ToolError::internal(format!(
                    "{} disappeared while it was being opened",
                    self.file.display()
                )));
            };
            *slot = Some(Open {
                db: sql::Store::sqlite(FAMILY, conn),
                ident,
            });
        }
        Ok(slot.as_mut())
    }

    /// Read the whole store (a missing database is an empty store; nothing is created).
    pub fn load(&self) -> ToolResult<Doc> {
        match self.with_db(false, |open| entries::load(&mut open.db, &self.place))? {
            Some(doc) => Ok(doc),
            None => self.without_db(),
        }
    }

    /// The store while there is no database: empty, or for a read-only server a `cron.json`
    /// read in place.
    fn without_db(&self) -> ToolResult<Doc> {
        if self.writable {
            Ok(Doc::default())
        } else {
            legacy::read_in_place(&self.files)
        }
    }

    /// Like [`Store::load`], but reuses the last read while nothing was committed since
    /// (by this process or another). For reads only; changes go through [`Store::write`].
    pub fn load_cached(&self) -> ToolResult<Arc<Doc>> {
        let got = self.with_db(false, |open| {
            let dv = open
                .db
                .int("PRAGMA data_version", &[])
                .map_err(|e| self.place.err(e))?;
            let key = (open.ident, dv, self.writes.load(Ordering::SeqCst));
            if let Some((k, doc)) = &*self.cache.locked()
                && *k == key
            {
                return Ok(doc.clone());
            }
            let doc = Arc::new(entries::load(&mut open.db, &self.place)?);
            *self.cache.locked() = Some((key, doc.clone()));
            Ok(doc)
        })?;
        match got {
            Some(doc) => Ok(doc),
            None => Ok(Arc::new(self.without_db()?)),
        }
    }

    /// Change the store in one IMMEDIATE transaction (waits up to 10 s for another
    /// process's, then `file_busy`). `f` returning an error changes nothing.
    pub fn write<T>(&self, f: impl FnOnce(&mut Changes<'_>) -> ToolResult<T>) -> ToolResult<T> {
        if !self.writable {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("the cron store {} is read-only", self.file.display()),
            ));
        }
        let out = self.with_db(true, |open| {
            let (out, _) = entries::commit(&mut open.db, &self.place, "", f)?;
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(out)
        })?;
        out.ok_or_else(|| ToolError::internal("the cron store could not be created"))
    }

    /// Append a run to the history under `cron.lock` (rotated at `--history-max-bytes`).
    pub fn record_run(&self, rec: &RunRecord) -> ToolResult<()> {
        let lock = self.lock()?;
        history::append(&self.files, self.runs_max_bytes, rec, &lock)
    }

    /// Runs newest first, optionally for one entry: `(page, total matching)`.
    pub fn read_runs(
        &self,
        id: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> ToolResult<(Vec<RunRecord>, usize)> {
        history::read(&self.files, id, offset, limit)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::Entry;
    use serde_json::json;
    use std::path::Path;

    fn entry(id: &str) -> Entry {
        serde_json::from_value(json!({"id": id, "schedule": "* * * * *", "message": "m"})).unwrap()
    }

    fn store_at(root: &Path) -> Store {
        Store::new(&PathPolicy::new(root, &[], false).unwrap(), 1 << 20)
    }

    fn add(s: &Store, id: &str) {
        s.write(|tx| tx.insert(&entry(id))).unwrap();
    }

    #[test]
    fn writes_are_all_or_nothing_and_ids_are_never_reused() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        assert!(!s.file.exists(), "reading creates nothing");
        assert_eq!(s.load().unwrap().slots.len(), 0);
        assert!(!s.file.exists());
        let id = s
            .write(|tx| {
                let id = tx.allocate_id()?;
                tx.insert(&entry(&id))?;
                Ok(id)
            })
            .unwrap();
        assert_eq!(id, "cron-1");
        let r: ToolResult<()> = s.write(|tx| {
            assert!(tx.remove("cron-1")?);
            tx.insert(&entry("cron-7"))?;
            Err(ToolError::invalid_field("id", "nope"))
        });
        assert!(r.is_err());
        let doc = s.load().unwrap();
        assert_eq!(doc.entries().count(), 1, "the failed change left nothing");
        assert!(doc.get("cron-1").is_some());
        s.write(|tx| {
            let id = tx.allocate_id()?;
            tx.insert(&entry(&id))
        })
        .unwrap();
        s.write(|tx| tx.remove("cron-2").map(|_| ())).unwrap();
        assert_eq!(s.write(|tx| tx.allocate_id()).unwrap(), "cron-3");
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 1);
        // A duplicate id is refused by the database, not silently doubled.
        assert!(s.write(|tx| tx.insert(&entry("cron-1"))).is_err());
        assert_eq!(s.load().unwrap().entries().count(), 1);
    }

    #[test]
    fn cached_load_sees_every_commit() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        assert_eq!(s.load_cached().unwrap().slots.len(), 0);
        add(&s, "cron-1");
        let a = s.load_cached().unwrap();
        assert_eq!(a.entries().count(), 1);
        assert!(
            Arc::ptr_eq(&a, &s.load_cached().unwrap()),
            "nothing committed: reused"
        );
        // A commit through another connection (another process).
        let other = store_at(d.path());
        add(&other, "cron-2");
        assert!(s.load_cached().unwrap().get("cron-2").is_some());
        // The database moved away (a reset by hand): a new one is started.
        drop(other);
        std::fs::rename(&s.file, d.path().join("old.db")).unwrap();
        let _ = std::fs::remove_file(s.dir.join("cron.db-wal"));
        let _ = std::fs::remove_file(s.dir.join("cron.db-shm"));
        assert_eq!(s.load_cached().unwrap().entries().count(), 0);
        add(&s, "cron-3");
        assert_eq!(store_at(d.path()).load().unwrap().entries().count(), 1);
    }

    #[test]
    fn a_read_only_store_reads_in_place_and_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path()).read_only(true);
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-1", "schedule": "@daily", "message": "a"}]"#,
        )
        .unwrap();
        assert_eq!(s.load_cached().unwrap().entries().count(), 1);
        assert_eq!(
            s.write(|tx| tx.insert(&entry("cron-2"))).unwrap_err().code,
            ErrorCode::CapabilityDenied
        );
        assert!(s.legacy.exists() && !s.file.exists());
        // With a database, it is read (a cron.json is then not looked at).
        store_at(d.path()).load().unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-5", "schedule": "@daily", "message": "b"}]"#,
        )
        .unwrap();
        let doc = s.load().unwrap();
        assert!(doc.get("cron-1").is_some() && doc.get("cron-5").is_none());
    }

    #[test]
    fn writers_on_separate_connections_never_collide() {
        let d = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let root = d.path().to_path_buf();
                std::thread::spawn(move || {
                    let s = store_at(&root);
                    (0..50)
                        .map(|_| {
                            s.write(|tx| {
                                let id = tx.allocate_id()?;
                                tx.insert(&entry(&id))?;
                                Ok(id)
                            })
                            .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<String> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 200);
        let s = store_at(d.path());
        assert_eq!(s.load().unwrap().entries().count(), 200);
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 200);
    }
}
