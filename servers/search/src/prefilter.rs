//! A literal prefilter for case-insensitive regexes.
//!
//! `(?i)fn\s+new_with_\w+` must contain `new_with_` in some casing, but the regex engine
//! cannot use that: folding seven letters gives 2^7 literal variants, more than its
//! prefilters take, so it runs its automaton over every byte. Here the longest run of
//! required literal bytes is pulled out of the pattern, and lines are only handed to the
//! regex where that run occurs (found with `memchr` on its rarest byte, both cases).
//! Exactness is kept: a letter joins the run only when its case-fold class is exactly
//! its two ASCII cases (so `k` — which also matches the Kelvin sign — and `s` break it).

use grep_matcher::{LineMatchKind, LineTerminator, Match, Matcher, NoError};
use grep_regex::{RegexCaptures, RegexMatcher};
use regex_syntax::hir::{Class, Hir, HirKind};

/// One byte of the required literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Exactly this byte.
    Exact(u8),
    /// This ASCII letter in either case (stored lowercase).
    Fold(u8),
}

impl Unit {
    fn matches(self, b: u8) -> bool {
        match self {
            Unit::Exact(x) => b == x,
            Unit::Fold(x) => b.to_ascii_lowercase() == x,
        }
    }
}

/// The shortest literal worth a prefilter: shorter ones occur too often to pay off.
const MIN_LEN: usize = 4;

/// A required literal, searched case-insensitively where the pattern folds case.
#[derive(Debug, Clone)]
pub struct Literal {
    units: Vec<Unit>,
    /// Index of the unit searched with memchr (the rarest in source code).
    anchor: usize,
}

impl Literal {
    /// The longest run of required literal units of `pattern`, parsed as the regex
    /// matcher will parse it; `None` when there is none long enough.
    pub fn extract(pattern: &str, case_insensitive: bool) -> Option<Literal> {
        let hir = regex_syntax::ParserBuilder::new()
            .case_insensitive(case_insensitive)
            .multi_line(true)
            .utf8(false)
            .build()
            .parse(pattern)
            .ok()?;
        let mut best: Vec<Unit> = Vec::new();
        let mut run: Vec<Unit> = Vec::new();
        collect(&hir, &mut run, &mut best);
        flush(&mut run, &mut best);
        if best.len() < MIN_LEN || !best.iter().any(|u| matches!(u, Unit::Fold(_))) {
            // Without a folded letter the regex engine's own literal prefilters work.
            return None;
        }
        let anchor = (0..best.len())
            .min_by_key(|&i| commonness(best[i]))
            .unwrap_or(0);
        Some(Literal {
            units: best,
            anchor,
        })
    }

    /// Start of the first occurrence in `hay`.
    pub fn find(&self, hay: &[u8]) -> Option<usize> {
        let k = self.units.len();
        let a = self.anchor;
        let mut from = a;
        while from < hay.len() {
            let rest = &hay[from..];
            let hit = match self.units[a] {
                Unit::Exact(b) => memchr::memchr(b, rest),
                Unit::Fold(b) => memchr::memchr2(b, b.to_ascii_uppercase(), rest),
            }?;
            let pos = from + hit;
            let start = pos - a;
            if start + k <= hay.len()
                && self
                    .units
                    .iter()
                    .zip(&hay[start..start + k])
                    .all(|(u, b)| u.matches(*b))
            {
                return Some(start);
            }
            from = pos + 1;
        }
        None
    }
}

fn flush(run: &mut Vec<Unit>, best: &mut Vec<Unit>) {
    if run.len() > best.len() {
        *best = std::mem::take(run);
    } else {
        run.clear();
    }
}

/// Walk the parts every match must contain, in order, extending `run` with literal units
/// and cutting it at anything else.
fn collect(hir: &Hir, run: &mut Vec<Unit>, best: &mut Vec<Unit>) {
    match hir.kind() {
        HirKind::Literal(lit) => {
            for &b in lit.0.iter() {
                run.push(Unit::Exact(b));
            }
        }
        HirKind::Class(class) => match fold_unit(class) {
            Some(u) => run.push(u),
            None => flush(run, best),
        },
        HirKind::Capture(cap) => collect(&cap.sub, run, best),
        HirKind::Concat(parts) => {
            for part in parts {
                collect(part, run, best);
            }
        }
        // Look-arounds match no bytes: they neither extend nor require a cut... but the
        // literal on either side is not adjacent text in every case (`\b`), so cut.
        HirKind::Look(_) => flush(run, best),
        HirKind::Empty => {}
        // A repetition of at least one: its sub-pattern is required once, but what
        // follows is not adjacent; alternations require none of their branches.
        HirKind::Repetition(rep) if rep.min >= 1 => {
            flush(run, best);
            collect(&rep.sub, run, best);
            flush(run, best);
        }
        HirKind::Repetition(_) | HirKind::Alternation(_) => flush(run, best),
    }
}

/// A class that is exactly one byte, or exactly one ASCII letter in both cases.
fn fold_unit(class: &Class) -> Option<Unit> {
    match class {
        Class::Unicode(u) => {
            let ranges = u.ranges();
            match ranges {
                [r] if r.start() == r.end() && r.start().is_ascii() => {
                    Some(Unit::Exact(r.start() as u8))
                }
                [a, b] if a.start() == a.end() && b.start() == b.end() => {
                    let (x, y) = (a.start(), b.start());
                    (x.is_ascii_uppercase() && y == x.to_ascii_lowercase())
                        .then_some(Unit::Fold(y as u8))
                }
                _ => None,
            }
        }
        Class::Bytes(b) => {
            let ranges = b.ranges();
            match ranges {
                [r] if r.start() == r.end() => Some(Unit::Exact(r.start())),
                [a, c] if a.start() == a.end() && c.start() == c.end() => {
                    let (x, y) = (a.start(), c.start());
                    (x.is_ascii_uppercase() && y == x.to_ascii_lowercase()).then_some(Unit::Fold(y))
                }
                _ => None,
            }
        }
    }
}

