//! Output caps. Everything a tool returns is bounded and says when it was cut.

/// What one result's `structuredContent` may weigh, serialized, when the caller gave no paging
/// parameter (issue #37): Claude Code swaps a result of 50 KB or more for a preview, and every
/// byte is paid in the model's context. A tool with more to give stops there and says how to
/// get the rest (`truncated` with `next_offset`, or the tool's own paging fields).
pub const RESULT_BUDGET_BYTES: usize = 40_000;

/// The serialized size of `value` (compact JSON, as it goes out), for holding lists and text
/// against [`RESULT_BUDGET_BYTES`].
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing into a counter cannot fail for plain data; a value that refuses to serialize
    // counts what was written before.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Cut `s` to at most `max_bytes` bytes on a char boundary. Returns the kept prefix and
/// whether anything was cut.
pub fn truncate_str(s: &str, max_bytes: usize) -> (&str, bool) {
    if s.len() <= max_bytes {
        return (s, false);
    }
    let mut end = max_bytes;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// Cut a single line to `max_chars` characters, appending a marker that says how much was cut.
pub fn truncate_line(line: &str, max_chars: usize) -> (String, bool) {
    match line.char_indices().nth(max_chars) {
        None => (line.to_string(), false),
        Some((idx, _)) => {
            let total = line.chars().count();
            (
                format!(
                    "{}… [line truncated: {} of {} chars shown]",
                    &line[..idx],
                    max_chars,
                    total
                ),
                true,
            )
        }
    }
}

/// Keep the head and the tail of `s` within `max_bytes`, with an elision marker between.
pub fn head_tail(s: &str, max_bytes: usize) -> (String, bool) {
    if s.len() <= max_bytes {
        return (s.to_string(), false);
    }
    let half = max_bytes / 2;
    let (head, _) = truncate_str(s, half);
    let mut tail_start = s.len() - half.min(s.len());
    while tail_start < s.len() && !s.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let tail = &s[tail_start..];
    let elided = s.len() - head.len() - tail.len();
    (format!("{head}\n… [{elided} bytes elided] …\n{tail}"), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_the_compact_serialized_size() {
        let v = serde_json::json!({"a": [1, "x\"y"], "b": null});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).expect("json").len());
    }

    #[test]
    fn truncates_on_char_boundary() {
        let (s, cut) = truncate_str("héllo", 2);
        assert_eq!(s, "h");
        assert!(cut);
        assert_eq!(truncate_str("abc", 10), ("abc", false));
    }

    #[test]
    fn line_marker() {
        let (s, cut) = truncate_line(&"x".repeat(10), 4);
        assert!(cut);
        assert!(s.starts_with("xxxx…"));
        assert!(s.contains("4 of 10"));
    }

    #[test]
    fn head_and_tail() {
        let s: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let (p, cut) = head_tail(&s, 100);
        assert!(cut);
        assert!(p.starts_with("0\n1\n"));
        assert!(p.ends_with("999\n"));
        assert!(p.contains("bytes elided"));
    }
}
