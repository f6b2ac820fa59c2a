//! `file_read`: numbered lines of a text file, a directory's entries, or a binary summary.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::path::Path;

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len, truncate_line};
use kitbag_shared::paths::{EntryKind as FsKind, Resolved, fd};
use kitbag_shared::rustix::fs::OFlags;
use kitbag_shared::{Access, PathPolicy, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::state::FilesState;

pub const DEFAULT_LIMIT: u64 = 2000;
pub const MAX_LINE_CHARS: usize = 2000;
/// What the result's fields other than `content` and `path` can weigh, serialized (keys,
/// `type`, up to eight 20-digit numbers, `mime`): held back from the budget for the content.
const RESERVE_BYTES: usize = 512;
/// The content's cap, measured as the JSON-escaped string it becomes in `structuredContent`:
/// the whole result stays under [`RESULT_BUDGET_BYTES`] (issue #37).
pub const MAX_OUTPUT_BYTES: usize = RESULT_BUDGET_BYTES - RESERVE_BYTES;
pub const MAX_DIR_ENTRIES: usize = 2000;

/// The content's cap for a result naming `path`: the budget less the path and the other fields.
fn content_cap(path: &str) -> usize {
    MAX_OUTPUT_BYTES.saturating_sub(json_len(path)).max(1024)
}
/// Bytes inspected to decide whether a file is binary.
const SNIFF_BYTES: usize = 8192;

pub const DEF: ToolDef = ToolDef::read(
    "file_read",
    "Read file",
    "Read a text file as numbered lines (`N: text`), list a directory, or describe a binary \
     file. Capped at 39 KB; very long lines are cut.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Root-relative (absolute inside the root accepted).
    pub path: String,
    /// First line, 1-based.
    #[serde(default)]
    pub offset: Option<i64>,
    /// Most lines (default 2000).
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Directory,
    Binary,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadResult {
    /// Root-relative path.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// Numbered lines (`N: text`) for a file; one entry per line (`name/` for directories) for a directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Lines in the whole file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_lines: Option<u64>,
    /// First and last line returned (1-based, inclusive); absent when no line was returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u64>,
    /// More lines (or entries) exist past what was returned.
    pub truncated: bool,
    /// `offset` to continue from when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// Lines cut at 2000 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub long_lines_cut: Option<u64>,
    /// The file was not valid UTF-8; invalid bytes are shown as U+FFFD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lossy: Option<bool>,
    /// Size in bytes (files and binaries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// MIME type guessed from the name (binaries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Number of entries (directories).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
}

impl ReadResult {
    fn bare(path: String, kind: EntryKind) -> Self {
        Self {
            path,
            kind,
            content: None,
            total_lines: None,
            start_line: None,
            end_line: None,
            truncated: false,
            next_offset: None,
            long_lines_cut: None,
            lossy: None,
            size: None,
            mime: None,
            entries: None,
        }
    }
}

/// Files up to this size are read on the async thread itself: a hand-off to the blocking pool
/// cost more than the read.
const QUICK_READ_BYTES: u64 = 1 << 20;

/// A validated read: the file (or directory) is open, nothing of its content touched yet.
pub struct Target {
    path: String,
    offset: u64,
    limit: u64,
    resolved: Resolved,
    /// Opened beneath the root without following links: what is read is what was resolved.
    file: File,
    meta: std::fs::Metadata,
}

/// Check the arguments, resolve and open the path, and stat the open file.
pub fn open(policy: &PathPolicy, p: ReadParams) -> ToolResult<Target> {
    let offset = args::opt_at_least("offset", p.offset, 1)?.map_or(1, |n| n as u64);
    let limit = args::opt_at_least("limit", p.limit, 1)?.map_or(DEFAULT_LIMIT, |n| n as u64);
    let (resolved, file) = policy.open_file(&p.path, "path", Access::Read)?;
    let meta = file.metadata().map_err(|e| ToolError::io(&p.path, &e))?;
    Ok(Target {
        path: p.path,
        offset,
        limit,
        resolved,
        file,
        meta,
    })
}

pub fn run(
    state: &FilesState,
    policy: &PathPolicy,
    p: ReadParams,
) -> ToolResult<Reply<ReadResult>> {
    open(policy, p)?.read(state, policy)
}

impl Target {
    /// The absolute path read, when it is a regular file.
    pub fn file_path(&self) -> Option<&std::path::Path> {
        self.meta.is_file().then_some(self.resolved.abs.as_path())
    }

    /// A small regular file: cheap enough to read without leaving the async thread.
    pub fn is_quick(&self) -> bool {
        self.meta.is_file() && self.meta.len() <= QUICK_READ_BYTES
    }

    /// Read the file (numbered lines, or a binary summary) or list the directory.
    pub fn read(self, state: &FilesState, policy: &PathPolicy) -> ToolResult<Reply<ReadResult>> {
        let Target {
            path,
            offset,
            limit,
            resolved,
            file,
            meta,
        } = self;
        if meta.is_dir() {
            return read_dir(policy, &file, resolved, offset, limit);
        }
        // A small file is read whole straight into its buffer (no staging copy); a larger one
        // streams. Either way a binary file is told from its first bytes.
        let mut content = if meta.len() <= QUICK_READ_BYTES {
            let mut data = Vec::with_capacity(meta.len() as usize + 1);
            (&file)
                .read_to_end(&mut data)
                .map_err(|e| ToolError::io(&path, &e))?;
            Content::Whole(data)
        } else {
            Content::Stream(BufReader::with_capacity(64 * 1024, file))
        };
        let head = match &mut content {
            Content::Whole(data) => &data[..],
            Content::Stream(reader) => reader.fill_buf().map_err(|e| ToolError::io(&path, &e))?,
        };
        let sniff = &head[..head.len().min(SNIFF_BYTES)];
        if content_inspector::inspect(sniff).is_binary() {
            let mut r = ReadResult::bare(resolved.rel, EntryKind::Binary);
            r.size = Some(meta.len());
            let mime = mime_guess::from_path(&resolved.abs)
                .first_raw()
                .unwrap_or("application/octet-stream")
                .to_string();
            let text = format!("{}: binary file, {} bytes, {}", r.path, meta.len(), mime);
            r.mime = Some(mime);
            return Ok(Reply::new(r, text));
        }
        let cap = content_cap(&resolved.rel);
        let out = match content {
            Content::Whole(data) => number_bytes(&data, offset, limit, cap),
            Content::Stream(mut reader) => {
                number_lines(&mut reader, meta.len(), offset, limit, cap)
                    .map_err(|e| ToolError::io(&path, &e))?
            }
        };
        if out.total_lines > 0 && offset > out.total_lines {
            return Err(ToolError::invalid_field(
                "offset",
                format!(
                    "{offset} is past the end of the file ({} lines)",
                    out.total_lines
                ),
            ));
        }
        state.record_hash(&resolved.abs, out.hash);

        let mut r = ReadResult::bare(resolved.rel, EntryKind::File);
        r.size = Some(meta.len());
        r.total_lines = Some(out.total_lines);
        if out.returned > 0 {
            r.start_line = Some(offset);
            r.end_line = Some(offset + out.returned - 1);
        }
        let next = offset + out.returned;
        r.truncated = next <= out.total_lines;
        r.next_offset = r.truncated.then_some(next);
        r.long_lines_cut = (out.long_lines > 0).then_some(out.long_lines);
        r.lossy = out.lossy.then_some(true);
        let mut text = String::with_capacity(out.content.len() + 128);
        text.push_str(&out.content);
        if r.truncated {
            text.push_str(&format!(
                "\n[truncated: lines {}–{} of {} shown; continue with offset={}]",
                offset,
                next.saturating_sub(1),
                out.total_lines,
                next
            ));
        } else if out.total_lines == 0 {
            text = format!("{}: empty file", r.path);
        }
        r.content = Some(out.content);
        Ok(Reply::new(r, text))
    }
}

/// A file's bytes: all of them, or a reader over them.
enum Content {
    Whole(Vec<u8>),
    Stream(BufReader<File>),
}

struct Numbered {
    content: String,
    total_lines: u64,
    returned: u64,
    long_lines: u64,
    lossy: bool,
    hash: u128,
}

/// Files up to this size are read with one call and hashed in one pass.
const WHOLE_FILE_BYTES: u64 = 32 << 20;

/// Formats the requested window of lines as `N: text`, within the output cap.
struct Window {
    offset: u64,
    limit: u64,
    n: u64,
    returned: u64,
    long_lines: u64,
    lossy: bool,
    full: bool,
    /// What the lines taken so far cost against `cap`, JSON escaping included.
    charged: usize,
    /// The content's cap, in bytes of JSON string.
    cap: usize,
    content: String,
}

impl Window {
    fn new(offset: u64, limit: u64, cap: usize) -> Self {
        Self {
            offset,
            limit,
            n: 0,
            returned: 0,
            long_lines: 0,
            lossy: false,
            full: false,
            // The string's quotes.
            charged: 2,
            cap,
            // Sized once for the cap: growing it by doubling copied the answer several times.
            content: String::with_capacity(cap + 64),
        }
    }

    /// Whether lines past this point can still be shown.
    fn wants_more(&self) -> bool {
        !self.full && self.returned < self.limit
    }

    /// Account for one line (with its terminator, if any).
    fn line(&mut self, line: &[u8]) {
        self.n += 1;
        if self.n < self.offset || !self.wants_more() {
            return;
        }
        let mut body = line;
        if body.last() == Some(&b'\n') {
            body = &body[..body.len() - 1];
        }
        if body.last() == Some(&b'\r') {
            body = &body[..body.len() - 1];
        }
        let text = match std::str::from_utf8(body) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => {
                self.lossy = true;
                String::from_utf8_lossy(body)
            }
        };
        let (shown, cut): (std::borrow::Cow<str>, bool) = if text.len() > MAX_LINE_CHARS {
            let (t, c) = truncate_line(&text, MAX_LINE_CHARS);
            (t.into(), c)
        } else {
            (text, false)
        };
        // Charged as JSON will carry it: the number, ": ", the text, an escaped newline (two
        // bytes), and up to 5 more bytes for each byte JSON escapes (quotes, backslashes,
        // control bytes).
        let mut number = itoa::Buffer::new();
        let number = number.format(self.n);
        let escapes = shown
            .bytes()
            .filter(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .count();
        let needed = number.len() + 2 + shown.len() + 2 + 5 * escapes;
        if self.charged + needed > self.cap && self.returned > 0 {
            self.full = true;
            return;
        }
        self.charged += needed;
        // Plain pushes: the formatting machinery of `write!` cost more than the copy itself.
        self.content.push_str(number);
        self.content.push_str(": ");
        self.content.push_str(&shown);
        self.content.push('\n');
        self.long_lines += cut as u64;
        self.returned += 1;
    }

    fn finish(mut self, hash: u128) -> Numbered {
        if self.content.ends_with('\n') {
            self.content.pop();
        }
        Numbered {
            content: self.content,
            total_lines: self.n,
            returned: self.returned,
            long_lines: self.long_lines,
            lossy: self.lossy,
            hash,
        }
    }
}

/// Number the requested window, count every line, hash every byte — in one pass.
fn number_lines(
    reader: &mut impl BufRead,
    size: u64,
    offset: u64,
    limit: u64,
    cap: usize,
) -> std::io::Result<Numbered> {
    if size <= WHOLE_FILE_BYTES {
        let mut data = Vec::with_capacity(size as usize + 1);
        reader.read_to_end(&mut data)?;
        return Ok(number_bytes(&data, offset, limit, cap));
    }
    let mut window = Window::new(offset, limit, cap);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        hasher.update(&line);
        window.line(&line);
    }
    Ok(window.finish(hasher.digest128()))
}

/// [`number_lines`] over content already in memory.
fn number_bytes(data: &[u8], offset: u64, limit: u64, cap: usize) -> Numbered {
    let mut window = Window::new(offset, limit, cap);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', data) {
        window.line(&data[start..=end]);
        start = end + 1;
        if window.n >= window.offset && !window.wants_more() {
            break;
        }
    }
    // Past the window only the line count is needed.
    let rest = &data[start..];
    window.n += memchr::memchr_iter(b'\n', rest).count() as u64;
    if let Some(last) = memchr::memrchr(b'\n', rest) {
        start += last + 1;
    }
    if start < data.len() {
        window.line(&data[start..]);
    }
    window.finish(xxhash_rust::xxh3::xxh3_128(data))
}