/// How often a unit's bytes occur in source code (lower is rarer).
fn commonness(u: Unit) -> u32 {
    let b = match u {
        Unit::Exact(b) | Unit::Fold(b) => b.to_ascii_lowercase(),
    };
    let rank = match b {
        b' ' => 100,
        b'e' | b't' | b'a' | b'o' | b'i' | b'n' | b's' | b'r' => 80,
        b'l' | b'c' | b'd' | b'u' | b'h' | b'm' | b'p' | b'f' | b'\n' => 60,
        b'_' | b'(' | b')' | b'.' | b',' | b';' | b'g' | b'b' | b'y' | b'w' => 40,
        b'v' | b'k' | b':' | b'=' | b'"' | b'{' | b'}' => 30,
        b'x' | b'j' | b'q' | b'z' => 10,
        _ => 20,
    };
    // Folded letters are searched for twice (both cases).
    if matches!(u, Unit::Fold(_)) {
        rank + 5
    } else {
        rank
    }
}

/// A regex matcher whose candidate lines come from the literal prefilter.
#[derive(Clone, Debug)]
pub struct PrefilteredMatcher {
    inner: RegexMatcher,
    literal: Option<Literal>,
}

impl PrefilteredMatcher {
    pub fn new(inner: RegexMatcher, literal: Option<Literal>) -> Self {
        PrefilteredMatcher { inner, literal }
    }

    pub fn has_prefilter(&self) -> bool {
        self.literal.is_some()
    }
}

impl Matcher for PrefilteredMatcher {
    type Captures = RegexCaptures;
    type Error = NoError;

    fn find_at(&self, haystack: &[u8], at: usize) -> Result<Option<Match>, NoError> {
        self.inner.find_at(haystack, at)
    }

    fn new_captures(&self) -> Result<RegexCaptures, NoError> {
        self.inner.new_captures()
    }

    fn capture_count(&self) -> usize {
        self.inner.capture_count()
    }

    fn capture_index(&self, name: &str) -> Option<usize> {
        self.inner.capture_index(name)
    }

    fn captures_at(
        &self,
        haystack: &[u8],
        at: usize,
        caps: &mut RegexCaptures,
    ) -> Result<bool, NoError> {
        self.inner.captures_at(haystack, at, caps)
    }

    fn shortest_match_at(&self, haystack: &[u8], at: usize) -> Result<Option<usize>, NoError> {
        self.inner.shortest_match_at(haystack, at)
    }

    fn non_matching_bytes(&self) -> Option<&grep_matcher::ByteSet> {
        self.inner.non_matching_bytes()
    }

    fn line_terminator(&self) -> Option<LineTerminator> {
        self.inner.line_terminator()
    }

    fn find_candidate_line(&self, haystack: &[u8]) -> Result<Option<LineMatchKind>, NoError> {
        match &self.literal {
            // The searcher confirms a candidate line with `find` before reporting it.
            Some(lit) => Ok(lit.find(haystack).map(LineMatchKind::Candidate)),
            None => self.inner.find_candidate_line(haystack),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lit(p: &str, ci: bool) -> Option<String> {
        Literal::extract(p, ci).map(|l| {
            l.units
                .iter()
                .map(|u| match u {
                    Unit::Exact(b) => *b as char,
                    Unit::Fold(b) => (*b as char).to_ascii_uppercase(),
                })
                .collect()
        })
    }

    #[test]
    fn extracts_the_longest_required_run() {
        // Folded letters shown uppercase.
        assert_eq!(
            lit(r"fn\s+new_with_\w+", true).as_deref(),
            Some("NEW_WITH_")
        );
        assert_eq!(
            lit(r"(?i)HELLO world", false).as_deref(),
            Some("HELLO WORLD")
        );
        // k and s also match non-ASCII letters under Unicode folding: they cut the run.
        assert_eq!(lit("kiss_the_frog", true).as_deref(), Some("_THE_FROG"));
        // Nothing required inside alternations or optional parts.
        assert_eq!(lit("(alpha|beta)", true), None);
        assert_eq!(lit("(?:prefix)?x", true), None);
        // Required repetitions count once.
        assert_eq!(lit("(?:abcd)+z", true).as_deref(), Some("ABCD"));
        // Case-sensitive patterns keep the regex engine's own prefilters.
        assert_eq!(lit("new_with_", false), None);
        assert_eq!(lit("ab", true), None);
        assert_eq!(lit("(", true), None);
    }

    #[test]
    fn finds_in_any_case_and_verifies_every_byte() {
        let l = Literal::extract("new_with_", true).unwrap();
        assert_eq!(l.find(b"fn NEW_With_cap()"), Some(3));
        assert_eq!(l.find(b"new_wit_ new_wiTh_"), Some(9));
        assert_eq!(l.find(b"new_wit"), None);
        assert_eq!(l.find(b""), None);
        let l = Literal::extract("(?-i:Ab)cdef", true).unwrap();
        assert_eq!(l.find(b"abCDEF AbcDeF"), Some(7));
    }
}
