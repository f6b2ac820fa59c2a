//! The tracker's vocabulary: statuses and their state machine, update kinds, todo kinds,
//! and the records stored, returned and exported.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest body or comment, in bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Largest todo note, in characters.
pub const MAX_NOTE_CHARS: usize = 2000;
/// Longest todo content, in characters.
pub const MAX_TODO_CHARS: usize = 500;
/// Most items one `set`/`add` may carry.
pub const MAX_TODO_ITEMS: usize = 100;
/// Most live (not abandoned) todos an issue may hold.
pub const MAX_LIVE_TODOS: usize = 500;

/// Where an issue is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Open,
    Triaged,
    Assigned,
    InProgress,
    Resolved,
    Rejected,
    Reopened,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Open,
        Status::Triaged,
        Status::Assigned,
        Status::InProgress,
        Status::Resolved,
        Status::Rejected,
        Status::Reopened,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Triaged => "triaged",
            Status::Assigned => "assigned",
            Status::InProgress => "in_progress",
            Status::Resolved => "resolved",
            Status::Rejected => "rejected",
            Status::Reopened => "reopened",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Resolved and rejected issues are closed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Resolved | Status::Rejected)
    }

    /// The state machine: the statuses this one may move to.
    pub fn legal_targets(self) -> &'static [Status] {
        use Status::*;
        match self {
            Open | Reopened => &[Triaged, Assigned, InProgress, Resolved, Rejected],
            Triaged => &[Assigned, InProgress, Resolved, Rejected],
            Assigned => &[InProgress, Resolved, Rejected],
            InProgress => &[Resolved, Rejected],
            Resolved | Rejected => &[Reopened],
        }
    }

    pub fn can_move_to(self, to: Status) -> bool {
        self.legal_targets().contains(&to)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who may see an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    // Plain comments: per-variant docs turn the schema's enum into a oneOf of described
    // consts, which the parameter's own description already says in fewer bytes.
    #[default]
    All,
    OperatorOnly,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::All => "all",
            Visibility::OperatorOnly => "operator_only",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" => Some(Visibility::All),
            "operator_only" => Some(Visibility::OperatorOnly),
            _ => None,
        }
    }
}

/// What an entry of an issue's update stream records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateKind {
    StatusChange,
    Comment,
    TitleEdit,
    BodyEdit,
    AssignmentChange,
}

impl UpdateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateKind::StatusChange => "status_change",
            UpdateKind::Comment => "comment",
            UpdateKind::TitleEdit => "title_edit",
            UpdateKind::BodyEdit => "body_edit",
            UpdateKind::AssignmentChange => "assignment_change",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            UpdateKind::StatusChange,
            UpdateKind::Comment,
            UpdateKind::TitleEdit,
            UpdateKind::BodyEdit,
            UpdateKind::AssignmentChange,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// A todo's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
    Abandoned,
}

impl TodoStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TodoStatus::Pending => "pending",
            TodoStatus::InProgress => "in_progress",
            TodoStatus::Completed => "completed",
            TodoStatus::Abandoned => "abandoned",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            TodoStatus::Pending,
            TodoStatus::InProgress,
            TodoStatus::Completed,
            TodoStatus::Abandoned,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// A step of the agent's plan, or an acceptance criterion of the issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum TodoKind {
    #[default]
    Step,
    Criterion,
}

impl TodoKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TodoKind::Step => "step",
            TodoKind::Criterion => "criterion",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "step" => Some(TodoKind::Step),
            "criterion" => Some(TodoKind::Criterion),
            _ => None,
        }
    }
}

/// One line of `issue_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IssueSummary {
    /// ULID.
    pub id: String,
    /// Project-scoped number (#42).
    pub number: i64,
    pub title: String,
    pub status: Status,
    /// `primary`, `workflow:<name>`, `session:<sid>`, or null.
    pub assignment: Option<String>,
    pub created_by: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

/// One entry of an issue's update stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Update {
    /// ULID.
    pub id: String,
    pub author: String,
    pub kind: UpdateKind,
    /// The comment text (comments only).
    pub body: Option<String>,
    /// What changed: `{old_status, new_status}`, `{old_title, new_title}`,
    /// `{old_assignment, new_assignment}`, `{old_bytes, new_bytes, original_preserved}`.
    pub metadata: Option<Value>,
    pub visibility: Visibility,
    /// Unix seconds.
    pub created_at: i64,
}

/// A note on a todo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Note {
    pub text: String,
    pub author: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// One todo of an issue's checklist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Todo {
    /// ULID.
    pub id: String,
    pub content: String,
    pub status: TodoStatus,
    pub kind: TodoKind,
    /// Work-stage grouping, if any.
    pub phase: Option<String>,
    /// Order in the list (never reused within an issue).
    pub position: i64,
    pub notes: Vec<Note>,
    /// The subagent (tree path) whose proposal this todo came from, if any.
    pub origin_agent: Option<String>,
    pub created_by: String,
    /// Unix seconds.
    pub created_at: i64,
    pub updated_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
}

/// One issue with everything it owns: the JSONL record of `export`/`import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueRecord {
    pub project: String,
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
    pub updates: Vec<Update>,
    pub todos: Vec<Todo>,
}

/// Whether a principal acts as the operator (who alone may drop acceptance criteria).
pub fn is_operator(principal: &str) -> bool {
    principal == "operator" || principal.starts_with("operator:")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_is_the_issues() {
        use Status::*;
        let expect: &[(Status, &[Status])] = &[
            (Open, &[Triaged, Assigned, InProgress, Resolved, Rejected]),
            (Triaged, &[Assigned, InProgress, Resolved, Rejected]),
            (Assigned, &[InProgress, Resolved, Rejected]),
            (InProgress, &[Resolved, Rejected]),
            (Resolved, &[Reopened]),
            (Rejected, &[Reopened]),
            (
                Reopened,
                &[Triaged, Assigned, InProgress, Resolved, Rejected],
            ),
        ];
        for (from, targets) in expect {
            for to in Status::ALL {
                assert_eq!(
                    from.can_move_to(to),
                    targets.contains(&to),
                    "{from} -> {to}"
                );
            }
            assert!(!from.can_move_to(*from), "{from} -> itself");
        }
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(Status::parse("closed"), None);
    }

    #[test]
    fn operator_principals() {
        assert!(is_operator("operator"));
        assert!(is_operator("operator:alice"));
        assert!(!is_operator("agent:primary"));
        assert!(!is_operator("operators"));
    }
}
