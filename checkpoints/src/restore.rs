//! Rewinding files to a checkpoint: each file kitbag changed since goes back to what it held
//! when the checkpoint was made — all of them or none. A file whose content is not what
//! kitbag last wrote (changed outside kitbag since, by a command, an editor, a person) is
//! never overwritten: the restore is refused and says which files and how they differ.

use kitbag_shared::atomic::{self, Changes};
use kitbag_shared::paths::{Access, ParentDir, Parents};
use kitbag_shared::{ErrorCode, PathPolicy, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::checkpoint::{current, not_found};
use crate::journal::Journal;
use crate::store::{self, Change, Hold, Image, Line, Store};

/// Longest diff shown per file, in bytes.
const MAX_DIFF_BYTES: usize = 4_000;
/// Longest diffs shown in all, in bytes (a result stays well within its budget).
const MAX_DIFFS_BYTES: usize = 24_000;

/// What a restore does to one file.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Its content is put back.
    Write,
    /// It was deleted since: made again.
    Create,
    /// It was created since: removed.
    Remove,
}

#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct RestoredFile {
    pub path: String,
    pub action: Action,
    /// Unified diff from the current content to the restored one (text files; cut at 4 KB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// A restore's result.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Restored {
    pub id: u64,
    /// Nothing was written: the files show what a restore would do.
    pub preview: bool,
    pub files: Vec<RestoredFile>,
    /// Files changed since that already hold the checkpoint's content.
    pub unchanged: usize,
}

/// One file's way back.
struct Step {
    path: String,
    target: Image,
    target_bytes: Option<Vec<u8>>,
    current: Image,
    current_bytes: Option<Vec<u8>>,
    action: Action,
}

/// Whether a file is to be rewound by the `paths` filter (a file, or a directory above it).
fn wanted(path: &str, paths: Option<&[String]>) -> bool {
    paths.is_none_or(|ps| {
        ps.iter().any(|p| {
            let p = p.trim_end_matches('/');
            p == "." || path == p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
        })
    })
}

fn text(b: &[u8]) -> Option<&str> {
    if b.contains(&0) {
        return None;
    }
    std::str::from_utf8(b).ok()
}

/// The diff a file's restore makes, cut to fit.
fn diff(step: &Step, room: &mut usize) -> Option<String> {
    if *room == 0 {
        return None;
    }
    let empty: &[u8] = b"";
    let old = step.current_bytes.as_deref().unwrap_or(empty);
    let new = step.target_bytes.as_deref().unwrap_or(empty);
    let d = match (text(old), text(new)) {
        (Some(o), Some(n)) => kitbag_shared::diff::unified_diff(&step.path, o, n),
        _ => format!("binary file: {} bytes -> {} bytes\n", old.len(), new.len()),
    };
    let cap = MAX_DIFF_BYTES.min(*room);
    let d = if d.len() > cap {
        let mut end = cap;
        while !d.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n… (diff cut)\n", &d[..end])
    } else {
        d
    };
    *room = room.saturating_sub(d.len());
    Some(d)
}

/// Rewind the files kitbag changed since checkpoint `id` (those under `paths`, when given)
/// to their content at that checkpoint; with `preview`, only say what would change.
pub fn restore(
    policy: &PathPolicy,
    id: u64,
    paths: Option<&[String]>,
    preview: bool,
) -> ToolResult<Restored> {
    let store = Store::open(policy, false, Hold::Exclusive)
        .map_err(|e| ToolError::io(store::DIR, &e))?
        .ok_or_else(|| not_found(id))?;
    let journal = Journal::of(store.lines().map_err(|e| ToolError::io(store::DIR, &e))?);
    let at = journal.position(id).ok_or_else(|| not_found(id))?;
    // Nothing of kitbag's own checkpoint directory is ever rewound (only a forged line names it).
    let since: Vec<Change> =
        Journal::merged(journal.segments[at..].iter().flat_map(|s| &s.changes))
            .into_iter()
            .filter(|c| !store::is_own(&c.path))
            .collect();
    if let Some(ps) = paths {
        for (i, p) in ps.iter().enumerate() {
            if !since
                .iter()
                .any(|c| wanted(&c.path, Some(std::slice::from_ref(p))))
            {
                return Err(ToolError::invalid_field(
                    &format!("paths[{i}]"),
                    format!("{p:?}: kitbag changed no file there since checkpoint {id}"),
                ));
            }
        }
    }
    let mut steps = Vec::new();
    let mut conflicts = Vec::new();
    let mut unrestorable = Vec::new();
    let mut unchanged = 0;
    for c in since.iter().filter(|c| wanted(&c.path, paths)) {
        let (now, now_bytes) = current(policy, None, &c.path);
        if now.same(&c.before) {
            unchanged += 1;
            continue;
        }
        let target_bytes = match &c.before {
            Image::Absent => None,
            Image::Content { sha256, .. } => match store.get(sha256) {
                Ok(b) => Some(b),
                Err(e) => {
                    unrestorable.push((c.path.clone(), format!("its stored content: {e}")));
                    continue;
                }
            },
            Image::TooLarge { size } => {
                unrestorable.push((
                    c.path.clone(),
                    format!(
                        "it was {size} bytes, over the {} kept",
                        store::MAX_OBJECT_BYTES
                    ),
                ));
                continue;
            }
            Image::Unknown => {
                unrestorable.push((
                    c.path.clone(),
                    "its earlier content was not recorded".into(),
                ));
                continue;
            }
        };
        let action = match (&c.before, &now) {
            (Image::Absent, _) => Action::Remove,
            (_, Image::Absent) => Action::Create,
            _ => Action::Write,
        };
        let step = Step {
            path: c.path.clone(),
            target: c.before.clone(),
            target_bytes,
            current: now.clone(),
            current_bytes: now_bytes,
            action,
        };
        if !now.same(&c.after) {
            conflicts.push(step);
        } else {
            steps.push(step);
        }
    }
    if !conflicts.is_empty() {
        return Err(changed_outside(id, &conflicts, &unrestorable));
    }
    if !unrestorable.is_empty() {
        let detail: Vec<_> = unrestorable
            .iter()
            .map(|(p, why)| json!({"path": p, "why": why}))
            .collect();
        return Err(ToolError::new(
            ErrorCode::NotRestorable,
            format!(
                "checkpoint {id}: {} cannot be restored ({}); nothing was changed — pass `paths` to restore the others",
                unrestorable[0].0, unrestorable[0].1
            ),
        )
        .with_detail(json!({ "files": detail })));
    }
    let mut room = MAX_DIFFS_BYTES;
    let files = steps
        .iter()
        .map(|s| RestoredFile {
            path: s.path.clone(),
            action: s.action,
            diff: diff(s, &mut room),
        })
        .collect();
    if !preview && !steps.is_empty() {
        apply(policy, &store, &steps)?;
    }
    Ok(Restored {
        id,
        preview,
        files,
        unchanged,
    })
}

