//! Code-health rules that hold for the whole workspace, checked on the sources so a new
//! module cannot quietly break them: library code returns typed errors, never
//! `Result<_, String>` (a caller cannot match on a string, and a tool error built from one
//! loses its field and code).

use kitbag_e2e::workspace;

/// The library part of a file: everything before its `#[cfg(test)]` module.
fn library_part(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Each `Result<…>` whose error type is `String`, as the text of the type.
fn string_error_results(code: &str) -> Vec<String> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = flat[from..].find("Result<") {
        let start = from + at;
        from = start + "Result<".len();
        // Only the type itself, not `MyResult<` or `io::Result<T>` with one argument.
        if flat[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let mut depth = 1;
        let mut last_comma = None;
        let mut end = None;
        for (i, c) in flat[from..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(from + i);
                        break;
                    }
                }
                ',' if depth == 1 => last_comma = Some(from + i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end)
            && flat[comma + 1..end].trim() == "String"
        {
            found.push(flat[start..=end].to_string());
        }
    }
    found
}

#[test]
fn library_code_has_no_string_errors() {
    let root = workspace::root();
    let files = workspace::library_files(root);
    assert!(
        files.len() > 100,
        "the walk found only {} source files under {}",
        files.len(),
        root.display()
    );
    let mut offenders = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file reads");
        for ty in string_error_results(library_part(&text)) {
            offenders.push(format!(
                "{}: {ty}",
                file.strip_prefix(root).unwrap_or(&file).display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "library code returns Result<_, String>; give these a typed error:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_scanner_finds_what_it_should() {
    assert_eq!(
        string_error_results("fn f() -> Result<Vec<(u8, String)>,\n    String> {"),
        vec!["Result<Vec<(u8, String)>, String>"]
    );
    assert!(string_error_results("fn f() -> Result<String, MyError>").is_empty());
    assert!(string_error_results("fn f() -> io::Result<String>").is_empty());
    assert!(string_error_results("fn f() -> VmResult<String>").is_empty());
    assert_eq!(
        string_error_results("x: OnceCell<Result<Arc<P>, String>>").len(),
        1
    );
}
