//! `edit_text`: exact-string or line-range edits, one or many, applied all-or-nothing.
//!
//! The file's bytes are decoded once (BOM stripped and remembered, CRLF normalised to LF when
//! every line ends in CRLF), every edit is applied in memory, and only if all succeed is the
//! result re-encoded exactly as the original (BOM, CRLF, final newline) and written atomically.

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use std::sync::Arc;

use kitbag_shared::paths::{ParentDir, Resolved};
use kitbag_shared::{
    Access, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult, blocking,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::FilesState;
use kitbag_lsp_client::check::EditDiagnostics;
use kitbag_lsp_client::feedback;

/// Largest diff returned in a result, in bytes of JSON string; the edit itself is never
/// limited by this.
pub const MAX_DIFF_BYTES: usize = 32 * 1024;
/// What the result's fields other than `path` and `diff` weigh at most, serialized (the
/// language server's diagnostics included).
const RESERVE_BYTES: usize = 1024 + kitbag_lsp_client::check::MAX_BYTES;
/// Lines of the matches listed when `old_string` is not unique.
const MAX_LINES_LISTED: usize = 100;
const BOM: &[u8] = b"\xEF\xBB\xBF";

pub const DEF: ToolDef = ToolDef::write(
    "edit_text",
    "Edit text",
    "Replace text in a file read with file_read and unchanged since: `old_string` (exact, \
     unique unless `replace_all`/`occurrence`) or lines `start_line`..`end_line` (1-based, \
     inclusive) → `new_string`.",
)
.destructive();

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditSpec {
    // No doc comments here: they would become schema descriptions repeating EditParams' own,
    // which every tools/list puts in front of the model again.
    #[serde(default, alias = "old_str")]
    pub old_string: Option<String>,
    #[serde(default, alias = "new_str")]
    pub new_string: Option<String>,
    #[serde(default)]
    pub replace_all: Option<bool>,
    #[serde(default)]
    pub occurrence: Option<i64>,
    #[serde(default)]
    pub start_line: Option<i64>,
    #[serde(default)]
    pub end_line: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    pub path: String,
    // `old_str`/`new_str`: the spelling of Claude's text-editor tool, accepted as it is.
    #[serde(default, alias = "old_str")]
    pub old_string: Option<String>,
    #[serde(default, alias = "new_str")]
    pub new_string: Option<String>,
    #[serde(default)]
    pub replace_all: Option<bool>,
    /// Replace only the Nth match (1-based).
    #[serde(default)]
    pub occurrence: Option<i64>,
    #[serde(default)]
    pub start_line: Option<i64>,
    /// Default `start_line`.
    #[serde(default)]
    pub end_line: Option<i64>,
    /// Instead: several edits of one mode, all or none.
    #[serde(default)]
    pub edits: Option<Vec<EditSpec>>,
    /// Diff only, no write.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Report new/fixed diagnostics.
    #[serde(default)]
    pub check: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EditResult {
    /// Root-relative path.
    pub path: String,
    /// Replacements made (string mode) or line ranges replaced (line mode), over all edits.
    pub replacements: u64,
    /// True when the file was written (false for a dry run).
    pub applied: bool,
    pub dry_run: bool,
    /// Unified diff of the change.
    pub diff: String,
    /// The diff was cut at 32 KB (the edit itself is complete).
    pub diff_truncated: bool,
    /// First line (1-based, in the new file) that changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_changed_line: Option<u64>,
    /// What the edit did to the language server's diagnostics (servers run with --lsp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<EditDiagnostics>,
}

/// The file's text and how to write it back exactly as it was encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub text: String,
    pub bom: bool,
    pub crlf: bool,
}

pub fn decode(mut bytes: Vec<u8>, shown: &str) -> ToolResult<Decoded> {
    let bom = bytes.starts_with(BOM);
    if bom {
        bytes.drain(..BOM.len());
    }
    if memchr::memchr(0, &bytes).is_some() {
        return Err(ToolError::new(
            ErrorCode::BinaryFile,
            format!("{shown}: looks like a binary file; edit_text edits UTF-8 text only"),
        ));
    }
    let lf = memchr::memchr_iter(b'\n', &bytes).count();
    let crlf = lf > 0 && memchr::memmem::find_iter(&bytes, b"\r\n").count() == lf;
    let text = String::from_utf8(bytes).map_err(|e| {
        ToolError::new(
            ErrorCode::EncodingUnsupported,
            format!(
                "{shown}: not valid UTF-8 (first invalid byte at offset {}); edit_text edits UTF-8 text only",
                e.utf8_error().valid_up_to() + if bom { 3 } else { 0 }
            ),
        )
        .with_detail(json!({ "field": "path", "path": shown }))
    })?;
    let text = if crlf {
        text.replace("\r\n", "\n")
    } else {
        text
    };
    Ok(Decoded { text, bom, crlf })
}

pub fn encode<'a>(d: &Decoded, text: &'a str) -> std::borrow::Cow<'a, [u8]> {
    if !d.bom && !d.crlf {
        return std::borrow::Cow::Borrowed(text.as_bytes());
    }
    let mut out = Vec::with_capacity(text.len() + text.len() / 32 + 8);
    if d.bom {
        out.extend_from_slice(BOM);
    }
    if d.crlf {
        out.extend_from_slice(text.replace('\n', "\r\n").as_bytes());
    } else {
        out.extend_from_slice(text.as_bytes());
    }
    std::borrow::Cow::Owned(out)
}

