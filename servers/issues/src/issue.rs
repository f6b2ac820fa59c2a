//! `issue_list`, `issue_get`, `issue_create`, `issue_update`, `issue_comment`,
//! `issue_transition` and `issue_bind`.

use kitbag_shared::args;
use kitbag_shared::lock::LockExt;
use std::sync::Arc;

use crate::db::Store;
use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

use crate::db::{self, Edit, StatusFilter};
use crate::model::{
    IssueSummary, MAX_BODY_BYTES, MAX_TITLE_CHARS, Status, Todo, TodoStatus, Update, Visibility,
};
use crate::render;
use crate::state::IssuesState;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, fit_str, json_len, within_budget};

pub const DEFAULT_LIMIT: i64 = 25;
pub const MAX_LIMIT: i64 = 100;
pub const DEFAULT_UPDATES: i64 = 200;
pub const MAX_UPDATES: i64 = 1000;
const MAX_SEARCH_CHARS: usize = 500;

// ---------------------------------------------------------------- validation

pub fn number(field: &str, n: i64) -> ToolResult<i64> {
    if n >= 1 {
        Ok(n)
    } else {
        Err(ToolError::invalid_field(
            field,
            format!("{n} is not an issue number; numbers start at 1 (#1)"),
        ))
    }
}

pub fn title(field: &str, t: &str) -> ToolResult<String> {
    let t = t.trim();
    args::non_empty(field, t, "give a one-line title of 1 to 200 characters")?;
    args::max_chars(field, t, MAX_TITLE_CHARS)?;
    if t.contains(['\n', '\r']) {
        return Err(ToolError::invalid_field(
            field,
            "a title is one line; put details in the body",
        ));
    }
    Ok(t.to_string())
}

pub fn body(field: &str, b: &str, allow_empty: bool) -> ToolResult<()> {
    if !allow_empty {
        args::non_empty(field, b.trim(), "write some text")?;
    }
    args::max_bytes(field, b, MAX_BODY_BYTES)
}

fn range(field: &str, v: Option<i64>, default: i64, min: i64, max: i64) -> ToolResult<i64> {
    Ok(args::opt_range(field, v, min, max)?.unwrap_or(default))
}

/// `primary`, `workflow:<name>` (a workflow given with `--workflow`), `session:<sid>`.
pub fn assignment(state: &IssuesState, a: &str) -> ToolResult<()> {
    let ok_name = |s: &str| {
        !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c))
    };
    if a == "primary" {
        return Ok(());
    }
    if let Some(sid) = a.strip_prefix("session:") {
        if ok_name(sid) {
            return Ok(());
        }
    } else if let Some(name) = a.strip_prefix("workflow:") {
        if !ok_name(name) {
            return Err(ToolError::invalid_field(
                "assignment",
                "workflow:<name> needs a name of letters, digits, - _ . : /",
            ));
        }
        if state.workflows.iter().any(|w| w == name) {
            return Ok(());
        }
        let known = if state.workflows.is_empty() {
            "no workflows are declared (start kitbag-issues with --workflow NAME)".to_string()
        } else {
            format!("known workflows: {}", state.workflows.join(", "))
        };
        return Err(ToolError::new(
            ErrorCode::InvalidAssignment,
            format!("assignment: there is no workflow named {name}; {known}"),
        )
        .with_detail(json!({
            "field": "assignment",
            "workflow": name,
            "known_workflows": state.workflows,
        })));
    }
    Err(ToolError::invalid_field(
        "assignment",
        format!(
            "{a:?} is not accepted; give null (unassign), \"primary\", \"workflow:<name>\" or \"session:<sid>\""
        ),
    ))
}

// ---------------------------------------------------------------- issue_list

pub const LIST_DEF: ToolDef = ToolDef::read(
    "issue_list",
    "List issues",
    "List issues, newest first (best match first with `search`).",
);

