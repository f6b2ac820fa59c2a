//! The store: SQLite (WAL, busy timeout) with an FTS5 index over titles and bodies.
//!
//! Several server processes may share one database. Every write runs in an IMMEDIATE
//! transaction, so reading the next number and inserting the issue are one step: numbers
//! stay sequential and unique per project. Every change also appends to `change_log`, which
//! each process watches to send `notifications/resources/updated`.

use std::path::Path;
use std::time::Duration;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::sqlite::{self, StateDb};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};
use serde_json::{Value, json};

use crate::model::{
    IssueRecord, IssueSummary, Note, Status, Todo, TodoKind, TodoStatus, Update, UpdateKind,
    Visibility,
};

pub const SCHEMA_VERSION: i64 = 1;
/// How long a writer waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// change_log rows kept (watchers only need the recent tail).
const CHANGE_LOG_KEEP: i64 = 10_000;

const SCHEMA: &str = "
CREATE TABLE issues (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    project TEXT NOT NULL,
    number INTEGER NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    original_body TEXT,
    status TEXT NOT NULL,
    assignment TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    resolved_at INTEGER,
    resolved_by TEXT,
    UNIQUE (project, number)
);
CREATE INDEX issues_by_status ON issues (project, status, number);
CREATE TABLE issue_updates (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    issue_seq INTEGER NOT NULL REFERENCES issues (seq) ON DELETE CASCADE,
    author TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT,
    metadata TEXT,
    visibility TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX issue_updates_by_issue ON issue_updates (issue_seq, seq);
CREATE TABLE issue_todos (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    issue_seq INTEGER NOT NULL REFERENCES issues (seq) ON DELETE CASCADE,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    kind TEXT NOT NULL,
    phase TEXT,
    position INTEGER NOT NULL,
    notes TEXT NOT NULL DEFAULT '[]',
    origin_agent TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER
);
CREATE INDEX issue_todos_by_issue ON issue_todos (issue_seq, position, seq);
CREATE TABLE change_log (
    seq INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    number INTEGER NOT NULL
);
CREATE VIRTUAL TABLE issues_fts USING fts5 (
    title, body, content = 'issues', content_rowid = 'seq',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER issues_fts_insert AFTER INSERT ON issues BEGIN
    INSERT INTO issues_fts (rowid, title, body) VALUES (new.seq, new.title, new.body);
END;
CREATE TRIGGER issues_fts_delete AFTER DELETE ON issues BEGIN
    INSERT INTO issues_fts (issues_fts, rowid, title, body)
        VALUES ('delete', old.seq, old.title, old.body);
END;
CREATE TRIGGER issues_fts_update AFTER UPDATE OF title, body ON issues BEGIN
    INSERT INTO issues_fts (issues_fts, rowid, title, body)
        VALUES ('delete', old.seq, old.title, old.body);
    INSERT INTO issues_fts (rowid, title, body) VALUES (new.seq, new.title, new.body);
END;
";

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn new_id() -> String {
    ulid::Ulid::generate().to_string()
}

/// A database failure as a tool error (busy is the one a caller can act on).
pub fn sql(e: rusqlite::Error) -> ToolError {
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

/// Open (creating if needed), check, and migrate the database. A file that is not a
/// usable SQLite database is a clear error naming it.
///
/// The directory is held by descriptor (walked beneath the root without links when it is
/// inside the root): a program renaming `.kitbag` away and planting a link cannot redirect
/// the database or its journal files (issue #22).
pub fn open(policy: &PathPolicy, path: &Path) -> anyhow::Result<StateDb> {
    let conn = StateDb::open_path(policy, path, sqlite::read_write_create())
        .map_err(|e| anyhow::anyhow!("issues database: {e}"))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Switching a new file to WAL takes an exclusive lock that SQLite does not wait for (the
    // busy timeout is not consulted): a server starting beside another retries briefly.
    let check = kitbag_shared::lock::retry_while_busy(
        BUSY_TIMEOUT,
        |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy),
        || {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
            conn.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
        },
    );
    match check {
        Ok(s) if s == "ok" => {}
        Ok(s) => anyhow::bail!(
            "issues database {} is corrupted ({s}); restore it from a backup or an `export`, or start with a new --db",
            path.display()
        ),
        Err(e) => anyhow::bail!(
            "issues database {} is not a usable SQLite database ({e}); restore it from a backup or an `export`, or start with a new --db",
            path.display()
        ),
    }
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
    migrate(&conn).map_err(|e| {
        anyhow::anyhow!(
            "preparing issues database {}: {e}; restore it from a backup or an `export`",
            path.display()
        )
    })?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if v > SCHEMA_VERSION {
        anyhow::bail!(
            "schema version {v} is newer than this kitbag-issues understands ({SCHEMA_VERSION})"
        );
    }
    if v == SCHEMA_VERSION {
        // Make sure it really is ours (a foreign database with a matching user_version).
        let n: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('issues','issue_updates','issue_todos','change_log','issues_fts')",
            [],
            |r| r.get(0),
        )?;
        if n != 5 {
            anyhow::bail!("the database lacks the kitbag-issues tables");
        }
        return Ok(());
    }
    // IMMEDIATE: two processes starting on a new file must not both create the schema.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| -> anyhow::Result<()> {
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v == 0 {
            let foreign: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )?;
            if foreign > 0 {
                anyhow::bail!(
                    "the database holds other tables; it is not a kitbag-issues database"
                );
            }
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

fn write_tx(conn: &mut Connection) -> ToolResult<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql)
}

fn not_found(number: i64) -> ToolError {
    ToolError::new(
        ErrorCode::IssueNotFound,
        format!("there is no issue #{number} in this project; issue_list shows the issues"),
    )
    .with_detail(json!({ "number": number, "field": "number" }))
}

fn log_change(tx: &Transaction<'_>, project: &str, number: i64) -> ToolResult<()> {
    tx.execute(
        "INSERT INTO change_log (project, number) VALUES (?1, ?2)",
        params![project, number],
    )
    .map_err(sql)?;
    let last = tx.last_insert_rowid();
    if last % 1000 == 0 {
        tx.execute(
            "DELETE FROM change_log WHERE seq <= ?1",
            params![last - CHANGE_LOG_KEEP],
        )
        .map_err(sql)?;
    }
    Ok(())
}

/// The newest change_log entry (0 when empty).
pub fn last_change(conn: &Connection) -> ToolResult<i64> {
    conn.query_row("SELECT coalesce(max(seq), 0) FROM change_log", [], |r| {
        r.get(0)
    })
    .map_err(sql)
}

/// Issue numbers of `project` changed after change `since`, and the newest change seen.
pub fn changes_since(conn: &Connection, project: &str, since: i64) -> ToolResult<(Vec<i64>, i64)> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, number FROM change_log WHERE seq > ?1 AND project = ?2 ORDER BY seq",
        )
        .map_err(sql)?;
    let mut last = since;
    let mut numbers = Vec::new();
    let rows = stmt
        .query_map(params![since, project], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(sql)?;
    for row in rows {
        let (seq, n) = row.map_err(sql)?;
        last = last.max(seq);
        if !numbers.contains(&n) {
            numbers.push(n);
        }
    }
    // Other projects' changes advance the cursor too.
    last = last.max(last_change(conn)?);
    Ok((numbers, last))
}

