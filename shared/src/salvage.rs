//! What a line the JSON decoder refuses still tells: its `id` and `method`.
//!
//! Valid JSON can still be undecodable: a lone surrogate escape (`"\ud800"`, what JavaScript
//! writes for a string cut mid-emoji), a number beyond f64 (`1e400`), nesting deeper than the
//! decoder's recursion limit. Dropping such a request leaves the client waiting forever; this
//! scanner finds the top-level `id` and `method` without decoding anything else, so the
//! request can be answered with an error naming the problem.
//!
//! The scan is iterative (no recursion, whatever the nesting) and linear in the line length.

/// The top-level members of a JSON object line that matter for an answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Salvaged<'a> {
    /// The raw text of `id`, exactly as sent (`None` when there is no `id` member).
    pub id: Option<&'a str>,
    /// The raw text of `method` (a JSON string, quotes included) when present.
    pub method: Option<&'a str>,
}

impl Salvaged<'_> {
    /// The id when JSON-RPC allows it: a string, or a number without fraction or exponent.
    pub fn valid_id(&self) -> Option<&str> {
        self.id.filter(|id| is_valid_id(id))
    }
}

/// Whether a raw JSON value is an id JSON-RPC allows: a string, or an integer (written without
/// fraction or exponent; any length — it is echoed as written, never converted).
pub fn is_valid_id(raw: &str) -> bool {
    let b = raw.trim().as_bytes();
    let is_string = b.len() >= 2 && b[0] == b'"' && b[b.len() - 1] == b'"';
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let is_integer = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    is_string || is_integer
}

/// Scan `line` as a JSON object; `None` when it is not one (then there is nothing to answer).
pub fn salvage(line: &str) -> Option<Salvaged<'_>> {
    match scan(line) {
        Scan::Whole(found) => Some(found),
        Scan::CutShort(_) | Scan::NotAnObject => None,
    }
}

/// The members found in the first part of a line too long to read whole (the id usually
/// comes early: `{"jsonrpc":"2.0","id":7,...`).
pub fn salvage_prefix(prefix: &str) -> Option<Salvaged<'_>> {
    match scan(prefix) {
        Scan::Whole(found) | Scan::CutShort(found) => Some(found),
        Scan::NotAnObject => None,
    }
}

enum Scan<'a> {
    Whole(Salvaged<'a>),
    /// The text ended inside the object: what was found before that.
    CutShort(Salvaged<'a>),
    NotAnObject,
}

fn scan(line: &str) -> Scan<'_> {
    let b = line.as_bytes();
    let mut pos = skip_ws(b, 0);
    if b.get(pos) != Some(&b'{') {
        return Scan::NotAnObject;
    }
    pos += 1;
    let mut found = Salvaged::default();
    loop {
        pos = skip_ws(b, pos);
        match b.get(pos) {
            None => return Scan::CutShort(found),
            Some(b'}') => return Scan::Whole(found),
            Some(b',') => {
                pos += 1;
                continue;
            }
            Some(b'"') => {}
            Some(_) => return Scan::NotAnObject,
        }
        let Some(key_end) = skip_string(b, pos) else {
            return Scan::CutShort(found);
        };
        let key = &line[pos..key_end];
        pos = skip_ws(b, key_end);
        match b.get(pos) {
            None => return Scan::CutShort(found),
            Some(b':') => {}
            Some(_) => return Scan::NotAnObject,
        }
        pos = skip_ws(b, pos + 1);
        let Some(value_end) = skip_value(b, pos) else {
            return Scan::CutShort(found);
        };
        let Some(value) = line.get(pos..value_end).map(str::trim_end) else {
            return Scan::NotAnObject;
        };
        match key {
            "\"id\"" => found.id = Some(value),
            "\"method\"" if value.starts_with('"') => found.method = Some(value),
            _ => {}
        }
        pos = value_end;
    }
}

fn skip_ws(b: &[u8], mut pos: usize) -> usize {
    while b
        .get(pos)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
    {
        pos += 1;
    }
    pos
}

/// `pos` is at an opening quote; returns the index just past the closing one.
fn skip_string(b: &[u8], pos: usize) -> Option<usize> {
    let mut i = pos + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Skip one value of any depth; returns the index just past it.
fn skip_value(b: &[u8], pos: usize) -> Option<usize> {
    match b.get(pos)? {
        b'"' => skip_string(b, pos),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = pos;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = pos;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']') {
                i += 1;
            }
            (i > pos).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_id_and_method_past_what_the_decoder_refuses() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"x":{}1{}}}}},"id":7}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        for (line, id) in [
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"file_read","arguments":{"path":"\ud800"}}}"#.to_string(),
                "3",
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a\"b","method":"x","params":{"n":1e400}}"#.to_string(),
                r#""a\"b""#,
            ),
            (deep, "7"),
        ] {
            let s = salvage(&line).expect("object");
            assert_eq!(s.id, Some(id), "{line:.80}");
            assert_eq!(s.valid_id(), Some(id));
            assert!(s.method.is_some());
        }
    }

    #[test]
    fn ids_json_rpc_forbids_are_seen_but_not_valid() {
        for id in ["true", "{}", "1.5", "1e400", "null", "[1]"] {
            let line = format!(r#"{{"id": {id} ,"method":"ping"}}"#);
            let s = salvage(&line).expect("object");
            assert_eq!(s.id, Some(id));
            assert_eq!(s.valid_id(), None, "{id}");
        }
        let big = r#"{"id":123456789012345678901234567890,"method":"ping"}"#;
        assert_eq!(
            salvage(big).and_then(|s| s.valid_id().map(String::from)),
            Some("123456789012345678901234567890".into())
        );
    }

    #[test]
    fn a_prefix_gives_what_it_holds() {
        let cut = r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"arguments":{"content":"xxxx"#;
        let s = salvage_prefix(cut).expect("object");
        assert_eq!(s.valid_id(), Some("42"));
        assert_eq!(s.method, Some("\"tools/call\""));
        assert_eq!(salvage(cut), None);
        assert_eq!(salvage_prefix("nope"), None);
    }

    #[test]
    fn not_an_object_or_cut_short_is_none() {
        for line in [
            "",
            "[1,2]",
            "hello",
            r#"{"id":1,"method":"x""#,
            r#"{"id":"#,
            "{\"a\":[1,2",
        ] {
            assert_eq!(salvage(line), None, "{line}");
        }
        assert_eq!(
            salvage(r#"{"method":"notifications/x"}"#).map(|s| s.id),
            Some(None)
        );
    }
}
