//! Terminal output → text a model can read: escape sequences removed, CRLF → LF,
//! carriage-return overwrites resolved to the last write of each line.

/// Strip CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL|ST`) and two-byte escapes.
pub fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // Parameters and intermediates, then one final byte in @..~.
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(d) = chars.next() {
                    if d == '\u{7}' {
                        break;
                    }
                    if d == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // Character-set designations carry one more byte: ESC ( B.
            Some('(' | ')' | '*' | '+') => {
                chars.next();
                chars.next();
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// What a terminal shows: `\r\n` is a newline; a lone `\r` returns to the line start and
/// later characters overwrite earlier ones, so progress bars collapse to their final state.
pub fn render(raw: &str) -> String {
    let text = strip_escapes(raw);
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !line.contains('\r') {
            out.push_str(line);
            continue;
        }
        let mut cells: Vec<char> = Vec::new();
        let mut cursor = 0;
        for c in line.chars() {
            if c == '\r' {
                cursor = 0;
            } else if cursor < cells.len() {
                cells[cursor] = c;
                cursor += 1;
            } else {
                cells.push(c);
                cursor += 1;
            }
        }
        out.extend(cells);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colors_and_titles() {
        assert_eq!(strip_escapes("\u{1b}[1;31mred\u{1b}[0m plain"), "red plain");
        assert_eq!(strip_escapes("\u{1b}]0;title\u{7}after"), "after");
        assert_eq!(strip_escapes("a\u{1b}(Bb"), "ab");
    }

    #[test]
    fn renders_crlf_and_progress() {
        assert_eq!(render("one\r\ntwo\r\n"), "one\ntwo\n");
        assert_eq!(render("10%\r50%\r100%\r\ndone"), "100%\ndone");
        assert_eq!(render("loading...\rok"), "okading...");
    }
}
