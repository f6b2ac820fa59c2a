//! What a write path calls so its changes can be rewound: [`Recorder::begin`] before it reads
//! the files it will change, [`Recorder::before`] for each (the old content is stored only
//! while a checkpoint is kept), [`Recorder::after`] for each file once the change is in place,
//! [`Recorder::finish`] at the end. A change that failed is never recorded: `after` is not
//! called for it.
//!
//! Recording is best effort: a journal that cannot be written costs the write nothing (it is
//! logged); a restore then finds the file's content unexpected and refuses rather than guess.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use kitbag_shared::PathPolicy;
use kitbag_shared::paths::{Access, ParentDir, Parents};

use crate::store::{self, Change, Hold, Image, Line, Store};

/// A file's content as the caller has it.
#[derive(Debug, Clone, Copy)]
pub enum Content<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// No file.
    Absent,
    /// Whatever the file there holds (read only if it is needed).
    At(&'a ParentDir),
}

/// The changes of one tool call, recorded to the root's journal.
pub struct Recorder {
    store: Option<Store>,
    active: bool,
    policy: PathPolicy,
    root: PathBuf,
    tool: String,
    pending: Vec<(String, Image)>,
    done: Vec<Line>,
}

/// Most files of a directory a recursive delete or a move notes one by one.
pub const MAX_TREE_FILES: usize = 10_000;

/// The regular files under `dir` (links not followed), up to [`MAX_TREE_FILES`]; false when
/// there were more or a directory could not be read.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for e in entries {
        let Ok(e) = e else { return false };
        let Ok(t) = e.file_type() else { return false };
        if t.is_dir() {
            if !walk(&e.path(), out) {
                return false;
            }
        } else if t.is_file() {
            if out.len() == MAX_TREE_FILES {
                return false;
            }
            out.push(e.path());
        }
    }
    true
}

/// Bytes of objects this process stored since the store was last pruned: past
/// [`PRUNE_EVERY_BYTES`] a recorder's finish prunes it.
static STORED: AtomicU64 = AtomicU64::new(0);
const PRUNE_EVERY_BYTES: u64 = 32 << 20;

