//! Holding results to [`RESULT_BUDGET_BYTES`] of `structuredContent`.

pub use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};

/// The longest prefix of `s` (on a char boundary) whose JSON string weighs at most
/// `max_json` bytes, with `marker` appended when cut; and whether it was cut.
pub fn fit_str(s: &str, max_json: usize, marker: &str) -> (String, bool) {
    if json_len(s) <= max_json {
        return (s.to_string(), false);
    }
    let room = max_json.saturating_sub(json_len(marker));
    // Binary search over byte lengths; a JSON string grows with its prefix.
    let (mut lo, mut hi) = (0usize, s.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let mut end = mid;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        if json_len(&s[..end]) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut end = lo;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}{marker}", &s[..end]), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_escaped_text_and_marks_the_cut() {
        let s = "\u{1}\"é".repeat(1000);
        let (cut, was) = fit_str(&s, 500, "…");
        assert!(was);
        assert!(json_len(&cut) <= 500, "{}", json_len(&cut));
        assert!(json_len(&cut) > 480);
        assert!(cut.ends_with('…'));
        assert_eq!(fit_str("abc", 10, "…"), ("abc".to_string(), false));
    }
}
