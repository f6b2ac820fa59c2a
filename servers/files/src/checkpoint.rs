//! `checkpoint`, `checkpoint_list`, `checkpoint_restore` (seed 004's `kaged.checkpoint`): the
//! agent marks a point the operator can sign off and the files can be rewound to. The journal
//! and the snapshots are kitbag-checkpoints'; this module is the tools around them and the
//! sign-off question (an MCP elicitation, like kitbag-issues' `ask`). They live with the files
//! they rewind: kitbag-files alone gives any client its edits' undo.
//!
//! A call that asks is made again when its answer comes — a 2026-07-28 retry with
//! `inputResponses`, or `kitbag run` resuming a paused session — and finds the checkpoint it
//! made (`checkpoint::create` returns the last one when nothing changed since, the reason is
//! the same and the operator has not decided), so one question makes one checkpoint.

use kitbag_checkpoints::checkpoint::{self, FileChange, Listing};
use kitbag_checkpoints::restore::{self, Restored};
use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult, args, blocking};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use kitbag_shared::elicit::answer::{self, Action, AnswerValue, Form};

pub const DEF: ToolDef = ToolDef::write(
    "checkpoint",
    "Checkpoint",
    "Snapshot the files changed since the last checkpoint; the operator signs off.",
);

pub const LIST_DEF: ToolDef = ToolDef::read(
    "checkpoint_list",
    "Checkpoints",
    "Checkpoints kept and the files changed since the last.",
);

pub const RESTORE_DEF: ToolDef = ToolDef::write(
    "checkpoint_restore",
    "Restore a checkpoint",
    "Rewind the files changed since checkpoint `id`; `preview` only shows the diffs.",
);

const MAX_REASON: usize = 500;
const MAX_SUMMARY: usize = 4000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    pub reason: String,
    #[serde(default)]
    pub summary: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    pub id: u64,
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    #[serde(default)]
    pub preview: Option<bool>,
}

/// The operator's word on a checkpoint.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Reject,
    /// Refused to answer.
    Decline,
    /// Dismissed the question.
    Cancel,
    /// The client cannot ask (no elicitation): recorded, not signed off.
    Unavailable,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
            Decision::Decline => "decline",
            Decision::Cancel => "cancel",
            Decision::Unavailable => "unavailable",
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct CheckpointResult {
    pub id: u64,
    /// Files changed since the checkpoint before.
    pub files: Vec<FileChange>,
    pub decision: Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The sign-off question.
fn sign_off_form(id: u64, p: &CheckpointParams, files: &[FileChange]) -> Form {
    let mut message = format!("Checkpoint {id}: {}", p.reason);
    if let Some(s) = &p.summary {
        message.push_str("\n\n");
        message.push_str(s);
    }
    let shown: Vec<&str> = files.iter().take(20).map(|f| f.path.as_str()).collect();
    message.push_str(&match files.len() {
        0 => "\n\nNo file changed since the last checkpoint.".to_string(),
        n if n > shown.len() => format!(
            "\n\nFiles: {} and {} more.",
            shown.join(", "),
            n - shown.len()
        ),
        _ => format!("\n\nFiles: {}.", shown.join(", ")),
    });
    Form {
        message,
        schema: json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "title": "Sign off", "enum": ["approve", "reject"]},
                "comment": {"type": "string", "title": "Comment"}
            },
            "required": ["decision"]
        }),
    }
}

