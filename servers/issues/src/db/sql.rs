//! The two engines behind one small interface, so every query is written once: SQLite (a file
//! of one machine) and PostgreSQL (`--database-url`, shared by replicas).
//!
//! Queries use SQLite's `?N` placeholders; PostgreSQL gets them as `$N`. Rows come back as
//! [`Cells`] (integers and texts — the only types the schema has). What differs between the
//! engines — starting a write, full-text search, errors — is asked of [`Engine`].

use std::collections::HashMap;

use kitbag_shared::state::pg::PgConn;
use kitbag_shared::state::sqlite::StateDb;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rusqlite::TransactionBehavior;

/// The advisory lock every PostgreSQL write takes: writes are serialised as SQLite's
/// IMMEDIATE transactions serialise them, so issue numbers and the change log's order are the
/// order of commits.
const WRITE_LOCK: i64 = 0x6b69_7462_6167_0003;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A query argument either engine takes.
pub trait Param: rusqlite::ToSql + postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + postgres::types::ToSql + Sync + ?Sized> Param for T {}

/// One cell of a result row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// A result row.
#[derive(Debug, Clone)]
pub struct Cells(Vec<Cell>);

impl Cells {
    fn cell(&self, i: usize) -> ToolResult<&Cell> {
        self.0
            .get(i)
            .ok_or_else(|| ToolError::internal(format!("issues database: no column {i}")))
    }

    pub fn int(&self, i: usize) -> ToolResult<i64> {
        self.opt_int(i)?
            .ok_or_else(|| ToolError::internal(format!("issues database: column {i} is NULL")))
    }

    pub fn opt_int(&self, i: usize) -> ToolResult<Option<i64>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(*v)),
            Cell::Text(_) => Err(ToolError::internal(format!(
                "issues database: column {i} is text, not an integer"
            ))),
        }
    }

    pub fn text(&self, i: usize) -> ToolResult<String> {
        self.opt_text(i)?
            .ok_or_else(|| ToolError::internal(format!("issues database: column {i} is NULL")))
    }

    pub fn opt_text(&self, i: usize) -> ToolResult<Option<String>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(v) => Ok(Some(v.clone())),
            Cell::Int(_) => Err(ToolError::internal(format!(
                "issues database: column {i} is an integer, not text"
            ))),
        }
    }
}

/// Where queries run: a connection or a transaction of either engine.
pub trait Sql {
    fn engine(&self) -> Engine;
    /// Every row `sql` returns.
    fn rows(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Vec<Cells>>;
    /// Run a statement; the number of rows it changed.
    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64>;

    /// The first row, if any.
    fn row(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Option<Cells>> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }

    /// The integer in the first column of the one row `sql` returns (a count, a new seq).
    fn int(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<i64> {
        self.row(sql, args)?
            .ok_or_else(|| ToolError::internal("issues database: a query returned no row"))?
            .int(0)
    }
}

/// The store of one server: its connection, whichever the engine.
pub enum Store {
    Sqlite(StateDb),
    Postgres(Box<PgStore>),
}

/// A PostgreSQL connection and the statements it has prepared.
pub struct PgStore {
    pub conn: PgConn,
    prepared: HashMap<String, postgres::Statement>,
    /// The connection generation `prepared` belongs to.
    generation: u64,
}

impl PgStore {
    pub fn new(conn: PgConn) -> PgStore {
        PgStore {
            generation: conn.generation(),
            conn,
            prepared: HashMap::new(),
        }
    }

    /// The client (reconnected if the last call lost it) and the statements prepared on it.
    fn parts(
        &mut self,
    ) -> Result<
        (
            &mut postgres::Client,
            &mut HashMap<String, postgres::Statement>,
        ),
        postgres::Error,
    > {
        self.conn.client()?;
        if self.generation != self.conn.generation() {
            self.prepared.clear();
            self.generation = self.conn.generation();
        }
        let client = self.conn.client()?;
        Ok((client, &mut self.prepared))
    }
}

/// A write transaction of either engine; dropped without [`Tx::commit`] it rolls back.
pub enum Tx<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres {
        tx: postgres::Transaction<'a>,
        prepared: &'a mut HashMap<String, postgres::Statement>,
    },
}

impl Store {
    /// Begin a write: SQLite's IMMEDIATE transaction, or PostgreSQL's with the write lock.
    pub fn write(&mut self) -> ToolResult<Tx<'_>> {
        match self {
            Store::Sqlite(c) => c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map(Tx::Sqlite)
                .map_err(sqlite_error),
            // A write that loses the connection leaves it closed: the next call reconnects.
            Store::Postgres(p) => {
                let (client, prepared) = p.parts().map_err(pg_error)?;
                let mut tx = client.transaction().map_err(pg_error)?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                    .map_err(pg_error)?;
                Ok(Tx::Postgres { tx, prepared })
            }
        }
    }
}

