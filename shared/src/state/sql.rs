//! One store on either engine, so every query of a family is written once: SQLite (a file of
//! one machine, opened by [`super::schema`]) and PostgreSQL (`--database-url`, shared by
//! replicas, migrated by [`super::pg::migrate`]).
//!
//! Queries use SQLite's `?N` placeholders; PostgreSQL gets them as `$N`. Rows come back as
//! [`Cells`] (integers, reals and texts). What differs between the engines — starting a
//! write, full-text search, errors — is asked of [`Engine`].

use std::collections::HashMap;

use rusqlite::TransactionBehavior;

use super::pg::PgConn;
use super::sqlite::StateDb;
use crate::{ErrorCode, ToolError, ToolResult};

/// The family a store belongs to: it names the store in errors and keys the advisory lock
/// every PostgreSQL write takes. Writes are serialised as SQLite's IMMEDIATE transactions
/// serialise them, so numbers a family hands out follow the order of commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// `issues`: errors say "issues database: …".
    pub name: &'static str,
    /// The PostgreSQL advisory lock of this family's writes (one per family, shared by every
    /// process on the database).
    pub write_lock: i64,
}

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
    Real(f64),
    Text(String),
}

/// A result row.
#[derive(Debug, Clone)]
pub struct Cells {
    family: &'static str,
    cells: Vec<Cell>,
}

impl Cells {
    fn cell(&self, i: usize) -> ToolResult<&Cell> {
        self.cells
            .get(i)
            .ok_or_else(|| self.wrong(format_args!("no column {i}")))
    }

    fn wrong(&self, what: std::fmt::Arguments<'_>) -> ToolError {
        ToolError::internal(format!("{} database: {what}", self.family))
    }

    pub fn int(&self, i: usize) -> ToolResult<i64> {
        self.opt_int(i)?
            .ok_or_else(|| self.wrong(format_args!("column {i} is NULL")))
    }

    pub fn opt_int(&self, i: usize) -> ToolResult<Option<i64>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(*v)),
            _ => Err(self.wrong(format_args!("column {i} is not an integer"))),
        }
    }

    /// A real; an integer column reads as one too.
    pub fn real(&self, i: usize) -> ToolResult<f64> {
        match self.cell(i)? {
            Cell::Real(v) => Ok(*v),
            Cell::Int(v) => Ok(*v as f64),
            _ => Err(self.wrong(format_args!("column {i} is not a number"))),
        }
    }

    pub fn text(&self, i: usize) -> ToolResult<String> {
        self.opt_text(i)?
            .ok_or_else(|| self.wrong(format_args!("column {i} is NULL")))
    }

    pub fn opt_text(&self, i: usize) -> ToolResult<Option<String>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.wrong(format_args!("column {i} is not text"))),
        }
    }
}

/// Where queries run: a connection or a transaction of either engine.
pub trait Sql {
    fn engine(&self) -> Engine;
    fn family(&self) -> Family;
    /// Call `each` on the rows `sql` returns, as they are read, until it answers false (a
    /// filter applied in code stops reading once it has enough).
    fn each(
        &mut self,
        sql: &str,
        args: &[&dyn Param],
        each: &mut dyn FnMut(Cells) -> ToolResult<bool>,
    ) -> ToolResult<()>;
    /// Run a statement; the number of rows it changed.
    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64>;

