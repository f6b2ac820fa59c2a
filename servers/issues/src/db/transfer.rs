//! Export and import: every issue with its updates and todos, as records.

use super::issues::{ISSUE_COL_COUNT, ISSUE_COLS, IssueRow, issue_row};
use super::todos::TODO_COLS;
use super::{log_change, todos, updates};
use crate::model::IssueRecord;
use kitbag_shared::ToolResult;
use kitbag_shared::state::sql::{Sql, Store};

/// Every issue of every project, with its updates and todos, in (project, number) order.
pub fn export(conn: &mut impl Sql) -> ToolResult<Vec<IssueRecord>> {
    let rows: Vec<(String, IssueRow)> = conn
        .rows(
            &format!("SELECT {ISSUE_COLS}, project FROM issues ORDER BY project, number"),
            &[],
        )?
        .iter()
        .map(|r| Ok((r.text(ISSUE_COL_COUNT)?, issue_row(r)?)))
        .collect::<ToolResult<Vec<_>>>()?;
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
pub fn import(conn: &mut Store, records: &[IssueRecord]) -> anyhow::Result<(usize, usize)> {
    let fail = |e: kitbag_shared::ToolError| anyhow::anyhow!(e.message);
    let mut tx = conn.write().map_err(fail)?;
    let (mut added, mut replaced) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        let line = i + 1;
        let by_number = tx
            .row(
                "SELECT id FROM issues WHERE project = ?1 AND number = ?2",
                &[&r.project, &r.number],
            )
            .and_then(|row| row.map(|row| row.text(0)).transpose())
            .map_err(fail)?;
        if let Some(other) = &by_number
            && other != &r.id
        {
            anyhow::bail!(
                "record {line}: project {} already has issue #{} with another id ({other}); nothing was imported",
                r.project,
                r.number
            );
        }
        let existed = tx
            .exec("DELETE FROM issues WHERE id = ?1", &[&r.id])
            .map_err(fail)?
            > 0;
        if existed {
            replaced += 1;
        } else {
            added += 1;
        }
        // The row is numbered anew (`seq` is left to the engine).
        let seq = tx
            .int(
                "INSERT INTO issues (id, number, title, body, original_body, status, assignment, created_by, created_at, updated_at, resolved_at, resolved_by, project)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING seq",
                &[
                    &r.id,
                    &r.number,
                    &r.title,
                    &r.body,
                    &r.original_body,
                    &r.status.as_str(),
                    &r.assignment,
                    &r.created_by,
                    &r.created_at,
                    &r.updated_at,
                    &r.resolved_at,
                    &r.resolved_by,
                    &r.project,
                ],
            )
            .map_err(|e| anyhow::anyhow!("record {line}: {}", e.message))?;
        for u in &r.updates {
            tx.exec(
                "INSERT INTO issue_updates (id, issue_seq, author, kind, body, metadata, visibility, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                &[
                    &u.id,
                    &seq,
                    &u.author,
                    &u.kind.as_str(),
                    &u.body,
                    &u.metadata.as_ref().map(|m| m.to_string()),
                    &u.visibility.as_str(),
                    &u.created_at,
                ],
            )
            .map_err(|e| anyhow::anyhow!("record {line}, update {}: {}", u.id, e.message))?;
        }
        for t in &r.todos {
            tx.exec(
                &format!(
                    "INSERT INTO issue_todos ({TODO_COLS}, issue_seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
                ),
                &[
                    &t.id,
                    &t.content,
                    &t.status.as_str(),
                    &t.kind.as_str(),
                    &t.phase,
                    &t.position,
                    &serde_json::to_string(&t.notes)?,
                    &t.origin_agent,
                    &t.created_by,
                    &t.created_at,
                    &t.updated_at,
                    &t.started_at,
                    &t.completed_at,
                    &seq,
                ],
            )
            .map_err(|e| anyhow::anyhow!("record {line}, todo {}: {}", t.id, e.message))?;
        }
        log_change(&mut tx, &r.project, r.number).map_err(fail)?;
    }
    tx.commit().map_err(fail)?;
    Ok((added, replaced))
}