enum Mode {
    Strings(Vec<EditSpec>),
    Lines(Vec<EditSpec>),
}

fn is_line_edit(e: &EditSpec) -> bool {
    e.start_line.is_some() || e.end_line.is_some()
}

fn is_string_edit(e: &EditSpec) -> bool {
    e.old_string.is_some() || e.replace_all.is_some() || e.occurrence.is_some()
}

impl EditParams {
    fn single(&self) -> EditSpec {
        EditSpec {
            old_string: self.old_string.clone(),
            new_string: self.new_string.clone(),
            replace_all: self.replace_all,
            occurrence: self.occurrence,
            start_line: self.start_line,
            end_line: self.end_line,
        }
    }
}

fn classify(p: &EditParams) -> ToolResult<Mode> {
    let single = p.single();
    let single_used =
        is_line_edit(&single) || is_string_edit(&single) || single.new_string.is_some();
    let edits = match (&p.edits, single_used) {
        (Some(_), true) => {
            return Err(ToolError::invalid_field(
                "edits",
                "give either `edits` or the single-edit fields (old_string/new_string/start_line/...), not both",
            ));
        }
        (Some(list), false) if list.is_empty() => {
            return Err(ToolError::invalid_field(
                "edits",
                "must contain at least one edit",
            ));
        }
        (Some(list), false) => list.clone(),
        (None, true) => vec![single],
        (None, false) => {
            return Err(ToolError::invalid_field(
                "old_string",
                "missing: give old_string + new_string, start_line + new_string, or an edits array",
            ));
        }
    };
    let lines = edits.iter().filter(|e| is_line_edit(e)).count();
    let strings = edits.iter().filter(|e| is_string_edit(e)).count();
    let prefix = |i: usize| {
        if p.edits.is_some() {
            format!("edits[{i}].")
        } else {
            String::new()
        }
    };
    for (i, e) in edits.iter().enumerate() {
        if is_line_edit(e) && is_string_edit(e) {
            return Err(ToolError::invalid_field(
                &format!("{}start_line", prefix(i)),
                "line-range fields (start_line/end_line) cannot be combined with old_string/replace_all/occurrence",
            ));
        }
        if e.new_string.is_none() {
            return Err(ToolError::invalid_field(
                &format!("{}new_string", prefix(i)),
                "is required",
            ));
        }
    }
    if lines > 0 && strings > 0 {
        return Err(ToolError::invalid_field(
            "edits",
            "mixes string edits (old_string) and line-range edits (start_line); use one mode per call",
        ));
    }
    if lines > 0 {
        Ok(Mode::Lines(edits))
    } else {
        Ok(Mode::Strings(edits))
    }
}