fn read_dir(
    policy: &PathPolicy,
    dir: &File,
    resolved: Resolved,
    offset: u64,
    limit: u64,
) -> ToolResult<Reply<ReadResult>> {
    let Resolved { abs, rel } = resolved;
    // Listed through the open directory: the entries are those of the directory resolved.
    let entries = fd::list_dir(dir.as_fd()).map_err(|e| ToolError::io(&rel, &e))?;
    let mut names: Vec<String> = entries
        .into_iter()
        .map(|(name, kind)| {
            let is_dir = match kind {
                FsKind::Dir => true,
                FsKind::Symlink => link_is_dir(policy, &abs.join(&name)),
                _ => false,
            };
            let name = name.to_string_lossy().into_owned();
            if is_dir { format!("{name}/") } else { name }
        })
        .collect();
    names.sort();
    let total = names.len() as u64;
    let take = limit.min(MAX_DIR_ENTRIES as u64) as usize;
    // Held to the content's cap as JSON carries the names: each escaped, a `\n` between.
    let cap = content_cap(&rel);
    let mut charged = 2;
    let mut window: Vec<String> = Vec::new();
    for name in names.into_iter().skip(offset as usize - 1).take(take) {
        let cost = json_len(name.as_str());
        if charged + cost > cap && !window.is_empty() {
            break;
        }
        charged += cost;
        window.push(name);
    }
    let mut r = ReadResult::bare(rel, EntryKind::Directory);
    r.entries = Some(total);
    let next = offset + window.len() as u64;
    r.truncated = next <= total;
    r.next_offset = r.truncated.then_some(next);
    let content = window.join("\n");
    let mut text = if content.is_empty() {
        format!("{}: empty directory", r.path)
    } else {
        content.clone()
    };
    if r.truncated {
        text.push_str(&format!(
            "\n[truncated: {total} entries; continue with offset={next}]"
        ));
    }
    r.content = Some(content);
    Ok(Reply::new(r, text))
}

