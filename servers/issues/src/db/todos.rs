//! An issue's todos: the row, the list, and every change to it in one write transaction.

use super::{find, log_change, new_id, now};
use crate::model::{Note, Todo, TodoKind, TodoStatus};
use kitbag_shared::state::sql::{Cells, Sql, Store};
use kitbag_shared::{ToolError, ToolResult};

pub(super) const TODO_COLS: &str = "id, content, status, kind, phase, position, notes, origin_agent, created_by, created_at, updated_at, started_at, completed_at";

fn todo_row(r: &Cells) -> ToolResult<Todo> {
    let status = r.text(2)?;
    let kind = r.text(3)?;
    let notes = r.text(6)?;
    Ok(Todo {
        id: r.text(0)?,
        content: r.text(1)?,
        status: TodoStatus::parse(&status).unwrap_or(TodoStatus::Pending),
        kind: TodoKind::parse(&kind).unwrap_or(TodoKind::Step),
        phase: r.opt_text(4)?,
        position: r.int(5)?,
        notes: serde_json::from_str::<Vec<Note>>(&notes).unwrap_or_default(),
        origin_agent: r.opt_text(7)?,
        created_by: r.text(8)?,
        created_at: r.int(9)?,
        updated_at: r.int(10)?,
        started_at: r.opt_int(11)?,
        completed_at: r.opt_int(12)?,
    })
}

/// Every todo of an issue in list order (abandoned ones included).
pub fn todos(conn: &mut impl Sql, issue_seq: i64) -> ToolResult<Vec<Todo>> {
    conn.rows(
        &format!("SELECT {TODO_COLS} FROM issue_todos WHERE issue_seq = ?1 ORDER BY position, seq"),
        &[&issue_seq],
    )?
    .iter()
    .map(todo_row)
    .collect()
}

/// New todos to append.
pub struct NewTodos<'a> {
    pub items: &'a [String],
    /// `set` abandons the criteria too (the operator's `set`; an agent's keeps them).
    pub replaces_criteria: bool,
    pub kind: TodoKind,
    pub phase: Option<&'a str>,
    pub origin_agent: Option<&'a str>,
}

/// A todo mutation, run in one write transaction by [`todo_change`].
pub enum TodoOp<'a> {
    /// Abandon the live steps (and criteria when `new.replaces_criteria`), then append `new`.
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
    conn: &mut Store,
    project: &str,
    author: &str,
    number: i64,
    op: &TodoOp<'_>,
    check: impl FnOnce(&[Todo]) -> ToolResult<()>,
) -> ToolResult<()> {
    let mut tx = conn.write()?;
    let row = find(&mut tx, project, number)?;
    let current = todos(&mut tx, row.seq)?;
    check(&current)?;
    let at = now();
    let next_position = current.iter().map(|t| t.position + 1).max().unwrap_or(0);
    match op {
        TodoOp::Set(new) | TodoOp::Add(new) => {
            if matches!(op, TodoOp::Set(_)) {
                let also = if new.replaces_criteria {
                    TodoKind::Criterion
                } else {
                    TodoKind::Step
                };
                tx.exec(
                    "UPDATE issue_todos SET status = 'abandoned', updated_at = ?1
                     WHERE issue_seq = ?2 AND kind IN (?3, ?4) AND status != 'abandoned'",
                    &[&at, &row.seq, &TodoKind::Step.as_str(), &also.as_str()],
                )?;
            }
            for (i, item) in new.items.iter().enumerate() {
                tx.exec(
                    "INSERT INTO issue_todos (id, issue_seq, content, status, kind, phase, position, origin_agent, created_by, created_at, updated_at)
                     VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
                    &[
                        &new_id(),
                        &row.seq,
                        item,
                        &new.kind.as_str(),
                        &new.phase,
                        &(next_position + i as i64),
                        &new.origin_agent,
                        &author,
                        &at,
                    ],
                )?;
            }
        }
        TodoOp::Start(id) => {
            tx.exec(
                "UPDATE issue_todos SET status = 'pending', updated_at = ?1
                 WHERE issue_seq = ?2 AND status = 'in_progress' AND id != ?3",
                &[&at, &row.seq, id],
            )?;
            tx.exec(
                "UPDATE issue_todos SET status = 'in_progress', updated_at = ?1, started_at = ?1, completed_at = NULL
                 WHERE id = ?2 AND status != 'in_progress'",
                &[&at, id],
            )?;
        }
        TodoOp::Done(id) => {
            tx.exec(
                "UPDATE issue_todos SET status = 'completed', updated_at = ?1, completed_at = ?1
                 WHERE id = ?2 AND status != 'completed'",
                &[&at, id],
            )?;
        }
        TodoOp::Drop(id) => {
            tx.exec(
                "UPDATE issue_todos SET status = 'abandoned', updated_at = ?1 WHERE id = ?2",
                &[&at, id],
            )?;
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
            tx.exec(
                "UPDATE issue_todos SET notes = ?1, updated_at = ?2 WHERE id = ?3",
                &[&notes, &at, id],
            )?;
        }
    }
    log_change(&mut tx, project, number)?;
    tx.commit()
}