pub async fn run(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: EditParams,
) -> ToolResult<Reply<EditResult>> {
    let mode = classify(&p)?;
    let dry_run = p.dry_run.unwrap_or(false);
    let total_new: usize = match &mode {
        Mode::Strings(e) | Mode::Lines(e) => e
            .iter()
            .filter_map(|e| e.new_string.as_ref())
            .map(|s| s.len())
            .sum(),
    };
    if total_new > state.max_content_bytes {
        return Err(ToolError::invalid_field(
            "new_string",
            format!(
                "{total_new} bytes in total; at most {} bytes are accepted",
                state.max_content_bytes
            ),
        ));
    }
    let access = if dry_run { Access::Read } else { Access::Write };
    // Read and written through the same open parent directory: the file edited is the one read.
    let path = p.path.clone();
    let (r, target) = {
        let policy = policy.clone();
        blocking(move || policy.parent(&path, "path", access, Parents::MustExist)).await?
    };
    let check = if dry_run { Some(false) } else { p.check };
    let pending = feedback::before(
        state.feedback.as_ref(),
        &policy,
        std::slice::from_ref(&r.abs),
        check,
    )
    .await;
    let mut reply = {
        let _guard = state.locks.lock(&r.abs).await?;
        // Reading, diffing, fsync and rename wait on the disk: off the async threads.
        let (state, policy) = (state.clone(), policy.clone());
        blocking(move || edit_locked(&state, &policy, r, target, p, mode, dry_run)).await?
    };
    let d = feedback::after(pending, &policy, &[]).await;
    feedback::append(&mut reply.text, d.as_ref());
    reply.data.diagnostics = d;
    Ok(reply)
}

fn edit_locked(
    state: &FilesState,
    policy: &PathPolicy,
    r: Resolved,
    target: ParentDir,
    p: EditParams,
    mode: Mode,
    dry_run: bool,
) -> ToolResult<Reply<EditResult>> {
    let meta = target
        .stat()
        .and_then(|m| m.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| ToolError::io(&r.rel, &e))?;
    if meta.is_dir() {
        return Err(ToolError::new(
            ErrorCode::NotAFile,
            format!("{}: is a directory", r.rel),
        ));
    }
    // Line numbers and matches computed on an older read must not land on newer content.
    let bytes = state.check_read_and_unchanged(&r.abs, &r.rel, || target.read(), "editing")?;
    let decoded = decode(bytes, &r.rel)?;
    let multi = p.edits.is_some();
    let (new_text, replacements) = match mode {
        Mode::Strings(edits) => apply_strings(&decoded, &edits, multi)?,
        Mode::Lines(edits) => apply_lines(&decoded.text, &edits, multi)?,
    };
    if new_text == decoded.text {
        return Err(ToolError::new(
            ErrorCode::NoChange,
            format!("{}: the edit leaves the file unchanged", r.rel),
        ));
    }
    let diff_full = kitbag_shared::diff::unified_diff(&r.rel, &decoded.text, &new_text);
    // Held as JSON carries it (escapes grow text up to 6×), within the result budget.
    let cap = MAX_DIFF_BYTES
        .min(RESULT_BUDGET_BYTES.saturating_sub(RESERVE_BYTES + json_len(r.rel.as_str())));
    let (diff, diff_truncated) = {
        let (d, cut) = kitbag_shared::limits::json_prefix(&diff_full, cap);
        (d.to_string(), cut)
    };
    let first_changed_line = first_changed_line(&decoded.text, &new_text);
    if !dry_run {
        let out = encode(&decoded, &new_text);
        let mut journal = Recorder::begin(policy, "file_edit");
        journal.before(&r.abs, Content::At(&target));
        kitbag_shared::atomic::write_atomic_at(&target, &out)
            .map_err(|e| ToolError::io(&r.rel, &e))?;
        journal.after(&r.abs, Content::Bytes(&out));
        journal.finish();
        state.record(&r.abs, &out);
    }
    let head = if dry_run {
        format!(
            "dry run: {replacements} replacement(s) in {} (not written)",
            r.rel
        )
    } else {
        format!("edited {}: {replacements} replacement(s)", r.rel)
    };
    let mut text = format!("{head}\n{diff}");
    if diff_truncated {
        text.push_str("\n[diff truncated at 32 KB]");
    }
    Ok(Reply::new(
        EditResult {
            path: r.rel,
            replacements,
            applied: !dry_run,
            dry_run,
            diff,
            diff_truncated,
            first_changed_line,
            diagnostics: None,
        },
        text,
    ))
}