/// The row behind an issue number.
#[derive(Debug, Clone)]
pub struct IssueRow {
    pub seq: i64,
    pub id: String,
    pub number: i64,
    pub title: String,
    pub body: String,
    pub original_body: Option<String>,
    pub status: Status,
    pub assignment: Option<String>,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    pub resolved_by: Option<String>,
}

const ISSUE_COLS: &str = "seq, id, number, title, body, original_body, status, assignment, created_by, created_at, updated_at, resolved_at, resolved_by";

fn status_col(r: &Row<'_>, i: usize) -> rusqlite::Result<Status> {
    let s: String = r.get(i)?;
    Status::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("unknown status {s}").into(),
        )
    })
}

fn issue_row(r: &Row<'_>) -> rusqlite::Result<IssueRow> {
    Ok(IssueRow {
        seq: r.get(0)?,
        id: r.get(1)?,
        number: r.get(2)?,
        title: r.get(3)?,
        body: r.get(4)?,
        original_body: r.get(5)?,
        status: status_col(r, 6)?,
        assignment: r.get(7)?,
        created_by: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        resolved_at: r.get(11)?,
        resolved_by: r.get(12)?,
    })
}

pub fn find(conn: &Connection, project: &str, number: i64) -> ToolResult<IssueRow> {
    conn.prepare_cached(&format!(
        "SELECT {ISSUE_COLS} FROM issues WHERE project = ?1 AND number = ?2"
    ))
    .map_err(sql)?
    .query_row(params![project, number], issue_row)
    .optional()
    .map_err(sql)?
    .ok_or_else(|| not_found(number))
}

