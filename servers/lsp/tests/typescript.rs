//! Drive the real `kitbag-lsp` binary against typescript-language-server.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bin, have, ok, write};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

#[test]
fn typescript_end_to_end() {
    if !have("typescript-language-server") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "tsconfig.json",
                "{\"compilerOptions\": {\"strict\": true, \"target\": \"es2020\", \"module\": \"commonjs\"}}\n",
            ),
            (
                "math.ts",
                "/** Adds two numbers. */\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n",
            ),
            (
                "main.tsx",
                "import { add } from \"./math\";\n\nconst s: string = add(1, 2);\nconst t = \"é😀\" + add(3, 4);\nconst u = ad(5, 6);\nexport { s, t, u };\n",
            ),
        ],
    );
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "main.tsx"}));
    assert!(
        s["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["line"] == 3 && d["severity"] == "error" && d["code"] == "2322"),
        "{s}"
    );
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "main.tsx", "line": 4, "symbol": "add"}),
    );
    assert_eq!(s["definitions"][0]["path"], "math.ts", "{s}");
    assert_eq!(s["definitions"][0]["line"], 2);
    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "main.tsx", "line": 4, "symbol": "add"}),
    );
    assert!(
        s["content"].as_str().unwrap().contains("add(a: number"),
        "{s}"
    );
    // An undefined name: the quick fix comes with its edit (informational, not applied).
    let s = ok(
        &mut c,
        json!({"action": "code_actions", "path": "main.tsx", "line": 5, "symbol": "ad"}),
    );
    let fix = s["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "quickfix" && a["title"].as_str().unwrap().contains("'ad'"))
        .unwrap_or_else(|| panic!("{s}"));
    assert_eq!(fix["edits"][0]["path"], "main.tsx", "{s}");
    assert!(
        fix["edits"][0]["new"]
            .as_str()
            .unwrap()
            .contains("function ad("),
        "{s}"
    );
    assert!(
        std::fs::read_to_string(d.path().join("main.tsx"))
            .unwrap()
            .contains("ad(5, 6)")
    );

    // Moving a file: the server rewrites the imports that point at it.
    let r = c.call(
        "code_lsp",
        json!({"action": "rename_file", "path": "math.ts", "new_path": "main.tsx"}),
    );
    assert_eq!(r.error_code(), Some("file_exists"), "{}", r.text);
    let r = c.call(
        "code_lsp",
        json!({"action": "rename_file", "path": "math.ts"}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "new_path",
        "{}",
        r.text
    );
    let s = ok(
        &mut c,
        json!({"action": "rename_file", "path": "math.ts", "new_path": "lib/arith.ts"}),
    );
    assert_eq!(s["references_updated"], true, "{s}");
    assert!(!d.path().join("math.ts").exists());
    assert!(
        std::fs::read_to_string(d.path().join("lib/arith.ts"))
            .unwrap()
            .contains("export function add")
    );
    let main = std::fs::read_to_string(d.path().join("main.tsx")).unwrap();
    assert!(main.contains("\"./lib/arith\""), "{main}\n{s}");
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "main.tsx", "line": 4, "symbol": "add"}),
    );
    assert_eq!(s["definitions"][0]["path"], "lib/arith.ts", "{s}");
}

/// Seed 004's rename example as the very first call of a fresh server: every file that uses
/// the name changes (tsserver loads the project only after the first open; a rename asked
/// before that sees the declaring file alone).
#[test]
fn the_seed_rename_is_whole_on_first_contact() {
    if !have("typescript-language-server") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "tsconfig.json",
                "{\"compilerOptions\": {\"strict\": true, \"target\": \"es2020\", \"module\": \"commonjs\"}, \"include\": [\"src\"]}\n",
            ),
            (
                "src/types.ts",
                "// The people who use the app.\n\nexport interface User {\n  id: string;\n  name: string;\n}\n",
            ),
            (
                "src/main.ts",
                "import { User } from \"./types\";\nimport { login } from \"./auth\";\n\nconst admin: User = { id: \"1\", name: \"root\" };\nexport function greet(u: User): string {\n  return `hello ${u.name}`;\n}\nlogin(admin);\n",
            ),
            (
                "src/auth.ts",
                "import { User } from \"./types\";\n\nexport function login(u: User): boolean {\n  return u.id.length > 0;\n}\n",
            ),
        ],
    );
    // Enough code that loading the project takes a while: the rename must not be answered
    // from the open file while it loads.
    for n in 0..40 {
        let body: String = (0..400)
            .map(|i| {
                format!("export function f{n}_{i}(x: number): number {{ return x * {i} + {n}; }}\n")
            })
            .collect();
        std::fs::write(d.path().join(format!("src/filler{n}.ts")), body).unwrap();
    }
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(120);
    let s = ok(
        &mut c,
        json!({"action": "rename", "path": "./src/types.ts", "line": 3, "character": 17, "new_name": "AppUser"}),
    );
    assert_eq!(s["files_changed"], 3, "{s}");
    assert_eq!(s["total_edits"], 6, "{s}");
    for f in ["src/types.ts", "src/main.ts", "src/auth.ts"] {
        let text = std::fs::read_to_string(d.path().join(f)).unwrap();
        assert!(
            text.contains("AppUser") && !text.replace("AppUser", "").contains("User"),
            "{f}: {text}"
        );
    }
}
