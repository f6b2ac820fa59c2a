//! Unified diffs of a text change, for edit results and restore previews.

/// Unified diff of a change. Only the changed region (plus context) is handed to the diff
/// algorithm, so a one-line edit in a megabyte file costs microseconds, not a full diff.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    const CONTEXT: usize = 3;
    let (a, b) = (old.as_bytes(), new.as_bytes());
    let prefix = common_prefix(a, b);
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = common_suffix(&a[a.len() - max_suffix..], &b[b.len() - max_suffix..]);
    // Widen the changed byte range to whole lines plus CONTEXT lines on each side.
    let mut start = a[..prefix]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    for _ in 0..CONTEXT {
        if start == 0 {
            break;
        }
        start = a[..start - 1]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
    }
    let widen_end = |text: &[u8], changed_end: usize| -> usize {
        // End of the line holding the last changed byte, then CONTEXT more lines.
        let mut end = changed_end;
        for _ in 0..=CONTEXT {
            match memchr::memchr(b'\n', &text[end.min(text.len())..]) {
                Some(i) => end += i + 1,
                None => return text.len(),
            }
        }
        end
    };
    let old_end = widen_end(a, a.len() - suffix);
    let new_end = widen_end(b, b.len() - suffix);
    let first_line = memchr::memchr_iter(b'\n', &a[..start]).count();
    let diff = similar::TextDiff::from_lines(&old[start..old_end], &new[start..new_end])
        .unified_diff()
        .context_radius(CONTEXT)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    if first_line == 0 {
        return diff;
    }
    // Shift hunk headers from window-relative to file line numbers.
    diff.split_inclusive('\n')
        .map(|line| shift_hunk_header(line, first_line).unwrap_or_else(|| line.to_string()))
        .collect()
}

pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    // 64-byte chunks compare with memcmp; the tail byte by byte.
    while i + 64 <= n && a[i..i + 64] == b[i..i + 64] {
        i += 64;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

pub fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + 64 <= n && a[n - i - 64..n - i] == b[n - i - 64..n - i] {
        i += 64;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// `@@ -a,b +c,d @@` with `a` and `c` increased by `by`.
fn shift_hunk_header(line: &str, by: usize) -> Option<String> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, tail) = rest.split_once(" @@")?;
    let shift = |range: &str| -> Option<String> {
        let (start, len) = match range.split_once(',') {
            Some((s, l)) => (s, Some(l)),
            None => (range, None),
        };
        let start = start.parse::<usize>().ok()? + by;
        Some(match len {
            Some(l) => format!("{start},{l}"),
            None => start.to_string(),
        })
    };
    Some(format!("@@ -{} +{} @@{tail}", shift(old)?, shift(new)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windowed_diff_matches_full_diff() {
        let old: String = (1..=200).map(|i| format!("line {i}\n")).collect();
        for (from, to) in [
            ("line 100\n", "LINE 100\nextra\n"),
            ("line 1\n", "first\n"),
            ("line 200\n", ""),
            ("line 5\nline 6\n", ""),
            ("line 3\n", "line 3\nnew 3a\n"),
            ("line 199\nline 200\n", "end\n"),
            ("line 10\n", "line 10 changed\n"),
        ] {
            let new = old.replacen(from, to, 1);
            let full = similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .context_radius(3)
                .header("a/f", "b/f")
                .to_string();
            assert_eq!(unified_diff("f", &old, &new), full, "{from:?} -> {to:?}");
        }
        // Two separated changes and a file without a final newline.
        let two = old
            .replacen("line 20\n", "A\n", 1)
            .replacen("line 90\n", "B\n", 1);
        let full = similar::TextDiff::from_lines(&old, &two)
            .unified_diff()
            .context_radius(3)
            .header("a/f", "b/f")
            .to_string();
        assert_eq!(unified_diff("f", &old, &two), full);
        let (o, n) = ("a\nb\nc", "a\nb\nC");
        let full = similar::TextDiff::from_lines(o, n)
            .unified_diff()
            .context_radius(3)
            .header("a/f", "b/f")
            .to_string();
        assert_eq!(unified_diff("f", o, n), full);
    }
}
