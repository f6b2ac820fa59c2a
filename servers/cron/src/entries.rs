//! The entries' queries, written once for both engines over kitbag-shared's store
//! (`state::sql`), and [`Changes`], the one change in progress every tool and the scheduler
//! write through.
//!
//! The two layouts differ only in names (the SQLite file predates the shared database, whose
//! tables carry the family's prefix) and in where the id counter lives (a `meta` row, or the
//! one row of `cron_meta`); each statement below is written once, and [`queries!`] fills in
//! each layout's names. What else differs is asked of [`Engine`]:
//!
//! - the entry count: SQLite reads the `count` row its triggers keep (no scan under the cap);
//!   PostgreSQL counts, holding the `cron_meta` row;
//! - row locks: every write holds the family's write lock on either engine (SQLite's IMMEDIATE
//!   transaction, PostgreSQL's advisory lock), so reads in a change see the latest commit; on
//!   PostgreSQL the rows a change reads are also locked (`FOR UPDATE`), which keeps it
//!   serialised with servers of earlier versions that only take row locks;
//! - claiming a fire: with SQLite's single writer the caller's re-read of the entry is enough;
//!   PostgreSQL also inserts the unique `(entry_id, scheduled_at)` row of `cron_fires`;
//! - a committed change is announced with `NOTIFY` on PostgreSQL (`pg.rs` listens).

use chrono::{DateTime, SecondsFormat, Utc};
use kitbag_shared::state::sql::{Cells, Engine, Param, Sql, Store, Tx};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::Value;

use crate::model::{Doc, Entry, Outcome, Slot};
use crate::schema::{CHANNEL, PG_LOCK_WAIT};

/// The statements of one layout.
struct Queries {
    next_id: &'static str,
    next_id_held: &'static str,
    raise_next_id: &'static str,
    count: &'static str,
    all: &'static str,
    get: &'static str,
    taken: &'static str,
    put: &'static str,
    insert: &'static str,
    insert_invalid: &'static str,
    remove: &'static str,
    some_ids: &'static str,
}

/// Each statement, written once, in a layout's names: the entries table, the table, column and
/// row of the id counter, the row-lock clause, and the count of entries.
macro_rules! queries {
    (
        entries: $e:literal,
        counter: $n:literal in $m:literal where $w:literal,
        held: $l:literal,
        count: $c:literal $(,)?
    ) => {
        Queries {
            next_id: concat!("SELECT ", $n, " FROM ", $m, " WHERE ", $w),
            next_id_held: concat!("SELECT ", $n, " FROM ", $m, " WHERE ", $w, $l),
            raise_next_id: concat!(
                "UPDATE ",
                $m,
                " SET ",
                $n,
                " = CASE WHEN ",
                $n,
                " < ?1 THEN ?1 ELSE ",
                $n,
                " END WHERE ",
                $w
            ),
            count: $c,
            all: concat!("SELECT body, error FROM ", $e, " ORDER BY seq"),
            get: concat!(
                "SELECT body FROM ",
                $e,
                " WHERE id = ?1 AND error IS NULL",
                $l
            ),
            taken: concat!("SELECT 1 FROM ", $e, " WHERE id = ?1"),
            put: concat!("UPDATE ", $e, " SET body = ?2, error = NULL WHERE id = ?1"),
            insert: concat!("INSERT INTO ", $e, " (id, body) VALUES (?1, ?2)"),
            insert_invalid: concat!(
                "INSERT INTO ",
                $e,
                " (id, body, error) VALUES (NULL, ?1, ?2)"
            ),
            remove: concat!("DELETE FROM ", $e, " WHERE id = ?1"),
            some_ids: concat!(
                "SELECT id FROM ",
                $e,
                " WHERE id IS NOT NULL AND error IS NULL ORDER BY seq LIMIT ?1"
            ),
        }
    };
}

