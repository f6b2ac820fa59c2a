//! Holding an answer under [`RESULT_BUDGET_BYTES`] of `structuredContent`: output cut by its
//! serialized (JSON-escaped) size, which is up to 6× its length in bytes.

pub use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};

/// What one character weighs inside a JSON string (serde_json's escaping).
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `s` when it serializes to at most `room` bytes (quotes included), else its head and tail
/// around a marker saying how many bytes were cut and that the log has them.
pub fn head_tail_within(s: &str, room: usize) -> (String, bool) {
    if json_len(s) <= room {
        return (s.to_string(), false);
    }
    let half = room.saturating_sub(160) / 2;
    let mut used = 0;
    let mut head_end = 0;
    for (i, c) in s.char_indices() {
        used += escaped_len(c);
        if used > half {
            break;
        }
        head_end = i + c.len_utf8();
    }
    let (head, rest) = s.split_at(head_end);
    let mut used = 0;
    let mut tail_start = rest.len();
    for (i, c) in rest.char_indices().rev() {
        used += escaped_len(c);
        if used > half {
            break;
        }
        tail_start = i;
    }
    let tail = &rest[tail_start..];
    let cut = s.len() - head.len() - tail.len();
    (
        format!("{head}\n… [{cut} bytes cut to fit the answer; the log file has them] …\n{tail}"),
        true,
    )
}

/// How many bytes of `buf` from its start, shown through `show`, serialize within `room`
/// bytes (the largest such count, found by bisection; not splitting a UTF-8 character where
/// it can).
pub fn bytes_within(buf: &[u8], room: usize, show: impl Fn(&[u8]) -> String) -> usize {
    let fits = |n: usize| json_len(&show(&buf[..n])) <= room;
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
    let mut n = lo;
    while n > 0 && lo - n < 3 && buf.get(n).is_some_and(|b| b & 0xc0 == 0x80) {
        n -= 1;
    }
    if buf.get(n).is_some_and(|b| b & 0xc0 == 0x80) || n == 0 {
        lo
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fit_their_room() {
        for c in (0u32..0x300).filter_map(char::from_u32) {
            assert_eq!(escaped_len(c) + 2, json_len(&c.to_string()), "{c:?}");
        }
        let s = "\u{1}\"é".repeat(10_000);
        let (out, cut) = head_tail_within(&s, 20_000);
        assert!(cut && json_len(&out) <= 20_000 && json_len(&out) > 19_000);
        assert!(out.starts_with("\u{1}\"é") && out.ends_with("\u{1}\"é"));
        let n = bytes_within(s.as_bytes(), 1_000, |b| {
            String::from_utf8_lossy(b).into_owned()
        });
        let part = std::str::from_utf8(&s.as_bytes()[..n]).expect("whole characters");
        assert!(json_len(part) <= 1_000 && json_len(part) > 980);
    }
}
