//! The checkpoint directory, `<root>/.kitbag/checkpoints`: the journal (`journal.jsonl`, one
//! [`Line`] per change, checkpoint and sign-off), the content-addressed objects
//! (`objects/<sha256>`: the files' earlier contents) and the `lock` every user takes — shared
//! by a write path while it reads a file's old content, writes and records, exclusive while a
//! checkpoint is made, a restore runs or the journal is rewritten.
//!
//! The directory sits in the root, where any program the agent runs can change it: it is held
//! by descriptor ([`StateDir`]), objects are checked against their digest when read, and every
//! path a journal line names goes through the path policy again before anything is written.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

use kitbag_shared::PathPolicy;
use kitbag_shared::paths::{EntryKind, ParentDir};
use kitbag_shared::state::{OFlags, StateDir};
use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where the checkpoints of a root live, relative to it.
pub const DIR: &str = ".kitbag/checkpoints";
/// A file larger than this is journaled by size only: it cannot be restored.
pub const MAX_OBJECT_BYTES: u64 = 8 << 20;
/// Checkpoints kept; older ones are pruned when a new one is made.
pub const MAX_CHECKPOINTS: usize = 20;
/// Bytes of objects kept; the oldest checkpoints go first past it.
pub const MAX_STORE_BYTES: u64 = 256 << 20;

const JOURNAL: &str = "journal.jsonl";
const LOCK: &str = "lock";
const OBJECTS: &str = "objects";

/// A file's content at one moment, as the journal knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Image {
    /// Not captured (no checkpoint was active, or reading it failed).
    #[default]
    Unknown,
    /// The file did not exist.
    Absent,
    /// Its content is the object of this digest.
    Content { sha256: String, size: u64 },
    /// Larger than [`MAX_OBJECT_BYTES`]: known by size only.
    TooLarge { size: u64 },
}

impl Image {
    /// The image of `bytes` (not stored).
    pub fn of(bytes: &[u8]) -> Image {
        Image::Content {
            sha256: digest(bytes),
            size: bytes.len() as u64,
        }
    }

    /// Whether two images say the same content (unknowns never match).
    pub fn same(&self, other: &Image) -> bool {
        match (self, other) {
            (Image::Absent, Image::Absent) => true,
            (Image::Content { sha256: a, .. }, Image::Content { sha256: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    Change(Change),
    Checkpoint(Marker),
    SignOff(SignOff),
}

/// A file a kitbag tool changed: its content before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Seconds since the epoch.
    pub ts: u64,
    pub tool: String,
    /// Root-relative, `/`-separated.
    pub path: String,
    #[serde(default)]
    pub before: Image,
    #[serde(default)]
    pub after: Image,
}

/// A checkpoint: the files changed since the one before, as they were when it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub id: u64,
    pub ts: u64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    pub files: Vec<Snapped>,
}

/// One file of a checkpoint's snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapped {
    pub path: String,
    /// Before the first change since the checkpoint before.
    pub before: Image,
    /// When the checkpoint was made.
    pub now: Image,
}

/// The operator's word on a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignOff {
    pub id: u64,
    pub ts: u64,
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// How [`Store::open`] locks the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Write paths recording: many at once.
    Shared,
    /// Making a checkpoint, restoring, rewriting the journal: alone.
    Exclusive,
    /// Alone, or not at all when another holds it (tidying after a write: it waits for
    /// nobody; the next write tidies).
    ExclusiveIfFree,
}

/// The open checkpoint directory of one root, locked.
#[derive(Debug)]
pub struct Store {
    dir: StateDir,
    // Held for the store's life: closing the descriptor releases the lock.
    _lock: File,
}