static SQLITE: Queries = queries! {
    entries: "entries",
    counter: "v" in "meta" where "k = 'next_id'",
    held: "",
    count: "SELECT v FROM meta WHERE k = 'count'",
};

static POSTGRES: Queries = queries! {
    entries: "cron_entries",
    counter: "next_id" in "cron_meta" where "one",
    held: " FOR UPDATE",
    count: "SELECT (SELECT count(*) FROM cron_entries) FROM cron_meta FOR UPDATE",
};

fn queries(engine: Engine) -> &'static Queries {
    match engine {
        Engine::Sqlite => &SQLITE,
        Engine::Postgres => &POSTGRES,
    }
}

/// Where the entries are (the database file, or the URL without credentials), to name in
/// messages: the shared layer's errors become the codes and words cron has always answered.
pub struct Place {
    engine: Engine,
    pub location: String,
}

impl Place {
    pub fn new(engine: Engine, location: String) -> Place {
        Place { engine, location }
    }

    /// A failure of the store as a tool error: `file_busy` when another process held it past
    /// the wait, else `io_error` naming the store.
    pub fn err(&self, e: ToolError) -> ToolError {
        let detail = e
            .message
            .strip_prefix("cron database: ")
            .unwrap_or(&e.message);
        let (code, message) = match (e.code, self.engine) {
            (ErrorCode::FileBusy, Engine::Sqlite) => (
                ErrorCode::FileBusy,
                format!(
                    "{} is held by another process for more than 10 s; try again",
                    self.location
                ),
            ),
            (ErrorCode::FileBusy, Engine::Postgres) => (
                ErrorCode::FileBusy,
                format!(
                    "the cron store {} is held by another server for more than {PG_LOCK_WAIT}; try again",
                    self.location
                ),
            ),
            (ErrorCode::Internal | ErrorCode::BackendUnavailable, Engine::Sqlite) => (
                ErrorCode::IoError,
                format!("cron store {}: {detail}", self.location),
            ),
            (ErrorCode::Internal | ErrorCode::BackendUnavailable, Engine::Postgres) => (
                ErrorCode::IoError,
                format!("cron database {}: {detail}", self.location),
            ),
            _ => return e,
        };
        ToolError::new(code, message)
    }
}

/// Every entry, in creation order, and the id counter.
pub fn load(conn: &mut impl Sql, place: &Place) -> ToolResult<Doc> {
    let q = queries(conn.engine());
    let next_id = match conn.row(q.next_id, &[]).map_err(|e| place.err(e))? {
        Some(row) => row.int(0).map_err(|e| place.err(e))?,
        None => 1,
    };
    let rows = conn.rows(q.all, &[]).map_err(|e| place.err(e))?;
    let mut slots = Vec::with_capacity(rows.len());
    for row in rows {
        let body = row.text(0).map_err(|e| place.err(e))?;
        let error = row.opt_text(1).map_err(|e| place.err(e))?;
        slots.push(Slot::of_row(&body, error));
    }
    Ok(Doc {
        next_id: next_id.max(1) as u64,
        slots,
    })
}

/// Run `f` as one change: begun with the store's write lock held, committed when it returns
/// `Ok` (and announced on PostgreSQL when it changed anything), rolled back otherwise.
/// `replica` names this server in claims and announcements. Answers `f`'s value and whether
/// anything changed.
pub fn commit<T>(
    store: &mut Store,
    place: &Place,
    replica: &str,
    f: impl FnOnce(&mut Changes<'_>) -> ToolResult<T>,
) -> ToolResult<(T, bool)> {
    let tx = store.write().map_err(|e| place.err(e))?;
    let mut changes = Changes {
        q: queries(tx.engine()),
        tx,
        place,
        replica,
        changed: false,
    };
    let out = f(&mut changes)?;
    let Changes {
        mut tx, changed, ..
    } = changes;
    if changed && tx.engine() == Engine::Postgres {
        // Delivered at commit, to every server that listens.
        tx.exec("SELECT pg_notify(?1, ?2)", &[&CHANNEL, &replica])
            .map_err(|e| place.err(e))?;
    }
    tx.commit().map_err(|e| place.err(e))?;
    Ok((out, changed))
}

/// One change in progress (a transaction): every method touches rows by key, so its cost does
/// not grow with the number of entries.
pub struct Changes<'a> {
    tx: Tx<'a>,
    q: &'static Queries,
    place: &'a Place,
    replica: &'a str,
    changed: bool,
}

