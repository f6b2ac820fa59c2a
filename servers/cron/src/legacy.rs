//! `cron.json`: the store of earlier versions, or entries written by hand in the seed's shape,
//! imported into the SQLite store on sight and kept as `cron.json.bak` (`.bak.2`, …; never
//! overwritten).
//!
//! Entries replace those with the same id, the others are added, `next_id` is kept (ids are
//! never reused), and an entry that does not parse is kept as written and reported, never
//! dropped. The file is claimed by renaming it to `cron.json.importing` under the `cron.lock`
//! flock (one process wins), and the import records the file's identity in the transaction
//! that adds the entries, so it happens exactly once even when the process dies half-way. A
//! file that does not parse is left where it is and reported on every call until it is fixed.
//! A read-only server reads the file in place instead ([`read_in_place`]).

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use kitbag_shared::state::sql::Store;
use kitbag_shared::state::{OFlags, StateDir};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::{Map, Value, json};

use crate::dir::{DB, IMPORTING, LEGACY, StoreDir, io_err};
use crate::entries::{self, Place};
use crate::file_lock::FileLock;
use crate::model::{Doc, Entry, Slot};

/// Why a `cron.json` cannot be read as a store.
#[derive(Debug)]
pub enum DocError {
    Json(serde_json::Error),
    EntriesNotArray,
    NotAStore,
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Json(e) => e.fmt(f),
            DocError::EntriesNotArray => f.write_str("`entries` must be an array"),
            DocError::NotAStore => f.write_str(
                "write an array of entries, one entry object ({\"id\": \"cron-1\", \"schedule\": \"*/5 * * * *\", \"message\": \"…\"}), or {\"next_id\": N, \"entries\": [...]}",
            ),
        }
    }
}

impl std::error::Error for DocError {}

/// What to write for an entry of a hand-written `cron.json` without a usable id.
const ID_HINT: &str =
    "give each entry an `id` no other entry has (e.g. \"cron-7\"), or create it with cron_create";

/// An object holding entry fields (`schedule`, `message`, `id`): one entry, not a store.
fn looks_like_entry(m: &Map<String, Value>) -> bool {
    ["schedule", "message", "id"]
        .iter()
        .any(|k| m.contains_key(*k))
}

impl Doc {
    pub fn parse(text: &str) -> Result<Self, DocError> {
        if text.trim().is_empty() {
            return Ok(Doc::default());
        }
        let v: Value = serde_json::from_str(text).map_err(DocError::Json)?;
        let (next_id, items) = match v {
            Value::Array(items) => (0, items),
            // One entry written as the seed prints it: that entry.
            Value::Object(m) if !m.contains_key("entries") && looks_like_entry(&m) => {
                (0, vec![Value::Object(m)])
            }
            Value::Object(mut m) => {
                let next = m.get("next_id").and_then(Value::as_u64).unwrap_or(0);
                match m.remove("entries") {
                    Some(Value::Array(items)) => (next, items),
                    // `{}` or `{"next_id": N}`: a store without entries.
                    None if m.keys().all(|k| k == "next_id") => (next, Vec::new()),
                    None => return Err(DocError::NotAStore),
                    Some(_) => return Err(DocError::EntriesNotArray),
                }
            }
            _ => return Err(DocError::NotAStore),
        };
        let slots = items
            .into_iter()
            .map(|raw| match serde_json::from_value::<Entry>(raw.clone()) {
                Ok(e) if e.id.trim().is_empty() => Slot::Invalid {
                    raw,
                    error: format!("`id` is empty; {ID_HINT}"),
                },
                Err(_) if raw.is_object() && raw.get("id").is_none() => Slot::Invalid {
                    raw,
                    error: format!("`id` is missing; {ID_HINT}"),
                },
                Ok(e) => Slot::Entry(Box::new(e)),
                Err(e) => Slot::Invalid {
                    raw,
                    error: e.to_string(),
                },
            })
            .collect();
        let mut doc = Doc { next_id, slots };
        let max = doc
            .entries()
            .filter_map(|e| e.id.strip_prefix("cron-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        doc.next_id = doc.next_id.max(max + 1);
        Ok(doc)
    }

    pub fn to_json(&self) -> String {
        let entries: Vec<Value> = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Entry(e) => serde_json::to_value(e).unwrap_or(Value::Null),
                Slot::Invalid { raw, .. } => raw.clone(),
            })
            .collect();
        let v = json!({ "next_id": self.next_id.max(1), "entries": entries });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }
}