    /// Every row `sql` returns.
    fn rows(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Vec<Cells>> {
        let mut out = Vec::new();
        self.each(sql, args, &mut |row| {
            out.push(row);
            Ok(true)
        })?;
        Ok(out)
    }

    /// The first row, if any.
    fn row(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<Option<Cells>> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }

    /// The integer in the first column of the one row `sql` returns (a count, a new seq).
    fn int(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<i64> {
        let family = self.family().name;
        self.row(sql, args)?
            .ok_or_else(|| {
                ToolError::internal(format!("{family} database: a query returned no row"))
            })?
            .int(0)
    }
}

/// The store of one server: its family and its connection, whichever the engine.
pub struct Store {
    family: Family,
    conn: Conn,
}

/// A store's connection.
pub enum Conn {
    Sqlite(StateDb),
    Postgres(Box<PgStore>),
}

impl Store {
    pub fn sqlite(family: Family, db: StateDb) -> Store {
        Store {
            family,
            conn: Conn::Sqlite(db),
        }
    }

    pub fn postgres(family: Family, conn: PgConn) -> Store {
        Store {
            family,
            conn: Conn::Postgres(Box::new(PgStore::new(conn))),
        }
    }

    /// The connection, for what only one engine has (another connection, LISTEN).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Run statements that take no arguments and cannot be prepared (`VACUUM`, `ANALYZE`)
    /// outside any transaction.
    pub fn batch(&mut self, sql: &str) -> ToolResult<()> {
        let family = self.family;
        match &mut self.conn {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(|e| sqlite_error(family, e)),
            Conn::Postgres(p) => p
                .run(|client, _| client.batch_execute(sql))
                .map_err(|e| pg_error(family, e)),
        }
    }

    /// Another connection to the same store (a watcher); on SQLite the file `name` in the
    /// same directory.
    pub fn reopen(&self, name: &str) -> ToolResult<Store> {
        let family = self.family;
        let conn = match &self.conn {
            Conn::Sqlite(db) => {
                let again =
                    StateDb::open(db.dir().clone(), name, super::sqlite::read_write_create())
                        .map_err(|e| sqlite_error(family, e))?;
                again
                    .busy_timeout(super::schema::BUSY_TIMEOUT)
                    .map_err(|e| sqlite_error(family, e))?;
                Conn::Sqlite(again)
            }
            Conn::Postgres(p) => Conn::Postgres(Box::new(PgStore::new(
                p.conn.reopen().map_err(|e| pg_error(family, e))?,
            ))),
        };
        Ok(Store { family, conn })
    }
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

impl PgStore {
    /// Run one call on the client and its prepared statements; a failure that lost the
    /// connection is noted, so the next call reconnects.
    fn run<T>(
        &mut self,
        call: impl FnOnce(
            &mut postgres::Client,
            &mut HashMap<String, postgres::Statement>,
        ) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let result = self
            .parts()
            .and_then(|(client, prepared)| call(client, prepared));
        if let Err(e) = &result {
            self.conn.failed(e);
        }
        result
    }
}

/// A write transaction of either engine; dropped without [`Tx::commit`] it rolls back.
pub struct Tx<'a> {
    family: Family,
    inner: TxInner<'a>,
}

enum TxInner<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres {
        tx: postgres::Transaction<'a>,
        prepared: &'a mut HashMap<String, postgres::Statement>,
    },
}

impl Store {
    /// Begin a write: SQLite's IMMEDIATE transaction, or PostgreSQL's with the family's write
    /// lock.
    pub fn write(&mut self) -> ToolResult<Tx<'_>> {
        let family = self.family;
        let inner = match &mut self.conn {
            Conn::Sqlite(c) => c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map(TxInner::Sqlite)
                .map_err(|e| sqlite_error(family, e))?,
            // A write that loses the connection leaves it closed: the next call reconnects.
            Conn::Postgres(p) => {
                let (client, prepared) = p.parts().map_err(|e| pg_error(family, e))?;
                let mut tx = client.transaction().map_err(|e| pg_error(family, e))?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&family.write_lock])
                    .map_err(|e| pg_error(family, e))?;
                TxInner::Postgres { tx, prepared }
            }
        };
        Ok(Tx { family, inner })
    }
}

impl Tx<'_> {
    pub fn commit(self) -> ToolResult<()> {
        let family = self.family;
        match self.inner {
            TxInner::Sqlite(tx) => tx.commit().map_err(|e| sqlite_error(family, e)),
            TxInner::Postgres { tx, .. } => tx.commit().map_err(|e| pg_error(family, e)),
        }
    }
}

impl Sql for Store {
    fn engine(&self) -> Engine {
        match self.conn {
            Conn::Sqlite(_) => Engine::Sqlite,
            Conn::Postgres(_) => Engine::Postgres,
        }
    }

    fn family(&self) -> Family {
        self.family
    }

    fn each(
        &mut self,
        sql: &str,
        args: &[&dyn Param],
        each: &mut dyn FnMut(Cells) -> ToolResult<bool>,
    ) -> ToolResult<()> {
        let family = self.family;
        match &mut self.conn {
            Conn::Sqlite(c) => sqlite_each(family, c, sql, args, each),
            Conn::Postgres(p) => p
                .run(|client, prepared| pg_each(family, client, prepared, sql, args, each))
                .map_err(|e| pg_error(family, e))?,
        }
    }

    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
        let family = self.family;
        match &mut self.conn {
            Conn::Sqlite(c) => sqlite_exec(family, c, sql, args),
            Conn::Postgres(p) => p
                .run(|client, prepared| pg_exec(client, prepared, sql, args))
                .map_err(|e| pg_error(family, e)),
        }
    }
}

impl Sql for Tx<'_> {
    fn engine(&self) -> Engine {
        match self.inner {
            TxInner::Sqlite(_) => Engine::Sqlite,
            TxInner::Postgres { .. } => Engine::Postgres,
        }
    }

    fn family(&self) -> Family {
        self.family
    }

    fn each(
        &mut self,
        sql: &str,
        args: &[&dyn Param],
        each: &mut dyn FnMut(Cells) -> ToolResult<bool>,
    ) -> ToolResult<()> {
        let family = self.family;
        match &mut self.inner {
            TxInner::Sqlite(tx) => sqlite_each(family, tx, sql, args, each),
            TxInner::Postgres { tx, prepared } => {
                pg_each(family, tx, prepared, sql, args, each).map_err(|e| pg_error(family, e))?
            }
        }
    }

    fn exec(&mut self, sql: &str, args: &[&dyn Param]) -> ToolResult<u64> {
        let family = self.family;
        match &mut self.inner {
            TxInner::Sqlite(tx) => sqlite_exec(family, tx, sql, args),
            TxInner::Postgres { tx, prepared } => {
                pg_exec(tx, prepared, sql, args).map_err(|e| pg_error(family, e))
            }
        }
    }
}

