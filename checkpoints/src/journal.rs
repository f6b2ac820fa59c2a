//! The journal read as a whole: the changes before the first kept checkpoint, then each
//! checkpoint with its sign-offs and the changes made after it (until the next).

use std::collections::{HashMap, HashSet};

use crate::store::{Change, Image, Line, Marker, SignOff};

/// One kept checkpoint and what followed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub marker: Marker,
    pub sign_offs: Vec<SignOff>,
    /// The changes made after this checkpoint and before the next, in order.
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Journal {
    /// Changes before the first kept checkpoint.
    pub head: Vec<Change>,
    pub segments: Vec<Segment>,
}

impl Journal {
    pub fn of(lines: Vec<Line>) -> Journal {
        let mut j = Journal::default();
        for line in lines {
            match line {
                Line::Change(c) => match j.segments.last_mut() {
                    Some(s) => s.changes.push(c),
                    None => j.head.push(c),
                },
                Line::Checkpoint(marker) => j.segments.push(Segment {
                    marker,
                    sign_offs: Vec::new(),
                    changes: Vec::new(),
                }),
                Line::SignOff(o) => {
                    if let Some(s) = j.segments.iter_mut().find(|s| s.marker.id == o.id) {
                        s.sign_offs.push(o);
                    }
                }
            }
        }
        j
    }

    pub fn lines(&self) -> Vec<Line> {
        let mut out: Vec<Line> = self.head.iter().cloned().map(Line::Change).collect();
        for s in &self.segments {
            out.push(Line::Checkpoint(s.marker.clone()));
            out.extend(s.sign_offs.iter().cloned().map(Line::SignOff));
            out.extend(s.changes.iter().cloned().map(Line::Change));
        }
        out
    }

    /// The changes since the last checkpoint (all of them when there is none).
    pub fn since_last(&self) -> &[Change] {
        self.segments.last().map_or(&self.head, |s| &s.changes)
    }

    /// The next checkpoint's id.
    pub fn next_id(&self) -> u64 {
        self.segments.last().map_or(1, |s| s.marker.id + 1)
    }

    pub fn position(&self, id: u64) -> Option<usize> {
        self.segments.iter().position(|s| s.marker.id == id)
    }

    /// Each path's changes merged: its first `before`, its last `after`, in order of first
    /// change. Restores and snapshots need nothing else.
    pub fn merged<'a>(changes: impl IntoIterator<Item = &'a Change>) -> Vec<Change> {
        let mut out: Vec<Change> = Vec::new();
        // Where each path is in `out`: a journal of thousands of changes merges in one pass.
        let mut at: HashMap<&'a str, usize> = HashMap::new();
        for c in changes {
            match at.get(c.path.as_str()) {
                Some(&i) => {
                    let m = &mut out[i];
                    m.after = c.after.clone();
                    m.ts = c.ts;
                    m.tool = c.tool.clone();
                }
                None => {
                    at.insert(&c.path, out.len());
                    out.push(c.clone());
                }
            }
        }
        out
    }

    /// The same journal with each stretch of changes merged per path.
    pub fn compacted(&self) -> Journal {
        Journal {
            head: Journal::merged(&self.head),
            segments: self
                .segments
                .iter()
                .map(|s| Segment {
                    changes: Journal::merged(&s.changes),
                    ..s.clone()
                })
                .collect(),
        }
    }

    /// Every object digest the kept checkpoints refer to (the head needs none).
    pub fn referenced(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        let mut add = |i: &Image| {
            if let Image::Content { sha256, .. } = i {
                out.insert(sha256.clone());
            }
        };
        for s in &self.segments {
            for f in &s.marker.files {
                add(&f.before);
                add(&f.now);
            }
            for c in &s.changes {
                add(&c.before);
                add(&c.after);
            }
        }
        out
    }

    /// Drop the oldest checkpoint: its changes become the head's (whose contents are no
    /// longer needed by any restore).
    pub fn drop_oldest(&mut self) {
        if self.segments.is_empty() {
            return;
        }
        let first = self.segments.remove(0);
        let mut head = std::mem::take(&mut self.head);
        head.extend(first.changes);
        self.head = Journal::merged(&head)
            .into_iter()
            .map(|mut c| {
                c.before = forget(c.before);
                c.after = forget(c.after);
                c
            })
            .collect();
    }
}

/// An image without its content (absent stays absent: it costs nothing).
fn forget(i: Image) -> Image {
    match i {
        Image::Absent => Image::Absent,
        _ => Image::Unknown,
    }
}