/// Import a waiting `cron.json` (or finish the import a dead process left claimed) into the
/// database `open` gives, under the lock `lock` takes; nothing to do when there is none.
/// `writes` counts this process's commits (its cached reads depend on them).
pub fn import<'s>(
    dir: &StoreDir,
    place: &Place,
    writes: &AtomicU64,
    lock: impl FnOnce() -> ToolResult<FileLock>,
    open: impl FnOnce() -> ToolResult<&'s mut Store>,
) -> ToolResult<()> {
    let Some(state) = dir.open(false)? else {
        return Ok(());
    };
    let exists = |name: &str| {
        state
            .exists(name)
            .map_err(|e| io_err("cannot read", &dir.shown(name), &e))
    };
    if !exists(IMPORTING)? {
        match state.stat(LEGACY) {
            Ok(Some(st)) if st.st_size > 0 => {}
            Ok(_) => return Ok(()), // missing, or empty: being written, nothing to import
            Err(e) => return Err(io_err("cannot read", &dir.shown(LEGACY), &e)),
        }
    }
    let _lock = lock()?;
    let leftover = exists(IMPORTING)?;
    if !leftover && !claim(dir, &state)? {
        return Ok(());
    }
    let claimed = dir.shown(IMPORTING);
    let (bytes, m) =
        read_file(&state, IMPORTING).map_err(|e| io_err("cannot read", &claimed, &e))?;
    let doc = match Doc::parse(&String::from_utf8_lossy(&bytes)) {
        Ok(d) => d,
        Err(e) => {
            unclaim(&state);
            return Err(invalid(dir, &e));
        }
    };
    let mark = import_mark(&bytes, &m);
    let imported = entries::commit(open()?, place, "", |tx| {
        let done = match tx.row("SELECT v FROM meta WHERE k = 'import'", &[])? {
            Some(row) => row
                .opt_text(0)
                .map_err(|e| place.err(e))?
                .unwrap_or_default(),
            None => String::new(),
        };
        // A leftover claim whose import was committed: the process died before moving the
        // file away. Do not import it twice.
        if leftover && done == mark {
            return Ok(0);
        }
        for s in &doc.slots {
            match s {
                Slot::Entry(e) => {
                    if !tx.put(e)? {
                        tx.insert(e)?;
                    }
                }
                Slot::Invalid { raw, error } => tx.insert_invalid(raw, error)?,
            }
        }
        tx.raise_next_id(doc.next_id)?;
        tx.exec("UPDATE meta SET v = ?1 WHERE k = 'import'", &[&mark])?;
        Ok(doc.slots.len())
    })?
    .0;
    writes.fetch_add(1, Ordering::SeqCst);
    let backup = keep_backup(dir, &state)?;
    tracing::info!(
        "imported {imported} entries from {} into {}; the file is kept as {}",
        dir.shown(LEGACY).display(),
        dir.shown(DB).display(),
        backup.display()
    );
    Ok(())
}

/// Check `cron.json` and claim it by renaming it to `IMPORTING`; false when there is nothing
/// to import (gone, or empty).
fn claim(dir: &StoreDir, state: &StateDir) -> ToolResult<bool> {
    let text = match read_file(state, LEGACY) {
        Ok(t) => String::from_utf8_lossy(&t.0).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("cannot read", &dir.shown(LEGACY), &e)),
    };
    if text.trim().is_empty() {
        return Ok(false);
    }
    // A broken file is left as it is, and reported on every call until it is fixed.
    Doc::parse(&text).map_err(|e| invalid(dir, &e))?;
    match state.rename(LEGACY, IMPORTING) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("cannot move", &dir.shown(LEGACY), &e)),
    }
}

fn invalid(dir: &StoreDir, e: &DocError) -> ToolError {
    ToolError::new(
        ErrorCode::IoError,
        format!(
            "{} is not a valid cron store ({e}); fix or move it — it was not imported and nothing was changed",
            dir.shown(LEGACY).display()
        ),
    )
}