fn normalize_arg(d: &Decoded, s: &str) -> String {
    if d.crlf {
        s.replace("\r\n", "\n")
    } else {
        s.to_string()
    }
}

/// Apply string edits in order to the in-memory text.
pub fn apply_strings(d: &Decoded, edits: &[EditSpec], multi: bool) -> ToolResult<(String, u64)> {
    let mut text = d.text.clone();
    let mut total = 0u64;
    for (i, e) in edits.iter().enumerate() {
        let f = |name: &str| {
            if multi {
                format!("edits[{i}].{name}")
            } else {
                name.to_string()
            }
        };
        let old = normalize_arg(d, e.old_string.as_deref().unwrap_or_default());
        let new = normalize_arg(d, e.new_string.as_deref().unwrap_or_default());
        if e.old_string.is_none() {
            return Err(ToolError::invalid_field(
                &f("old_string"),
                "is required in string mode",
            ));
        }
        if old.is_empty() {
            return Err(ToolError::invalid_field(
                &f("old_string"),
                "must not be empty; use start_line/end_line to insert at a line, or file_write for a whole file",
            ));
        }
        if old == new {
            return Err(ToolError::new(
                ErrorCode::NoChange,
                format!(
                    "{}: old_string and new_string are identical",
                    f("new_string")
                ),
            )
            .with_detail(json!({ "field": f("new_string") })));
        }
        let replace_all = e.replace_all.unwrap_or(false);
        if replace_all && e.occurrence.is_some() {
            return Err(ToolError::invalid_field(
                &f("occurrence"),
                "cannot be combined with replace_all: true",
            ));
        }
        let positions = find_all(&text, &old);
        if positions.is_empty() {
            return Err(not_found(&text, &old, &f("old_string"), i, multi));
        }
        let chosen: Vec<usize> = match (replace_all, e.occurrence) {
            (true, _) => positions.clone(),
            (false, Some(n)) => {
                if n < 1 || n as usize > positions.len() {
                    return Err(ToolError::invalid_field(
                        &f("occurrence"),
                        format!(
                            "{n} is out of range; old_string occurs {} time(s), so 1..={} is accepted",
                            positions.len(),
                            positions.len()
                        ),
                    ));
                }
                vec![positions[n as usize - 1]]
            }
            (false, None) if positions.len() > 1 => {
                // The first lines only: `count` says how many there are.
                let lines: Vec<u64> = positions
                    .iter()
                    .take(MAX_LINES_LISTED)
                    .map(|&at| line_of(&text, at))
                    .collect();
                return Err(ToolError::new(
                    ErrorCode::MultipleMatches,
                    format!(
                        "{}: found {} matches (lines {}); add surrounding context to make it unique, \
                         or set replace_all: true or occurrence: N",
                        f("old_string"),
                        positions.len(),
                        join_nums(&lines)
                    ),
                )
                .with_detail(json!({ "field": f("old_string"), "count": positions.len(), "lines": lines, "edit_index": i })));
            }
            (false, None) => positions.clone(),
        };
        // Literal splice, back to front so earlier offsets stay valid.
        for &at in chosen.iter().rev() {
            text.replace_range(at..at + old.len(), &new);
        }
        total += chosen.len() as u64;
    }
    Ok((text, total))
}