/// A link to a directory still reads as a directory (`name/`) — when the policy resolves it
/// to one inside the root. The link is never followed by the kernel: a link leading out of the
/// root reads as a plain name.
fn link_is_dir(policy: &PathPolicy, link: &Path) -> bool {
    let Some(spelled) = link.to_str() else {
        return false;
    };
    policy.resolve_in_root(spelled, "path").is_ok_and(|r| {
        policy
            .open_real(&r.abs, OFlags::PATH | OFlags::DIRECTORY)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_and_whole_file_paths_agree() {
        let mut data = Vec::new();
        for i in 0..5000 {
            data.extend_from_slice(format!("row {i} {}\r\n", "é".repeat(i % 7)).as_bytes());
        }
        data.extend_from_slice(b"last line without newline \xff");
        for (offset, limit) in [(1, 2000), (4990, 100), (3, 1)] {
            let whole = number_lines(
                &mut &data[..],
                data.len() as u64,
                offset,
                limit,
                MAX_OUTPUT_BYTES,
            )
            .expect("whole");
            // A size past the threshold forces the streaming path.
            let stream = number_lines(&mut &data[..], u64::MAX, offset, limit, MAX_OUTPUT_BYTES)
                .expect("stream");
            assert_eq!(whole.content, stream.content);
            assert_eq!(whole.hash, stream.hash);
            assert_eq!(
                (whole.total_lines, whole.returned),
                (stream.total_lines, stream.returned)
            );
            assert_eq!(whole.total_lines, 5001);
            assert_eq!(whole.lossy, offset == 4990);
        }
    }
}