/// Put a claimed file back (unless a new `cron.json` appeared meanwhile).
fn unclaim(state: &StateDir) {
    if state.hard_link(IMPORTING, LEGACY).is_ok() {
        let _ = state.remove(IMPORTING);
    }
}

/// Move an imported file to the first free `cron.json.bak[.N]`, never over another.
fn keep_backup(dir: &StoreDir, state: &StateDir) -> ToolResult<std::path::PathBuf> {
    let claimed = dir.shown(IMPORTING);
    for n in 1..10_000 {
        let name = if n == 1 {
            "cron.json.bak".to_string()
        } else {
            format!("cron.json.bak.{n}")
        };
        match state.hard_link(IMPORTING, &name) {
            Ok(()) => {
                state
                    .remove(IMPORTING)
                    .map_err(|e| io_err("cannot remove", &claimed, &e))?;
                return Ok(dir.shown(&name));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("cannot keep a backup of", &claimed, &e)),
        }
    }
    Err(ToolError::new(
        ErrorCode::IoError,
        format!("too many cron.json.bak files in {}", dir.path.display()),
    ))
}

/// The entries of a `cron.json`, read where it is (a read-only server without a database).
pub fn read_in_place(dir: &StoreDir) -> ToolResult<Doc> {
    let Some(state) = dir.open(false)? else {
        return Ok(Doc::default());
    };
    let text = match read_file(&state, LEGACY) {
        Ok((t, _)) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Doc::default()),
        Err(e) => return Err(io_err("cannot read", &dir.shown(LEGACY), &e)),
    };
    Doc::parse(&text).map_err(|e| invalid(dir, &e))
}

/// What identifies one claimed file's content: device, inode, size, mtime and a hash.
fn import_mark(bytes: &[u8], m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}:{}:{}:{}:{:016x}",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime_nsec() + m.mtime() * 1_000_000_000,
        xxhash_rust::xxh3::xxh3_64(bytes)
    )
}