impl Tx<'_> {
    pub fn commit(self) -> ToolResult<()> {
        match self {
            Tx::Sqlite(tx) => tx.commit().map_err(sqlite_error),
            Tx::Postgres { tx, .. } => tx.commit().map_err(pg_error),
        }
    }
}

impl Sql for Store {
    fn engine(&self) -> Engine {
        match self {
            Store::Sqlite(_) => Engine::Sqlite,
            Store::Postgres(_) => Engine::Postgres,
        }
    }

    fn rows(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Vec<Cells>> {
        match self {
            Store::Sqlite(c) => sqlite_rows(c, sql, args),
            Store::Postgres(p) => {
                let result = p
                    .parts()
                    .and_then(|(client, prepared)| pg_rows(client, prepared, sql, args));
                if let Err(e) = &result {
                    p.conn.failed(e);
                }
                result.map_err(pg_error)
            }
        }
    }

    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
        match self {
            Store::Sqlite(c) => sqlite_exec(c, sql, args),
            Store::Postgres(p) => {
                let result = p
                    .parts()
                    .and_then(|(client, prepared)| pg_exec(client, prepared, sql, args));
                if let Err(e) = &result {
                    p.conn.failed(e);
                }
                result.map_err(pg_error)
            }
        }
    }
}

impl Sql for Tx<'_> {
    fn engine(&self) -> Engine {
        match self {
            Tx::Sqlite(_) => Engine::Sqlite,
            Tx::Postgres { .. } => Engine::Postgres,
        }
    }

    fn rows(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Vec<Cells>> {
        match self {
            Tx::Sqlite(tx) => sqlite_rows(tx, sql, args),
            Tx::Postgres { tx, prepared } => pg_rows(tx, prepared, sql, args).map_err(pg_error),
        }
    }

    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
        match self {
            Tx::Sqlite(tx) => sqlite_exec(tx, sql, args),
            Tx::Postgres { tx, prepared } => pg_exec(tx, prepared, sql, args).map_err(pg_error),
        }
    }
}

fn sqlite_args<'a>(args: &'a [&'a dyn Param]) -> Vec<&'a dyn rusqlite::ToSql> {
    args.iter().map(|a| *a as &dyn rusqlite::ToSql).collect()
}

fn sqlite_rows(c: &rusqlite::Connection, sql: &str, args: &[&dyn Param]) -> ToolResult<Vec<Cells>> {
    let mut stmt = c.prepare_cached(sql).map_err(sqlite_error)?;
    let columns = stmt.column_count();
    let mut rows = stmt
        .query(sqlite_args(args).as_slice())
        .map_err(sqlite_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sqlite_error)? {
        let mut cells = Vec::with_capacity(columns);
        for i in 0..columns {
            use rusqlite::types::ValueRef;
            cells.push(match row.get_ref(i).map_err(sqlite_error)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(v) => Cell::Int(v),
                ValueRef::Text(t) | ValueRef::Blob(t) => {
                    Cell::Text(String::from_utf8_lossy(t).into_owned())
                }
                ValueRef::Real(v) => Cell::Int(v as i64),
            });
        }
        out.push(Cells(cells));
    }
    Ok(out)
}

