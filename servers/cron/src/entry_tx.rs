//! One change in progress, whichever store holds the entries: the SQLite store's transaction
//! (`store.rs`, through `backend.rs`) and PostgreSQL's (`pg.rs`) both implement [`EntryTx`], and
//! tools change entries through it (`Backend::write`).

use chrono::{DateTime, Utc};
use kitbag_shared::ToolResult;

use crate::store::{Entry, Outcome};

/// One change in progress (a transaction): every method touches rows by key.
pub trait EntryTx {
    /// Rows in the store (unparsable ones included).
    fn count(&self) -> ToolResult<usize>;
    /// The entry with this id, held for this change (None when absent or unparsable).
    fn get(&self, id: &str) -> ToolResult<Option<Entry>>;
    /// Replace a stored entry (by its id); false when there is none.
    fn put(&self, e: &Entry) -> ToolResult<bool>;
    /// Add an entry after all others (its id must be new).
    fn insert(&self, e: &Entry) -> ToolResult<()>;
    /// Delete an entry; false when there is none.
    fn remove(&self, id: &str) -> ToolResult<bool>;
    /// Hand out the next `cron-N` id (never one used before in this store).
    fn allocate_id(&self) -> ToolResult<String>;
    /// The first few ids, for an error message that names some.
    fn some_ids(&self, n: usize) -> ToolResult<Vec<String>>;
    /// Claim the fire of `id` at `scheduled_at` for this process: false when another process
    /// holds it already. The caller has re-read the entry in this change; SQLite's one writer
    /// at a time makes that check enough there, PostgreSQL inserts a unique row.
    fn claim_fire(
        &self,
        id: &str,
        scheduled_at: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: Outcome,
    ) -> ToolResult<bool>;
}
