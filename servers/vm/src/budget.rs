//! Holding a default answer under [`RESULT_BUDGET_BYTES`] of `structuredContent`: text cut by
//! its serialized (JSON-escaped) size, which is up to 6× its length in bytes.

pub use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};

/// What one character weighs inside a JSON string (serde_json's escaping).
pub fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The longest prefix of `s` that serializes (quotes excluded) to at most `room` bytes.
pub fn prefix_within(s: &str, room: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += escaped_len(c);
        if used > room {
            return &s[..i];
        }
    }
    s
}

/// The longest suffix of `s` that serializes (quotes excluded) to at most `room` bytes.
pub fn suffix_within(s: &str, room: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices().rev() {
        used += escaped_len(c);
        if used > room {
            return &s[i + c.len_utf8()..];
        }
    }
    s
}

/// `s` as it is when it serializes to at most `room` bytes (quotes included), else its head
/// and tail around a marker saying how many bytes were left out and `where_` they are.
pub fn head_tail_within(s: &str, room: usize, where_: &str) -> (String, bool) {
    if json_len(s) <= room {
        return (s.to_string(), false);
    }
    // The marker's figure is at most 20 digits; quotes 2.
    let marker_room = json_len(where_) + 64;
    let half = room.saturating_sub(marker_room + 2) / 2;
    let head = prefix_within(s, half);
    let tail = suffix_within(&s[head.len()..], half);
    let cut = s.len() - head.len() - tail.len();
    (
        format!("{head}\n… [{cut} bytes cut to fit the answer; {where_}] …\n{tail}"),
        true,
    )
}

/// How many bytes of `buf`, from its start (`from_end`: its end), shown as text (invalid
/// UTF-8 replaced) serialize within `room` bytes; not splitting a character where it can.
pub fn bytes_within(buf: &[u8], room: usize, from_end: bool) -> usize {
    let weight = |n: usize| {
        let part = if from_end {
            &buf[buf.len() - n..]
        } else {
            &buf[..n]
        };
        json_len(&String::from_utf8_lossy(part))
    };
    if weight(buf.len()) <= room {
        return buf.len();
    }
    // The largest n that fits (weight grows with n, give or take a split character).
    let (mut lo, mut hi) = (0, buf.len());
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if weight(mid) <= room {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // Stop before a character's continuation bytes, so the next page starts on a whole one.
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
    if is_cont(n) { lo } else { n }
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
    fn head_and_tail_fit_their_room() {
        let s: String = (0..20_000)
            .map(|i| ['"', '\u{1}', 'a', 'é'][i % 4])
            .collect();
        let (out, cut) = head_tail_within(&s, 10_000, "all of it in log_path");
        assert!(cut);
        assert!(json_len(&out) <= 10_000, "{}", json_len(&out));
        assert!(json_len(&out) > 9_000, "{}", json_len(&out));
        assert!(out.starts_with("\"\u{1}aé"));
        assert!(out.ends_with("\"\u{1}aé"));
        assert_eq!(
            head_tail_within("short", 100, "x"),
            ("short".to_string(), false)
        );
        assert_eq!(prefix_within("a\"b", 2), "a");
        assert_eq!(suffix_within("a\"b", 3), "\"b");
    }

    #[test]
    fn bytes_within_fits_and_keeps_characters_whole() {
        let buf: Vec<u8> = "é\"\u{1}".repeat(5_000).into_bytes();
        for from_end in [false, true] {
            let n = bytes_within(&buf, 1_000, from_end);
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
        assert_eq!(bytes_within(b"abc", 100, false), 3);
    }
}
