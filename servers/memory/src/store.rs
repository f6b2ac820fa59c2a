//! Where memories live: the SQLite file of one machine (`db.rs`, the default) or a shared
//! PostgreSQL (`pg.rs`, with `--database-url`). The tools see one [`Store`].

use kitbag_shared::state::sqlite::StateDb;

use crate::db::{self, Filter, Record, Stored};
use crate::pg::PgStore;

pub enum Store {
    Sqlite(StateDb),
    Postgres(Box<PgStore>),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{0}")]
    Postgres(#[from] postgres::Error),
}

pub type Backend<T> = Result<T, StoreError>;

/// A PostgreSQL call, noting a lost connection for the next one.
fn pg<T>(
    store: &mut PgStore,
    call: impl FnOnce(&mut PgStore) -> Result<T, postgres::Error>,
) -> Result<T, postgres::Error> {
    call(store).inspect_err(|e| store.failed(e))
}

impl Store {
    /// Insert a memory unless an identical one exists; make room or refuse when full.
    pub fn store(
        &mut self,
        content: &str,
        tags: &[String],
        scope: &str,
        session: Option<&str>,
        max_total: i64,
        evict_when_full: bool,
    ) -> Backend<Stored> {
        Ok(match self {
            Store::Sqlite(c) => {
                db::store(c, content, tags, scope, session, max_total, evict_when_full)?
            }
            Store::Postgres(p) => pg(p, |p| {
                p.store(content, tags, scope, session, max_total, evict_when_full)
            })?,
        })
    }

    /// Full-text candidates for `words` (every word first, then any), best first, with a
    /// relevance where higher is better; at most `want`.
    pub fn candidates(
        &mut self,
        words: &[String],
        filter: &Filter,
        limit: usize,
        want: usize,
    ) -> Backend<Vec<(Record, f64)>> {
        Ok(match self {
            Store::Sqlite(c) => db::candidates(c, words, filter, limit, want)?,
            Store::Postgres(p) => pg(p, |p| p.candidates(words, filter, limit, want))?,
        })
    }

    pub fn recent(&mut self, filter: &Filter, limit: usize) -> Backend<Vec<Record>> {
        Ok(match self {
            Store::Sqlite(c) => db::recent(c, filter, limit)?,
            Store::Postgres(p) => pg(p, |p| p.recent(filter, limit))?,
        })
    }

    /// Mark memories as recalled (recalled memories are kept longer).
    pub fn touch(&mut self, ids: &[String]) -> Backend<()> {
        match self {
            Store::Sqlite(c) => db::touch(c, ids)?,
            Store::Postgres(p) => pg(p, |p| p.touch(ids))?,
        }
        Ok(())
    }

    /// Deleted ids and unknown ids, in the order given.
    pub fn delete(&mut self, ids: &[String]) -> Backend<(Vec<String>, Vec<String>)> {
        Ok(match self {
            Store::Sqlite(c) => db::delete(c, ids)?,
            Store::Postgres(p) => pg(p, |p| p.delete(ids))?,
        })
    }

    pub fn count(&mut self) -> Backend<i64> {
        Ok(match self {
            Store::Sqlite(c) => db::count(c)?,
            Store::Postgres(p) => pg(p, |p| p.count())?,
        })
    }

    pub fn export(&mut self) -> Backend<Vec<Record>> {
        Ok(match self {
            Store::Sqlite(c) => db::export(c)?,
            Store::Postgres(p) => pg(p, |p| p.export())?,
        })
    }

    /// Insert records as they are; existing ones are skipped. How many were added.
    pub fn import(&mut self, records: &[Record]) -> Backend<usize> {
        Ok(match self {
            Store::Sqlite(c) => db::import(c, records)?,
            Store::Postgres(p) => pg(p, |p| p.import(records))?,
        })
    }
}