/// A status, or `all`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StatusArg {
    Open,
    Triaged,
    Assigned,
    InProgress,
    Resolved,
    Rejected,
    Reopened,
    All,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Default: all but resolved and rejected.
    #[serde(default)]
    pub status: Option<StatusArg>,
    /// Default 25.
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    /// Full text over titles and bodies: words, "a phrase", OR, NOT, prefix*.
    #[serde(default)]
    pub search: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    pub issues: Vec<IssueSummary>,
    /// Every issue matching the filter (not only this page).
    pub total: i64,
    /// Always true: `total` is counted, never estimated.
    pub total_exact: bool,
    /// More issues follow this page (`next_offset`).
    pub truncated: bool,
    pub limit: i64,
    pub offset: i64,
    /// `offset` for the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<i64>,
}

pub fn list(state: &IssuesState, conn: &mut Store, p: ListParams) -> ToolResult<Reply<ListResult>> {
    let limit = range("limit", p.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)?;
    let offset = range("offset", p.offset, 0, 0, i64::MAX / 2)?;
    let search = match p.search.as_deref().map(str::trim) {
        None => None,
        Some(s) => {
            args::non_empty("search", s, "give some words, or omit search")?;
            args::max_chars("search", s, MAX_SEARCH_CHARS)?;
            Some(s.to_string())
        }
    };
    let filter = match p.status {
        None => StatusFilter::NonTerminal,
        Some(StatusArg::All) => StatusFilter::All,
        Some(s) => StatusFilter::Only(match s {
            StatusArg::Open => Status::Open,
            StatusArg::Triaged => Status::Triaged,
            StatusArg::Assigned => Status::Assigned,
            StatusArg::InProgress => Status::InProgress,
            StatusArg::Resolved => Status::Resolved,
            StatusArg::Rejected => Status::Rejected,
            StatusArg::Reopened => Status::Reopened,
            StatusArg::All => Status::Open,
        }),
    };
    let (mut issues, total) = db::list(
        conn,
        &state.project,
        filter,
        search.as_deref(),
        limit,
        offset,
    )?;
    // Cut at the budget (a title escapes to up to 1.2 KB); the first issue always fits.
    // The budget holds a default call; an explicit `limit` gets what it asks for.
    if p.limit.is_none() {
        let used = json_len(&ListResult {
            issues: Vec::new(),
            total,
            total_exact: true,
            truncated: true,
            limit,
            offset,
            next_offset: Some(i64::MAX),
        });
        issues = within_budget(used, issues).0;
    }
    let end = offset + issues.len() as i64;
    let next_offset = (end < total).then_some(end);
    let what = match filter {
        StatusFilter::NonTerminal => "not closed".to_string(),
        StatusFilter::All => "any status".to_string(),
        StatusFilter::Only(s) => s.to_string(),
    };
    let mut text = String::new();
    for i in &issues {
        text.push_str(&render::summary_line(i));
        text.push('\n');
    }
    if issues.is_empty() {
        text.push_str(&format!(
            "no issues ({what}{})",
            search
                .as_deref()
                .map(|s| format!(", matching {s:?}"))
                .unwrap_or_default()
        ));
    } else {
        text.push_str(&format!("{}–{} of {total} ({what})", offset + 1, end));
        if let Some(n) = next_offset {
            text.push_str(&format!("; next page: offset {n}"));
        }
    }
    Ok(Reply::new(
        ListResult {
            issues,
            total,
            total_exact: true,
            truncated: next_offset.is_some(),
            limit,
            offset,
            next_offset,
        },
        text,
    ))
}

// ---------------------------------------------------------------- issue_get