impl Store {
    /// Open the root's checkpoint directory (made when `create`), locked as `hold`. `None`
    /// when it does not exist and `create` is false, or is held by another and `hold` is
    /// [`Hold::ExclusiveIfFree`].
    pub fn open(policy: &PathPolicy, create: bool, hold: Hold) -> io::Result<Option<Store>> {
        let path = policy.root().join(DIR);
        let dir = match StateDir::open(policy, &path, create) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(e),
        };
        let lock = dir.open_file(LOCK, OFlags::RDWR | OFlags::CREATE)?;
        let op = match hold {
            Hold::Shared => FlockOperation::LockShared,
            Hold::Exclusive => FlockOperation::LockExclusive,
            Hold::ExclusiveIfFree => FlockOperation::NonBlockingLockExclusive,
        };
        match flock(&lock, op) {
            Ok(()) => Ok(Some(Store { dir, _lock: lock })),
            Err(rustix::io::Errno::WOULDBLOCK) if hold == Hold::ExclusiveIfFree => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a checkpoint is kept: only then are earlier contents worth storing.
    pub fn active(&self) -> bool {
        self.dir.exists(OBJECTS).unwrap_or(false)
    }

    fn objects(&self, create: bool) -> io::Result<StateDir> {
        self.dir.subdir(OBJECTS, create)
    }

    /// Store `bytes` as an object (once per content); its image.
    pub fn put(&self, bytes: &[u8]) -> io::Result<Image> {
        let size = bytes.len() as u64;
        if size > MAX_OBJECT_BYTES {
            return Ok(Image::TooLarge { size });
        }
        let sha256 = digest(bytes);
        let objects = self.objects(true)?;
        if !objects.exists(&sha256)? {
            let temp = format!(".{sha256}.{}", std::process::id());
            let mut f =
                objects.open_file(&temp, OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC)?;
            f.write_all(bytes)?;
            // Not fsynced: an object a crash cuts short fails its digest check when read, and
            // the restore of that file is refused (`not_restorable`) — never wrong content.
            // An fsync per object was most of a checkpoint's and a restore's time.
            drop(f);
            objects.rename(&temp, &sha256)?;
        }
        Ok(Image::Content { sha256, size })
    }

    /// The content of an object, checked against its digest (the directory is writable by
    /// whatever runs in the root).
    pub fn get(&self, sha256: &str) -> io::Result<Vec<u8>> {
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a digest"));
        }
        let mut bytes = Vec::new();
        self.objects(false)?
            .open_file(sha256, OFlags::RDONLY)?
            .take(MAX_OBJECT_BYTES + 1)
            .read_to_end(&mut bytes)?;
        if digest(&bytes) != sha256 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the stored content no longer matches its digest",
            ));
        }
        Ok(bytes)
    }

    /// Every object's digest and size.
    pub fn objects_list(&self) -> io::Result<Vec<(String, u64)>> {
        let objects = match self.objects(false) {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for (name, _) in kitbag_shared::paths::fd::list_dir(objects.fd())? {
            let name = name.to_string_lossy().into_owned();
            let size = objects.stat(&name)?.map_or(0, |s| s.st_size as u64);
            out.push((name, size));
        }
        Ok(out)
    }

    /// Remove the objects not in `keep`; with `keep` empty, the objects directory too (no
    /// checkpoint is left: nothing is stored until the next).
    pub fn remove_objects_except(
        &self,
        keep: &std::collections::HashSet<String>,
    ) -> io::Result<()> {
        let objects = match self.objects(false) {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for (name, _) in self.objects_list()? {
            if !keep.contains(&name) {
                objects.remove(&name)?;
            }
        }
        if keep.is_empty() {
            rustix::fs::unlinkat(self.dir.fd(), OBJECTS, rustix::fs::AtFlags::REMOVEDIR)?;
        }
        Ok(())
    }

    /// Every line of the journal (a torn or unreadable line is skipped).
    pub fn lines(&self) -> io::Result<Vec<Line>> {
        let f = match self.dir.open_file(JOURNAL, OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for line in BufReader::new(f).lines() {
            match serde_json::from_str(&line?) {
                Ok(l) => out.push(l),
                Err(e) => tracing::debug!("{DIR}/{JOURNAL}: a line skipped: {e}"),
            }
        }
        Ok(out)
    }

    /// Add lines to the journal, in one write.
    pub fn append(&self, lines: &[Line]) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut buf, l)?;
            buf.push(b'\n');
        }
        let mut f = self
            .dir
            .open_file(JOURNAL, OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND)?;
        f.write_all(&buf)
    }

    /// The journal's size in bytes.
    pub fn journal_bytes(&self) -> u64 {
        self.dir
            .stat(JOURNAL)
            .ok()
            .flatten()
            .map_or(0, |s| s.st_size as u64)
    }

    /// Replace the whole journal (under the exclusive lock only).
    pub fn rewrite(&self, lines: &[Line]) -> io::Result<()> {
        let mut buf = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut buf, l)?;
            buf.push(b'\n');
        }
        let temp = format!(".{JOURNAL}.{}", std::process::id());
        let mut f = self
            .dir
            .open_file(&temp, OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        self.dir.rename(&temp, JOURNAL)
    }

    /// The directory as configured, for messages.
    pub fn shown(&self) -> &Path {
        self.dir.shown()
    }
}

/// The bytes of the entry `parent` names when it is a regular file whose content can be kept;
/// else the image that says why not (absent, over [`MAX_OBJECT_BYTES`], a directory, a link,
/// unreadable).
pub fn read_entry(parent: &ParentDir) -> Result<Vec<u8>, Image> {
    match parent.stat() {
        Ok(None) => Err(Image::Absent),
        Ok(Some(s)) if s.kind != EntryKind::File => Err(Image::Unknown),
        Ok(Some(s)) if s.len > MAX_OBJECT_BYTES => Err(Image::TooLarge { size: s.len }),
        Ok(Some(_)) => parent.read().map_err(|_| Image::Unknown),
        Err(_) => Err(Image::Unknown),
    }
}

/// Whether a root-relative path lies in the checkpoint directory itself.
pub fn is_own(rel: &str) -> bool {
    let rel = rel.trim_start_matches("./");
    rel == DIR || rel.starts_with(&format!("{DIR}/"))
}

/// The hex SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
