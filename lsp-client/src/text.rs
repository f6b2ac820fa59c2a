//! Document text: lines, position-encoding conversion, symbol lookup on a line, URIs.
//!
//! Callers speak in 1-based lines and 0-based *characters* (Unicode scalar values) as
//! the file shows them; servers speak in 0-based lines and code units of the negotiated
//! encoding (UTF-16 for most). Every conversion goes through here.

use std::path::{Path, PathBuf};

/// The position encoding negotiated with a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
    Utf32,
}

impl Encoding {
    /// From `capabilities.positionEncoding`; servers that say nothing use UTF-16.
    pub fn from_capability(v: Option<&str>) -> Self {
        match v {
            Some("utf-8") => Encoding::Utf8,
            Some("utf-32") => Encoding::Utf32,
            _ => Encoding::Utf16,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf-8",
            Encoding::Utf16 => "utf-16",
            Encoding::Utf32 => "utf-32",
        }
    }

    fn units(self, c: char) -> usize {
        match self {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
            Encoding::Utf32 => 1,
        }
    }
}

/// Convert a character column to the encoding's code units.
pub fn char_to_units(line: &str, ch: usize, enc: Encoding) -> usize {
    line.chars().take(ch).map(|c| enc.units(c)).sum()
}

/// Convert code units to a character column; a position inside a character (or past the
/// end) is clamped to that character's start (or the line's end).
pub fn units_to_char(line: &str, units: usize, enc: Encoding) -> usize {
    let mut acc = 0;
    for (i, c) in line.chars().enumerate() {
        let next = acc + enc.units(c);
        if next > units {
            return i;
        }
        acc = next;
    }
    line.chars().count()
}

/// A document's text split into lines (`\n`, `\r\n` and lone `\r` all end a line, as LSP
/// says), with byte offsets so edits can be applied.
#[derive(Debug, Clone)]
pub struct Lines {
    pub text: String,
    /// (start, end) byte offsets of each line's content, terminator excluded.
    spans: Vec<(usize, usize)>,
}

