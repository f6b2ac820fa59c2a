//! `edit_patch`: a multi-file change in the patch format a model knows best — Codex's
//! apply_patch envelope, a unified diff (`git diff`, `diff -u`), or Claude's str_replace
//! commands — applied all or nothing.
//!
//! Every file is checked before any is written: an updated or deleted file must have been read
//! with `file_read` and be unchanged since (as for `edit_text`), an added file or a move's
//! destination must not exist, and every hunk must be found (exactly, else nearby, else with
//! whitespace ignored — see [`hunks`]). Then all the new files are staged beside their
//! targets and put in place together ([`kitbag_shared::atomic::commit_changes`]): a failure
//! puts back what was already changed.

pub mod codex;
pub mod hunks;
pub mod model;
pub mod replace;
pub mod unified;

use kitbag_lsp_client::check::EditDiagnostics;
use kitbag_lsp_client::feedback;
use std::path::PathBuf;
use std::sync::Arc;

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::atomic::{self, Changes, is_exists};
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::paths::{ParentDir, Resolved};
use kitbag_shared::{
    Access, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult, blocking,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::edit::{self, Decoded, EditSpec, MAX_DIFF_BYTES};
use crate::state::FilesState;
use model::{Edits, FileChange, Format, Op};

pub const DEF: ToolDef = ToolDef::write(
    "edit_patch",
    "Apply patch",
    "Apply a multi-file patch all-or-nothing: Codex apply_patch (`*** Begin Patch`), unified \
     diff or str_replace JSON commands, to files read with file_read and unchanged since.",
)
.destructive();

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FormatParam {
    #[default]
    Auto,
    ApplyPatch,
    Unified,
    StrReplace,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchParams {
    pub patch: String,
    // Default: detected (`auto`).
    #[serde(default)]
    pub format: Option<FormatParam>,
    /// Diff only, no write.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Report new/fixed diagnostics.
    #[serde(default)]
    pub check: Option<bool>,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Added,
    Deleted,
    Updated,
    Moved,
}

/// A hunk that did not apply exactly where the patch put it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HunkNote {
    pub hunk: u64,
    /// Line where it applied (its first old line; for an insertion, the line it follows).
    pub line: u64,
    /// Lines from where the patch put it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// Matched only with whitespace ignored.
    pub loose: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PatchedFile {
    /// Root-relative; a move's destination.
    pub path: String,
    pub action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
    pub lines_added: u64,
    pub lines_removed: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hunks_moved: Vec<HunkNote>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PatchResult {
    /// The format read.
    pub format: String,
    pub applied: bool,
    pub dry_run: bool,
    pub files: Vec<PatchedFile>,
    pub diff: String,
    /// The diff was cut at 32 KB (the patch itself is whole).
    pub diff_truncated: bool,
    /// What the patch did to the language servers' diagnostics (servers run with --lsp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<EditDiagnostics>,
}

/// A patch text that does not parse: the 1-based line and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

/// The format of `text` as given or detected, and its file changes.
pub fn parse(text: &str, format: FormatParam) -> ToolResult<(Format, Vec<FileChange>)> {
    let format = match format {
        FormatParam::ApplyPatch => Format::ApplyPatch,
        FormatParam::Unified => Format::Unified,
        FormatParam::StrReplace => Format::StrReplace,
        FormatParam::Auto if codex::detect(text) => Format::ApplyPatch,
        FormatParam::Auto if unified::detect(text) => Format::Unified,
        FormatParam::Auto if replace::detect(text) => Format::StrReplace,
        FormatParam::Auto => {
            return Err(ToolError::invalid_field(
                "patch",
                "not a patch format edit_patch reads: an apply_patch envelope starts with \
                 `*** Begin Patch`, a unified diff has `--- a/PATH` and `+++ b/PATH` lines \
                 before its `@@` hunks, str_replace commands are a JSON object or array",
            ));
        }
    };
    let parsed = match format {
        Format::ApplyPatch => codex::parse(text),
        Format::Unified => unified::parse(text),
        Format::StrReplace => replace::parse(text),
    };
    let changes = parsed.map_err(|e| {
        ToolError::invalid_field(
            "patch",
            format!("line {}: {} ({} format)", e.line, e.msg, format.as_str()),
        )
        .with_detail(json!({ "field": "patch", "line": e.line, "format": format.as_str() }))
    })?;
    Ok((format, changes))
}

/// A file change with its paths resolved.
struct Planned {
    change: FileChange,
    from: Resolved,
    /// A move's destination.
    to: Option<Resolved>,
}

pub async fn run(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: PatchParams,
) -> ToolResult<Reply<PatchResult>> {
    if p.patch.len() > state.max_content_bytes {
        return Err(ToolError::invalid_field(
            "patch",
            format!(
                "is {} bytes; at most {} bytes are accepted (--max-content-bytes)",
                p.patch.len(),
                state.max_content_bytes
            ),
        ));
    }
    let (format, changes) = parse(&p.patch, p.format.unwrap_or_default())?;
    let dry_run = p.dry_run.unwrap_or(false);
    let access = if dry_run { Access::Read } else { Access::Write };
    let plan = {
        let policy = policy.clone();
        blocking(move || resolve_all(&policy, format, changes, access)).await?
    };
    let paths: Vec<_> = plan
        .iter()
        .flat_map(|p| std::iter::once(p.from.abs.clone()).chain(p.to.iter().map(|t| t.abs.clone())))
        .collect();
    let moved: Vec<(PathBuf, PathBuf)> = plan
        .iter()
        .filter_map(|p| Some((p.from.abs.clone(), p.to.as_ref()?.abs.clone())))
        .collect();
    let changed: Vec<PathBuf> = plan.iter().map(|p| p.from.abs.clone()).collect();
    let check = if dry_run { Some(false) } else { p.check };
    let pending = feedback::before(state.feedback.as_ref(), &policy, &changed, check).await;
    let mut reply = {
        let _guard = state.locks.lock_many(&paths).await?;
        let (state, policy) = (state.clone(), policy.clone());
        blocking(move || apply_locked(&state, &policy, format, plan, dry_run)).await?
    };
    let d = feedback::after(pending, &policy, &moved).await;
    feedback::append(&mut reply.text, d.as_ref());
    reply.data.diagnostics = d;
    Ok(reply)
}

/// Resolve every path the patch names (each at most once), before anything is locked.
fn resolve_all(
    policy: &PathPolicy,
    format: Format,
    mut changes: Vec<FileChange>,
    access: Access,
) -> ToolResult<Vec<Planned>> {
    if format == Format::Unified && strips_one_level(policy, &changes) {
        for c in &mut changes {
            c.path = without_first_dir(&c.path).to_string();
            if let Op::Update {
                move_to: Some(to), ..
            } = &mut c.op
            {
                *to = without_first_dir(to).to_string();
            }
        }
    }
    let mut plan: Vec<Planned> = Vec::with_capacity(changes.len());
    for change in changes {
        let from = policy.resolve(&change.path, "patch", access)?;
        let to = match &change.op {
            Op::Update {
                move_to: Some(to), ..
            } => Some(policy.resolve(to, "patch", access)?).filter(|t| t.abs != from.abs),
            _ => None,
        };
        let mut named = std::iter::once(&from).chain(to.as_ref());
        if let Some(dup) = named.find(|r| {
            plan.iter()
                .any(|q| q.from.abs == r.abs || q.to.as_ref().is_some_and(|t| t.abs == r.abs))
        }) {
            return Err(ToolError::invalid_field(
                "patch",
                format!(
                    "{} is changed twice; give each file's changes in one section",
                    dup.rel
                ),
            ));
        }
        plan.push(Planned { change, from, to });
    }
    Ok(plan)
}

/// `diff -ruN old new` names `old/f`, `new/f`: paths one directory up from the root (what
/// `patch -p1` is told by hand). True when no file the patch changes exists as named but one
/// does without its first directory; then every path of the patch, added ones too, drops it.
fn strips_one_level(policy: &PathPolicy, changes: &[FileChange]) -> bool {
    let exists = |p: &str| {
        policy
            .resolve(p, "patch", Access::Read)
            .is_ok_and(|r| r.abs.exists())
    };
    let existing: Vec<&str> = changes
        .iter()
        .filter(|c| !matches!(c.op, Op::Add(_)))
        .map(|c| c.path.as_str())
        .collect();
    !existing.iter().any(|p| exists(p))
        && existing
            .iter()
            .any(|p| p.contains('/') && exists(without_first_dir(p)))
}

fn without_first_dir(path: &str) -> &str {
    path.split_once('/').map_or(path, |(_, rest)| rest)
}

/// One file's outcome, checked and computed, not yet written.
struct Outcome {
    action: Action,
    /// The file the old text is at, and its original encoding (BOM, CRLF).
    from: Resolved,
    from_dir: Option<ParentDir>,
    to: Option<(Resolved, Option<ParentDir>)>,
    old: String,
    new: String,
    encoding: Option<Decoded>,
    notes: Vec<HunkNote>,
}

fn apply_locked(
    state: &FilesState,
    policy: &PathPolicy,
    format: Format,
    plan: Vec<Planned>,
    dry_run: bool,
) -> ToolResult<Reply<PatchResult>> {
    let access = if dry_run { Access::Read } else { Access::Write };
    let mut outcomes = Vec::with_capacity(plan.len());
    for p in plan {
        outcomes.push(check_one(state, policy, p, access)?);
    }
    let diffs: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let shown = o.to.as_ref().map_or(&o.from.rel, |(t, _)| &t.rel);
            kitbag_shared::diff::unified_diff(shown, &o.old, &o.new)
        })
        .collect();
    let diff_full = diffs.concat();
    let budget = RESULT_BUDGET_BYTES.saturating_sub(
        1024 + kitbag_lsp_client::check::MAX_BYTES
            + outcomes
                .iter()
                .map(|o| 160 + 2 * json_len(o.from.rel.as_str()) + 64 * o.notes.len())
                .sum::<usize>(),
    );
    let (diff, diff_truncated) = {
        let (d, cut) = kitbag_shared::limits::json_prefix(&diff_full, MAX_DIFF_BYTES.min(budget));
        (d.to_string(), cut)
    };
    if !dry_run {
        commit(state, policy, &mut outcomes)?;
    }
    let files: Vec<PatchedFile> = outcomes
        .into_iter()
        .zip(&diffs)
        .map(|(o, d)| summary(o, d))
        .collect();
    let verb = if dry_run { "would change" } else { "changed" };
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("{} {}", action_letter(f.action), f.path))
        .collect();
    let mut text = format!(
        "{verb} {} file(s) ({} patch):\n{}\n{diff}",
        files.len(),
        format.as_str(),
        list.join("\n")
    );
    if diff_truncated {
        text.push_str("\n[diff truncated at 32 KB]");
    }
    Ok(Reply::new(
        PatchResult {
            format: format.as_str().into(),
            applied: !dry_run,
            dry_run,
            files,
            diff,
            diff_truncated,
            diagnostics: None,
        },
        text,
    ))
}