#[allow(clippy::too_many_arguments)]
fn add_update(
    tx: &Transaction<'_>,
    issue_seq: i64,
    author: &str,
    kind: UpdateKind,
    body: Option<&str>,
    metadata: Option<&Value>,
    visibility: Visibility,
    at: i64,
) -> ToolResult<String> {
    let id = new_id();
    tx.prepare_cached(
        "INSERT INTO issue_updates (id, issue_seq, author, kind, body, metadata, visibility, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .map_err(sql)?
    .execute(params![
        id,
        issue_seq,
        author,
        kind.as_str(),
        body,
        metadata.map(|m| m.to_string()),
        visibility.as_str(),
        at
    ])
    .map_err(sql)?;
    Ok(id)
}

/// What `create` answers.
pub struct Created {
    pub id: String,
    pub number: i64,
    pub created_at: i64,
}

pub fn create(
    conn: &mut Connection,
    project: &str,
    author: &str,
    title: &str,
    body: &str,
) -> ToolResult<Created> {
    let tx = write_tx(conn)?;
    let number: i64 = tx
        .query_row(
            "SELECT coalesce(max(number), 0) + 1 FROM issues WHERE project = ?1",
            [project],
            |r| r.get(0),
        )
        .map_err(sql)?;
    let id = new_id();
    let at = now();
    tx.execute(
        "INSERT INTO issues (id, project, number, title, body, status, created_by, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?7, ?7)",
        params![id, project, number, title, body, author, at],
    )
    .map_err(sql)?;
    log_change(&tx, project, number)?;
    tx.commit().map_err(sql)?;
    Ok(Created {
        id,
        number,
        created_at: at,
    })
}

/// Which statuses `list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Everything not resolved or rejected.
    NonTerminal,
    All,
    Only(Status),
}

/// Quote every word so FTS5 operators and punctuation in a casual query cannot fail.
pub fn quote_fts(query: &str) -> String {
    query
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn summary(r: &Row<'_>) -> rusqlite::Result<IssueSummary> {
    Ok(IssueSummary {
        id: r.get(0)?,
        number: r.get(1)?,
        title: r.get(2)?,
        status: status_col(r, 3)?,
        assignment: r.get(4)?,
        created_by: r.get(5)?,
        created_at: r.get(6)?,
        updated_at: r.get(7)?,
    })
}

/// A page of issues (newest first, or best match first with a search) and the total.
pub fn list(
    conn: &Connection,
    project: &str,
    filter: StatusFilter,
    search: Option<&str>,
    limit: i64,
    offset: i64,
) -> ToolResult<(Vec<IssueSummary>, i64)> {
    match search {
        None => list_query(conn, project, filter, None, limit, offset).map_err(sql),
        Some(q) => match list_query(conn, project, filter, Some(q), limit, offset) {
            Ok(r) => Ok(r),
            Err(e) if is_fts_syntax(&e) => {
                let quoted = quote_fts(q);
                list_query(conn, project, filter, Some(&quoted), limit, offset).map_err(|e| {
                    if is_fts_syntax(&e) {
                        ToolError::invalid_field(
                            "search",
                            format!("not a usable full-text query ({e}); use plain words, \"a phrase\", OR, NOT, or prefix*"),
                        )
                    } else {
                        sql(e)
                    }
                })
            }
            Err(e) => Err(sql(e)),
        },
    }
}

fn is_fts_syntax(e: &rusqlite::Error) -> bool {
    let m = e.to_string();
    m.contains("fts5") || m.contains("no such column") || m.contains("unterminated")
}

fn list_query(
    conn: &Connection,
    project: &str,
    filter: StatusFilter,
    search: Option<&str>,
    limit: i64,
    offset: i64,
) -> rusqlite::Result<(Vec<IssueSummary>, i64)> {
    let status_sql = match filter {
        StatusFilter::NonTerminal => " AND i.status NOT IN ('resolved', 'rejected')",
        StatusFilter::All => "",
        StatusFilter::Only(_) => " AND i.status = ?3",
    };
    let status_param = match filter {
        StatusFilter::Only(s) => s.as_str(),
        _ => "",
    };
    let cols =
        "i.id, i.number, i.title, i.status, i.assignment, i.created_by, i.created_at, i.updated_at";
    let (from, order, query) = match search {
        Some(q) => (
            "issues_fts JOIN issues i ON i.seq = issues_fts.rowid WHERE issues_fts MATCH ?2 AND i.project = ?1",
            "ORDER BY bm25(issues_fts, 10.0, 1.0), i.number DESC",
            q,
        ),
        None => (
            "issues i WHERE i.project = ?1 AND ?2 = ?2",
            "ORDER BY i.number DESC",
            "",
        ),
    };
    let param_list: Vec<&dyn rusqlite::ToSql> = if matches!(filter, StatusFilter::Only(_)) {
        vec![&project, &query, &status_param, &limit, &offset]
    } else {
        vec![&project, &query, &limit, &offset]
    };
    let (lim, off) = if matches!(filter, StatusFilter::Only(_)) {
        ("?4", "?5")
    } else {
        ("?3", "?4")
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {cols} FROM {from}{status_sql} {order} LIMIT {lim} OFFSET {off}"
    ))?;
    let issues = stmt
        .query_map(param_list.as_slice(), summary)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let count_params = &param_list[..param_list.len() - 2];
    let total: i64 = conn
        .prepare_cached(&format!("SELECT count(*) FROM {from}{status_sql}"))?
        .query_row(count_params, |r| r.get(0))?;
    Ok((issues, total))
}