fn sqlite_exec(c: &rusqlite::Connection, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
    c.prepare_cached(sql)
        .map_err(sqlite_error)?
        .execute(sqlite_args(args).as_slice())
        .map(|n| n as u64)
        .map_err(sqlite_error)
}

/// `?N` → `$N` (the queries have no `?` inside literals).
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn statement(
    client: &mut impl postgres::GenericClient,
    prepared: &mut HashMap<String, postgres::Statement>,
    sql: &str,
) -> Result<postgres::Statement, postgres::Error> {
    if let Some(s) = prepared.get(sql) {
        return Ok(s.clone());
    }
    let s = client.prepare(&dollar_placeholders(sql))?;
    prepared.insert(sql.to_owned(), s.clone());
    Ok(s)
}

fn pg_args<'a>(args: &'a [&'a dyn Param]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|a| *a as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

fn pg_rows(
    client: &mut impl postgres::GenericClient,
    prepared: &mut HashMap<String, postgres::Statement>,
    sql: &str,
    args: &[&dyn Param],
) -> Result<Vec<Cells>, postgres::Error> {
    use postgres::types::Type;
    let stmt = statement(client, prepared, sql)?;
    let rows = client.query(&stmt, &pg_args(args))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cells = Vec::with_capacity(row.len());
        for (i, column) in row.columns().iter().enumerate() {
            let ty = column.type_();
            let cell = if *ty == Type::INT8 {
                row.try_get::<_, Option<i64>>(i)?.map(Cell::Int)
            } else if *ty == Type::INT4 {
                row.try_get::<_, Option<i32>>(i)?
                    .map(|v| Cell::Int(i64::from(v)))
            } else {
                row.try_get::<_, Option<String>>(i)?.map(Cell::Text)
            };
            cells.push(cell.unwrap_or(Cell::Null));
        }
        out.push(Cells(cells));
    }
    Ok(out)
}

fn pg_exec(
    client: &mut impl postgres::GenericClient,
    prepared: &mut HashMap<String, postgres::Statement>,
    sql: &str,
    args: &[&dyn Param],
) -> Result<u64, postgres::Error> {
    let stmt = statement(client, prepared, sql)?;
    client.execute(&stmt, &pg_args(args))
}

/// A SQLite failure as a tool error (busy is the one a caller can act on).
pub fn sqlite_error(e: rusqlite::Error) -> ToolError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    {
        return ToolError::new(
            ErrorCode::FileBusy,
            "the issues database stayed locked by another process for 10 s; try again",
        );
    }
    ToolError::internal(format!("issues database: {e}"))
}

/// A PostgreSQL failure as a tool error; a lost connection says the next call reconnects.
pub fn pg_error(e: postgres::Error) -> ToolError {
    if e.as_db_error().is_none() {
        return ToolError::new(
            ErrorCode::BackendUnavailable,
            format!("issues database: {e}; the next call reconnects"),
        );
    }
    ToolError::internal(format!("issues database: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars() {
        assert_eq!(
            dollar_placeholders("SELECT a FROM t WHERE x = ?1 AND y = ?12 AND z <> '?'"),
            "SELECT a FROM t WHERE x = $1 AND y = $12 AND z <> '?'"
        );
    }

    #[test]
    fn cells_read_typed_and_refuse_the_wrong_type() {
        let row = Cells(vec![Cell::Int(4), Cell::Text("a".into()), Cell::Null]);
        assert_eq!(row.int(0).ok(), Some(4));
        assert_eq!(row.text(1).ok().as_deref(), Some("a"));
        assert_eq!(row.opt_text(2).ok(), Some(None));
        assert!(row.int(1).is_err());
        assert!(row.text(2).is_err());
        assert!(row.int(9).is_err());
    }
}