pub const GET_DEF: ToolDef = ToolDef::read(
    "issue_get",
    "Get an issue",
    "One issue in full: body, status, assignment, resolution, updates and todos.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    pub number: i64,
    #[serde(default)]
    pub updates_offset: Option<i64>,
    /// 1 to 1000, default 200.
    #[serde(default)]
    pub updates_limit: Option<i64>,
    #[serde(default)]
    pub todos_offset: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GetResult {
    pub id: String,
    pub number: i64,
    pub title: String,
    pub body: String,
    /// The body before its first edit (null if never edited).
    pub original_body: Option<String>,
    pub status: Status,
    pub assignment: Option<String>,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    pub resolved_by: Option<String>,
    /// Chronological.
    pub updates: Vec<Update>,
    /// Updates the issue has in all.
    pub updates_total: i64,
    /// `updates_offset` to read the next updates, when some were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_updates_offset: Option<i64>,
    /// The live checklist (abandoned todos left out).
    pub todos: Vec<Todo>,
    /// Live todos in all.
    pub todos_total: i64,
    /// `todos_offset` to read the next todos, when some were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_todos_offset: Option<i64>,
    /// Updates or todos were left out: their `next_*_offset` goes on.
    pub truncated: bool,
    /// A text (body, original_body, a comment, a todo's older notes) was cut to fit 40 KB.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_truncated: bool,
}

/// The part of the budget the issue's own texts may fill before they are cut, leaving room
/// for a todo or an update on every page (two plain 16 KB bodies still fit whole).
const FIELDS_BUDGET: usize = RESULT_BUDGET_BYTES - 6_000;
const CUT_MARK: &str = "… [cut to fit 40 KB]";

pub fn get(state: &IssuesState, conn: &mut Store, p: GetParams) -> ToolResult<Reply<GetResult>> {
    let n = number("number", p.number)?;
    let offset = range("updates_offset", p.updates_offset, 0, 0, i64::MAX / 2)?;
    let limit = range(
        "updates_limit",
        p.updates_limit,
        DEFAULT_UPDATES,
        1,
        MAX_UPDATES,
    )?;
    let todos_offset = range("todos_offset", p.todos_offset, 0, 0, i64::MAX / 2)?;
    let row = db::find(conn, &state.project, n)?;
    let (updates, total) = db::updates(conn, row.seq, offset, limit)?;
    let live: Vec<Todo> = db::todos(conn, row.seq)?
        .into_iter()
        .filter(|t| t.status != TodoStatus::Abandoned)
        .collect();
    let todos_total = live.len() as i64;
    let mut result = GetResult {
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
        updates: Vec::new(),
        updates_total: total,
        // Room for the paging fields and the flag, whatever they end up being.
        next_updates_offset: Some(i64::MAX),
        todos: Vec::new(),
        todos_total,
        next_todos_offset: Some(i64::MAX),
        truncated: true,
        text_truncated: true,
    };
    let cut_texts = fit_fields(&mut result);
    let mut used = json_len(&result);
    // Todos first (the live checklist), then updates, each cut at the budget; the first item
    // of a page always goes in (cut to fit) so that paging moves on.
    let mut cut_items = false;
    let mut todos_end = todos_offset;
    for mut t in live
        .into_iter()
        .skip(usize::try_from(todos_offset).unwrap_or(usize::MAX))
    {
        let first = result.todos.is_empty();
        let mut add = json_len(&t) + usize::from(!first);
        if used + add > RESULT_BUDGET_BYTES {
            if !first {
                break;
            }
            // Its oldest notes go first.
            while used + add > RESULT_BUDGET_BYTES && !t.notes.is_empty() {
                t.notes.remove(0);
                add = json_len(&t);
                cut_items = true;
            }
            if used + add > RESULT_BUDGET_BYTES {
                let room = (RESULT_BUDGET_BYTES - used.min(RESULT_BUDGET_BYTES))
                    .saturating_sub(add - json_len(t.content.as_str()));
                t.content = fit_str(&t.content, room, CUT_MARK).0;
                add = json_len(&t);
                cut_items = true;
            }
        }
        used += add;
        result.todos.push(t);
        todos_end += 1;
    }
    let todos_left = todos_end < todos_total;
    let mut end = offset;
    if !todos_left {
        for mut u in updates {
            let first = result.updates.is_empty();
            let add = json_len(&u) + usize::from(!first);
            if used + add > RESULT_BUDGET_BYTES {
                if !first {
                    break;
                }
                if let Some(b) = &u.body {
                    let room = (RESULT_BUDGET_BYTES - used.min(RESULT_BUDGET_BYTES))
                        .saturating_sub(json_len(&u) - json_len(b));
                    u.body = Some(fit_str(b, room, CUT_MARK).0);
                    cut_items = true;
                }
            }
            used += json_len(&u) + usize::from(!first);
            result.updates.push(u);
            end += 1;
        }
    }
    result.next_updates_offset = (end < total).then_some(end);
    result.next_todos_offset = todos_left.then_some(todos_end);
    result.truncated = result.next_updates_offset.is_some() || todos_left;
    result.text_truncated = cut_texts || cut_items;
    let text = issue_markdown(&result);
    Ok(Reply::new(result, text))
}

/// Cut `original_body`, then `body`, until the issue without updates and todos fits
/// [`FIELDS_BUDGET`]. Whether anything was cut.
fn fit_fields(r: &mut GetResult) -> bool {
    let over = json_len(&*r).saturating_sub(FIELDS_BUDGET);
    if over == 0 {
        return false;
    }
    let mut over = over;
    if let Some(orig) = &r.original_body {
        let len = json_len(orig.as_str());
        let (cut, _) = fit_str(orig, len.saturating_sub(over), CUT_MARK);
        r.original_body = Some(cut);
        over = json_len(&*r).saturating_sub(FIELDS_BUDGET);
    }
    if over > 0 {
        let len = json_len(r.body.as_str());
        r.body = fit_str(&r.body, len.saturating_sub(over), CUT_MARK).0;
    }
    true
}

/// One issue as markdown (the `issue_get` text and the `issues://N` resource).
pub fn issue_markdown(r: &GetResult) -> String {
    let mut s = format!("# #{} {}\n\n", r.number, r.title);
    s.push_str(&format!(
        "status: {} · assignment: {} · created by {} at {} · updated {}",
        r.status,
        r.assignment.as_deref().unwrap_or("none"),
        r.created_by,
        render::ts(r.created_at),
        render::ts(r.updated_at)
    ));
    if let (Some(at), Some(by)) = (r.resolved_at, &r.resolved_by) {
        s.push_str(&format!(" · resolved by {by} at {}", render::ts(at)));
    }
    s.push_str("\n\n");
    s.push_str(if r.body.is_empty() {
        "(no body)"
    } else {
        &r.body
    });
    s.push('\n');
    if r.original_body.is_some() {
        s.push_str("\n(the body was edited; original_body holds the first version)\n");
    }
    if !r.todos.is_empty() {
        s.push_str("\n## Todos\n");
        s.push_str(&render::todos_markdown(&r.todos));
        s.push('\n');
    }
    s.push_str(&format!("\n## Updates ({})\n", r.updates_total));
    for u in &r.updates {
        s.push_str(&render::update_line(u));
        s.push('\n');
    }
    if let Some(n) = r.next_updates_offset {
        s.push_str(&format!(
            "… {} more updates; call again with updates_offset {n}\n",
            r.updates_total - n
        ));
    }
    if let Some(n) = r.next_todos_offset {
        s.push_str(&format!(
            "… {} more todos; call again with todos_offset {n}\n",
            r.todos_total - n
        ));
    }
    s
}

// ---------------------------------------------------------------- issue_create

pub const CREATE_DEF: ToolDef = ToolDef::write(
    "issue_create",
    "File an issue",
    "File a new issue (status `open`). Check issue_list `search` for duplicates first.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// One line.
    pub title: String,
    /// Markdown.
    pub body: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateResult {
    pub id: String,
    pub number: i64,
    pub status: Status,
    pub created_at: i64,
}

pub fn create(
    state: &IssuesState,
    conn: &mut Store,
    p: CreateParams,
) -> ToolResult<Reply<CreateResult>> {
    let t = title("title", &p.title)?;
    body("body", &p.body, true)?;
    let c = db::create(conn, &state.project, &state.principal, &t, &p.body)?;
    let text = format!("filed #{} {t} (open)", c.number);
    Ok(Reply::new(
        CreateResult {
            id: c.id,
            number: c.number,
            status: Status::Open,
            created_at: c.created_at,
        },
        text,
    ))
}

// ---------------------------------------------------------------- issue_update

pub const UPDATE_DEF: ToolDef = ToolDef::write(
    "issue_update",
    "Edit an issue",
    "Change an issue's title, body or assignment. Status: issue_transition.",
)
.idempotent();

/// Present-and-null is different from absent (`assignment: null` unassigns).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    pub number: i64,
    /// One line.
    #[serde(default)]
    pub title: Option<String>,
    /// Markdown.
    #[serde(default)]
    pub body: Option<String>,
    /// null (unassign), "primary", "workflow:<name>" or "session:<sid>".
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<String>", extend("x-null-means" = "unassign"))]
    pub assignment: Option<Option<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct UpdateResult {
    pub number: i64,
    /// Fields that changed: title, body, assignment.
    pub updated_fields: Vec<String>,
    pub updated_at: i64,
}

pub fn update(
    state: &IssuesState,
    conn: &mut Store,
    p: UpdateParams,
) -> ToolResult<Reply<UpdateResult>> {
    let n = number("number", p.number)?;
    if p.title.is_none() && p.body.is_none() && p.assignment.is_none() {
        return Err(ToolError::invalid_field(
            "title",
            "give at least one of title, body, assignment",
        )
        .with_detail(json!({"fields": ["title", "body", "assignment"]})));
    }
    let t = match &p.title {
        Some(t) => Some(title("title", t)?),
        None => None,
    };
    if let Some(b) = &p.body {
        body("body", b, true)?;
    }
    if let Some(Some(a)) = &p.assignment {
        assignment(state, a)?;
    }
    let edit = Edit {
        title: t.as_deref(),
        body: p.body.as_deref(),
        assignment: p.assignment.as_ref().map(|a| a.as_deref()),
    };
    let e = db::update(conn, &state.project, &state.principal, n, &edit)?;
    let text = format!("updated #{n}: {}", e.updated_fields.join(", "));
    Ok(Reply::new(
        UpdateResult {
            number: n,
            updated_fields: e.updated_fields.iter().map(|s| s.to_string()).collect(),
            updated_at: e.updated_at,
        },
        text,
    ))
}

// ---------------------------------------------------------------- issue_comment

pub const COMMENT_DEF: ToolDef = ToolDef::write(
    "issue_comment",
    "Comment on an issue",
    "Add a comment to an issue's update stream.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentParams {
    pub number: i64,
    /// Markdown.
    pub body: String,
    /// Default `all`; `operator_only` is an internal note for the operator.
    #[serde(default)]
    pub visibility: Option<Visibility>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CommentResult {
    pub update_id: String,
    pub issue_number: i64,
    pub visibility: Visibility,
    pub created_at: i64,
}

pub fn comment(
    state: &IssuesState,
    conn: &mut Store,
    p: CommentParams,
) -> ToolResult<Reply<CommentResult>> {
    let n = number("number", p.number)?;
    body("body", &p.body, false)?;
    let vis = p.visibility.unwrap_or_default();
    let (id, at) = db::comment(conn, &state.project, &state.principal, n, &p.body, vis)?;
    Ok(Reply::new(
        CommentResult {
            update_id: id,
            issue_number: n,
            visibility: vis,
            created_at: at,
        },
        format!("commented on #{n} ({})", vis.as_str()),
    ))
}

// ---------------------------------------------------------------- issue_transition

pub const TRANSITION_DEF: ToolDef = ToolDef::write(
    "issue_transition",
    "Change an issue's status",
    "Change an issue's status forward (steps may be skipped): open → triaged → \
     assigned → in_progress → resolved|rejected → reopened.",
);

// A status an issue can be moved to.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Triaged,
    Assigned,
    InProgress,
    Resolved,
    Rejected,
    Reopened,
}

impl Target {
    fn status(self) -> Status {
        match self {
            Target::Triaged => Status::Triaged,
            Target::Assigned => Status::Assigned,
            Target::InProgress => Status::InProgress,
            Target::Resolved => Status::Resolved,
            Target::Rejected => Status::Rejected,
            Target::Reopened => Status::Reopened,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionParams {
    pub number: i64,
    pub to: Target,
    /// Why; required for resolved and rejected. Markdown, ≤ 16 KB.
    #[serde(default)]
    pub comment: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TransitionResult {
    pub number: i64,
    pub from: Status,
    pub to: Status,
    pub updated_at: i64,
    /// The comment's update id, when a comment was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment_id: Option<String>,
}

pub fn transition(
    state: &IssuesState,
    conn: &mut Store,
    p: TransitionParams,
) -> ToolResult<Reply<TransitionResult>> {
    let n = number("number", p.number)?;
    let to = p.to.status();
    let comment = match p.comment.as_deref() {
        Some(c) if !c.trim().is_empty() => {
            body("comment", c, false)?;
            Some(c)
        }
        _ => None,
    };
    // Seed 004's amendment: a closing status says why.
    let needs_comment = match to {
        Status::Rejected => Some("Rejection requires an explanatory comment."),
        Status::Resolved => Some("Resolution requires an explanatory comment."),
        _ => None,
    };
    if let Some(why) = needs_comment
        && comment.is_none()
    {
        return Err(
            ToolError::new(ErrorCode::InvalidParams, why).with_detail(json!({"field": "comment"}))
        );
    }
    let m = db::transition(conn, &state.project, &state.principal, n, to, comment)?;
    Ok(Reply::new(
        TransitionResult {
            number: n,
            from: m.from,
            to: m.to,
            updated_at: m.updated_at,
            comment_id: m.comment_id,
        },
        format!("#{n}: {} → {}", m.from, m.to),
    ))
}

// ---------------------------------------------------------------- issue_bind

pub const BIND_DEF: ToolDef = ToolDef::write(
    "issue_bind",
    "Bind the session to an issue",
    "Set the issue this session works on (whose checklist `todo` manages); `unbind: true` clears \
     it.",
)
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BindParams {
    #[serde(default)]
    pub number: Option<i64>,
    #[serde(default)]
    pub unbind: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct BindResult {
    /// The bound issue's number (null when unbound).
    pub bound: Option<i64>,
    /// The binding before this call.
    pub previous: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// The bound issue's checklist as markdown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    /// Live todos in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub todos_total: Option<i64>,
    /// The markdown stopped at 40 KB: `todos_offset` for todo view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_todos_offset: Option<i64>,
}

pub fn bind(state: &IssuesState, conn: &mut Store, p: BindParams) -> ToolResult<Reply<BindResult>> {
    let unbind = p.unbind.unwrap_or(false);
    match (p.number, unbind) {
        (Some(_), true) => Err(ToolError::invalid_field(
            "unbind",
            "give either number (to bind) or unbind: true, not both",
        )),
        (None, false) => Err(ToolError::invalid_field(
            "number",
            "required: the issue to bind (or unbind: true)",
        )),
        (None, true) => {
            let previous = state.set_bound(None);
            Ok(Reply::new(
                BindResult {
                    bound: None,
                    previous,
                    title: None,
                    status: None,
                    markdown: None,
                    todos_total: None,
                    next_todos_offset: None,
                },
                match previous {
                    Some(n) => format!("unbound from #{n}"),
                    None => "no issue was bound".to_string(),
                },
            ))
        }
        (Some(n), false) => {
            let n = number("number", n)?;
            let row = db::find(conn, &state.project, n)?;
            let todos: Vec<Todo> = db::todos(conn, row.seq)?
                .into_iter()
                .filter(|t| t.status != TodoStatus::Abandoned)
                .collect();
            let previous = state.set_bound(Some(n));
            let mut result = BindResult {
                bound: Some(n),
                previous,
                title: Some(row.title),
                status: Some(row.status),
                markdown: Some(String::new()),
                todos_total: Some(todos.len() as i64),
                next_todos_offset: Some(i64::MAX),
            };
            // The pages of todo view (which weigh the todos' JSON too), so that its
            // `todos_offset` resumes here.
            let total = todos.len() as i64;
            let page = crate::todo::page(todos, 0, json_len(&result));
            let (md, next) = (page.markdown, page.next);
            let mut text = format!(
                "bound to #{n} {} [{}]\n{md}",
                result.title.as_deref().unwrap_or(""),
                row.status
            );
            if let Some(next) = next {
                text.push_str(&format!(
                    "\n… {} more todos; todo {{\"action\": \"view\", \"todos_offset\": {next}}}",
                    total - next
                ));
            }
            result.markdown = Some(md);
            result.next_todos_offset = next;
            Ok(Reply::new(result, text))
        }
    }
}

// ---------------------------------------------------------------- wiring helpers

/// Run `f` on the shared connection off the async runtime.
pub async fn with_conn<T: Send + 'static>(
    state: Arc<IssuesState>,
    ctx: &CallCtx,
    f: impl FnOnce(&IssuesState, &mut Store) -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    ctx.check_cancelled()?;
    kitbag_shared::blocking(move || {
        let mut conn = state.conn.locked();
        f(&state, &mut conn)
    })
    .await
}