/// Apply line-range edits, all numbered against the original text; ranges must not overlap.
pub fn apply_lines(text: &str, edits: &[EditSpec], multi: bool) -> ToolResult<(String, u64)> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let n = lines.len() as i64;
    let mut ranges: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, edit index), 0-based inclusive
    for (i, e) in edits.iter().enumerate() {
        let f = |name: &str| {
            if multi {
                format!("edits[{i}].{name}")
            } else {
                name.to_string()
            }
        };
        let Some(start) = e.start_line else {
            return Err(ToolError::invalid_field(
                &f("start_line"),
                "is required in line mode",
            ));
        };
        let end = e.end_line.unwrap_or(start);
        if start < 1 {
            return Err(ToolError::invalid_field(
                &f("start_line"),
                format!("{start} is not accepted; lines start at 1"),
            ));
        }
        if start > end {
            return Err(ToolError::invalid_field(
                &f("start_line"),
                format!(
                    "start_line {start} is after end_line {end}; start_line <= end_line is required"
                ),
            ));
        }
        // One past the last line inserts at the end of the file.
        if start > n + 1 || (end > n && !(start == n + 1 && end == n + 1)) {
            return Err(ToolError::invalid_field(
                &f("end_line"),
                format!("line {end} is past the end of the file ({n} lines)"),
            ));
        }
        ranges.push((start as usize - 1, end as usize - 1, i));
    }
    let mut sorted = ranges.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        if w[1].0 <= w[0].1 {
            return Err(ToolError::invalid_field(
                &format!("edits[{}].start_line", w[1].2),
                format!(
                    "overlaps edits[{}] (lines {}-{})",
                    w[0].2,
                    w[0].0 + 1,
                    w[0].1 + 1
                ),
            ));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut next = 0usize;
    for (start, end, i) in sorted.iter().copied() {
        for l in &lines[next.min(lines.len())..start.min(lines.len())] {
            out.push_str(l);
        }
        let new = edits[i].new_string.as_deref().unwrap_or_default();
        let replaced_had_newline = if end < lines.len() {
            lines[end].ends_with('\n')
        } else {
            // Appending after the last line: separate it from a last line lacking a newline.
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            true
        };
        out.push_str(new);
        if !new.is_empty() && !new.ends_with('\n') && replaced_had_newline {
            out.push('\n');
        }
        next = end + 1;
    }
    for l in &lines[next.min(lines.len())..] {
        out.push_str(l);
    }
    Ok((out, ranges.len() as u64))
}

fn line_of(text: &str, byte: usize) -> u64 {
    memchr::memchr_iter(b'\n', &text.as_bytes()[..byte]).count() as u64 + 1
}

/// Start offsets of the non-overlapping occurrences of `needle`, left to right.
fn find_all(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut from = 0;
    while let Some(i) = finder.find(&hay.as_bytes()[from..]) {
        out.push(from + i);
        from += i + needle.len();
    }
    out
}