fn update_row(r: &Row<'_>) -> rusqlite::Result<Update> {
    let kind: String = r.get(2)?;
    let metadata: Option<String> = r.get(4)?;
    let vis: String = r.get(5)?;
    Ok(Update {
        id: r.get(0)?,
        author: r.get(1)?,
        kind: UpdateKind::parse(&kind).unwrap_or(UpdateKind::Comment),
        body: r.get(3)?,
        metadata: metadata.and_then(|m| serde_json::from_str(&m).ok()),
        visibility: Visibility::parse(&vis).unwrap_or(Visibility::OperatorOnly),
        created_at: r.get(6)?,
    })
}

/// Updates of an issue in chronological order, a page of them, and how many there are.
pub fn updates(
    conn: &Connection,
    issue_seq: i64,
    offset: i64,
    limit: i64,
) -> ToolResult<(Vec<Update>, i64)> {
    let total: i64 = conn
        .prepare_cached("SELECT count(*) FROM issue_updates WHERE issue_seq = ?1")
        .map_err(sql)?
        .query_row([issue_seq], |r| r.get(0))
        .map_err(sql)?;
    let list = conn
        .prepare_cached(
            "SELECT id, author, kind, body, metadata, visibility, created_at FROM issue_updates
             WHERE issue_seq = ?1 ORDER BY seq LIMIT ?2 OFFSET ?3",
        )
        .map_err(sql)?
        .query_map(params![issue_seq, limit, offset], update_row)
        .map_err(sql)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql)?;
    Ok((list, total))
}

/// The changes `update` makes; `None` leaves a field alone.
#[derive(Debug, Default)]
pub struct Edit<'a> {
    pub title: Option<&'a str>,
    pub body: Option<&'a str>,
    /// `Some(None)` unassigns.
    pub assignment: Option<Option<&'a str>>,
}

pub struct Edited {
    pub updated_fields: Vec<&'static str>,
    pub updated_at: i64,
}