fn changed_outside(id: u64, conflicts: &[Step], unrestorable: &[(String, String)]) -> ToolError {
    let mut room = MAX_DIFFS_BYTES;
    let files: Vec<_> = conflicts
        .iter()
        .map(|s| json!({"path": s.path, "restore_diff": diff(s, &mut room)}))
        .collect();
    let names: Vec<&str> = conflicts.iter().map(|s| s.path.as_str()).collect();
    ToolError::new(
        ErrorCode::ChangedOutsideSession,
        format!(
            "checkpoint {id}: {} changed outside kitbag since it last wrote {}; nothing was \
             restored. Each file's `restore_diff` shows what a restore would do to it now; pass \
             `paths` without them to restore the others",
            names.join(", "),
            if names.len() == 1 { "it" } else { "them" }
        ),
    )
    .with_detail(json!({
        "files": files,
        "unrestorable": unrestorable.iter().map(|(p, w)| json!({"path": p, "why": w})).collect::<Vec<_>>(),
    }))
}

/// Put every step in place at once, then journal them (a restore is undone like any change).
fn apply(policy: &PathPolicy, store: &Store, steps: &[Step]) -> ToolResult<()> {
    let mut parents: Vec<(ParentDir, &Step)> = Vec::new();
    for s in steps {
        let make = if s.action == Action::Create {
            Parents::Create
        } else {
            Parents::MustExist
        };
        let (_, parent) = policy.entry_parent(&s.path, "paths", Access::Write, make)?;
        parents.push((parent, s));
    }
    let mut changes = Changes {
        replace: Vec::new(),
        create: Vec::new(),
        remove: Vec::new(),
    };
    // Every file written first (made durable together), then put in place at once.
    let writes: Vec<(&ParentDir, &[u8])> = parents
        .iter()
        .filter(|(_, s)| s.action != Action::Remove)
        .map(|(p, s)| (p, s.target_bytes.as_deref().unwrap_or_default()))
        .collect();
    let mut staged = atomic::stage_all(&writes)
        .map_err(|e| ToolError::io("the restored files", &e))?
        .into_iter();
    for (parent, s) in &parents {
        match s.action {
            Action::Write => changes.replace.extend(staged.next()),
            Action::Create => changes.create.extend(staged.next()),
            Action::Remove => changes.remove.push(parent),
        }
    }
    atomic::commit_changes(changes).map_err(|e| {
        ToolError::new(
            ErrorCode::IoError,
            format!("the restore failed and was undone: {e}"),
        )
    })?;
    let lines: Vec<Line> = steps
        .iter()
        .map(|s| {
            // The content replaced is kept too: a restore can be rewound like any change.
            let before = match &s.current_bytes {
                Some(b) => store.put(b).unwrap_or(Image::Unknown),
                None => s.current.clone(),
            };
            Line::Change(Change {
                ts: kitbag_shared::clock::unix_secs(),
                tool: "checkpoint_restore".into(),
                path: s.path.clone(),
                before,
                after: s.target.clone(),
            })
        })
        .collect();
    if let Err(e) = store.append(&lines) {
        tracing::warn!(error = %e, "{}: the restore not journaled", store::DIR);
    }
    Ok(())
}