fn join_nums(v: &[u64]) -> String {
    v.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `old_string_not_found`, pointing at the closest whitespace-insensitive match if any.
fn not_found(text: &str, old: &str, field: &str, index: usize, multi: bool) -> ToolError {
    let mut message = format!("{field}: not found in the file");
    let mut detail = json!({ "field": field });
    if multi {
        detail["edit_index"] = json!(index);
        message.push_str(&format!(" (edit {index}; no edit was applied)"));
    }
    if let Some((start, end)) = whitespace_insensitive_find(text, old) {
        let (l1, l2) = (
            line_of(text, start),
            line_of(text, end.saturating_sub(1).max(start)),
        );
        let snippet: String = text[start..end].chars().take(2000).collect();
        message.push_str(&format!(
            ". A match ignoring whitespace exists at lines {l1}-{l2}; the whitespace differs \
             (indentation, tabs vs spaces or line breaks). Copy the exact text from there:\n{snippet}"
        ));
        detail["closest"] = json!({ "start_line": l1, "end_line": l2, "text": snippet, "kind": "whitespace_insensitive" });
    } else if let Some((line_no, line)) = closest_line(text, old) {
        message.push_str(&format!(". The most similar line is {line_no}: {line}"));
        detail["closest"] = json!({ "start_line": line_no, "end_line": line_no, "text": line, "kind": "similar_line" });
    }
    ToolError::new(ErrorCode::OldStringNotFound, message).with_detail(detail)
}

/// Find `needle` in `hay` ignoring all whitespace; returns the byte range in `hay`.
pub fn whitespace_insensitive_find(hay: &str, needle: &str) -> Option<(usize, usize)> {
    let pat: Vec<char> = needle.chars().filter(|c| !c.is_whitespace()).collect();
    if pat.is_empty() {
        return None;
    }
    let squeezed: Vec<(usize, char)> = hay
        .char_indices()
        .filter(|(_, c)| !c.is_whitespace())
        .collect();
    if squeezed.len() < pat.len() {
        return None;
    }
    let chars: Vec<char> = squeezed.iter().map(|(_, c)| *c).collect();
    let start = chars.windows(pat.len()).position(|w| w == pat.as_slice())?;
    let (first, _) = squeezed[start];
    let (last, c) = squeezed[start + pat.len() - 1];
    Some((first, last + c.len_utf8()))
}

/// The file line most similar to the first non-blank line of `old` (ratio ≥ 0.6).
fn closest_line(text: &str, old: &str) -> Option<(u64, String)> {
    let probe = old.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut best: Option<(f32, u64, &str)> = None;
    for (i, line) in text.lines().enumerate().take(200_000) {
        let t = line.trim();
        if t.is_empty() || t.len() > 4 * probe.len() + 40 {
            continue;
        }
        let ratio = similar::TextDiff::from_chars(probe, t).ratio();
        if ratio >= 0.6 && best.is_none_or(|(r, _, _)| ratio > r) {
            best = Some((ratio, i as u64 + 1, line));
        }
    }
    best.map(|(_, n, l)| (n, l.chars().take(500).collect()))
}

/// First line (1-based, in `new`) where the texts differ.
fn first_changed_line(old: &str, new: &str) -> Option<u64> {
    let prefix = kitbag_shared::diff::common_prefix(old.as_bytes(), new.as_bytes());
    if prefix == old.len() && prefix == new.len() {
        return None;
    }
    Some(memchr::memchr_iter(b'\n', &new.as_bytes()[..prefix]).count() as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(old: &str, new: &str) -> EditSpec {
        EditSpec {
            old_string: Some(old.into()),
            new_string: Some(new.into()),
            replace_all: None,
            occurrence: None,
            start_line: None,
            end_line: None,
        }
    }

    fn lines(s: i64, e: Option<i64>, new: &str) -> EditSpec {
        EditSpec {
            old_string: None,
            new_string: Some(new.into()),
            replace_all: None,
            occurrence: None,
            start_line: Some(s),
            end_line: e,
        }
    }

    fn plain(t: &str) -> Decoded {
        Decoded {
            text: t.into(),
            bom: false,
            crlf: false,
        }
    }

    #[test]
    fn literal_dollar() {
        let (t, n) =
            apply_strings(&plain("a = x;\n"), &[spec("x", "$1 $$ ${name}")], false).expect("ok");
        assert_eq!(t, "a = $1 $$ ${name};\n");
        assert_eq!(n, 1);
    }

    #[test]
    fn multiple_matches_lists_lines() {
        let e =
            apply_strings(&plain("x\ny\nx\nz\nx\n"), &[spec("x", "w")], false).expect_err("multi");
        assert_eq!(e.code, ErrorCode::MultipleMatches);
        assert_eq!(e.detail["lines"], json!([1, 3, 5]));
        let mut s = spec("x", "w");
        s.occurrence = Some(2);
        assert_eq!(
            apply_strings(&plain("x\ny\nx\n"), &[s], false)
                .expect("ok")
                .0,
            "x\ny\nw\n"
        );
        let mut s = spec("x", "w");
        s.replace_all = Some(true);
        assert_eq!(
            apply_strings(&plain("x x x"), &[s], false).expect("ok"),
            ("w w w".into(), 3)
        );
    }

    #[test]
    fn not_found_points_at_whitespace_variant() {
        let text = "fn main() {\n    let  x =\n        1;\n}\n";
        let e = apply_strings(&plain(text), &[spec("let x = 1;", "let x = 2;")], false)
            .expect_err("nf");
        assert_eq!(e.code, ErrorCode::OldStringNotFound);
        assert_eq!(e.detail["closest"]["start_line"], 2);
        assert_eq!(e.detail["closest"]["end_line"], 3);
    }

    #[test]
    fn crlf_bom_roundtrip() {
        let bytes = b"\xEF\xBB\xBFone\r\ntwo\r\nthree\r\n";
        let d = decode(bytes.to_vec(), "f").expect("decode");
        assert!(d.bom && d.crlf);
        let (t, _) = apply_strings(&d, &[spec("two\nthree", "2\n3")], false).expect("ok");
        assert_eq!(encode(&d, &t).as_ref(), b"\xEF\xBB\xBFone\r\n2\r\n3\r\n");
    }

    #[test]
    fn non_utf8_refused() {
        let e = decode(b"caf\xe9\n".to_vec(), "f").expect_err("latin1");
        assert_eq!(e.code, ErrorCode::EncodingUnsupported);
    }

    #[test]
    fn line_mode_and_final_newline() {
        let t = "a\nb\nc";
        assert_eq!(
            apply_lines(t, &[lines(2, None, "B")], false).expect("ok").0,
            "a\nB\nc"
        );
        assert_eq!(
            apply_lines(t, &[lines(3, None, "C")], false).expect("ok").0,
            "a\nb\nC"
        );
        assert_eq!(
            apply_lines("a\nb\n", &[lines(1, Some(2), "z")], false)
                .expect("ok")
                .0,
            "z\n"
        );
        assert_eq!(
            apply_lines("a\nb\n", &[lines(3, None, "c")], false)
                .expect("ok")
                .0,
            "a\nb\nc\n"
        );
        assert_eq!(
            apply_lines("a\nb\nc\n", &[lines(2, None, "")], false)
                .expect("ok")
                .0,
            "a\nc\n"
        );
        let e = apply_lines(t, &[lines(3, Some(2), "x")], false).expect_err("start>end");
        assert_eq!(e.detail["field"], "start_line");
        let e = apply_lines(t, &[lines(1, Some(9), "x")], false).expect_err("past end");
        assert_eq!(e.code, ErrorCode::InvalidParams);
        let e = apply_lines(
            "a\nb\nc\n",
            &[lines(1, Some(2), "x"), lines(2, None, "y")],
            true,
        )
        .expect_err("overlap");
        assert_eq!(e.detail["field"], "edits[1].start_line");
        let (t2, n) = apply_lines(
            "a\nb\nc\n",
            &[lines(3, None, "C"), lines(1, None, "A")],
            true,
        )
        .expect("ok");
        assert_eq!((t2.as_str(), n), ("A\nb\nC\n", 2));
    }

    #[test]
    fn the_first_changed_line_is_counted_in_the_new_text() {
        let old: String = (1..=200).map(|i| format!("line {i}\n")).collect();
        let new = old.replacen("line 150", "x", 1);
        assert_eq!(first_changed_line(&old, &new), Some(150));
        assert_eq!(first_changed_line(&old, &old), None);
    }

    #[test]
    fn sequential_string_edits_fail_as_a_whole() {
        let d = plain("alpha beta\n");
        let e = apply_strings(&d, &[spec("alpha", "A"), spec("gamma", "G")], true)
            .expect_err("2nd fails");
        assert_eq!(e.detail["edit_index"], 1);
        assert_eq!(e.detail["field"], "edits[1].old_string");
    }
}
