//! Making checkpoints, signing them off, listing them, and keeping the directory bounded.

use std::io;

use kitbag_shared::paths::{Access, Parents};
use kitbag_shared::{ErrorCode, PathPolicy, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Serialize;

use crate::journal::{Journal, Segment};
use crate::store::{self, Hold, Image, Line, Marker, SignOff, Snapped, Store};

/// A journal past this size is compacted (each stretch of changes merged per path).
pub const COMPACT_JOURNAL_BYTES: u64 = 4 << 20;

/// How a file changed since the checkpoint before.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
}

/// One file of a checkpoint.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct FileChange {
    pub path: String,
    pub change: ChangeKind,
    /// Its size when the checkpoint was made (not for deleted files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// A checkpoint as [`create`] made (or found) it.
#[derive(Debug, Clone, PartialEq)]
pub struct Made {
    pub id: u64,
    /// It is the last checkpoint, asked again (no change since, same reason, not signed off):
    /// a resumed or retried call finds the checkpoint it made.
    pub reused: bool,
    pub files: Vec<FileChange>,
}

fn failed(e: io::Error) -> ToolError {
    ToolError::io(store::DIR, &e)
}

fn open(policy: &PathPolicy, create: bool, hold: Hold) -> ToolResult<Option<Store>> {
    Store::open(policy, create, hold).map_err(failed)
}

/// What `path` holds now, read through the policy (a link, a directory or anything but a
/// regular file is `Unknown`: kitbag never wrote it).
pub fn current(policy: &PathPolicy, store: Option<&Store>, path: &str) -> (Image, Option<Vec<u8>>) {
    let parent = match policy.entry_parent(path, "path", Access::Read, Parents::MustExist) {
        Ok((_, p)) => p,
        Err(e) if e.code == ErrorCode::FileNotFound => return (Image::Absent, None),
        Err(_) => return (Image::Unknown, None),
    };
    let bytes = match store::read_entry(&parent) {
        Ok(b) => b,
        Err(image) => return (image, None),
    };
    let image = match store {
        Some(s) => s.put(&bytes).unwrap_or(Image::Unknown),
        None => Image::of(&bytes),
    };
    (image, Some(bytes))
}

fn kind(before: &Image, now: &Image) -> Option<ChangeKind> {
    match (before, now) {
        (Image::Absent, Image::Absent) => None,
        (b, n) if b.same(n) => None,
        (_, Image::Absent) => Some(ChangeKind::Deleted),
        (Image::Absent, _) => Some(ChangeKind::Created),
        _ => Some(ChangeKind::Modified),
    }
}

fn size_of(i: &Image) -> Option<u64> {
    match i {
        Image::Content { size, .. } | Image::TooLarge { size } => Some(*size),
        _ => None,
    }
}

/// A checkpoint's files as a result lists them.
pub fn file_changes(marker: &Marker) -> Vec<FileChange> {
    marker
        .files
        .iter()
        .filter_map(|f| {
            Some(FileChange {
                path: f.path.clone(),
                change: kind(&f.before, &f.now)?,
                bytes: size_of(&f.now),
            })
        })
        .collect()
}

/// Whether `s` was answered approve or reject.
fn decided(s: &Segment) -> bool {
    s.sign_offs
        .iter()
        .any(|o| o.decision == "approve" || o.decision == "reject")
}

/// Make a checkpoint of the files changed since the last one: their current contents are
/// stored (from now on every kitbag write stores the content it replaces), then the journal
/// is pruned. The last checkpoint is returned instead when nothing changed since, it has the
/// same reason and the operator has not decided on it.
pub fn create(policy: &PathPolicy, reason: &str, summary: Option<&str>) -> ToolResult<Made> {
    let store = open(policy, true, Hold::Exclusive)?
        .ok_or_else(|| ToolError::internal(format!("{}: could not be made", store::DIR)))?;
    let mut journal = Journal::of(store.lines().map_err(failed)?);
    if let Some(last) = journal.segments.last()
        && last.changes.is_empty()
        && last.marker.reason == reason
        && !decided(last)
    {
        return Ok(Made {
            id: last.marker.id,
            reused: true,
            files: file_changes(&last.marker),
        });
    }
    let mut files = Vec::new();
    for c in Journal::merged(journal.since_last()) {
        let (now, _) = current(policy, Some(&store), &c.path);
        files.push(Snapped {
            path: c.path,
            before: c.before,
            now,
        });
    }
    let marker = Marker {
        id: journal.next_id(),
        ts: kitbag_shared::clock::unix_secs(),
        reason: reason.to_string(),
        summary: summary.map(str::to_string),
        files,
    };
    store
        .append(&[Line::Checkpoint(marker.clone())])
        .map_err(failed)?;
    journal.segments.push(Segment {
        marker: marker.clone(),
        sign_offs: Vec::new(),
        changes: Vec::new(),
    });
    prune(&store, journal).map_err(failed)?;
    Ok(Made {
        id: marker.id,
        reused: false,
        files: file_changes(&marker),
    })
}