fn encode(e: &Entry) -> ToolResult<String> {
    serde_json::to_string(e).map_err(|err| ToolError::internal(format!("entry encoding: {err}")))
}

/// An instant as PostgreSQL reads it (the client is built without chrono support, so
/// instants travel as text).
fn pg_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl Changes<'_> {
    /// Run a statement of this change; the rows it changed.
    pub fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
        let n = self.tx.exec(sql, args).map_err(|e| self.place.err(e))?;
        if n > 0 {
            self.changed = true;
        }
        Ok(n)
    }

    /// The first row `sql` returns in this change.
    pub fn row(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Option<Cells>> {
        self.tx.row(sql, args).map_err(|e| self.place.err(e))
    }

    fn int_of(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Option<i64>> {
        match self.row(sql, args)? {
            Some(row) => row.int(0).map(Some).map_err(|e| self.place.err(e)),
            None => Ok(None),
        }
    }

    /// Rows in the store (unparsable ones included).
    pub fn count(&mut self) -> ToolResult<usize> {
        Ok(self.int_of(self.q.count, &[])?.unwrap_or(0).max(0) as usize)
    }

    /// The entry with this id, held for this change (None when absent or its stored body
    /// does not parse).
    pub fn get(&mut self, id: &str) -> ToolResult<Option<Entry>> {
        let Some(row) = self.row(self.q.get, &[&id])? else {
            return Ok(None);
        };
        let body = row.text(0).map_err(|e| self.place.err(e))?;
        Ok(serde_json::from_str(&body).ok())
    }

    /// Replace a stored entry (by its id); false when there is none.
    pub fn put(&mut self, e: &Entry) -> ToolResult<bool> {
        let body = encode(e)?;
        Ok(self.exec(self.q.put, &[&e.id, &body])? > 0)
    }

    /// Add an entry after all others (its id must be new: a duplicate is refused).
    pub fn insert(&mut self, e: &Entry) -> ToolResult<()> {
        let body = encode(e)?;
        self.exec(self.q.insert, &[&e.id, &body])?;
        Ok(())
    }

    /// Add an entry kept as written because it did not parse (no id, its error).
    pub fn insert_invalid(&mut self, raw: &Value, error: &str) -> ToolResult<()> {
        self.exec(self.q.insert_invalid, &[&raw.to_string(), &error])?;
        Ok(())
    }

    /// Delete an entry; false when there is none.
    pub fn remove(&mut self, id: &str) -> ToolResult<bool> {
        Ok(self.exec(self.q.remove, &[&id])? > 0)
    }

    /// Hand out the next `cron-N` id (never one used before in this store: an id written by
    /// hand is skipped).
    pub fn allocate_id(&mut self) -> ToolResult<String> {
        let mut n = self.int_of(self.q.next_id_held, &[])?.unwrap_or(0).max(1);
        loop {
            let id = format!("cron-{n}");
            if self.row(self.q.taken, &[&id])?.is_none() {
                self.raise_next_id(n as u64 + 1)?;
                return Ok(id);
            }
            n += 1;
        }
    }

    /// Make the id counter at least `n`.
    pub fn raise_next_id(&mut self, n: u64) -> ToolResult<()> {
        self.exec(self.q.raise_next_id, &[&(n as i64)])?;
        Ok(())
    }

    /// The first few ids, for an error message that names some.
    pub fn some_ids(&mut self, n: usize) -> ToolResult<Vec<String>> {
        let rows = self
            .tx
            .rows(self.q.some_ids, &[&(n as i64)])
            .map_err(|e| self.place.err(e))?;
        rows.iter()
            .map(|r| r.text(0).map_err(|e| self.place.err(e)))
            .collect()
    }

    /// Claim the fire of `id` at `scheduled_at` for this process: false when another process
    /// holds it already. The caller has re-read the entry in this change.
    pub fn claim_fire(
        &mut self,
        id: &str,
        scheduled_at: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: Outcome,
    ) -> ToolResult<bool> {
        match self.tx.engine() {
            // The IMMEDIATE transaction is the only writer: the caller's re-read of
            // `last_scheduled_at` cannot be overtaken.
            Engine::Sqlite => Ok(true),
            // One insert wins, whatever the clocks of the replicas say.
            Engine::Postgres => {
                let replica = self.replica;
                let won = self.exec(
                    "INSERT INTO cron_fires (entry_id, scheduled_at, fired_at, outcome, replica)
                     VALUES (?1, ?2::text::timestamptz, ?3::text::timestamptz, ?4, ?5)
                     ON CONFLICT (entry_id, scheduled_at) DO NOTHING",
                    &[
                        &id,
                        &pg_time(scheduled_at),
                        &pg_time(fired_at),
                        &outcome.as_str(),
                        &replica,
                    ],
                )?;
                Ok(won == 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::dir::StoreDir;
    use crate::schema::{self, FAMILY};
    use kitbag_shared::paths::PathPolicy;
    use kitbag_testkit::pg::PgServer;
    use serde_json::json;

    fn entry(id: &str) -> Entry {
        serde_json::from_value(json!({"id": id, "schedule": "* * * * *", "message": "m"})).unwrap()
    }

    fn sqlite(root: &std::path::Path) -> (Store, Place) {
        let dir = StoreDir::new(&PathPolicy::new(root, &[], false).unwrap());
        let db = schema::open_sqlite(dir.made().unwrap(), true, &dir.shown("cron.db")).unwrap();
        let place = Place::new(Engine::Sqlite, "cron.db".into());
        (Store::sqlite(FAMILY, db), place)
    }

    fn postgres(url: &str) -> (Store, Place) {
        let conn = schema::open_postgres(url).unwrap();
        let place = Place::new(Engine::Postgres, conn.redacted_url());
        (Store::postgres(FAMILY, conn), place)
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Every query of a change, the same calls on either engine.
    fn every_change_on(db: &mut Store, place: &Place) {
        let (ids, changed) = commit(db, place, "r1", |tx| {
            let a = tx.allocate_id()?;
            tx.insert(&entry(&a))?;
            // An id written by hand where the counter points next is skipped.
            tx.insert(&entry("cron-2"))?;
            let b = tx.allocate_id()?;
            tx.insert(&entry(&b))?;
            tx.insert_invalid(&json!({"schedule": "oops"}), "`id` is missing")?;
            Ok((a, b))
        })
        .unwrap();
        assert!(changed);
        assert_eq!(ids, ("cron-1".to_string(), "cron-3".to_string()));
        let (_, changed) = commit(db, place, "r1", |tx| {
            assert_eq!(tx.count()?, 4);
            assert_eq!(tx.some_ids(2)?, vec!["cron-1", "cron-2"]);
            assert!(tx.get("nope")?.is_none());
            Ok(())
        })
        .unwrap();
        assert!(!changed, "reads change nothing");
        commit(db, place, "r1", |tx| {
            let mut e = tx.get("cron-2")?.unwrap();
            e.message = "changed".into();
            assert!(tx.put(&e)?);
            assert!(!tx.put(&entry("cron-9"))?);
            assert!(tx.remove("cron-1")?);
            assert!(!tx.remove("cron-1")?);
            tx.raise_next_id(40)?;
            tx.raise_next_id(7)?; // never lowered
            Ok(())
        })
        .unwrap();
        // A duplicate id is refused by the database and the change rolls back whole.
        let e = commit(db, place, "r1", |tx| {
            tx.remove("cron-3")?;
            tx.insert(&entry("cron-2"))
        })
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::IoError, "{}", e.message);
        let doc = load(db, place).unwrap();
        assert_eq!(doc.next_id, 40);
        assert_eq!(doc.entries().count(), 2);
        assert_eq!(doc.get("cron-2").unwrap().message, "changed");
        assert!(matches!(&doc.slots[2], Slot::Invalid { error, .. } if error.contains("`id`")));
        let at = t("2026-05-01T08:00:00Z");
        let (claims, _) = commit(db, place, "r1", |tx| {
            Ok((
                tx.claim_fire("cron-2", at, at, Outcome::Fired)?,
                tx.claim_fire("cron-2", at, at, Outcome::Fired)?,
            ))
        })
        .unwrap();
        match db.engine() {
            // The caller's re-read is the claim.
            Engine::Sqlite => assert_eq!(claims, (true, true)),
            // The unique row: the second insert of the same instant loses.
            Engine::Postgres => assert_eq!(claims, (true, false)),
        }
    }

    #[test]
    fn every_change_on_sqlite() {
        let d = tempfile::tempdir().unwrap();
        let (mut db, place) = sqlite(d.path());
        every_change_on(&mut db, &place);
    }

    #[test]
    fn every_change_on_postgres() {
        let Some(pg) = PgServer::start() else {
            return;
        };
        let (mut db, place) = postgres(&pg.database("cron"));
        every_change_on(&mut db, &place);
        // One claim row: the losing insert added none.
        assert_eq!(
            pg.psql_in("cron", "SELECT count(*) FROM cron_fires")
                .unwrap(),
            "1"
        );
    }

    #[test]
    fn a_postgres_write_waiting_past_its_lock_timeout_is_busy() {
        let Some(pg) = PgServer::start() else {
            return;
        };
        let url = pg.database("cron");
        let (mut holder, place) = postgres(&url);
        let (mut waiter, _) = postgres(&url);
        waiter.exec("SET lock_timeout = '200ms'", &[]).unwrap();
        let held = holder.write().unwrap();
        let e = commit(&mut waiter, &place, "r2", |tx| tx.count()).unwrap_err();
        assert_eq!(e.code, ErrorCode::FileBusy, "{}", e.message);
        assert!(
            e.message.contains("held by another server"),
            "{}",
            e.message
        );
        drop(held);
        assert_eq!(
            commit(&mut waiter, &place, "r2", |tx| tx.count())
                .unwrap()
                .0,
            0
        );
    }

    #[test]
    fn shared_errors_become_crons() {
        let sqlite = Place::new(Engine::Sqlite, "/r/.kitbag/cron.db".into());
        let busy = sqlite.err(ToolError::new(ErrorCode::FileBusy, "x"));
        assert_eq!(busy.code, ErrorCode::FileBusy);
        assert!(
            busy.message.starts_with("/r/.kitbag/cron.db is held"),
            "{}",
            busy.message
        );
        let io = sqlite.err(ToolError::internal("cron database: disk I/O error"));
        assert_eq!(io.code, ErrorCode::IoError);
        assert_eq!(io.message, "cron store /r/.kitbag/cron.db: disk I/O error");
        let pg = Place::new(Engine::Postgres, "postgres://u@h/db".into());
        let lost = pg.err(ToolError::new(
            ErrorCode::BackendUnavailable,
            "cron database: closed; the next call reconnects",
        ));
        assert_eq!(lost.code, ErrorCode::IoError);
        assert_eq!(
            lost.message,
            "cron database postgres://u@h/db: closed; the next call reconnects"
        );
        // A tool's own error passes unchanged.
        let own = pg.err(ToolError::invalid_field("id", "taken"));
        assert_eq!(own.code, ErrorCode::InvalidParams);
    }
}
