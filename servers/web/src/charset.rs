//! A body's character encoding, found as browsers find it: a byte-order mark, then the
//! `Content-Type` header's charset, then (for HTML and XML) a declaration in the document's
//! first bytes, then UTF-8 when the bytes are valid UTF-8, else windows-1252 — the legacy
//! default of the pages that declare nothing.

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};

/// How far into a document a `<meta charset>` or `<?xml encoding?>` is looked for. The HTML
/// standard's prescan stops at 1,024 bytes; real pages put a long `<head>` (styles, scripts,
/// comments) before theirs, so the search goes further.
const PRESCAN: usize = 8192;

/// `body` as text, decoded by the encoding it declares (see the module doc).
pub fn decode(body: &[u8], content_type: &str) -> String {
    encoding_of(body, content_type)
        .decode_with_bom_removal(body)
        .0
        .into_owned()
}

/// The encoding `body` is in.
pub fn encoding_of(body: &[u8], content_type: &str) -> &'static Encoding {
    if let Some((bom, _)) = Encoding::for_bom(body) {
        return bom;
    }
    if let Some(label) = header_charset(content_type)
        && let Some(enc) = Encoding::for_label(label.as_bytes())
    {
        return enc;
    }
    if let Some(enc) = declared(&body[..body.len().min(PRESCAN)]) {
        return enc;
    }
    match std::str::from_utf8(body) {
        Ok(_) => UTF_8,
        // A body cut mid-character at the size cap is still UTF-8.
        Err(e) if e.error_len().is_none() => UTF_8,
        Err(_) => WINDOWS_1252,
    }
}

/// The `charset=` parameter of a `Content-Type` value.
fn header_charset(content_type: &str) -> Option<&str> {
    content_type
        .split(';')
        .filter_map(|p| {
            let (name, value) = p.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("charset")
                .then(|| value.trim().trim_matches(['"', '\'']))
        })
        .next()
}

/// An encoding the document declares in its first bytes: `<meta charset=…>`,
/// `<meta http-equiv="Content-Type" content="…; charset=…">` or `<?xml … encoding="…"?>`.
/// A declared UTF-16 means UTF-8 (the bytes were read as ASCII, so they are not UTF-16), as
/// the HTML standard says.
fn declared(head: &[u8]) -> Option<&'static Encoding> {
    let lower = head.to_ascii_lowercase();
    let mut at = 0;
    while let Some(found) = find(&lower[at..], b"charset") {
        let after = at + found + b"charset".len();
        at = after;
        // Only inside a tag: a `charset` in text or a script is not a declaration.
        let tag_start = lower[..after].iter().rposition(|&b| b == b'<');
        let tag_end = lower[..after].iter().rposition(|&b| b == b'>');
        let Some(start) = tag_start else { continue };
        if tag_end.is_some_and(|end| end > start) {
            continue;
        }
        let tag = &lower[start..];
        if !(tag.starts_with(b"<meta") || tag.starts_with(b"<?xml")) {
            continue;
        }
        if let Some(enc) = label_after(&head[after..]) {
            return Some(if enc.name().starts_with("UTF-16") {
                UTF_8
            } else {
                enc
            });
        }
    }
    if let Some(found) = find(&lower, b"<?xml")
        && let Some(enc_at) = find(&lower[found..], b"encoding")
    {
        let value = &head[found + enc_at + b"encoding".len()..];
        return label_after(value).map(|e| {
            if e.name().starts_with("UTF-16") {
                UTF_8
            } else {
                e
            }
        });
    }
    None
}

/// The label in `= "label"` (quotes optional) at the start of `rest`, as an encoding.
fn label_after(rest: &[u8]) -> Option<&'static Encoding> {
    let rest = trim_start(rest);
    let rest = trim_start(rest.strip_prefix(b"=")?);
    let rest = rest
        .strip_prefix(b"\"")
        .or_else(|| rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let end = rest
        .iter()
        .position(|&b| {
            matches!(b, b'"' | b'\'' | b';' | b'>' | b'/' | b'?') || b.is_ascii_whitespace()
        })
        .unwrap_or(rest.len());
    Encoding::for_label(&rest[..end])
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(body: &[u8], content_type: &str) -> &'static str {
        encoding_of(body, content_type).name()
    }

    #[test]
    fn the_header_wins_over_the_document() {
        let body = b"<meta charset=\"iso-8859-2\"><p>x</p>";
        assert_eq!(name(body, "text/html; charset=utf-8"), "UTF-8");
        assert_eq!(name(body, "text/html"), "ISO-8859-2");
    }

    #[test]
    fn a_byte_order_mark_wins_over_everything() {
        assert_eq!(
            name(b"\xEF\xBB\xBF<p>x</p>", "text/html; charset=latin1"),
            "UTF-8"
        );
        assert_eq!(decode(b"\xEF\xBB\xBFok", ""), "ok");
    }

    #[test]
    fn meta_declarations_in_their_forms() {
        for (head, want) in [
            (&b"<meta charset=windows-1251>"[..], "windows-1251"),
            (b"<META CHARSET='Shift_JIS' />", "Shift_JIS"),
            (
                b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=ISO-8859-1\">",
                "windows-1252",
            ),
            (
                b"<?xml version=\"1.0\" encoding=\"koi8-r\"?><html>",
                "KOI8-R",
            ),
            (b"<meta charset=\"utf-16\">", "UTF-8"),
        ] {
            assert_eq!(
                name(head, "text/html"),
                want,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn charset_outside_a_meta_tag_is_not_a_declaration() {
        let body = "<p>set charset=koi8-r in the config</p>é";
        assert_eq!(name(body.as_bytes(), "text/html"), "UTF-8");
    }

    #[test]
    fn undeclared_bytes_are_utf8_when_valid_else_windows_1252() {
        assert_eq!(
            decode("<p>Grüße</p>".as_bytes(), "text/html"),
            "<p>Grüße</p>"
        );
        assert_eq!(decode(b"<p>Gr\xFC\xDFe</p>", "text/html"), "<p>Grüße</p>");
        // Cut mid-character by the body cap: still UTF-8.
        let cut = &"<p>Grüße</p>".as_bytes()[..6];
        assert_eq!(name(cut, "text/html"), "UTF-8");
    }
}
