//! Issues: the row, create, list and search, updates and comments, status changes.

use serde_json::{Value, json};

use super::{log_change, new_id, not_found, now};
use crate::model::{IssueSummary, Status, Update, UpdateKind, Visibility};
use kitbag_shared::state::sql::{Cells, Engine, Sql, Store, Tx};
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

/// The issue row's columns, in the order [`issue_row`] reads them (`seq` first).
pub(super) const ISSUE_COLS: &str = "seq, id, number, title, body, original_body, status, assignment, created_by, created_at, updated_at, resolved_at, resolved_by";
/// How many columns [`ISSUE_COLS`] names: a query selecting more reads them from here on.
pub(super) const ISSUE_COL_COUNT: usize = 13;

fn status_col(r: &Cells, i: usize) -> ToolResult<Status> {
    let s = r.text(i)?;
    Status::parse(&s)
        .ok_or_else(|| ToolError::internal(format!("issues database: unknown status {s}")))
}

/// The one reading of an issue row (columns [`ISSUE_COLS`]).
pub(super) fn issue_row(r: &Cells) -> ToolResult<IssueRow> {
    Ok(IssueRow {
        seq: r.int(0)?,
        id: r.text(1)?,
        number: r.int(2)?,
        title: r.text(3)?,
        body: r.text(4)?,
        original_body: r.opt_text(5)?,
        status: status_col(r, 6)?,
        assignment: r.opt_text(7)?,
        created_by: r.text(8)?,
        created_at: r.int(9)?,
        updated_at: r.int(10)?,
        resolved_at: r.opt_int(11)?,
        resolved_by: r.opt_text(12)?,
    })
}

pub fn find(conn: &mut impl Sql, project: &str, number: i64) -> ToolResult<IssueRow> {
    let row = conn.row(
        &format!("SELECT {ISSUE_COLS} FROM issues WHERE project = ?1 AND number = ?2"),
        &[&project, &number],
    )?;
    issue_row(&row.ok_or_else(|| not_found(number))?)
}

#[allow(clippy::too_many_arguments)]
fn add_update(
    tx: &mut Tx<'_>,
    issue_seq: i64,
    author: &str,
    kind: UpdateKind,
    body: Option<&str>,
    metadata: Option<&Value>,
    visibility: Visibility,
    at: i64,
) -> ToolResult<String> {
    let id = new_id();
    tx.exec(
        "INSERT INTO issue_updates (id, issue_seq, author, kind, body, metadata, visibility, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        &[
            &id,
            &issue_seq,
            &author,
            &kind.as_str(),
            &body,
            &metadata.map(|m| m.to_string()),
            &visibility.as_str(),
            &at,
        ],
    )?;
    Ok(id)
}

/// What `create` answers.
pub struct Created {
    pub id: String,
    pub number: i64,
    pub created_at: i64,
}