pub fn update(
    conn: &mut Connection,
    project: &str,
    author: &str,
    number: i64,
    edit: &Edit<'_>,
) -> ToolResult<Edited> {
    let tx = write_tx(conn)?;
    let row = find(&tx, project, number)?;
    let at = now();
    let mut fields = Vec::new();
    if let Some(title) = edit.title
        && title != row.title
    {
        tx.execute(
            "UPDATE issues SET title = ?1 WHERE seq = ?2",
            params![title, row.seq],
        )
        .map_err(sql)?;
        add_update(
            &tx,
            row.seq,
            author,
            UpdateKind::TitleEdit,
            None,
            Some(&json!({"old_title": row.title, "new_title": title})),
            Visibility::All,
            at,
        )?;
        fields.push("title");
    }
    if let Some(body) = edit.body
        && body != row.body
    {
        let preserve = row.original_body.is_none();
        if preserve {
            tx.execute(
                "UPDATE issues SET original_body = body WHERE seq = ?1",
                [row.seq],
            )
            .map_err(sql)?;
        }
        tx.execute(
            "UPDATE issues SET body = ?1 WHERE seq = ?2",
            params![body, row.seq],
        )
        .map_err(sql)?;
        add_update(
            &tx,
            row.seq,
            author,
            UpdateKind::BodyEdit,
            None,
            Some(&json!({
                "old_bytes": row.body.len(),
                "new_bytes": body.len(),
                "original_preserved": preserve,
            })),
            Visibility::All,
            at,
        )?;
        fields.push("body");
    }
    if let Some(assignment) = edit.assignment
        && assignment != row.assignment.as_deref()
    {
        tx.execute(
            "UPDATE issues SET assignment = ?1 WHERE seq = ?2",
            params![assignment, row.seq],
        )
        .map_err(sql)?;
        add_update(
            &tx,
            row.seq,
            author,
            UpdateKind::AssignmentChange,
            None,
            Some(&json!({"old_assignment": row.assignment, "new_assignment": assignment})),
            Visibility::All,
            at,
        )?;
        fields.push("assignment");
    }
    if fields.is_empty() {
        return Err(ToolError::new(
            ErrorCode::NoChange,
            format!("issue #{number} already has those values; nothing changed"),
        )
        .with_detail(json!({"number": number})));
    }
    tx.execute(
        "UPDATE issues SET updated_at = ?1 WHERE seq = ?2",
        params![at, row.seq],
    )
    .map_err(sql)?;
    log_change(&tx, project, number)?;
    tx.commit().map_err(sql)?;
    Ok(Edited {
        updated_fields: fields,
        updated_at: at,
    })
}

pub fn comment(
    conn: &mut Connection,
    project: &str,
    author: &str,
    number: i64,
    body: &str,
    visibility: Visibility,
) -> ToolResult<(String, i64)> {
    let tx = write_tx(conn)?;
    let row = find(&tx, project, number)?;
    let at = now();
    let id = add_update(
        &tx,
        row.seq,
        author,
        UpdateKind::Comment,
        Some(body),
        None,
        visibility,
        at,
    )?;
    tx.execute(
        "UPDATE issues SET updated_at = ?1 WHERE seq = ?2",
        params![at, row.seq],
    )
    .map_err(sql)?;
    log_change(&tx, project, number)?;
    tx.commit().map_err(sql)?;
    Ok((id, at))
}

/// The legal targets from `from`, as strings, for error details.
pub fn legal_targets(from: Status) -> Vec<&'static str> {
    from.legal_targets().iter().map(|s| s.as_str()).collect()
}

pub struct Moved {
    pub from: Status,
    pub to: Status,
    pub updated_at: i64,
    pub comment_id: Option<String>,
}

pub fn transition(
    conn: &mut Connection,
    project: &str,
    author: &str,
    number: i64,
    to: Status,
    comment: Option<&str>,
) -> ToolResult<Moved> {
    let tx = write_tx(conn)?;
    let row = find(&tx, project, number)?;
    let from = row.status;
    if !from.can_move_to(to) {
        let legal = legal_targets(from);
        let why = if from == to {
            format!("issue #{number} is already {to}")
        } else {
            format!("issue #{number} cannot go from {from} to {to}")
        };
        return Err(ToolError::new(
            ErrorCode::InvalidTransition,
            format!("{why}; from {from} it may go to: {}", legal.join(", ")),
        )
        .with_detail(json!({
            "field": "to",
            "number": number,
            "from": from,
            "to": to,
            "legal_transitions": legal,
        })));
    }
    let at = now();
    match to {
        Status::Resolved => tx.execute(
            "UPDATE issues SET status = ?1, updated_at = ?2, resolved_at = ?2, resolved_by = ?3 WHERE seq = ?4",
            params![to.as_str(), at, author, row.seq],
        ),
        Status::Reopened => tx.execute(
            "UPDATE issues SET status = ?1, updated_at = ?2, resolved_at = NULL, resolved_by = NULL WHERE seq = ?3",
            params![to.as_str(), at, row.seq],
        ),
        _ => tx.execute(
            "UPDATE issues SET status = ?1, updated_at = ?2 WHERE seq = ?3",
            params![to.as_str(), at, row.seq],
        ),
    }
    .map_err(sql)?;
    add_update(
        &tx,
        row.seq,
        author,
        UpdateKind::StatusChange,
        None,
        Some(&json!({"old_status": from, "new_status": to})),
        Visibility::All,
        at,
    )?;
    let comment_id = match comment {
        Some(c) => Some(add_update(
            &tx,
            row.seq,
            author,
            UpdateKind::Comment,
            Some(c),
            None,
            Visibility::All,
            at,
        )?),
        None => None,
    };
    log_change(&tx, project, number)?;
    tx.commit().map_err(sql)?;
    Ok(Moved {
        from,
        to,
        updated_at: at,
        comment_id,
    })
}

