//! Issues: the row, create, list and search, updates and comments, status changes.

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde_json::{Value, json};

use super::{log_change, new_id, not_found, now, sql, write_tx};
use crate::model::{IssueSummary, Status, Update, UpdateKind, Visibility};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};

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

/// The issue row's columns, in the order [`issue_row`] reads them (`seq` first; an insert that
/// gives `NULL` for it lets SQLite number the row).
pub(super) const ISSUE_COLS: &str = "seq, id, number, title, body, original_body, status, assignment, created_by, created_at, updated_at, resolved_at, resolved_by";
/// How many columns [`ISSUE_COLS`] names: a query selecting more reads them from here on.
pub(super) const ISSUE_COL_COUNT: usize = 13;

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

/// The one reading of an issue row (columns [`ISSUE_COLS`]).
pub(super) fn issue_row(r: &Row<'_>) -> rusqlite::Result<IssueRow> {
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
        set_title(&tx, &row, author, title, at)?;
        fields.push("title");
    }
    if let Some(body) = edit.body
        && body != row.body
    {
        set_body(&tx, &row, author, body, at)?;
        fields.push("body");
    }
    if let Some(assignment) = edit.assignment
        && assignment != row.assignment.as_deref()
    {
        set_assignment(&tx, &row, author, assignment, at)?;
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

fn set_title(
    tx: &Transaction<'_>,
    row: &IssueRow,
    author: &str,
    title: &str,
    at: i64,
) -> ToolResult<()> {
    tx.execute(
        "UPDATE issues SET title = ?1 WHERE seq = ?2",
        params![title, row.seq],
    )
    .map_err(sql)?;
    add_update(
        tx,
        row.seq,
        author,
        UpdateKind::TitleEdit,
        None,
        Some(&json!({"old_title": row.title, "new_title": title})),
        Visibility::All,
        at,
    )?;
    Ok(())
}

/// The first edit of a body keeps the original beside it.
fn set_body(
    tx: &Transaction<'_>,
    row: &IssueRow,
    author: &str,
    body: &str,
    at: i64,
) -> ToolResult<()> {
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
        tx,
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
    Ok(())
}

fn set_assignment(
    tx: &Transaction<'_>,
    row: &IssueRow,
    author: &str,
    assignment: Option<&str>,
    at: i64,
) -> ToolResult<()> {
    tx.execute(
        "UPDATE issues SET assignment = ?1 WHERE seq = ?2",
        params![assignment, row.seq],
    )
    .map_err(sql)?;
    add_update(
        tx,
        row.seq,
        author,
        UpdateKind::AssignmentChange,
        None,
        Some(&json!({"old_assignment": row.assignment, "new_assignment": assignment})),
        Visibility::All,
        at,
    )?;
    Ok(())
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