fn sqlite_args<'a>(args: &'a [&'a dyn Param]) -> Vec<&'a dyn rusqlite::ToSql> {
    args.iter().map(|a| *a as &dyn rusqlite::ToSql).collect()
}

/// Call `each` on the rows of `sql` until it answers false.
fn sqlite_each(
    family: Family,
    c: &rusqlite::Connection,
    sql: &str,
    args: &[&dyn Param],
    each: &mut dyn FnMut(Cells) -> ToolResult<bool>,
) -> ToolResult<()> {
    let sqlite_error = |e| sqlite_error(family, e);
    let mut stmt = c.prepare_cached(sql).map_err(sqlite_error)?;
    let columns = stmt.column_count();
    let mut rows = stmt
        .query(sqlite_args(args).as_slice())
        .map_err(sqlite_error)?;
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
                ValueRef::Real(v) => Cell::Real(v),
            });
        }
        let more = each(Cells {
            family: family.name,
            cells,
        })?;
        if !more {
            break;
        }
    }
    Ok(())
}

fn sqlite_exec(
    family: Family,
    c: &rusqlite::Connection,
    sql: &str,
    args: &[&dyn Param],
) -> ToolResult<u64> {
    let sqlite_error = |e| sqlite_error(family, e);
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

/// Call `each` on the rows of `sql` until it answers false; rows are read as they arrive.
/// The outer error is the database's, the inner one `each`'s.
fn pg_each(
    family: Family,
    client: &mut impl postgres::GenericClient,
    prepared: &mut HashMap<String, postgres::Statement>,
    sql: &str,
    args: &[&dyn Param],
    each: &mut dyn FnMut(Cells) -> ToolResult<bool>,
) -> Result<ToolResult<()>, postgres::Error> {
    use postgres::fallible_iterator::FallibleIterator;
    let stmt = statement(client, prepared, sql)?;
    let mut rows = client.query_raw(&stmt, pg_args(args))?;
    while let Some(row) = rows.next()? {
        let cells = pg_cells(&row)?;
        match each(Cells {
            family: family.name,
            cells,
        }) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(()))
}

fn pg_cells(row: &postgres::Row) -> Result<Vec<Cell>, postgres::Error> {
    use postgres::types::Type;
    let mut cells = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let cell = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i)?.map(Cell::Int)
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)?
                .map(|v| Cell::Int(i64::from(v)))
        } else if *ty == Type::FLOAT8 {
            row.try_get::<_, Option<f64>>(i)?.map(Cell::Real)
        } else if *ty == Type::FLOAT4 {
            row.try_get::<_, Option<f32>>(i)?
                .map(|v| Cell::Real(f64::from(v)))
        } else {
            row.try_get::<_, Option<String>>(i)?.map(Cell::Text)
        };
        cells.push(cell.unwrap_or(Cell::Null));
    }
    Ok(cells)
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
pub fn sqlite_error(family: Family, e: rusqlite::Error) -> ToolError {
    if super::schema::is_busy(&e) {
        return ToolError::new(
            ErrorCode::FileBusy,
            format!(
                "the {} database stayed locked by another process for {} s; try again",
                family.name,
                super::schema::BUSY_TIMEOUT.as_secs()
            ),
        );
    }
    ToolError::internal(format!("{} database: {e}", family.name))
}

/// A PostgreSQL failure as a tool error; a lost connection says the next call reconnects.
pub fn pg_error(family: Family, e: postgres::Error) -> ToolError {
    // A server-side error shows as just "db error": say what the server said.
    let said = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    if super::pg::connection_lost(&e) {
        return ToolError::new(
            ErrorCode::BackendUnavailable,
            format!("{} database: {said}; the next call reconnects", family.name),
        );
    }
    // A lock waited for past the session's `lock_timeout` (a family that sets one): busy, as
    // SQLite's busy timeout is.
    if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
        return ToolError::new(
            ErrorCode::FileBusy,
            format!(
                "the {} database stayed locked by another server past its lock_timeout; try again",
                family.name
            ),
        );
    }
    ToolError::internal(format!("{} database: {said}", family.name))
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
        let row = Cells {
            family: "test",
            cells: vec![
                Cell::Int(4),
                Cell::Text("a".into()),
                Cell::Null,
                Cell::Real(0.5),
            ],
        };
        assert_eq!(row.int(0).ok(), Some(4));
        assert_eq!(row.text(1).ok().as_deref(), Some("a"));
        assert_eq!(row.opt_text(2).ok(), Some(None));
        assert!(row.int(1).is_err());
        assert!(row.text(2).is_err());
        assert!(row.int(9).is_err());
        assert_eq!(row.real(3).ok(), Some(0.5));
        assert_eq!(row.real(0).ok(), Some(4.0));
        let e = row.int(1).expect_err("text is not an integer").to_string();
        assert!(e.contains("test database: column 1"), "{e}");
    }
}
