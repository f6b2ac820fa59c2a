//! Every search result says when it is cut (issue #41): `truncated`, `total`, `total_exact`
//! and `next_offset`, and following `next_offset` walks the whole list without overlap or gap.

use std::path::Path;

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn client(dir: &Path, args: &[&str]) -> McpClient {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-search"));
    McpClient::spawn(bin, args, dir, Era::Handshake)
}

/// 23 files, each with two `needle` lines and one `fn needle_N()`.
fn corpus() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for i in 0..23 {
        let body = format!("// needle {i}\nfn needle_{i}() {{}}\n// needle again\n");
        std::fs::write(dir.path().join(format!("f{i:02}.rs")), body).expect("write");
    }
    dir
}

/// Call `tool` page by page (`limit_key` = `limit`, from offset 0), checking each page's
/// paging fields, and return every entry of `list` in order.
fn page_through(
    c: &mut McpClient,
    tool: &str,
    args: Value,
    list: &str,
    limit_key: &str,
    limit: u64,
    total: u64,
) -> Vec<Value> {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let mut a = args.clone();
        a[limit_key] = json!(limit);
        a["offset"] = json!(offset);
        let r = c.call_ok(tool, a);
        let s = &r.structured;
        let page = s[list].as_array().expect("list").clone();
        assert_eq!(s["total"], total, "{tool} @{offset}: {s}");
        assert_eq!(s["total_exact"], true, "{tool} @{offset}");
        let left = total - offset;
        assert_eq!(page.len() as u64, left.min(limit), "{tool} @{offset}");
        all.extend(page);
        if s["truncated"] == false {
            assert!(s.get("next_offset").is_none(), "{tool}: {s}");
            return all;
        }
        assert!(left > limit, "{tool} @{offset}: cut with nothing left");
        assert!(r.text.contains("offset="), "{tool}: {}", r.text);
        let next = s["next_offset"].as_u64().expect("next_offset");
        assert_eq!(next, offset + limit, "{tool}: no overlap, no gap");
        offset = next;
    }
}

#[test]
fn grep_glob_and_ast_pages_cover_the_whole_list() {
    let dir = corpus();
    let mut c = client(dir.path(), &[]);
    let cases = [
        (
            "search_grep",
            json!({"pattern": "needle", "output_mode": "content"}),
            "matches",
            "head_limit",
            69,
        ),
        (
            "search_grep",
            json!({"pattern": "needle again"}),
            "files",
            "head_limit",
            23,
        ),
        (
            "search_grep",
            json!({"pattern": "needle", "output_mode": "count"}),
            "counts",
            "head_limit",
            23,
        ),
        (
            "search_glob",
            json!({"pattern": "*.rs", "sort": "path"}),
            "files",
            "limit",
            23,
        ),
        (
            "search_ast",
            json!({"pattern": "fn $N() {}", "lang": "rust"}),
            "matches",
            "limit",
            23,
        ),
    ];
    for (tool, args, list, limit_key, total) in cases {
        let whole = c.call_ok(tool, args.clone());
        assert_eq!(whole.structured["truncated"], false, "{tool}");
        assert_eq!(whole.structured["total"], total, "{tool}");
        let want = whole.structured[list].as_array().expect("list").clone();
        assert_eq!(want.len() as u64, total, "{tool}");
        let paged = page_through(&mut c, tool, args, list, limit_key, 5, total);
        assert_eq!(paged, want, "{tool}: pages reassemble the whole list");
    }
}

#[test]
fn a_search_stopped_early_gives_a_lower_bound() {
    let dir = tempfile::tempdir().expect("tmp");
    for i in 0..300 {
        let body = "some words to match on this line\n".repeat(40);
        std::fs::write(dir.path().join(format!("f{i:03}.txt")), body).expect("write");
    }
    // A 1 ms budget cannot walk 300 files.
    let mut c = client(dir.path(), &["--search-timeout-ms", "1"]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "(\\w+\\s+){3}match", "output_mode": "count"}),
    );
    assert_eq!(r.structured["truncated_reason"], "time_budget");
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["total_exact"], false);
    assert!(r.structured["total"].as_u64().expect("total") < 300);
}

#[test]
fn offsets_past_the_end_and_negative_ones() {
    let dir = corpus();
    let mut c = client(dir.path(), &[]);
    let r = c.call_ok("search_glob", json!({"pattern": "*.rs", "offset": 100}));
    assert_eq!(r.structured["files"], json!([]));
    assert_eq!(r.structured["total"], 23);
    assert_eq!(r.structured["truncated"], false);
    for tool in ["search_grep", "search_glob", "search_ast"] {
        c.call_err(
            tool,
            json!({"pattern": "needle", "offset": -1}),
            "invalid_params",
        )
        .expect_field("offset");
    }
}
