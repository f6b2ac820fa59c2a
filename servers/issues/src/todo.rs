//! `todo`: the working checklist of the session's bound issue.
//!
//! Todos are addressed by their text (case-insensitive, trimmed; a unique prefix or a unique
//! part of the text is enough), never by a synthetic id. At most one todo is in progress.
//! Steps are the agent's plan; criteria are the issue's acceptance criteria, which only an
//! operator may drop or replace.

use crate::db::Store;
use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::db::{self, NewTodos, TodoOp};
use crate::model::{
    MAX_LIVE_TODOS, MAX_NOTE_CHARS, MAX_TODO_CHARS, MAX_TODO_ITEMS, Todo, TodoKind, TodoStatus,
    is_operator,
};
use crate::render;
use crate::state::IssuesState;

pub const DEF: ToolDef = ToolDef::write(
    "todo",
    "Todo checklist",
    "Checklist of the issue bound by issue_bind. `set`/`add`: replace/append steps (`items`); \
     `start`, `done`, `drop`, `note` (`text`) act on `content`: a todo's text or a unique part. \
     Only the operator drops criteria.",
);

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    View,
    Set,
    Add,
    Start,
    Done,
    Drop,
    Note,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::View => "view",
            Action::Set => "set",
            Action::Add => "add",
            Action::Start => "start",
            Action::Done => "done",
            Action::Drop => "drop",
            Action::Note => "note",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoParams {
    pub action: Action,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub items: Option<Vec<String>>,
    /// Work stage of the new items.
    #[serde(default)]
    pub phase: Option<String>,
    /// step (default; your plan) or criterion (acceptance).
    #[serde(default)]
    pub kind: Option<TodoKind>,
    #[serde(default)]
    pub text: Option<String>,
    /// Proposing subagent.
    #[serde(default)]
    pub origin_agent: Option<String>,
    #[serde(default)]
    pub include_abandoned: Option<bool>,
    #[serde(default)]
    pub todos_offset: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TodoResult {
    /// The bound issue's number.
    pub issue: i64,
    pub action: String,
    /// The todo acted on (start, done, drop, note).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The live list in order (abandoned todos only with include_abandoned).
    pub todos: Vec<Todo>,
    /// The list as a markdown checklist: [ ] pending, [>] in progress, [x] done, [-] dropped.
    pub markdown: String,
    /// Abandoned todos not listed.
    pub abandoned_hidden: usize,
    /// Todos in the list (not only this page).
    pub todos_total: i64,
    /// `todos_offset` (action view) for the next todos, when the answer stopped at 40 KB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_todos_offset: Option<i64>,
    /// Todos were left out: `next_todos_offset` goes on.
    pub truncated: bool,
    /// A todo too big for a page alone lost its oldest notes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_truncated: bool,
}

fn no_bound_issue() -> ToolError {
    ToolError::new(
        ErrorCode::NoBoundIssue,
        "no issue is bound to this session: ask the operator which issue you are working on, then \
         call issue_bind {\"number\": N} (or start kitbag-issues with --issue N)",
    )
}

/// Lower-cased, trimmed, inner whitespace collapsed.
pub fn normalize(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// `task-1`, `todo-3`, `item-2`, `step-4`, `id-5` (any case): a synthetic id, not text.
pub fn is_id_like(s: &str) -> bool {
    let s = s.trim();
    let Some((prefix, digits)) = s.split_once('-') else {
        return false;
    };
    matches!(
        prefix.to_ascii_lowercase().as_str(),
        "task" | "todo" | "item" | "step" | "id"
    ) && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
}

fn available(live: &[&Todo]) -> Vec<String> {
    live.iter().take(20).map(|t| t.content.clone()).collect()
}

/// Find the live todo `content` names: exact text, else a unique prefix, else a unique part.
pub fn lookup<'a>(todos: &'a [Todo], content: &str) -> ToolResult<&'a Todo> {
    if is_id_like(content) {
        return Err(ToolError::new(
            ErrorCode::ContentAddressingHint,
            format!(
                "content: {:?} looks like an id; todos are addressed by their text — give the task's words (e.g. \"write tests\")",
                content.trim()
            ),
        )
        .with_detail(json!({"field": "content", "content": content})));
    }
    let want = normalize(content);
    if want.is_empty() {
        return Err(ToolError::invalid_field(
            "content",
            "empty; give the todo's text",
        ));
    }
    let live: Vec<&Todo> = todos
        .iter()
        .filter(|t| t.status != TodoStatus::Abandoned)
        .collect();
    let exact: Vec<&Todo> = live
        .iter()
        .copied()
        .filter(|t| normalize(&t.content) == want)
        .collect();
    if let Some(t) = exact.first() {
        return Ok(t);
    }
    for (how, found) in [
        (
            "start with",
            live.iter()
                .copied()
                .filter(|t| normalize(&t.content).starts_with(&want))
                .collect::<Vec<_>>(),
        ),
        (
            "contain",
            live.iter()
                .copied()
                .filter(|t| normalize(&t.content).contains(&want))
                .collect::<Vec<_>>(),
        ),
    ] {
        match found.len() {
            0 => continue,
            1 => return Ok(found[0]),
            n => {
                let names: Vec<String> = found.iter().map(|t| t.content.clone()).collect();
                return Err(ToolError::new(
                    ErrorCode::MultipleMatches,
                    format!(
                        "content: {n} todos {how} {:?}: {}; give more of the text",
                        content.trim(),
                        names
                            .iter()
                            .map(|s| format!("{s:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_detail(json!({"field": "content", "matches": names})));
            }
        }
    }
    let hint = if live.is_empty() {
        "the list is empty; add todos first with {\"action\": \"add\", \"items\": [...]}"
            .to_string()
    } else {
        format!(
            "available: {}",
            available(&live)
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Err(ToolError::new(
        ErrorCode::TodoNotFound,
        format!("no todo matches {:?}; {hint}", content.trim()),
    )
    .with_detail(json!({
        "field": "content",
        "content": content,
        "available": available(&live),
    })))
}

fn unused(p: &TodoParams, allowed: &[&str]) -> ToolResult<()> {
    let present = [
        ("content", p.content.is_some()),
        ("items", p.items.is_some()),
        ("phase", p.phase.is_some()),
        ("kind", p.kind.is_some()),
        ("text", p.text.is_some()),
        ("origin_agent", p.origin_agent.is_some()),
        ("include_abandoned", p.include_abandoned.is_some()),
        ("todos_offset", p.todos_offset.is_some()),
    ];
    for (name, is) in present {
        if is && !allowed.contains(&name) {
            return Err(ToolError::invalid_field(
                name,
                format!(
                    "not used by action {}; it takes: {}",
                    p.action.as_str(),
                    if allowed.is_empty() {
                        "nothing else".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}

fn required<'a>(v: &'a Option<String>, field: &str, action: Action) -> ToolResult<&'a str> {
    match v.as_deref() {
        Some(s) if !s.trim().is_empty() => Ok(s),
        Some(_) => Err(ToolError::invalid_field(field, "empty")),
        None => Err(ToolError::invalid_field(
            field,
            format!("required by action {}", action.as_str()),
        )),
    }
}

fn short_text(field: &str, v: &Option<String>, max: usize) -> ToolResult<Option<String>> {
    match v.as_deref().map(str::trim) {
        None => Ok(None),
        Some("") => Err(ToolError::invalid_field(field, "empty; omit it instead")),
        Some(s) if s.chars().count() > max || s.contains('\n') => Err(ToolError::invalid_field(
            field,
            format!("one line of at most {max} characters"),
        )),
        Some(s) => Ok(Some(s.to_string())),
    }
}

/// Validate `items`, returning them trimmed.
/// Whether `set` abandons `t`: the seed's `set` replaces the whole list, but only the operator
/// may drop acceptance criteria, so an agent's `set` keeps them.
fn replaced_by_set(t: &Todo, operator: bool) -> bool {
    t.kind == TodoKind::Step || operator
}

/// The new items, checked; `replacing_as`: `set` by the operator (`Some(true)`) or an agent.
fn items(p: &TodoParams, live: &[Todo], replacing_as: Option<bool>) -> ToolResult<Vec<String>> {
    let replacing = replacing_as.is_some();
    let Some(items) = &p.items else {
        return Err(ToolError::invalid_field(
            "items",
            format!(
                "required by action {}: a list of todo texts",
                p.action.as_str()
            ),
        ));
    };
    if items.is_empty() && !replacing {
        return Err(ToolError::invalid_field(
            "items",
            "empty; give at least one todo text",
        ));
    }
    args::max_count("items", items.len(), MAX_TODO_ITEMS, "items")?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut seen: Vec<String> = live
        .iter()
        .filter(|t| {
            t.status != TodoStatus::Abandoned
                && !replacing_as.is_some_and(|operator| replaced_by_set(t, operator))
        })
        .map(|t| normalize(&t.content))
        .collect();
    for (i, item) in items.iter().enumerate() {
        let field = format!("items[{i}]");
        let t = item.trim();
        args::non_empty(&field, t, "")?;
        args::max_chars(&field, t, MAX_TODO_CHARS)?;
        if is_id_like(t) {
            return Err(ToolError::new(
                ErrorCode::ContentAddressingHint,
                format!("{field}: {t:?} looks like an id; write what the task is, in words"),
            )
            .with_detail(json!({"field": field})));
        }
        let norm = normalize(t);
        if seen.contains(&norm) {
            return Err(ToolError::invalid_field(
                &field,
                format!(
                    "{t:?} is already on the list; todos are addressed by their text, so each must be distinct"
                ),
            ));
        }
        seen.push(norm);
        out.push(t.to_string());
    }
    if seen.len() > MAX_LIVE_TODOS {
        return Err(ToolError::invalid_field(
            "items",
            format!(
                "the list would hold {} live todos; at most {MAX_LIVE_TODOS}",
                seen.len()
            ),
        ));
    }
    Ok(out)
}

/// Run one `todo` call against the bound issue.
pub fn run(state: &IssuesState, conn: &mut Store, p: TodoParams) -> ToolResult<Reply<TodoResult>> {
    // Arguments first: a bad call changes nothing and says what is wrong.
    let args = validate(&p)?;
    let number = state.bound().ok_or_else(no_bound_issue)?;
    let include_abandoned = p.include_abandoned.unwrap_or(false);
    if p.action == Action::View {
        return view(
            state,
            conn,
            number,
            p.action,
            None,
            include_abandoned,
            args.offset,
        );
    }
    let kind = p.kind.unwrap_or_default();
    // The op needs values computed from the current list: plan on a read, then apply with a
    // re-check under the write lock (another process may have changed the list meanwhile).
    let row = db::find(conn, &state.project, number)?;
    let current = db::todos(conn, row.seq)?;
    let operator = is_operator(&state.principal);
    let plan = plan(&current, &p, kind, operator, args.content.as_deref())?;
    let new = NewTodos {
        items: &plan.new_items,
        replaces_criteria: operator,
        kind,
        phase: args.phase.as_deref(),
        origin_agent: args.origin.as_deref(),
    };
    let op = match p.action {
        Action::Set => TodoOp::Set(new),
        Action::Add => TodoOp::Add(new),
        Action::Start => TodoOp::Start(plan.op_id.clone()),
        Action::Done => TodoOp::Done(plan.op_id.clone()),
        Action::Drop => TodoOp::Drop(plan.op_id.clone()),
        // (View answered above.)
        Action::Note | Action::View => {
            TodoOp::Note(plan.op_id.clone(), args.note.as_deref().unwrap_or(""))
        }
    };
    db::todo_change(
        conn,
        &state.project,
        &state.principal,
        number,
        &op,
        |current| still_applies(current, p.action, operator, &plan.new_items, &plan.op_id),
    )?;
    view(
        state,
        conn,
        number,
        p.action,
        plan.target,
        include_abandoned,
        0,
    )
}

/// The arguments a todo action uses, checked (each present when its action needs it).
struct Checked {
    offset: i64,
    content: Option<String>,
    note: Option<String>,
    phase: Option<String>,
    origin: Option<String>,
}

fn validate(p: &TodoParams) -> ToolResult<Checked> {
    match p.action {
        Action::View => unused(p, &["include_abandoned", "todos_offset"])?,
        Action::Set | Action::Add => unused(p, &["items", "phase", "kind", "origin_agent"])?,
        Action::Start | Action::Done | Action::Drop => unused(p, &["content"])?,
        Action::Note => unused(p, &["content", "text"])?,
    }
    let content = match p.action {
        Action::Start | Action::Done | Action::Drop | Action::Note => {
            Some(required(&p.content, "content", p.action)?.to_string())
        }
        _ => None,
    };
    let note = if p.action == Action::Note {
        let t = required(&p.text, "text", p.action)?;
        args::max_chars("text", t, MAX_NOTE_CHARS)?;
        Some(t.trim().to_string())
    } else {
        None
    };
    let offset = args::opt_range("todos_offset", p.todos_offset, 0, i64::MAX / 2)?.unwrap_or(0);
    let phase = short_text("phase", &p.phase, 100)?;
    let origin = short_text("origin_agent", &p.origin_agent, 200)?;
    if p.items.is_none() && matches!(p.action, Action::Set | Action::Add) {
        return Err(ToolError::invalid_field(
            "items",
            format!(
                "required by action {}: a list of todo texts",
                p.action.as_str()
            ),
        ));
    }
    Ok(Checked {
        offset,
        content,
        note,
        phase,
        origin,
    })
}

/// What a change acts on, found in the current list: the new items (set, add), or the todo
/// its `content` names (start, done, drop, note) — and whether the principal may do it.
struct Plan {
    new_items: Vec<String>,
    op_id: String,
    target: Option<String>,
}

fn plan(
    current: &[Todo],
    p: &TodoParams,
    kind: TodoKind,
    operator: bool,
    content: Option<&str>,
) -> ToolResult<Plan> {
    let mut plan = Plan {
        new_items: Vec::new(),
        op_id: String::new(),
        target: None,
    };
    match p.action {
        Action::Set | Action::Add => {
            let replacing = p.action == Action::Set;
            plan.new_items = items(p, current, replacing.then_some(operator))?;
            if replacing
                && kind == TodoKind::Criterion
                && !operator
                && current
                    .iter()
                    .any(|t| t.kind == TodoKind::Criterion && t.status != TodoStatus::Abandoned)
            {
                return Err(ToolError::new(
                    ErrorCode::InvalidTransition,
                    "Only the operator can replace acceptance criteria; use action add to append criteria.",
                )
                .with_detail(json!({"field": "kind"})));
            }
        }
        _ => {
            let t = lookup(current, content.unwrap_or(""))?;
            if p.action == Action::Drop && t.kind == TodoKind::Criterion && !operator {
                return Err(ToolError::new(
                    ErrorCode::InvalidTransition,
                    "Only the operator can drop acceptance criteria.",
                )
                .with_detail(json!({"field": "content", "content": t.content})));
            }
            plan.op_id = t.id.clone();
            plan.target = Some(t.content.clone());
        }
    }
    Ok(plan)
}

/// Whether a change checked against the list read earlier still applies to `current`, the
/// list under the write lock: new items are still distinct, the todo acted on is still live.
fn still_applies(
    current: &[Todo],
    action: Action,
    operator: bool,
    new_items: &[String],
    op_id: &str,
) -> ToolResult<()> {
    match action {
        Action::Set | Action::Add => {
            let live: Vec<String> = current
                .iter()
                .filter(|t| {
                    t.status != TodoStatus::Abandoned
                        && !(action == Action::Set && replaced_by_set(t, operator))
                })
                .map(|t| normalize(&t.content))
                .collect();
            if let Some(dup) = new_items.iter().find(|i| live.contains(&normalize(i))) {
                return Err(ToolError::invalid_field(
                    "items",
                    format!("{dup:?} was just added by someone else; view the list and retry"),
                ));
            }
            Ok(())
        }
        _ => {
            if current
                .iter()
                .any(|t| t.id == op_id && t.status != TodoStatus::Abandoned)
            {
                Ok(())
            } else {
                Err(ToolError::new(
                    ErrorCode::TodoNotFound,
                    "that todo was dropped or replaced meanwhile; view the list and retry",
                ))
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn view(
    state: &IssuesState,
    conn: &mut Store,
    number: i64,
    action: Action,
    target: Option<String>,
    include_abandoned: bool,
    offset: i64,
) -> ToolResult<Reply<TodoResult>> {
    let row = db::find(conn, &state.project, number)?;
    let all = db::todos(conn, row.seq)?;
    let hidden = if include_abandoned {
        0
    } else {
        all.iter()
            .filter(|t| t.status == TodoStatus::Abandoned)
            .count()
    };
    let todos: Vec<Todo> = all
        .into_iter()
        .filter(|t| include_abandoned || t.status != TodoStatus::Abandoned)
        .collect();
    let mut result = TodoResult {
        issue: number,
        action: action.as_str().to_string(),
        target,
        todos: Vec::new(),
        markdown: String::new(),
        abandoned_hidden: hidden,
        todos_total: todos.len() as i64,
        // Room for the paging fields, whatever they end up being.
        next_todos_offset: Some(i64::MAX),
        truncated: true,
        text_truncated: true,
    };
    let page = page(todos, offset, json_len(&result));
    let head = match (&result.target, action) {
        (Some(t), Action::Start) => format!("started {t:?}"),
        (Some(t), Action::Done) => format!("completed {t:?}"),
        (Some(t), Action::Drop) => format!("dropped {t:?}"),
        (Some(t), Action::Note) => format!("noted on {t:?}"),
        (_, Action::Set) => "list replaced".to_string(),
        (_, Action::Add) => "added".to_string(),
        _ => "todos".to_string(),
    };
    let mut text = format!("{head} · #{number} {}\n{}", row.title, page.markdown);
    if let Some(n) = page.next {
        text.push_str(&format!(
            "\n… {} more todos; todo {{\"action\": \"view\", \"todos_offset\": {n}}}",
            result.todos_total - n
        ));
    }
    result.todos = page.todos;
    result.markdown = page.markdown;
    result.next_todos_offset = page.next;
    result.truncated = page.next.is_some();
    result.text_truncated = page.cut;
    Ok(Reply::new(result, text))
}

/// One page of a checklist: the todos from `offset` whose JSON and markdown together fit
/// [`RESULT_BUDGET_BYTES`] beside `used` bytes (the rest of the answer); at least one, so that
/// paging moves on — a todo too big alone loses its oldest notes.
pub struct Page {
    pub todos: Vec<Todo>,
    pub markdown: String,
    /// The offset of the first todo left out.
    pub next: Option<i64>,
    /// Notes were cut.
    pub cut: bool,
}

pub fn page(list: Vec<Todo>, offset: i64, used: usize) -> Page {
    let total = list.len();
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
    let mut rest: Vec<Todo> = list.into_iter().skip(start).collect();
    let cost = |part: &[Todo]| used + json_len(part) + json_len(&render::todos_markdown(part));
    let fits = |part: &[Todo]| cost(part) < RESULT_BUDGET_BYTES;
    let mut cut = false;
    let keep = if rest.is_empty() || fits(&rest) {
        rest.len()
    } else {
        // The most todos that fit (the cost grows with the count), at least one.
        let (mut lo, mut hi) = (1, rest.len());
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(&rest[..mid]) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if !fits(&rest[..1]) {
            cut = true;
            let first = &mut rest[0];
            // Keep the newest notes the room takes (each weighs its JSON, and its markdown
            // line when the todo is in progress), then drop the oldest until it fits.
            let notes = std::mem::take(&mut first.notes);
            let room = RESULT_BUDGET_BYTES.saturating_sub(cost(std::slice::from_ref(first)));
            let echo = first.status == TodoStatus::InProgress;
            let mut weight = 0;
            let from = notes
                .iter()
                .rposition(|n| {
                    weight += json_len(n) + 1 + if echo { json_len(&n.text) + 8 } else { 0 };
                    weight >= room
                })
                .map_or(0, |i| i + 1);
            first.notes = notes.into_iter().skip(from).collect();
            while !fits(&rest[..1]) && !rest[0].notes.is_empty() {
                rest[0].notes.remove(0);
            }
        }
        lo
    };
    rest.truncate(keep);
    let markdown = render::todos_markdown(&rest);
    let end = start + rest.len();
    Page {
        todos: rest,
        markdown,
        next: (end < total).then_some(end as i64),
        cut,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(content: &str, status: TodoStatus) -> Todo {
        Todo {
            id: content.into(),
            content: content.into(),
            status,
            kind: TodoKind::Step,
            phase: None,
            position: 0,
            notes: vec![],
            origin_agent: None,
            created_by: "x".into(),
            created_at: 0,
            updated_at: 0,
            started_at: None,
            completed_at: None,
        }
    }

    #[test]
    fn id_like_tokens() {
        for s in ["task-1", "TODO-12", " item-3 ", "step-4", "id-5"] {
            assert!(is_id_like(s), "{s}");
        }
        for s in ["task-", "task-a", "tasks-1", "write tests", "task 1", "1"] {
            assert!(!is_id_like(s), "{s}");
        }
    }

    #[test]
    fn lookup_exact_prefix_part_and_errors() {
        let list = vec![
            t("Implement auth module", TodoStatus::Pending),
            t("Write tests", TodoStatus::Pending),
            t("Write docs", TodoStatus::Pending),
            t("Old plan", TodoStatus::Abandoned),
        ];
        assert_eq!(
            lookup(&list, "  write TESTS ").unwrap().content,
            "Write tests"
        );
        assert_eq!(
            lookup(&list, "implement").unwrap().content,
            "Implement auth module"
        );
        assert_eq!(
            lookup(&list, "auth").unwrap().content,
            "Implement auth module"
        );
        let e = lookup(&list, "write").unwrap_err();
        assert_eq!(e.code, ErrorCode::MultipleMatches);
        let e = lookup(&list, "old plan").unwrap_err();
        assert_eq!(e.code, ErrorCode::TodoNotFound);
        assert!(e.message.contains("available"), "{}", e.message);
        let e = lookup(&list, "task-2").unwrap_err();
        assert_eq!(e.code, ErrorCode::ContentAddressingHint);
        let e = lookup(&[], "anything").unwrap_err();
        assert_eq!(e.code, ErrorCode::TodoNotFound);
        assert!(e.message.contains("the list is empty"), "{}", e.message);
    }
}