impl Lines {
    pub fn new(text: String) -> Self {
        let mut spans = Vec::new();
        let bytes = text.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => {
                    spans.push((start, i));
                    start = i + 1;
                }
                b'\r' => {
                    spans.push((start, i));
                    if bytes.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
        spans.push((start, bytes.len()));
        Lines { text, spans }
    }

    /// Number of lines (a trailing newline starts an empty last line, as editors count).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Lines as a person counts them: a final newline does not add a line.
    pub fn visible_len(&self) -> usize {
        match self.spans.last() {
            Some((s, e)) if s == e && self.spans.len() > 1 => self.spans.len() - 1,
            _ => self.spans.len(),
        }
    }

    /// Line `i` (0-based) without its terminator.
    pub fn line(&self, i: usize) -> Option<&str> {
        self.spans.get(i).map(|&(s, e)| &self.text[s..e])
    }

    /// Byte offset of an LSP position (0-based line, code units), clamped into the text.
    pub fn offset(&self, line: usize, units: usize, enc: Encoding) -> usize {
        match self.spans.get(line) {
            None => self.text.len(),
            Some(&(s, e)) => {
                let l = &self.text[s..e];
                let ch = units_to_char(l, units, enc);
                s + l.char_indices().nth(ch).map(|(b, _)| b).unwrap_or(l.len())
            }
        }
    }

    /// LSP position → (0-based line, character column).
    pub fn to_chars(&self, line: usize, units: usize, enc: Encoding) -> (usize, usize) {
        match self.line(line) {
            Some(l) => (line, units_to_char(l, units, enc)),
            None => (line, units),
        }
    }

    /// (0-based line, character column) → code units for the server.
    pub fn to_units(&self, line: usize, ch: usize, enc: Encoding) -> usize {
        self.line(line)
            .map(|l| char_to_units(l, ch, enc))
            .unwrap_or(ch)
    }

    /// A one-line preview: trimmed and capped.
    pub fn preview(&self, line: usize) -> String {
        preview_of(self.line(line).unwrap_or(""))
    }
}

pub const PREVIEW_CHARS: usize = 200;

pub fn preview_of(line: &str) -> String {
    let t = line.trim();
    if t.chars().count() > PREVIEW_CHARS {
        let cut: String = t.chars().take(PREVIEW_CHARS).collect();
        format!("{cut}…")
    } else {
        t.to_string()
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Character column of `symbol` as a whole word in `line`, if present.
pub fn find_word(line: &str, symbol: &str) -> Option<usize> {
    if symbol.is_empty() {
        return None;
    }
    let chars: Vec<char> = line.chars().collect();
    let sym: Vec<char> = symbol.chars().collect();
    let word_like = sym.iter().all(|c| is_ident_char(*c));
    let mut i = 0;
    while i + sym.len() <= chars.len() {
        if chars[i..i + sym.len()] == sym[..] {
            let before_ok = i == 0 || !word_like || !is_ident_char(chars[i - 1]);
            let after = i + sym.len();
            let after_ok = after == chars.len() || !word_like || !is_ident_char(chars[after]);
            if before_ok && after_ok {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

/// Whether `name` is an identifier in the languages we serve (letters, digits, `_`,
/// `$`; not starting with a digit).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if (c.is_alphabetic() || c == '_' || c == '$') => chars.all(is_ident_char),
        _ => false,
    }
}

pub fn path_to_uri(path: &Path) -> String {
    url::Url::from_file_path(path)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| format!("file://{}", path.display()))
}

pub fn uri_to_path(uri: &str) -> Option<PathBuf> {
    url::Url::parse(uri).ok()?.to_file_path().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_between_characters_and_code_units() {
        let line = "é😀x = 1";
        // é is 2 UTF-8 bytes / 1 UTF-16 unit; 😀 is 4 bytes / 2 units.
        assert_eq!(char_to_units(line, 2, Encoding::Utf8), 6);
        assert_eq!(char_to_units(line, 2, Encoding::Utf16), 3);
        assert_eq!(char_to_units(line, 2, Encoding::Utf32), 2);
        assert_eq!(units_to_char(line, 6, Encoding::Utf8), 2);
        assert_eq!(units_to_char(line, 3, Encoding::Utf16), 2);
        // Inside the emoji's surrogate pair: clamp to its start.
        assert_eq!(units_to_char(line, 2, Encoding::Utf16), 1);
        assert_eq!(
            units_to_char(line, 99, Encoding::Utf16),
            line.chars().count()
        );
    }

    #[test]
    fn lines_handle_every_terminator_and_offsets() {
        let l = Lines::new("a\r\nbé\rc\n".to_string());
        assert_eq!(l.len(), 4);
        assert_eq!(l.visible_len(), 3);
        assert_eq!(l.line(1), Some("bé"));
        assert_eq!(l.line(2), Some("c"));
        assert_eq!(l.offset(1, 2, Encoding::Utf16), 3 + 1 + 2);
        assert_eq!(l.offset(9, 0, Encoding::Utf16), l.text.len());
        assert_eq!(l.to_chars(1, 3, Encoding::Utf8), (1, 2));
    }

    #[test]
    fn finds_whole_words_only() {
        assert_eq!(find_word("let total = subtotal + total;", "total"), Some(4));
        assert_eq!(find_word("subtotal", "total"), None);
        assert_eq!(find_word("é😀 greet(x)", "greet"), Some(3));
        assert_eq!(find_word("a::b", "::"), Some(1));
        assert_eq!(find_word("", "x"), None);
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("AppUser"));
        assert!(is_identifier("_x1"));
        assert!(is_identifier("naïve"));
        assert!(!is_identifier("1abc"));
        assert!(!is_identifier("a-b"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("a b"));
    }

    #[test]
    fn uris_round_trip_with_spaces_and_unicode() {
        let p = Path::new("/tmp/a dir/é.py");
        let u = path_to_uri(p);
        assert!(u.starts_with("file:///tmp/a%20dir/"));
        assert_eq!(uri_to_path(&u).as_deref(), Some(p));
    }
}