// ---------------------------------------------------------------- todos

const TODO_COLS: &str = "id, content, status, kind, phase, position, notes, origin_agent, created_by, created_at, updated_at, started_at, completed_at";

fn todo_row(r: &Row<'_>) -> rusqlite::Result<Todo> {
    let status: String = r.get(2)?;
    let kind: String = r.get(3)?;
    let notes: String = r.get(6)?;
    Ok(Todo {
        id: r.get(0)?,
        content: r.get(1)?,
        status: TodoStatus::parse(&status).unwrap_or(TodoStatus::Pending),
        kind: TodoKind::parse(&kind).unwrap_or(TodoKind::Step),
        phase: r.get(4)?,
        position: r.get(5)?,
        notes: serde_json::from_str::<Vec<Note>>(&notes).unwrap_or_default(),
        origin_agent: r.get(7)?,
        created_by: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        started_at: r.get(11)?,
        completed_at: r.get(12)?,
    })
}

/// Every todo of an issue in list order (abandoned ones included).
pub fn todos(conn: &Connection, issue_seq: i64) -> ToolResult<Vec<Todo>> {
    conn.prepare_cached(&format!(
        "SELECT {TODO_COLS} FROM issue_todos WHERE issue_seq = ?1 ORDER BY position, seq"
    ))
    .map_err(sql)?
    .query_map([issue_seq], todo_row)
    .map_err(sql)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .map_err(sql)
}

/// New todos to append.
pub struct NewTodos<'a> {
    pub items: &'a [String],
    pub kind: TodoKind,
    pub phase: Option<&'a str>,
    pub origin_agent: Option<&'a str>,
}