/// Read the whole file `name` in `dir` (a link there is refused), with its metadata.
fn read_file(dir: &StateDir, name: &str) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    let mut f = dir.open_file(name, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let m = f.metadata()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok((bytes, m))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::Store;
    use kitbag_shared::paths::PathPolicy;
    use std::path::Path;

    fn entry(id: &str) -> Entry {
        serde_json::from_value(json!({"id": id, "schedule": "* * * * *", "message": "m"})).unwrap()
    }

    fn store_at(root: &Path) -> Store {
        Store::new(&PathPolicy::new(root, &[], false).unwrap(), 1 << 20)
    }

    fn importing(s: &Store) -> std::path::PathBuf {
        s.dir.join(IMPORTING)
    }

    #[test]
    fn seed_shape_and_bare_array_load_and_unknown_or_bad_entries_survive() {
        let text = r#"[
          {"id": "cron-1", "schedule": "*/5 * * * *", "message": "Check", "session": "health-check", "enabled": true, "owner": "me"},
          {"schedule": "oops"}
        ]"#;
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.entries().count(), 1);
        let e = doc.get("cron-1").unwrap();
        assert_eq!(e.session(), "health-check");
        assert!(e.recurring && e.catch_up && e.enabled);
        assert_eq!(doc.next_id, 2);
        let out = doc.to_json();
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["entries"][0]["owner"], "me", "unknown fields are kept");
        assert_eq!(
            back["entries"][1],
            json!({"schedule": "oops"}),
            "bad entries are kept as written"
        );
        assert!(matches!(&doc.slots[1], Slot::Invalid { error, .. } if error.contains("id")));
    }

    #[test]
    fn ids_are_never_reused() {
        let mut doc = Doc::default();
        assert_eq!(doc.allocate_id(), "cron-1");
        doc.slots.push(Slot::Entry(Box::new(entry("cron-1"))));
        assert_eq!(doc.allocate_id(), "cron-2");
        doc.slots.clear();
        assert_eq!(doc.allocate_id(), "cron-3");
        let again = Doc::parse(&doc.to_json()).unwrap();
        assert_eq!(again.next_id, 4);
    }

    fn add(s: &Store, id: &str) {
        s.write(|tx| tx.insert(&entry(id))).unwrap();
    }

    #[test]
    fn a_cron_json_is_imported_once_and_kept_as_a_backup() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        std::fs::create_dir_all(&s.dir).unwrap();
        let text = r#"{"next_id": 40, "entries": [
          {"id": "cron-3", "schedule": "*/5 * * * *", "message": "Check", "owner": "me"},
          {"schedule": "oops"},
          {"id": "cron-9", "schedule": "@daily", "message": "Digest", "enabled": false}
        ]}"#;
        std::fs::write(&s.legacy, text).unwrap();
        let doc = s.load_cached().unwrap();
        assert_eq!(doc.entries().count(), 2);
        assert!(
            matches!(&doc.slots[1], Slot::Invalid { raw, .. } if raw == &json!({"schedule": "oops"}))
        );
        assert_eq!(
            doc.get("cron-3").unwrap().extra["owner"],
            "me",
            "unknown fields are kept"
        );
        assert!(!s.legacy.exists());
        let bak = s.dir.join("cron.json.bak");
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), text);
        assert_eq!(
            s.write(|tx| tx.allocate_id()).unwrap(),
            "cron-40",
            "next_id is kept"
        );
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 3);

        // Another store object (another connection, as another process) sees it too.
        let other = store_at(d.path());
        assert_eq!(other.load().unwrap().entries().count(), 2);

        // A later cron.json replaces entries by id and adds the others; the first backup stays.
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-9", "schedule": "@hourly", "message": "Changed by hand"},
                {"id": "cron-50", "schedule": "@hourly", "message": "New"}]"#,
        )
        .unwrap();
        let doc = other.load_cached().unwrap();
        assert_eq!(doc.entries().count(), 3);
        assert_eq!(doc.get("cron-9").unwrap().message, "Changed by hand");
        assert!(doc.get("cron-9").unwrap().enabled);
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), text);
        assert!(s.dir.join("cron.json.bak.2").exists());
        assert_eq!(s.write(|tx| tx.allocate_id()).unwrap(), "cron-51");
    }

    #[test]
    fn a_half_done_import_is_finished_exactly_once() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-1", "schedule": "@daily", "message": "a"}]"#,
        )
        .unwrap();
        assert_eq!(s.load().unwrap().entries().count(), 1);
        // A change after the import that a second import of the same file would undo.
        s.write(|tx| {
            let mut e = tx.get("cron-1")?.unwrap();
            e.message = "changed".into();
            tx.put(&e).map(|_| ())
        })
        .unwrap();
        // The importer died after its commit, before moving the file away.
        std::fs::rename(s.dir.join("cron.json.bak"), importing(&s)).unwrap();
        let fresh = store_at(d.path());
        let doc = fresh.load().unwrap();
        assert_eq!(
            doc.get("cron-1").unwrap().message,
            "changed",
            "not imported twice"
        );
        assert!(!importing(&s).exists());
        assert!(s.dir.join("cron.json.bak").exists());
        // The importer died before its commit: the claimed file is imported.
        std::fs::write(
            importing(&s),
            r#"[{"id": "cron-2", "schedule": "@daily", "message": "b"}]"#,
        )
        .unwrap();
        assert_eq!(fresh.load().unwrap().entries().count(), 2);
        assert!(!importing(&s).exists());
        assert!(s.dir.join("cron.json.bak.2").exists());
    }

    #[test]
    fn a_broken_cron_json_is_reported_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        add(&s, "cron-1");
        std::fs::write(&s.legacy, "{ not json").unwrap();
        let e = s.write(|tx| tx.insert(&entry("cron-2"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::IoError);
        assert!(e.message.contains("cron.json"), "{}", e.message);
        assert_eq!(s.load_cached().unwrap_err().code, ErrorCode::IoError);
        assert_eq!(std::fs::read_to_string(&s.legacy).unwrap(), "{ not json");
        std::fs::remove_file(&s.legacy).unwrap();
        assert_eq!(
            s.load().unwrap().entries().count(),
            1,
            "nothing was changed"
        );
    }
}