fn action_letter(a: Action) -> &'static str {
    match a {
        Action::Added => "A",
        Action::Deleted => "D",
        Action::Updated => "M",
        Action::Moved => "R",
    }
}

/// The open parent of `r`, or `None` when its directory does not exist yet (made at commit).
fn parent_of(policy: &PathPolicy, r: &Resolved, access: Access) -> ToolResult<Option<ParentDir>> {
    match policy.parent(&r.rel, "patch", access, Parents::MustExist) {
        Ok((_, dir)) => Ok(Some(dir)),
        Err(e) if matches!(e.code, ErrorCode::FileNotFound | ErrorCode::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Check one file's change and compute its new text.
fn check_one(
    state: &FilesState,
    policy: &PathPolicy,
    p: Planned,
    access: Access,
) -> ToolResult<Outcome> {
    let Planned { change, from, to } = p;
    let from_dir = parent_of(policy, &from, access)?;
    let exists = match &from_dir {
        Some(d) => match d.stat().map_err(|e| ToolError::io(&from.rel, &e))? {
            Some(m) if m.is_dir() => {
                return Err(ToolError::new(
                    ErrorCode::NotAFile,
                    format!("{}: is a directory", from.rel),
                ));
            }
            Some(_) => true,
            None => false,
        },
        None => false,
    };
    let mut outcome = Outcome {
        action: Action::Updated,
        from,
        from_dir,
        to: None,
        old: String::new(),
        new: String::new(),
        encoding: None,
        notes: Vec::new(),
    };
    let rel = outcome.from.rel.clone();
    let must_exist = || {
        ToolError::new(
            ErrorCode::FileNotFound,
            format!("{rel}: does not exist; the patch changes or deletes it"),
        )
        .with_detail(json!({ "field": "patch", "path": rel }))
    };
    let read_checked = |o: &Outcome, doing: &str| -> ToolResult<Decoded> {
        let dir = o.from_dir.as_ref().ok_or_else(must_exist)?;
        let bytes =
            state.check_read_and_unchanged(&o.from.abs, &o.from.rel, || dir.read(), doing)?;
        edit::decode(bytes, &o.from.rel)
    };
    match change.op {
        Op::Add(text) => {
            if exists {
                return Err(exists_error(&outcome.from.rel, "the patch adds it"));
            }
            outcome.action = Action::Added;
            outcome.new = text;
        }
        Op::Delete => {
            if !exists {
                return Err(must_exist());
            }
            let d = read_checked(&outcome, "deleting")?;
            outcome.action = Action::Deleted;
            outcome.old = d.text;
        }
        Op::Update { edits, .. } => {
            if !exists {
                return Err(must_exist());
            }
            let d = read_checked(&outcome, "patching")?;
            let mut text = d.text.clone();
            for group in &edits {
                text = apply_group(&outcome.from.rel, &d, text, group, &mut outcome.notes)?;
            }
            outcome.old = d.text.clone();
            outcome.encoding = Some(d);
            if let Some(to) = to {
                let dir = parent_of(policy, &to, access)?;
                if let Some(dir) = &dir
                    && dir
                        .stat()
                        .map_err(|e| ToolError::io(&to.rel, &e))?
                        .is_some()
                {
                    return Err(exists_error(&to.rel, "the patch moves a file there"));
                }
                outcome.action = Action::Moved;
                outcome.to = Some((to, dir));
            } else if text == outcome.old {
                return Err(ToolError::new(
                    ErrorCode::NoChange,
                    format!("{}: the patch leaves the file unchanged", outcome.from.rel),
                )
                .with_detail(json!({ "field": "patch", "path": outcome.from.rel })));
            }
            outcome.new = text;
        }
    }
    Ok(outcome)
}

fn exists_error(rel: &str, why: &str) -> ToolError {
    ToolError::new(
        ErrorCode::FileExists,
        format!("{rel}: already exists, and {why}; nothing was changed"),
    )
    .with_detail(json!({ "field": "patch", "path": rel }))
}

/// One group of edits applied to `text`, errors naming the file (and nothing written).
fn apply_group(
    rel: &str,
    d: &Decoded,
    text: String,
    group: &Edits,
    notes: &mut Vec<HunkNote>,
) -> ToolResult<String> {
    // Patch text written against a CRLF file may carry its `\r`s: the file is edited as LF.
    let lf = |s: &str| {
        if d.crlf {
            s.replace("\r\n", "\n").trim_end_matches('\r').to_string()
        } else {
            s.to_string()
        }
    };
    match group {
        Edits::Hunks(hunks) => {
            let hunks: Vec<_> = hunks
                .iter()
                .map(|h| {
                    let mut h = h.clone();
                    for (_, l) in &mut h.lines {
                        *l = lf(l);
                    }
                    h
                })
                .collect();
            let first = notes.len();
            let (new, placed) = hunks::apply(&text, &hunks).map_err(|m| {
                let mut message = format!(
                    "{rel}: hunk {} of {} did not apply: {}; nothing was changed",
                    m.hunk,
                    hunks.len(),
                    m.message
                );
                let mut detail = json!({ "field": "patch", "path": rel, "hunk": m.hunk });
                if let Some((line, equal)) = m.closest {
                    let want: Vec<&str> = hunks[m.hunk - 1].old_lines().collect();
                    message.push_str(&format!(
                        ". Closest: line {line}, {equal} of {} lines equal:\n{}",
                        want.len(),
                        closest_listing(&text, line, &want)
                    ));
                    detail["closest_line"] = json!(line);
                    detail["equal_lines"] = json!(equal);
                }
                ToolError::new(ErrorCode::HunkNotFound, message).with_detail(detail)
            })?;
            notes.extend(placed.into_iter().map(|p| HunkNote {
                hunk: (first + p.hunk) as u64,
                line: p.line as u64,
                offset: p.offset,
                loose: p.loose,
            }));
            Ok(new)
        }
        Edits::Replace(r) => {
            let spec = EditSpec {
                old_string: Some(lf(&r.old)),
                new_string: Some(lf(&r.new)),
                replace_all: Some(r.all),
                occurrence: None,
                start_line: None,
                end_line: None,
            };
            let current = Decoded {
                text,
                bom: false,
                crlf: false,
            };
            edit::apply_strings(&current, &[spec], false)
                .map(|(t, _)| t)
                .map_err(|mut e| {
                    e.message = format!("{rel}: {}; nothing was changed", e.message);
                    e
                })
        }
    }
}

/// The file's lines at `line` against the hunk's, the differing ones marked (at most 8).
fn closest_listing(text: &str, line: usize, want: &[&str]) -> String {
    let have: Vec<&str> = text.lines().skip(line - 1).take(want.len()).collect();
    let mut out = Vec::new();
    for (k, w) in want.iter().enumerate() {
        let h = have.get(k).copied().unwrap_or("");
        if h.trim() != w.trim() {
            out.push(format!(
                "  line {}: the file has {:?}, the patch {:?}",
                line + k,
                h.chars().take(200).collect::<String>(),
                w.chars().take(200).collect::<String>()
            ));
        }
        if out.len() == 8 {
            break;
        }
    }
    out.join("\n")
}

fn io_error(rel: &str) -> impl Fn(std::io::Error) -> ToolError + '_ {
    move |e| ToolError::io(rel, &e)
}

/// Stage every new file and put them all in place, or none.
fn commit(state: &FilesState, policy: &PathPolicy, outcomes: &mut [Outcome]) -> ToolResult<()> {
    // Directories a new file needs are made now, after every check passed.
    for o in outcomes.iter_mut() {
        match (o.action, &mut o.to) {
            (Action::Added, _) if o.from_dir.is_none() => {
                o.from_dir = Some(
                    policy
                        .parent(&o.from.rel, "patch", Access::Write, Parents::Create)?
                        .1,
                );
            }
            (Action::Moved, Some((to, dir @ None))) => {
                *dir = Some(
                    policy
                        .parent(&to.rel, "patch", Access::Write, Parents::Create)?
                        .1,
                );
            }
            _ => {}
        }
    }
    let mut journal = Recorder::begin(policy, "file_patch");
    for o in outcomes.iter() {
        match (o.action, &o.from_dir) {
            (Action::Added, _) => journal.before(&o.from.abs, Content::Absent),
            (_, Some(dir)) => journal.before(&o.from.abs, Content::At(dir)),
            (_, None) => {}
        }
        if let Some((to, Some(dir))) = &o.to {
            journal.before(&to.abs, Content::At(dir));
        }
    }
    let bytes: Vec<Vec<u8>> = outcomes
        .iter()
        .map(|o| match &o.encoding {
            Some(d) => edit::encode(d, &o.new).into_owned(),
            None => o.new.clone().into_bytes(),
        })
        .collect();
    let mut changes = Changes {
        replace: Vec::new(),
        create: Vec::new(),
        remove: Vec::new(),
    };
    for (o, b) in outcomes.iter().zip(&bytes) {
        let from = o
            .from_dir
            .as_ref()
            .ok_or_else(|| ToolError::internal("no parent"))?;
        match o.action {
            Action::Added => changes
                .create
                .push(atomic::stage(from, b, None).map_err(io_error(&o.from.rel))?),
            Action::Deleted => changes.remove.push(from),
            Action::Updated => changes
                .replace
                .push(atomic::stage(from, b, None).map_err(io_error(&o.from.rel))?),
            Action::Moved => {
                let Some((to, Some(dir))) = &o.to else {
                    return Err(ToolError::internal("a move without its destination"));
                };
                // The moved file keeps its mode.
                let mode = from.stat().ok().flatten().map(|m| m.mode);
                changes
                    .create
                    .push(atomic::stage(dir, b, mode).map_err(io_error(&to.rel))?);
                changes.remove.push(from);
            }
        }
    }
    atomic::commit_changes(changes).map_err(|e| {
        if is_exists(&e) {
            ToolError::new(
                ErrorCode::FileExists,
                "a file the patch adds was created meanwhile by someone else; nothing was changed",
            )
        } else {
            ToolError::io("patch", &e)
        }
    })?;
    for (o, b) in outcomes.iter().zip(&bytes) {
        match (o.action, &o.to) {
            (Action::Deleted, _) => journal.after(&o.from.abs, Content::Absent),
            (Action::Moved, Some((to, _))) => {
                journal.after(&o.from.abs, Content::Absent);
                journal.after(&to.abs, Content::Bytes(b));
            }
            _ => journal.after(&o.from.abs, Content::Bytes(b)),
        }
    }
    journal.finish();
    for (o, b) in outcomes.iter().zip(&bytes) {
        match (o.action, &o.to) {
            (Action::Deleted, _) => state.forget(&o.from.abs),
            (Action::Moved, Some((to, _))) => {
                state.forget(&o.from.abs);
                state.record(&to.abs, b);
            }
            _ => state.record(&o.from.abs, b),
        }
    }
    Ok(())
}

/// The file's entry in the result; its line counts from its diff.
fn summary(o: Outcome, diff: &str) -> PatchedFile {
    let (mut added, mut removed) = (0u64, 0u64);
    for l in diff.lines() {
        if l.starts_with('+') && !l.starts_with("+++ ") {
            added += 1;
        } else if l.starts_with('-') && !l.starts_with("--- ") {
            removed += 1;
        }
    }
    let (path, moved_from) = match o.to {
        Some((to, _)) => (to.rel, Some(o.from.rel)),
        None => (o.from.rel, None),
    };
    PatchedFile {
        path,
        action: o.action,
        moved_from,
        lines_added: added,
        lines_removed: removed,
        hunks_moved: o.notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix of a patch of each format, and every one with a byte changed, parses or
    /// fails typed: no panic on any input.
    #[test]
    fn cut_and_mangled_patches_never_panic() {
        let samples = [
            "*** Begin Patch\n*** Update File: a/b.rs\n*** Move to: c.rs\n@@ fn x() {\n@@\n ctx\n-old\n+new\n*** End of File\n*** Add File: n\n+1\n*** Delete File: d\n*** End Patch\n",
            "diff --git \"a/sp ace\" \"b/sp ace\"\nrename from x\nrename to y\n--- a/x\n+++ b/y\n@@ -1,2 +1,2 @@ h\n a\n-b\n+c\n\\ No newline at end of file\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+z\n",
            r#"[{"command":"insert","path":"a","insert_line":3,"new_str":"x"},{"path":"a","old_str":"é","new_str":""}]"#,
        ];
        let text = "ctx\nold\na\nb\n";
        for s in samples {
            let bytes = s.as_bytes();
            for cut in 0..=bytes.len() {
                for variant in [bytes[..cut].to_vec(), {
                    let mut b = bytes.to_vec();
                    if cut < b.len() {
                        b[cut] = b"@ -+\n\\\"*"[cut % 8];
                    }
                    b
                }] {
                    let Ok(p) = String::from_utf8(variant) else {
                        continue;
                    };
                    if let Ok((_, changes)) = parse(&p, FormatParam::Auto) {
                        for c in changes {
                            if let Op::Update { edits, .. } = c.op {
                                for e in edits {
                                    if let Edits::Hunks(h) = e {
                                        let _ = hunks::apply(text, &h);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