/// A todo mutation, run in one write transaction by [`todo_change`].
pub enum TodoOp<'a> {
    /// Abandon the live todos of `new.kind`, then append `new`.
    Set(NewTodos<'a>),
    Add(NewTodos<'a>),
    Start(String),
    Done(String),
    Drop(String),
    Note(String, &'a str),
}

/// Apply a todo change to issue `number` after `check` approves it against the current
/// list (so lookups and invariants see exactly what the change applies to).
pub fn todo_change(
    conn: &mut Connection,
    project: &str,
    author: &str,
    number: i64,
    op: &TodoOp<'_>,
    check: impl FnOnce(&[Todo]) -> ToolResult<()>,
) -> ToolResult<()> {
    let tx = write_tx(conn)?;
    let row = find(&tx, project, number)?;
    let current = todos(&tx, row.seq)?;
    check(&current)?;
    let at = now();
    let next_position = current.iter().map(|t| t.position + 1).max().unwrap_or(0);
    match op {
        TodoOp::Set(new) | TodoOp::Add(new) => {
            if matches!(op, TodoOp::Set(_)) {
                tx.execute(
                    "UPDATE issue_todos SET status = 'abandoned', updated_at = ?1
                     WHERE issue_seq = ?2 AND kind = ?3 AND status != 'abandoned'",
                    params![at, row.seq, new.kind.as_str()],
                )
                .map_err(sql)?;
            }
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO issue_todos (id, issue_seq, content, status, kind, phase, position, origin_agent, created_by, created_at, updated_at)
                     VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
                )
                .map_err(sql)?;
            for (i, item) in new.items.iter().enumerate() {
                stmt.execute(params![
                    new_id(),
                    row.seq,
                    item,
                    new.kind.as_str(),
                    new.phase,
                    next_position + i as i64,
                    new.origin_agent,
                    author,
                    at
                ])
                .map_err(sql)?;
            }
        }
        TodoOp::Start(id) => {
            tx.execute(
                "UPDATE issue_todos SET status = 'pending', updated_at = ?1
                 WHERE issue_seq = ?2 AND status = 'in_progress' AND id != ?3",
                params![at, row.seq, id],
            )
            .map_err(sql)?;
            tx.execute(
                "UPDATE issue_todos SET status = 'in_progress', updated_at = ?1, started_at = ?1, completed_at = NULL
                 WHERE id = ?2 AND status != 'in_progress'",
                params![at, id],
            )
            .map_err(sql)?;
        }
        TodoOp::Done(id) => {
            tx.execute(
                "UPDATE issue_todos SET status = 'completed', updated_at = ?1, completed_at = ?1
                 WHERE id = ?2 AND status != 'completed'",
                params![at, id],
            )
            .map_err(sql)?;
        }
        TodoOp::Drop(id) => {
            tx.execute(
                "UPDATE issue_todos SET status = 'abandoned', updated_at = ?1 WHERE id = ?2",
                params![at, id],
            )
            .map_err(sql)?;
        }
        TodoOp::Note(id, text) => {
            let todo = current
                .iter()
                .find(|t| &t.id == id)
                .ok_or_else(|| ToolError::internal("todo vanished"))?;
            let mut notes = todo.notes.clone();
            notes.push(Note {
                text: (*text).to_string(),
                author: author.to_string(),
                created_at: at,
            });
            let notes = serde_json::to_string(&notes)
                .map_err(|e| ToolError::internal(format!("notes: {e}")))?;
            tx.execute(
                "UPDATE issue_todos SET notes = ?1, updated_at = ?2 WHERE id = ?3",
                params![notes, at, id],
            )
            .map_err(sql)?;
        }
    }
    log_change(&tx, project, number)?;
    tx.commit().map_err(sql)
}

// ---------------------------------------------------------------- export / import

/// Every issue of every project, with its updates and todos, in (project, number) order.
pub fn export(conn: &Connection) -> ToolResult<Vec<IssueRecord>> {
    let rows: Vec<(String, IssueRow)> = conn
        .prepare(&format!(
            "SELECT project, {ISSUE_COLS} FROM issues ORDER BY project, number"
        ))
        .map_err(sql)?
        .query_map([], |r| {
            let project: String = r.get(0)?;
            let row = IssueRow {
                seq: r.get(1)?,
                id: r.get(2)?,
                number: r.get(3)?,
                title: r.get(4)?,
                body: r.get(5)?,
                original_body: r.get(6)?,
                status: status_col(r, 7)?,
                assignment: r.get(8)?,
                created_by: r.get(9)?,
                created_at: r.get(10)?,
                updated_at: r.get(11)?,
                resolved_at: r.get(12)?,
                resolved_by: r.get(13)?,
            };
            Ok((project, row))
        })
        .map_err(sql)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql)?;
    let mut out = Vec::with_capacity(rows.len());
    for (project, row) in rows {
        let (updates, _) = updates(conn, row.seq, 0, i64::MAX)?;
        let todos = todos(conn, row.seq)?;
        out.push(IssueRecord {
            project,
            id: row.id,
            number: row.number,
            title: row.title,
            body: row.body,
            original_body: row.original_body,
            status: row.status,
            assignment: row.assignment,
            created_by: row.created_by,
            created_at: row.created_at,
            updated_at: row.updated_at,
            resolved_at: row.resolved_at,
            resolved_by: row.resolved_by,
            updates,
            todos,
        });
    }
    Ok(out)
}

