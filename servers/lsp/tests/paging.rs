//! Issue #41: every `code_lsp` list says when it is cut — `truncated`, `total`,
//! `total_exact`, `next_offset` — and following `next_offset` walks the whole list without
//! overlap or gap. Against the real pyright language server.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bin, have, ok};

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let mut refs = String::from("def target() -> int:\n    return 1\n\n\n");
    for i in 0..12 {
        refs.push_str(&format!("x{i:02} = target()\n"));
    }
    let mut names = String::new();
    for i in 0..11 {
        names.push_str(&format!("def pageable_{i:02}() -> None:\n    pass\n\n\n"));
    }
    let undefined: String = (0..8).map(|i| format!("print(missing_{i})\n")).collect();
    std::fs::write(d.path().join("refs.py"), refs).unwrap();
    std::fs::write(d.path().join("names.py"), names).unwrap();
    std::fs::write(d.path().join("undefined.py"), undefined).unwrap();
    d
}

/// The whole list of `ask`, then the same list in pages of `limit`, checking each page's
/// paging fields; the pages must join up to the whole list.
fn pages_join_up(c: &mut McpClient, ask: Value, list: &str, limit: u64) -> u64 {
    let whole = ok(c, ask.clone());
    let all = whole[list].as_array().unwrap().clone();
    let total = all.len() as u64;
    assert!(total > limit, "{list}: {whole}");
    assert_eq!(whole["total"], total, "{list}");
    assert_eq!(whole["total_exact"], true, "{list}");
    assert_eq!(whole["truncated"], false, "{list}");
    assert!(whole.get("next_offset").is_none(), "{list}");
    let mut paged = Vec::new();
    let mut offset = 0;
    loop {
        let mut a = ask.clone();
        a["limit"] = json!(limit);
        a["offset"] = json!(offset);
        let r = ok(c, a);
        assert_eq!(r["total"], total, "{list} @{offset}: {r}");
        assert_eq!(r["total_exact"], true, "{list} @{offset}");
        let page = r[list].as_array().unwrap().clone();
        assert_eq!(page.len() as u64, (total - offset).min(limit), "{list}");
        paged.extend(page);
        if r["truncated"] == false {
            assert!(r.get("next_offset").is_none(), "{list}: {r}");
            break;
        }
        assert_eq!(
            r["next_offset"],
            offset + limit,
            "{list}: no overlap, no gap"
        );
        offset += limit;
    }
    assert_eq!(paged, all, "{list}: the pages join up to the whole list");
    total
}

#[test]
fn lists_page_without_overlap_or_gap() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    let refs = json!({"action": "references", "path": "refs.py", "line": 1, "symbol": "target"});
    assert_eq!(pages_join_up(&mut c, refs, "references", 5), 12);
    let outline = json!({"action": "symbols", "path": "names.py"});
    assert_eq!(pages_join_up(&mut c, outline, "symbols", 4), 11);
    let found = json!({"action": "symbols", "scope": "workspace", "query": "pageable", "language": "python"});
    assert_eq!(pages_join_up(&mut c, found, "symbols", 3), 11);
    // Diagnostics once the server has settled on the file, so every page sees the same list.
    let diags = json!({"action": "diagnostics", "path": "undefined.py"});
    let first = ok(&mut c, diags.clone());
    assert_eq!(first["settled"], true, "{first}");
    assert_eq!(pages_join_up(&mut c, diags, "diagnostics", 3), 8);
}

/// A diagnostics answer that may lack entries says so: `total` is then a lower bound.
#[test]
fn unsettled_diagnostics_give_a_lower_bound() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    let r = ok(
        &mut c,
        json!({"action": "diagnostics", "path": ".", "wait_ms": 0}),
    );
    let settled = r["settled"].as_bool().unwrap();
    assert_eq!(r["total_exact"], settled, "{r}");
    if !settled {
        assert_eq!(r["truncated"], true, "{r}");
    }
}