impl Recorder {
    /// Start recording `tool`'s changes in `policy`'s root.
    pub fn begin(policy: &PathPolicy, tool: &str) -> Recorder {
        let store = if policy.is_read_only() {
            None
        } else {
            match Store::open(policy, true, Hold::Shared) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "{}: changes not journaled", store::DIR);
                    None
                }
            }
        };
        let active = store.as_ref().is_some_and(Store::active);
        Recorder {
            store,
            active,
            policy: policy.clone(),
            root: policy.root().to_path_buf(),
            tool: tool.to_string(),
            pending: Vec::new(),
            done: Vec::new(),
        }
    }

    /// `abs` as the journal names it: root-relative, `/`-separated; `None` for paths outside
    /// the root (extra mounts) and for the checkpoint directory itself.
    fn rel(&self, abs: &Path) -> Option<String> {
        let rel = abs.strip_prefix(&self.root).ok()?;
        let rel = rel.to_str()?.to_string();
        if rel.is_empty() || store::is_own(&rel) {
            return None;
        }
        Some(rel)
    }

    fn image(&self, content: Content<'_>, store_it: bool) -> Image {
        let bytes = match content {
            Content::Absent => return Image::Absent,
            Content::Bytes(b) => std::borrow::Cow::Borrowed(b),
            Content::At(parent) => match store::read_entry(parent) {
                Ok(b) => std::borrow::Cow::Owned(b),
                Err(image) => return image,
            },
        };
        if !store_it {
            return Image::of(&bytes);
        }
        let Some(s) = &self.store else {
            return Image::Unknown;
        };
        match s.put(&bytes) {
            Ok(image) => {
                if let Image::Content { size, .. } = image {
                    STORED.fetch_add(size, Ordering::Relaxed);
                }
                image
            }
            Err(e) => {
                tracing::warn!(error = %e, "{}: an earlier content not stored", store::DIR);
                Image::Unknown
            }
        }
    }

    /// `abs` is about to change; `content` is what it holds now.
    pub fn before(&mut self, abs: &Path, content: Content<'_>) {
        let Some(rel) = self.rel(abs) else { return };
        if self.store.is_none() || self.pending.iter().any(|(p, _)| *p == rel) {
            return;
        }
        let image = match (self.active, content) {
            (_, Content::Absent) => Image::Absent,
            // No checkpoint to rewind to: the path (and whether the file is new) is all the
            // journal needs.
            (false, Content::At(parent)) if matches!(parent.stat(), Ok(None)) => Image::Absent,
            (false, _) => Image::Unknown,
            (true, c) => self.image(c, true),
        };
        self.pending.push((rel, image));
    }

    /// `abs`, a directory, is about to be removed or moved: each regular file under it is
    /// noted (its content stored while a checkpoint is kept), up to [`MAX_TREE_FILES`]; the
    /// files noted, for [`Recorder::after`]. Past the bound the directory itself is noted with
    /// its content unknown, so a restore refuses it rather than bring back a part.
    pub fn before_tree(&mut self, abs: &Path) -> Vec<PathBuf> {
        if self.store.is_none() || self.rel(abs).is_none() {
            return Vec::new();
        }
        if !self.active {
            self.pending
                .extend(self.rel(abs).map(|r| (r, Image::Unknown)));
            return vec![abs.to_path_buf()];
        }
        let mut files = Vec::new();
        let complete = walk(abs, &mut files);
        for f in &files {
            let Some(rel) = self.rel(f) else { continue };
            match self
                .policy
                .entry_parent(&rel, "path", Access::Read, Parents::MustExist)
            {
                Ok((_, parent)) => self.before(f, Content::At(&parent)),
                Err(_) => self.pending.push((rel, Image::Unknown)),
            }
        }
        if !complete {
            self.pending
                .extend(self.rel(abs).map(|r| (r, Image::Unknown)));
            files.push(abs.to_path_buf());
        }
        files
    }

    /// A file [`Recorder::before`] noted, now at `abs` (after a move): read through the
    /// policy when its content is needed.
    pub fn after_at(&mut self, abs: &Path) {
        let Some(rel) = self.rel(abs) else { return };
        if !self.active {
            return self.after(abs, Content::Bytes(b""));
        }
        match self
            .policy
            .entry_parent(&rel, "path", Access::Read, Parents::MustExist)
        {
            Ok((_, parent)) => self.after(abs, Content::At(&parent)),
            Err(_) => self.after(abs, Content::Absent),
        }
    }

    /// `abs` changed and now holds `content`.
    pub fn after(&mut self, abs: &Path, content: Content<'_>) {
        let Some(rel) = self.rel(abs) else { return };
        let Some(at) = self.pending.iter().position(|(p, _)| *p == rel) else {
            return;
        };
        let (path, before) = self.pending.swap_remove(at);
        let after = match (self.active, content) {
            (_, Content::Absent) => Image::Absent,
            (false, _) => Image::Unknown,
            (true, c) => self.image(c, false),
        };
        self.done.push(Line::Change(Change {
            ts: kitbag_shared::clock::unix_secs(),
            tool: self.tool.clone(),
            path,
            before,
            after,
        }));
    }

    /// Write the recorded changes to the journal.
    pub fn finish(self) {
        let Some(store) = self.store else { return };
        if let Err(e) = store.append(&self.done) {
            tracing::warn!(error = %e, "{}: changes not journaled", store::DIR);
        }
        let big = store.journal_bytes() > crate::checkpoint::COMPACT_JOURNAL_BYTES;
        let heavy = STORED.load(Ordering::Relaxed) > PRUNE_EVERY_BYTES;
        let policy = self.policy;
        drop(store);
        if big || heavy {
            STORED.store(0, Ordering::Relaxed);
            if let Err(e) = crate::checkpoint::tidy(&policy) {
                tracing::warn!(error = %e, "{}: not pruned", store::DIR);
            }
        }
    }
}
