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

/// What one character weighs inside a JSON string (serde_json's escaping: up to 6 bytes for a
/// control character).
pub fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The longest prefix of `s` (on a char boundary) whose JSON string, quotes included, weighs
/// at most `max` bytes; and whether anything was cut.
pub fn json_prefix(s: &str, max: usize) -> (&str, bool) {
    let mut used = 2;
    for (i, c) in s.char_indices() {
        used += escaped_len(c);
        if used > max {
            return (&s[..i], true);
        }
    }
    (s, false)
}

/// The longest suffix of `s` whose JSON string, quotes included, weighs at most `max` bytes.
pub fn json_suffix(s: &str, max: usize) -> &str {
    let mut used = 2;
    for (i, c) in s.char_indices().rev() {
        used += escaped_len(c);
        if used > max {
            return &s[i + c.len_utf8()..];
        }
    }
    s
}

/// `s` when its JSON string weighs at most `max` bytes, else its longest prefix that does with
/// `marker` after it; and whether it was cut.
pub fn fit_str(s: &str, max: usize, marker: &str) -> (String, bool) {
    if json_len(s) <= max {
        return (s.to_string(), false);
    }
    let room = max.saturating_sub(json_len(marker) - 2);
    (format!("{}{marker}", json_prefix(s, room).0), true)
}

/// `s` when its JSON string weighs at most `room` bytes, else its head and tail around a
/// marker saying how many bytes were left out and `where_` they are.
pub fn head_tail_within(s: &str, room: usize, where_: &str) -> (String, bool) {
    if json_len(s) <= room {
        return (s.to_string(), false);
    }
    // The marker's figure is at most 20 digits.
    let marker_room = json_len(where_) + 64;
    let half = room.saturating_sub(marker_room) / 2;
    let head = json_prefix(s, half).0;
    let tail = json_suffix(&s[head.len()..], half);
    let cut = s.len() - head.len() - tail.len();
    (
        format!("{head}\n… [{cut} bytes cut to fit the answer; {where_}] …\n{tail}"),
        true,
    )
}

/// How many bytes of `buf` — from its start, or from its end when `from_end` — shown as text by
/// `show`, weigh at most `room` bytes as a JSON string: the largest such count (by bisection),
/// not splitting a UTF-8 character where it can, so the next page starts on a whole one.
pub fn bytes_within(
    buf: &[u8],
    room: usize,
    from_end: bool,
    show: impl Fn(&[u8]) -> String,
) -> usize {
    let part = |n: usize| {
        if from_end {
            &buf[buf.len() - n..]
        } else {
            &buf[..n]
        }
    };
    let fits = |n: usize| json_len(&show(part(n))) <= room;
    if fits(buf.len()) {
        return buf.len();
    }
    let (mut lo, mut hi) = (0, buf.len());
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let is_cont = |n: usize| {
        let i = if from_end { buf.len() - n } else { n };
        buf.get(i).is_some_and(|b| b & 0xc0 == 0x80)
    };
    let mut n = lo;
    for _ in 0..3 {
        if n > 0 && is_cont(n) {
            n -= 1;
        }
    }
    if is_cont(n) || n == 0 { lo } else { n }
}

/// The first `items` that fit in [`RESULT_BUDGET_BYTES`] beside `used` bytes already spent (the
/// rest of the result, room for its paging fields), always at least one so paging moves on;
/// and whether any were left out.
pub fn within_budget<T: serde::Serialize>(used: usize, items: Vec<T>) -> (Vec<T>, bool) {
    let mut used = used;
    let total = items.len();
    let mut kept = Vec::new();
    for item in items {
        used += json_len(&item) + 1;
        if used >= RESULT_BUDGET_BYTES && !kept.is_empty() {
            break;
        }
        kept.push(item);
    }
    let cut = kept.len() < total;
    (kept, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_len_matches_serde_json() {
        for c in (0u32..0x300).filter_map(char::from_u32).chain(['€', '😀']) {
            assert_eq!(escaped_len(c) + 2, json_len(&c.to_string()), "{c:?}");
        }
    }

    #[test]
    fn prefixes_suffixes_and_fits_weigh_what_serde_writes() {
        let s = "\u{1}\"é".repeat(1000);
        for max in [2, 3, 9, 100, 501] {
            let (p, cut) = json_prefix(&s, max);
            assert!(cut && json_len(p) <= max && json_len(p) + 6 > max, "{max}");
            let t = json_suffix(&s, max);
            assert!(json_len(t) <= max && json_len(t) + 6 > max, "{max}");
        }
        assert_eq!(json_prefix("abc", 10), ("abc", false));
        let (f, cut) = fit_str(&s, 500, "…");
        assert!(cut && f.ends_with('…') && json_len(&f) <= 500 && json_len(&f) > 490);
        assert_eq!(fit_str("abc", 10, "…"), ("abc".to_string(), false));
    }

    #[test]
    fn head_and_tail_fit_their_room() {
        let s: String = (0..20_000)
            .map(|i| ['"', '\u{1}', 'a', 'é'][i % 4])
            .collect();
        let (out, cut) = head_tail_within(&s, 10_000, "all of it in log_path");
        assert!(cut);
        assert!(
            json_len(&out) <= 10_000 && json_len(&out) > 9_000,
            "{}",
            json_len(&out)
        );
        assert!(out.starts_with("\"\u{1}aé") && out.ends_with("\"\u{1}aé"));
        assert_eq!(
            head_tail_within("short", 100, "x"),
            ("short".to_string(), false)
        );
    }

    #[test]
    fn bytes_within_fits_and_keeps_characters_whole() {
        let buf: Vec<u8> = "é\"\u{1}".repeat(5_000).into_bytes();
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        for from_end in [false, true] {
            let n = bytes_within(&buf, 1_000, from_end, lossy);
            let part = if from_end {
                &buf[buf.len() - n..]
            } else {
                &buf[..n]
            };
            let text = std::str::from_utf8(part).expect("whole characters");
            assert!(
                json_len(text) <= 1_000 && json_len(text) > 980,
                "{}",
                json_len(text)
            );
        }
        assert_eq!(bytes_within(b"abc", 100, false, lossy), 3);
    }

    #[test]
    fn a_list_is_cut_at_the_budget_but_never_empty() {
        let items: Vec<String> = (0..100).map(|_| "x".repeat(1_000)).collect();
        let (kept, cut) = within_budget(0, items.clone());
        assert!(cut && json_len(&kept) < RESULT_BUDGET_BYTES && kept.len() > 35);
        let (kept, cut) = within_budget(RESULT_BUDGET_BYTES, items);
        assert!(cut && kept.len() == 1);
    }

    #[test]
    fn json_prefix_counts_as_serde_does() {
        let s = "a\"b\\c\n\t\u{1}é😀\u{7f}".repeat(50);
        for max in 0..s.len() * 3 {
            let (kept, cut) = json_prefix(&s, max);
            let len = json_len(kept);
            assert!(len <= max.max(2), "{max}: {len}");
            assert_eq!(cut, kept.len() < s.len());
            if cut {
                let next = s[kept.len()..].chars().next().expect("char");
                let longer = &s[..kept.len() + next.len_utf8()];
                assert!(json_len(longer) > max, "{max}: cut too early");
            }
        }
    }

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