/// Import records all-or-nothing. An issue whose id exists is replaced with the record
/// (updates and todos included); a number taken by a different issue is an error.
/// Returns (added, replaced).
pub fn import(conn: &mut Connection, records: &[IssueRecord]) -> anyhow::Result<(usize, usize)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (mut added, mut replaced) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        let line = i + 1;
        let by_number: Option<String> = tx
            .query_row(
                "SELECT id FROM issues WHERE project = ?1 AND number = ?2",
                params![r.project, r.number],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(other) = &by_number
            && other != &r.id
        {
            anyhow::bail!(
                "record {line}: project {} already has issue #{} with another id ({other}); nothing was imported",
                r.project,
                r.number
            );
        }
        let existed = tx.execute("DELETE FROM issues WHERE id = ?1", [&r.id])? > 0;
        if existed {
            replaced += 1;
        } else {
            added += 1;
        }
        tx.execute(
            "INSERT INTO issues (id, project, number, title, body, original_body, status, assignment, created_by, created_at, updated_at, resolved_at, resolved_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                r.id,
                r.project,
                r.number,
                r.title,
                r.body,
                r.original_body,
                r.status.as_str(),
                r.assignment,
                r.created_by,
                r.created_at,
                r.updated_at,
                r.resolved_at,
                r.resolved_by
            ],
        )
        .map_err(|e| anyhow::anyhow!("record {line}: {e}"))?;
        let seq = tx.last_insert_rowid();
        for u in &r.updates {
            tx.execute(
                "INSERT INTO issue_updates (id, issue_seq, author, kind, body, metadata, visibility, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    u.id,
                    seq,
                    u.author,
                    u.kind.as_str(),
                    u.body,
                    u.metadata.as_ref().map(|m| m.to_string()),
                    u.visibility.as_str(),
                    u.created_at
                ],
            )
            .map_err(|e| anyhow::anyhow!("record {line}, update {}: {e}", u.id))?;
        }
        for t in &r.todos {
            tx.execute(
                "INSERT INTO issue_todos (id, issue_seq, content, status, kind, phase, position, notes, origin_agent, created_by, created_at, updated_at, started_at, completed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    t.id,
                    seq,
                    t.content,
                    t.status.as_str(),
                    t.kind.as_str(),
                    t.phase,
                    t.position,
                    serde_json::to_string(&t.notes)?,
                    t.origin_agent,
                    t.created_by,
                    t.created_at,
                    t.updated_at,
                    t.started_at,
                    t.completed_at
                ],
            )
            .map_err(|e| anyhow::anyhow!("record {line}, todo {}: {e}", t.id))?;
        }
        tx.execute(
            "INSERT INTO change_log (project, number) VALUES (?1, ?2)",
            params![r.project, r.number],
        )?;
    }
    tx.commit()?;
    Ok((added, replaced))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn policy(root: &Path) -> PathPolicy {
        PathPolicy::new(root, &[], false).unwrap()
    }

    fn db() -> (tempfile::TempDir, StateDb) {
        let d = tempfile::tempdir().unwrap();
        let c = open(&policy(d.path()), &d.path().join("x/issues.db")).unwrap();
        (d, c)
    }

    #[test]
    fn numbers_are_per_project_and_sequential() {
        let (_d, mut c) = db();
        for want in 1..=3 {
            assert_eq!(create(&mut c, "a", "me", "t", "b").unwrap().number, want);
        }
        assert_eq!(create(&mut c, "b", "me", "t", "b").unwrap().number, 1);
        assert_eq!(create(&mut c, "a", "me", "t", "b").unwrap().number, 4);
    }

    #[test]
    fn fts_finds_body_words_and_survives_bad_syntax() {
        let (_d, mut c) = db();
        create(&mut c, "p", "me", "Dark mode", "The palette needs a toggle").unwrap();
        create(&mut c, "p", "me", "Login bug", "crash on submit").unwrap();
        let (hits, total) = list(&c, "p", StatusFilter::All, Some("palette"), 25, 0).unwrap();
        assert_eq!((hits.len(), total), (1, 1));
        assert_eq!(hits[0].title, "Dark mode");
        // Punctuation that is FTS5 syntax falls back to quoted words.
        let (hits, _) = list(&c, "p", StatusFilter::All, Some("crash: \"on"), 25, 0).unwrap();
        assert_eq!(hits.len(), 1);
        // Title edits reach the index.
        let edit = Edit {
            title: Some("Night theme"),
            ..Default::default()
        };
        update(&mut c, "p", "me", 1, &edit).unwrap();
        assert_eq!(
            list(&c, "p", StatusFilter::All, Some("night"), 25, 0)
                .unwrap()
                .1,
            1
        );
        assert_eq!(
            list(&c, "p", StatusFilter::All, Some("dark"), 25, 0)
                .unwrap()
                .1,
            0
        );
    }

    #[test]
    fn foreign_and_corrupt_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let junk = d.path().join("junk.db");
        std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
        let e = open(&policy(d.path()), &junk).unwrap_err().to_string();
        assert!(e.contains("not a usable SQLite database"), "{e}");
        let other = d.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = open(&policy(d.path()), &other).unwrap_err().to_string();
        assert!(e.contains("not a kitbag-issues database"), "{e}");
    }
}