pub fn create(
    conn: &mut Store,
    project: &str,
    author: &str,
    title: &str,
    body: &str,
) -> ToolResult<Created> {
    let mut tx = conn.write()?;
    let number = tx.int(
        "SELECT coalesce(max(number), 0) + 1 FROM issues WHERE project = ?1",
        &[&project],
    )?;
    let id = new_id();
    let at = now();
    tx.exec(
        "INSERT INTO issues (id, project, number, title, body, status, created_by, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?7, ?7)",
        &[&id, &project, &number, &title, &body, &author, &at],
    )?;
    log_change(&mut tx, project, number)?;
    tx.commit()?;
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

fn summary(r: &Cells) -> ToolResult<IssueSummary> {
    Ok(IssueSummary {
        id: r.text(0)?,
        number: r.int(1)?,
        title: r.text(2)?,
        status: status_col(r, 3)?,
        assignment: r.opt_text(4)?,
        created_by: r.text(5)?,
        created_at: r.int(6)?,
        updated_at: r.int(7)?,
    })
}

/// A page of issues (newest first, or best match first with a search) and the total.
pub fn list(
    conn: &mut impl Sql,
    project: &str,
    filter: StatusFilter,
    search: Option<&str>,
    limit: i64,
    offset: i64,
) -> ToolResult<(Vec<IssueSummary>, i64)> {
    let Some(q) = search else {
        return list_query(conn, project, filter, None, limit, offset);
    };
    let unusable = |e: &ToolError| {
        ToolError::invalid_field(
            "search",
            format!(
                "not a usable full-text query ({}); use plain words, \"a phrase\", OR, NOT, or prefix*",
                e.message
            ),
        )
    };
    if conn.engine() == Engine::Postgres {
        let query = tsquery(q);
        return list_query(conn, project, filter, Some(&query), limit, offset).map_err(|e| {
            if e.message.contains("tsquery") {
                unusable(&e)
            } else {
                e
            }
        });
    }
    match list_query(conn, project, filter, Some(q), limit, offset) {
        Err(e) if is_fts_syntax(&e) => {
            let quoted = quote_fts(q);
            list_query(conn, project, filter, Some(&quoted), limit, offset)
                .map_err(|e| if is_fts_syntax(&e) { unusable(&e) } else { e })
        }
        other => other,
    }
}

fn is_fts_syntax(e: &ToolError) -> bool {
    let m = &e.message;
    m.contains("fts5") || m.contains("no such column") || m.contains("unterminated")
}

/// A casual query as a PostgreSQL `tsquery` with FTS5's meaning: words must all match,
/// `"a phrase"` in order, `OR` between alternatives, `NOT` (or `-`) before an excluded word,
/// `prefix*`. Each word is quoted, so punctuation cannot be tsquery syntax.
pub fn tsquery(query: &str) -> String {
    let mut out = String::new();
    let mut pending_or = false;
    let mut negate = false;
    for token in query_tokens(query) {
        match token.as_str() {
            "OR" => {
                pending_or = !out.is_empty();
                continue;
            }
            "NOT" | "AND" => {
                negate |= token == "NOT";
                continue;
            }
            _ => {}
        }
        let (word, neg) = match token.strip_prefix('-') {
            Some(rest) if !rest.is_empty() => (rest, true),
            _ => (token.as_str(), false),
        };
        let (word, prefix) = match word.strip_suffix('*') {
            Some(stem) if !stem.is_empty() => (stem, true),
            _ => (word, false),
        };
        let mut term = format!("'{}'", word.replace('\\', "\\\\").replace('\'', "''"));
        if prefix {
            term.push_str(":*");
        }
        if !out.is_empty() {
            out.push_str(if pending_or { " | " } else { " & " });
        }
        if negate || neg {
            out.push('!');
        }
        out.push_str(&term);
        pending_or = false;
        negate = false;
    }
    out
}

/// Words, and phrases in double quotes kept whole.
fn query_tokens(query: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in query.chars() {
        if c == '"' {
            quoted = !quoted;
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
        } else if c.is_whitespace() && !quoted {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

fn list_query(
    conn: &mut impl Sql,
    project: &str,
    filter: StatusFilter,
    search: Option<&str>,
    limit: i64,
    offset: i64,
) -> ToolResult<(Vec<IssueSummary>, i64)> {
    let status = match filter {
        StatusFilter::Only(s) => Some(s.as_str()),
        _ => None,
    };
    let mut args: Vec<&dyn kitbag_shared::state::sql::Param> = vec![&project];
    let mut conditions = String::from("i.project = ?1");
    let (from, order) = match (&search, conn.engine()) {
        (None, _) => ("issues i", "i.number DESC".to_string()),
        (Some(q), Engine::Sqlite) => {
            args.push(q);
            conditions.push_str(" AND issues_fts MATCH ?2");
            (
                "issues_fts JOIN issues i ON i.seq = issues_fts.rowid",
                "bm25(issues_fts, 10.0, 1.0), i.number DESC".to_string(),
            )
        }
        (Some(q), Engine::Postgres) => {
            args.push(q);
            conditions.push_str(" AND i.search @@ to_tsquery('simple', ?2)");
            (
                "issues i",
                "ts_rank_cd(i.search, to_tsquery('simple', ?2)) DESC, i.number DESC".to_string(),
            )
        }
    };
    match (filter, &status) {
        (StatusFilter::NonTerminal, _) => {
            conditions.push_str(" AND i.status NOT IN ('resolved', 'rejected')");
        }
        (_, Some(s)) => {
            args.push(s);
            conditions.push_str(&format!(" AND i.status = ?{}", args.len()));
        }
        _ => {}
    }
    let total = conn.int(
        &format!("SELECT count(*) FROM {from} WHERE {conditions}"),
        &args,
    )?;
    let n = args.len();
    args.push(&limit);
    args.push(&offset);
    let cols =
        "i.id, i.number, i.title, i.status, i.assignment, i.created_by, i.created_at, i.updated_at";
    let issues = conn
        .rows(
            &format!(
                "SELECT {cols} FROM {from} WHERE {conditions} ORDER BY {order} LIMIT ?{} OFFSET ?{}",
                n + 1,
                n + 2
            ),
            &args,
        )?
        .iter()
        .map(summary)
        .collect::<ToolResult<Vec<_>>>()?;
    Ok((issues, total))
}

fn update_row(r: &Cells) -> ToolResult<Update> {
    let kind = r.text(2)?;
    let metadata = r.opt_text(4)?;
    let vis = r.text(5)?;
    Ok(Update {
        id: r.text(0)?,
        author: r.text(1)?,
        kind: UpdateKind::parse(&kind).unwrap_or(UpdateKind::Comment),
        body: r.opt_text(3)?,
        metadata: metadata.and_then(|m| serde_json::from_str(&m).ok()),
        visibility: Visibility::parse(&vis).unwrap_or(Visibility::OperatorOnly),
        created_at: r.int(6)?,
    })
}

/// Updates of an issue in chronological order, a page of them, and how many there are.
pub fn updates(
    conn: &mut impl Sql,
    issue_seq: i64,
    offset: i64,
    limit: i64,
) -> ToolResult<(Vec<Update>, i64)> {
    let total = conn.int(
        "SELECT count(*) FROM issue_updates WHERE issue_seq = ?1",
        &[&issue_seq],
    )?;
    let list = conn
        .rows(
            "SELECT id, author, kind, body, metadata, visibility, created_at FROM issue_updates
             WHERE issue_seq = ?1 ORDER BY seq LIMIT ?2 OFFSET ?3",
            &[&issue_seq, &limit, &offset],
        )?
        .iter()
        .map(update_row)
        .collect::<ToolResult<Vec<_>>>()?;
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
    conn: &mut Store,
    project: &str,
    author: &str,
    number: i64,
    edit: &Edit<'_>,
) -> ToolResult<Edited> {
    let mut tx = conn.write()?;
    let row = find(&mut tx, project, number)?;
    let at = now();
    let mut fields = Vec::new();
    if let Some(title) = edit.title
        && title != row.title
    {
        set_title(&mut tx, &row, author, title, at)?;
        fields.push("title");
    }
    if let Some(body) = edit.body
        && body != row.body
    {
        set_body(&mut tx, &row, author, body, at)?;
        fields.push("body");
    }
    if let Some(assignment) = edit.assignment
        && assignment != row.assignment.as_deref()
    {
        set_assignment(&mut tx, &row, author, assignment, at)?;
        fields.push("assignment");
    }
    if fields.is_empty() {
        return Err(ToolError::new(
            ErrorCode::NoChange,
            format!("issue #{number} already has those values; nothing changed"),
        )
        .with_detail(json!({"number": number})));
    }
    tx.exec(
        "UPDATE issues SET updated_at = ?1 WHERE seq = ?2",
        &[&at, &row.seq],
    )?;
    log_change(&mut tx, project, number)?;
    tx.commit()?;
    Ok(Edited {
        updated_fields: fields,
        updated_at: at,
    })
}

fn set_title(
    tx: &mut Tx<'_>,
    row: &IssueRow,
    author: &str,
    title: &str,
    at: i64,
) -> ToolResult<()> {
    tx.exec(
        "UPDATE issues SET title = ?1 WHERE seq = ?2",
        &[&title, &row.seq],
    )?;
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
fn set_body(tx: &mut Tx<'_>, row: &IssueRow, author: &str, body: &str, at: i64) -> ToolResult<()> {
    let preserve = row.original_body.is_none();
    if preserve {
        tx.exec(
            "UPDATE issues SET original_body = body WHERE seq = ?1",
            &[&row.seq],
        )?;
    }
    tx.exec(
        "UPDATE issues SET body = ?1 WHERE seq = ?2",
        &[&body, &row.seq],
    )?;
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
    tx: &mut Tx<'_>,
    row: &IssueRow,
    author: &str,
    assignment: Option<&str>,
    at: i64,
) -> ToolResult<()> {
    tx.exec(
        "UPDATE issues SET assignment = ?1 WHERE seq = ?2",
        &[&assignment, &row.seq],
    )?;
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
    conn: &mut Store,
    project: &str,
    author: &str,
    number: i64,
    body: &str,
    visibility: Visibility,
) -> ToolResult<(String, i64)> {
    let mut tx = conn.write()?;
    let row = find(&mut tx, project, number)?;
    let at = now();
    let id = add_update(
        &mut tx,
        row.seq,
        author,
        UpdateKind::Comment,
        Some(body),
        None,
        visibility,
        at,
    )?;
    tx.exec(
        "UPDATE issues SET updated_at = ?1 WHERE seq = ?2",
        &[&at, &row.seq],
    )?;
    log_change(&mut tx, project, number)?;
    tx.commit()?;
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
    conn: &mut Store,
    project: &str,
    author: &str,
    number: i64,
    to: Status,
    comment: Option<&str>,
) -> ToolResult<Moved> {
    let mut tx = conn.write()?;
    let row = find(&mut tx, project, number)?;
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
        Status::Resolved => tx.exec(
            "UPDATE issues SET status = ?1, updated_at = ?2, resolved_at = ?2, resolved_by = ?3 WHERE seq = ?4",
            &[&to.as_str(), &at, &author, &row.seq],
        ),
        Status::Reopened => tx.exec(
            "UPDATE issues SET status = ?1, updated_at = ?2, resolved_at = NULL, resolved_by = NULL WHERE seq = ?3",
            &[&to.as_str(), &at, &row.seq],
        ),
        _ => tx.exec(
            "UPDATE issues SET status = ?1, updated_at = ?2 WHERE seq = ?3",
            &[&to.as_str(), &at, &row.seq],
        ),
    }?;
    add_update(
        &mut tx,
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
            &mut tx,
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
    log_change(&mut tx, project, number)?;
    tx.commit()?;
    Ok(Moved {
        from,
        to,
        updated_at: at,
        comment_id,
    })
}
