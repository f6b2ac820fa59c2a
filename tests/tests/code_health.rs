//! Code-health rules that hold for the whole workspace, checked on the sources so a new
//! module cannot quietly break them:
//! - library code returns typed errors, never `Result<_, String>` (a caller cannot match on a
//!   string, and a tool error built from one loses its field and code);
//! - no blocking filesystem call directly in an `async fn` (it would stall a runtime worker
//!   and every task on it): `tokio::fs`, or `kitbag_shared::blocking::unblock` /
//!   `spawn_blocking` around the sync work;
//! - a poisoned std lock is recovered the one way (`kitbag_shared::lock::LockExt`), never
//!   skipped or turned into an error.

use kitbag_e2e::workspace;

/// The library part of a file: everything before its `#[cfg(test)]` module (whose other
/// attributes may stand between the two).
fn library_part(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]\n") {
        let start = from + at;
        from = start + 1;
        let module = text[start..]
            .lines()
            .skip(1)
            .find(|l| !l.trim_start().starts_with("#["));
        if module.is_some_and(|l| l.trim_start().starts_with("mod ")) {
            return &text[..start];
        }
    }
    text
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

/// The end (exclusive) of the brace block opening at `open` (`text[open] == '{'`), skipping
/// string and char literals and comments.
fn block_end(text: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < text.len() {
        match text[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' if text.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if text.get(i + 1) == Some(&b'\\') => {
                while i + 1 < text.len() && text[i + 1] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b'/' if text.get(i + 1) == Some(&b'/') => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// The ranges of `body` that are handed to a blocking thread: the arguments of
/// `spawn_blocking(…)` and `unblock(…)`, and nested (sync) `fn` items.
fn off_the_runtime(body: &str) -> Vec<(usize, usize)> {
    let bytes = body.as_bytes();
    let mut ranges = Vec::new();
    for call in ["spawn_blocking(", "unblock("] {
        let mut from = 0;
        while let Some(at) = body[from..].find(call) {
            let open = from + at + call.len() - 1;
            let mut depth = 0usize;
            let mut end = open;
            for (i, &c) in bytes.iter().enumerate().skip(open) {
                match c {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            ranges.push((open, end));
            from = open + 1;
        }
    }
    let mut from = 0;
    while let Some(at) = body[from..].find("\n") {
        let line_start = from + at + 1;
        from = line_start;
        let line = body[line_start..].trim_start();
        if (line.starts_with("fn ") || line.starts_with("pub fn "))
            && let Some(open) = body[line_start..].find('{')
        {
            let open = line_start + open;
            ranges.push((open, block_end(bytes, open)));
        }
    }
    ranges
}

/// Blocking filesystem calls made directly in an `async fn`: (the call, the function).
fn blocking_fs_in_async(code: &str) -> Vec<(String, String)> {
    const BLOCKING: &[&str] = &[
        "std::fs::",
        "File::open(",
        "File::create(",
        "OpenOptions::new()",
    ];
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("async fn ") {
        let start = from + at;
        from = start + 1;
        let name: String = code[start + "async fn ".len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = code[start..].find('{').map(|o| start + o) else {
            continue;
        };
        // A declaration without a body (a trait's) ends at `;` before any `{`.
        if code[start..open].contains(';') {
            continue;
        }
        let body = &code[open..block_end(bytes, open)];
        let excluded = off_the_runtime(body);
        for pattern in BLOCKING {
            let mut at_from = 0;
            while let Some(hit) = body[at_from..].find(pattern) {
                let hit = at_from + hit;
                at_from = hit + 1;
                let before = &body[..hit];
                if before.ends_with("tokio::fs::")
                    || before.ends_with("tokio::")
                    || (pattern.starts_with("File::") && before.ends_with("std::fs::"))
                {
                    continue;
                }
                if excluded.iter().any(|&(a, b)| a < hit && hit < b) {
                    continue;
                }
                let call: String = body[hit..]
                    .chars()
                    .take_while(|c| *c != '(' && *c != '\n')
                    .collect();
                found.push((call, name.clone()));
            }
        }
    }
    found
}

#[test]
fn no_blocking_filesystem_call_in_an_async_fn() {
    let root = workspace::root();
    let mut offenders = Vec::new();
    for file in workspace::library_files(root) {
        let text = std::fs::read_to_string(&file).expect("a source file reads");
        for (call, function) in blocking_fs_in_async(library_part(&text)) {
            offenders.push(format!(
                "{}: `{call}` in async fn {function}",
                file.strip_prefix(root).unwrap_or(&file).display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "blocking filesystem calls on the runtime; use tokio::fs, or kitbag_shared::blocking::unblock around the sync work:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_async_scanner_finds_what_it_should() {
    let code = "async fn a() {\n    let _ = std::fs::read(\"x\");\n    let _ = tokio::fs::read(\"x\").await;\n    unblock(move || std::fs::write(p, b\"}\")).await;\n}\nfn sync() { std::fs::read(\"y\"); }\nasync fn b() {\n    fn helper() { let _ = File::open(\"z\"); }\n    let f = OpenOptions::new();\n}\n";
    assert_eq!(
        blocking_fs_in_async(code),
        vec![
            ("std::fs::read".to_string(), "a".to_string()),
            ("OpenOptions::new".to_string(), "b".to_string()),
        ]
    );
}

/// Std locks whose poisoning is skipped or turned into an error instead of recovered.
fn unrecovered_locks(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    // A chain split over lines (`.lock()` / `.map(…)`) is read as one line.
    let lines: Vec<&str> = code.lines().collect();
    let mut joined: Vec<(usize, String)> = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let flat = line.trim();
        match joined.last_mut() {
            Some((_, prev)) if flat.starts_with('.') && prev.ends_with(".lock()") => {
                prev.push_str(flat);
            }
            _ => joined.push((n, flat.to_string())),
        }
    }
    for (n, flat) in &joined {
        let flat = flat.as_str();
        let skips = [
            ".lock().ok()",
            ".lock().map(",
            ".lock().map_err(",
            ".lock().unwrap_or",
        ]
        .iter()
        .chain(&[
            ".read().ok()",
            ".write().ok()",
            ".read().map(",
            ".write().map(",
        ])
        .any(|p| flat.contains(p));
        let matched = ((flat.contains("let Ok(") || flat.contains("if let Ok("))
            && (flat.ends_with(".lock()")
                || flat.ends_with(".lock() {")
                || flat.contains(".lock() else")))
            || (flat.contains("match ") && flat.ends_with(".lock() {"));
        // The recovery itself (`LockExt` is written with it).
        let recovers = flat.contains("PoisonError::into_inner");
        if (skips || matched) && !recovers {
            found.push(format!("line {}: {flat}", n + 1));
        }
    }
    found
}

#[test]
fn poisoned_locks_are_recovered_the_one_way() {
    let root = workspace::root();
    let mut offenders = Vec::new();
    for file in workspace::library_files(root) {
        let text = std::fs::read_to_string(&file).expect("a source file reads");
        for hit in unrecovered_locks(library_part(&text)) {
            offenders.push(format!(
                "{}: {hit}",
                file.strip_prefix(root).unwrap_or(&file).display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "a poisoned lock skipped or made an error; use kitbag_shared::lock::LockExt (locked, read_locked, write_locked):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_lock_scanner_finds_what_it_should() {
    let code = "if let Ok(mut p) = self.pending.lock() {\nlet x = m.lock().map(|g| *g).unwrap_or(0);\nlet y = m.locked();\nlet tx = store.write().map_err(fail)?;\nlet r = core\n    .events\n    .lock()\n    .map(|e| e.closed)\n    .unwrap_or(true);\nlet s = match self.slots.lock() {\n";
    assert_eq!(unrecovered_locks(code).len(), 4);
}