pub async fn run(ctx: &CallCtx, p: CheckpointParams) -> ToolResult<Reply<CheckpointResult>> {
    args::non_empty("reason", p.reason.trim(), "")?;
    args::max_chars("reason", &p.reason, MAX_REASON)?;
    if let Some(s) = &p.summary {
        args::max_chars("summary", s, MAX_SUMMARY)?;
    }
    let policy = ctx.policy().clone();
    let (reason, summary) = (p.reason.clone(), p.summary.clone());
    let made = blocking(move || checkpoint::create(&policy, &reason, summary.as_deref())).await?;
    let form = sign_off_form(made.id, &p, &made.files);
    let (decision, comment) = match ctx
        .elicit(
            &format!("checkpoint-{}", made.id),
            &form.message,
            &form.schema,
        )
        .await
    {
        Ok(result) => {
            let a = answer::answered(&form, result)?;
            let text = |k: &str| match a.answers.as_ref().and_then(|m| m.get(k)) {
                Some(AnswerValue::Text(s)) => Some(s.clone()),
                _ => None,
            };
            let decision = match (a.action, text("decision").as_deref()) {
                (Action::Accept, Some("approve")) => Decision::Approve,
                (Action::Accept, _) => Decision::Reject,
                (Action::Decline, _) => Decision::Decline,
                (Action::Cancel, _) => Decision::Cancel,
            };
            (decision, text("comment").filter(|c| !c.trim().is_empty()))
        }
        Err(e) if e.code == ErrorCode::ElicitationUnsupported => (Decision::Unavailable, None),
        Err(e) => return Err(e),
    };
    let policy = ctx.policy().clone();
    let (id, c) = (made.id, comment.clone());
    blocking(move || checkpoint::sign_off(&policy, id, decision.as_str(), c.as_deref())).await?;
    let head = format!(
        "checkpoint {} ({} file{})",
        made.id,
        made.files.len(),
        if made.files.len() == 1 { "" } else { "s" }
    );
    let mut text = match decision {
        Decision::Approve => format!("{head}: the operator approved."),
        Decision::Reject => format!(
            "{head}: the operator rejected it. Ask how to go on; checkpoint_restore rewinds to an \
             earlier checkpoint."
        ),
        Decision::Decline => format!("{head}: the operator declined to sign off."),
        Decision::Cancel => format!("{head}: the operator dismissed the sign-off."),
        Decision::Unavailable => {
            format!("{head} recorded; this client cannot ask the operator to sign off.")
        }
    };
    if let Some(c) = &comment {
        text.push_str(&format!("\nComment: {c}"));
    }
    Ok(Reply::new(
        CheckpointResult {
            id: made.id,
            files: made.files,
            decision,
            comment,
        },
        text,
    ))
}

pub async fn list(ctx: &CallCtx, _: ListParams) -> ToolResult<Reply<Listing>> {
    let policy = ctx.policy().clone();
    let l = blocking(move || checkpoint::list(&policy)).await?;
    let mut text = match l.checkpoints.len() {
        0 => "no checkpoint".to_string(),
        n => format!("{n} checkpoint(s), {} bytes stored", l.stored_bytes),
    };
    for c in &l.checkpoints {
        text.push_str(&format!(
            "\n#{} {} {} — {} file(s); {} changed since{}",
            c.id,
            c.created,
            c.reason,
            c.files.len(),
            c.changed_since,
            c.decision
                .as_deref()
                .map(|d| format!("; {d}"))
                .unwrap_or_default()
        ));
    }
    if !l.changed.is_empty() {
        text.push_str(&format!(
            "\nchanged since the last: {}",
            l.changed.join(", ")
        ));
    }
    Ok(Reply::new(l, text))
}

pub async fn restore(ctx: &CallCtx, p: RestoreParams) -> ToolResult<Reply<Restored>> {
    if let Some(paths) = &p.paths {
        if paths.is_empty() {
            return Err(ToolError::invalid_field(
                "paths",
                "give at least one path, or leave `paths` out to restore every file",
            ));
        }
        args::max_count("paths", paths.len(), 1000, "paths")?;
    }
    let policy = ctx.policy().clone();
    let preview = p.preview.unwrap_or(false);
    let r = blocking(move || restore::restore(&policy, p.id, p.paths.as_deref(), preview)).await?;
    let verb = if preview { "would rewind" } else { "rewound" };
    let mut text = format!(
        "checkpoint {}: {verb} {} file(s){}",
        r.id,
        r.files.len(),
        if r.unchanged > 0 {
            format!(" ({} already as they were)", r.unchanged)
        } else {
            String::new()
        }
    );
    for f in &r.files {
        text.push('\n');
        match &f.diff {
            Some(d) => text.push_str(d),
            None => text.push_str(&format!("{:?} {}", f.action, f.path)),
        }
    }
    Ok(Reply::new(r, text))
}
