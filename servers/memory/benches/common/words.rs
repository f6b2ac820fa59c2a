//! The benches' vocabulary: 5,832 three-syllable words, as varied as real notes' words.

/// The word numbered `n` (mod 5,832).
pub fn word(n: usize) -> String {
    const SYL: &[&str] = &[
        "ka", "lo", "mi", "ter", "van", "dus", "pre", "sol", "ri", "ont", "bel", "cha", "nu",
        "gra", "fen", "tos", "ul", "zer",
    ];
    let mut w = String::new();
    let mut x = n;
    for _ in 0..3 {
        w.push_str(SYL[x % SYL.len()]);
        x /= SYL.len();
    }
    w
}