/// Record the operator's decision on checkpoint `id`.
pub fn sign_off(
    policy: &PathPolicy,
    id: u64,
    decision: &str,
    comment: Option<&str>,
) -> ToolResult<()> {
    let Some(store) = open(policy, false, Hold::Shared)? else {
        return Err(not_found(id));
    };
    store
        .append(&[Line::SignOff(SignOff {
            id,
            ts: kitbag_shared::clock::unix_secs(),
            decision: decision.to_string(),
            comment: comment.map(str::to_string),
        })])
        .map_err(failed)
}

pub fn not_found(id: u64) -> ToolError {
    ToolError::new(
        ErrorCode::CheckpointNotFound,
        format!("checkpoint {id} is not kept (checkpoint_list shows the ones that are)"),
    )
    .with_detail(serde_json::json!({ "field": "id", "id": id }))
}

/// One checkpoint as `checkpoint_list` shows it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Listed {
    pub id: u64,
    /// RFC 3339, UTC.
    pub created: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The operator's last word: approve, reject, decline, cancel or unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The files changed since the checkpoint before.
    pub files: Vec<FileChange>,
    /// Files kitbag changed since this checkpoint (what restoring it rewinds).
    pub changed_since: usize,
}

/// The checkpoints kept (newest first), what changed since the last, the bytes stored.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Listing {
    pub checkpoints: Vec<Listed>,
    /// Files changed since the last checkpoint.
    pub changed: Vec<String>,
    pub stored_bytes: u64,
}

/// RFC 3339 of seconds since the epoch.
pub fn rfc3339(ts: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(ts as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&fmt).unwrap_or_default()
}

pub fn list(policy: &PathPolicy) -> ToolResult<Listing> {
    let Some(store) = open(policy, false, Hold::Shared)? else {
        return Ok(Listing {
            checkpoints: Vec::new(),
            changed: Vec::new(),
            stored_bytes: 0,
        });
    };
    let journal = Journal::of(store.lines().map_err(failed)?);
    let mut checkpoints = Vec::new();
    for (i, s) in journal.segments.iter().enumerate().rev() {
        let since = Journal::merged(journal.segments[i..].iter().flat_map(|s| &s.changes));
        let last = s.sign_offs.last();
        checkpoints.push(Listed {
            id: s.marker.id,
            created: rfc3339(s.marker.ts),
            reason: s.marker.reason.clone(),
            summary: s.marker.summary.clone(),
            decision: last.map(|o| o.decision.clone()),
            comment: last.and_then(|o| o.comment.clone()),
            files: file_changes(&s.marker),
            changed_since: since.len(),
        });
    }
    let changed = Journal::merged(journal.since_last())
        .into_iter()
        .map(|c| c.path)
        .collect();
    let stored_bytes = store
        .objects_list()
        .map_err(failed)?
        .iter()
        .map(|(_, n)| n)
        .sum();
    Ok(Listing {
        checkpoints,
        changed,
        stored_bytes,
    })
}

/// Compact the journal and prune old checkpoints (a write path's recorder calls this when the
/// journal or the objects grew); skipped while another process holds the directory.
pub fn tidy(policy: &PathPolicy) -> io::Result<()> {
    let Some(store) = Store::open(policy, false, Hold::ExclusiveIfFree)? else {
        return Ok(());
    };
    let journal = Journal::of(store.lines()?);
    prune(&store, journal)
}

/// Keep at most [`store::MAX_CHECKPOINTS`] checkpoints and [`store::MAX_STORE_BYTES`] of
/// objects (the oldest checkpoints go first; past the bytes, even the last — a restore could
/// no longer be complete), merge each stretch of changes per path, remove unreferenced
/// objects.
fn prune(store: &Store, journal: Journal) -> io::Result<()> {
    let mut journal = journal.compacted();
    while journal.segments.len() > store::MAX_CHECKPOINTS {
        journal.drop_oldest();
    }
    let sizes: std::collections::HashMap<String, u64> = store.objects_list()?.into_iter().collect();
    loop {
        let bytes: u64 = journal
            .referenced()
            .iter()
            .map(|d| sizes.get(d).copied().unwrap_or(0))
            .sum();
        if bytes <= store::MAX_STORE_BYTES || journal.segments.is_empty() {
            break;
        }
        tracing::info!(
            id = journal.segments[0].marker.id,
            bytes,
            "checkpoints past their bytes: the oldest is dropped"
        );
        journal.drop_oldest();
    }
    store.rewrite(&journal.lines())?;
    store.remove_objects_except(&journal.referenced())
}
