//! A server's own error output printed into the page: PHP's "Warning: … in /path/file.php on
//! line 82" (and its notices, deprecations, strict-standards messages), one per line, sometimes
//! hundreds of them above the article on a misconfigured blog. They are never the page's text.
//! They sit inline between `<br>`s, so they are taken out of the markdown line by line.

/// What PHP starts such a line with.
const KINDS: &[&str] = &[
    "Warning",
    "Notice",
    "Deprecated",
    "Strict Standards",
    "Fatal error",
    "Parse error",
    "Catchable fatal error",
];

/// `line` (markdown) is one of PHP's error messages: `Kind: … on line N`.
pub(crate) fn is_php_notice(line: &str) -> bool {
    let plain: String = line
        .chars()
        .filter(|c| !matches!(c, '*' | '_' | '\\'))
        .collect();
    let plain = plain.trim();
    let Some((kind, rest)) = plain.split_once(':') else {
        return false;
    };
    if !KINDS.contains(&kind.trim()) {
        return false;
    }
    rest.rsplit_once(" on line ")
        .is_some_and(|(_, n)| !n.is_empty() && n.trim().chars().all(|c| c.is_ascii_digit()))
}

/// `md` without PHP's error lines.
pub(crate) fn drop_php_notices(md: &str) -> String {
    if !md.contains(" on line ") {
        return md.to_string();
    }
    md.lines()
        .filter(|l| !is_php_notice(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn php_error_lines_go_and_prose_about_them_stays() {
        let md = "**Warning**: Creating default object from empty value in **/www/htdocs/wp-includes/classes.php** on line **407**  \n\
                  Strict Standards: Only variables should be passed by reference in /www/wp-db.php on line 785\n\
                  Málaga is a lively city.\n\
                  Warning: the ferry leaves on line 3 of the timetable, at noon.";
        assert_eq!(
            drop_php_notices(md),
            "Málaga is a lively city.\nWarning: the ferry leaves on line 3 of the timetable, at noon."
        );
    }
}
