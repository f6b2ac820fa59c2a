//! `edit_patch` over stdio against the real binary: every format, all-or-nothing, the
//! read-before-write rules, and the same trees as `git apply`, GNU `patch` and Codex's own
//! apply_patch on diffs from this repository's history.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::clients::testkit_dir;
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, content).expect("write");
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).expect("read")
}

fn client(root: &Path) -> McpClient {
    McpClient::spawn(bin(), &[], root, Era::Handshake)
}

fn read_all(c: &mut McpClient, paths: &[&str]) {
    for p in paths {
        c.call_ok("file_read", json!({"path": p}));
    }
}

#[test]
fn an_apply_patch_envelope_adds_deletes_updates_and_moves_in_one_call() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    write(
        root,
        "src/lib.rs",
        "fn a() {\n    one();\n}\n\nfn b() {\n    one();\n}\n",
    );
    write(root, "old.txt", "bye\n");
    write(root, "notes/todo.md", "- x\n- y\n");
    let mut c = client(root);
    read_all(&mut c, &["src/lib.rs", "old.txt", "notes/todo.md"]);
    let patch = [
        "*** Begin Patch",
        "*** Update File: src/lib.rs",
        "@@ fn b() {",
        "-    one();",
        "+    two();",
        "*** Add File: src/new/mod.rs",
        "+pub fn fresh() {}",
        "*** Delete File: old.txt",
        "*** Update File: notes/todo.md",
        "*** Move to: done/todo.md",
        "@@",
        " - x",
        "-- y",
        "+- y (done)",
        "*** End Patch",
    ]
    .join("\n");
    let r = c.call_ok("edit_patch", json!({"patch": patch}));
    assert_eq!(r.structured["format"], "apply_patch");
    assert_eq!(r.structured["applied"], true);
    let files = r.structured["files"].as_array().expect("files");
    let actions: Vec<(&str, &str)> = files
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("string"),
                f["action"].as_str().expect("string"),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("src/lib.rs", "updated"),
            ("src/new/mod.rs", "added"),
            ("old.txt", "deleted"),
            ("done/todo.md", "moved")
        ]
    );
    assert_eq!(files[3]["moved_from"], "notes/todo.md");
    assert_eq!(files[0]["lines_added"], 1);
    assert_eq!(
        read(root, "src/lib.rs"),
        "fn a() {\n    one();\n}\n\nfn b() {\n    two();\n}\n",
        "the anchor chose fn b"
    );
    assert_eq!(read(root, "src/new/mod.rs"), "pub fn fresh() {}\n");
    assert!(!root.join("old.txt").exists());
    assert!(!root.join("notes/todo.md").exists());
    assert_eq!(read(root, "done/todo.md"), "- x\n- y (done)\n");
    assert!(
        r.structured["diff"]
            .as_str()
            .expect("string")
            .contains("+    two();")
    );
    // Written through this connection: edited again without another read.
    c.call_ok(
        "edit_text",
        json!({"path": "src/new/mod.rs", "old_str": "fresh", "new_str": "renewed"}),
    );
    assert_eq!(read(root, "src/new/mod.rs"), "pub fn renewed() {}\n");
    let left: Vec<String> = walk(root);
    assert!(
        left.iter().all(|p| !p.contains(".kitbag-")),
        "no temp or backup file left: {left:?}"
    );
}

#[test]
fn a_hunk_that_fails_changes_nothing_and_names_the_closest_place() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    write(root, "a.txt", "alpha\nbeta\ngamma\n");
    write(root, "b.txt", "one\ntwo\nthree\nfour\n");
    let mut c = client(root);
    read_all(&mut c, &["a.txt", "b.txt"]);
    let before = walk(root);
    let diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n\
                --- a/b.txt\n+++ b/b.txt\n@@ -1,3 +1,3 @@\n one\n-TWO\n+2\n three\n\
                --- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+new\n";
    let r = c.call_err("edit_patch", json!({"patch": diff}), "hunk_not_found");
    assert!(r.text.contains("b.txt: hunk 1 of 1"), "{}", r.text);
    assert!(
        r.text.contains("Closest: line 1, 2 of 3 lines equal"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains(r#"the file has "two", the patch "TWO""#),
        "{}",
        r.text
    );
    assert_eq!(r.structured["error"]["detail"]["closest_line"], 1);
    assert_eq!(
        read(root, "a.txt"),
        "alpha\nbeta\ngamma\n",
        "a.txt untouched"
    );
    assert_eq!(walk(root), before, "nothing added, nothing left behind");
}

#[test]
fn read_before_write_and_existing_targets_are_enforced() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    write(root, "a.txt", "x\n");
    write(root, "taken.txt", "mine\n");
    let mut c = client(root);
    let update = "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n*** End Patch";
    c.call_err("edit_patch", json!({"patch": update}), "file_not_read");
    c.call_ok("file_read", json!({"path": "a.txt"}));
    std::fs::write(root.join("a.txt"), "x\nchanged behind our back\n").expect("w");
    c.call_err(
        "edit_patch",
        json!({"patch": update}),
        "file_changed_since_read",
    );
    c.call_ok("file_read", json!({"path": "a.txt"}));
    let add = "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n*** Add File: taken.txt\n+theirs\n*** End Patch";
    c.call_err("edit_patch", json!({"patch": add}), "file_exists");
    assert_eq!(read(root, "a.txt"), "x\nchanged behind our back\n");
    assert_eq!(read(root, "taken.txt"), "mine\n");
    let escape = "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch";
    let r = c.call("edit_patch", json!({"patch": escape}));
    assert!(r.is_error, "{}", r.text);
    assert!(!d.path().parent().expect("up").join("escape.txt").exists());
    let r = c.call_err("edit_patch", json!({"patch": "hello"}), "invalid_params");
    assert!(r.text.contains("*** Begin Patch"), "{}", r.text);
    let r = c.call_err(
        "edit_patch",
        json!({"patch": "*** Begin Patch\n*** Update File: a.txt\nbad line\n*** End Patch"}),
        "invalid_params",
    );
    assert_eq!(r.structured["error"]["detail"]["line"], 3, "{}", r.text);
    // A dry run checks and diffs, and writes nothing.
    let r = c.call_ok(
        "edit_patch",
        json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n*** End Patch", "dry_run": true}),
    );
    assert_eq!(r.structured["applied"], false);
    assert!(
        r.structured["diff"]
            .as_str()
            .expect("string")
            .contains("+y")
    );
    assert_eq!(read(root, "a.txt"), "x\nchanged behind our back\n");
}

#[test]
fn str_replace_commands_and_crlf_files() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    write(root, "win.txt", "one\r\ntwo\r\nthree\r\n");
    write(root, "app.py", "x = 1\ny = x\n");
    let mut c = client(root);
    read_all(&mut c, &["win.txt", "app.py"]);
    let cmds = json!([
        {"command": "str_replace", "path": "app.py", "old_str": "x = 1", "new_str": "x = 2"},
        {"command": "insert", "path": "app.py", "insert_line": 0, "new_str": "import os"},
        {"command": "create", "path": "pkg/__init__.py", "file_text": ""},
        {"path": "win.txt", "old_str": "two", "new_str": "TWO"}
    ]);
    let r = c.call_ok("edit_patch", json!({"patch": cmds.to_string()}));
    assert_eq!(r.structured["format"], "str_replace");
    assert_eq!(read(root, "app.py"), "import os\nx = 2\ny = x\n");
    assert_eq!(
        read(root, "win.txt"),
        "one\r\nTWO\r\nthree\r\n",
        "CRLF kept"
    );
    assert!(root.join("pkg/__init__.py").exists());
    // A unified diff of the CRLF file, hunks moved by the insert above.
    c.call_ok("file_read", json!({"path": "win.txt"}));
    let diff = "--- a/win.txt\n+++ b/win.txt\n@@ -5,2 +5,2 @@\n TWO\r\n-three\r\n+3\r\n";
    let r = c.call_ok("edit_patch", json!({"patch": diff}));
    assert_eq!(read(root, "win.txt"), "one\r\nTWO\r\n3\r\n");
    let moved = &r.structured["files"][0]["hunks_moved"][0];
    assert_eq!(moved["offset"], -3, "{}", r.structured);
    let r = c.call_err(
        "edit_patch",
        json!({"patch": json!({"path": "app.py", "old_str": "nowhere", "new_str": "x"}).to_string()}),
        "old_string_not_found",
    );
    assert!(
        r.text.contains("app.py: old_string: not found"),
        "{}",
        r.text
    );
}

/// Every file under `root`, root-relative, sorted, with its bytes' length.
/// The files under `root`, with sizes — kitbag's own state (`.kitbag`: the change journal)
/// left out.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("ls") {
            let e = e.expect("entry");
            let p = e.path();
            if p == root.join(".kitbag") {
                continue;
            }
            if e.file_type().expect("type").is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).expect("rel").display().to_string();
                out.push(format!(
                    "{rel} {}",
                    std::fs::metadata(&p).map_or(0, |m| m.len())
                ));
            }
        }
    }
    out.sort();
    out
}

fn git(repo: &Path, args: &[&str]) -> Vec<u8> {
    let o = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// A commit of this repository, as a patch and the trees before and after it.
struct Commit {
    id: String,
    diff: String,
    /// (path, content before) for every file the commit changes or removes.
    before: Vec<(String, Vec<u8>)>,
    /// (path, content after, or `None` when removed or moved away).
    after: Vec<(String, Option<Vec<u8>>)>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace")
        .to_path_buf()
}

/// Up to `n` recent commits whose diffs are text only and under 1 MB.
fn history(n: usize) -> Vec<Commit> {
    let repo = workspace();
    assert!(
        repo.join(".git").exists(),
        "the history test reads this repository's commits: run it from a git clone"
    );
    let ids = String::from_utf8(git(
        &repo,
        &["rev-list", "--no-merges", "--max-count=120", "HEAD"],
    ))
    .expect("utf8");
    let mut out = Vec::new();
    for id in ids.lines() {
        if out.len() == n {
            break;
        }
        let parent = format!("{id}^");
        let Ok(diff) = String::from_utf8(git(&repo, &["diff", "-M", "--no-color", &parent, id]))
        else {
            continue;
        };
        if diff.is_empty()
            || diff.len() > 1 << 20
            || diff.contains("\nBinary files ")
            || diff.contains("GIT binary patch")
        {
            continue;
        }
        let status = String::from_utf8(git(
            &repo,
            &["diff", "-M", "--name-status", "-z", &parent, id],
        ))
        .expect("utf8");
        let fields: Vec<&str> = status.split('\0').filter(|s| !s.is_empty()).collect();
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut i = 0;
        let blob = |rev: &str, path: &str| git(&repo, &["show", &format!("{rev}:{path}")]);
        while i < fields.len() {
            let st = fields[i];
            if st.starts_with('R') || st.starts_with('C') {
                let (from, to) = (fields[i + 1], fields[i + 2]);
                before.push((from.to_string(), blob(&parent, from)));
                if st.starts_with('R') {
                    after.push((from.to_string(), None));
                }
                after.push((to.to_string(), Some(blob(id, to))));
                i += 3;
            } else {
                let path = fields[i + 1];
                match st {
                    "A" => after.push((path.to_string(), Some(blob(id, path)))),
                    "D" => {
                        before.push((path.to_string(), blob(&parent, path)));
                        after.push((path.to_string(), None));
                    }
                    _ => {
                        before.push((path.to_string(), blob(&parent, path)));
                        after.push((path.to_string(), Some(blob(id, path))));
                    }
                }
                i += 2;
            }
        }
        out.push(Commit {
            id: id.to_string(),
            diff,
            before,
            after,
        });
    }
    out
}

/// A fresh tree holding the commit's files as they were before it.
fn tree_before(c: &Commit) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    for (path, bytes) in &c.before {
        let p = d.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, bytes).expect("w");
    }
    d
}

/// Whether `root` holds exactly what the commit left in its files; the first difference.
fn matches_after(root: &Path, c: &Commit) -> Result<(), String> {
    for (path, want) in &c.after {
        let have = std::fs::read(root.join(path)).ok();
        if have != *want {
            return Err(format!(
                "{}: {path}: {}",
                c.id,
                match (&have, want) {
                    (None, Some(_)) => "missing".to_string(),
                    (Some(_), None) => "should be gone".to_string(),
                    _ => "content differs".to_string(),
                }
            ));
        }
    }
    Ok(())
}

/// This repository's recent history replayed: each commit's `git diff` applied by edit_patch
/// gives the same files as `git apply` and GNU `patch -p1` on the same tree — the commit's own.
#[test]
fn git_history_applies_like_git_apply_and_gnu_patch() {
    let commits = history(40);
    assert!(commits.len() >= 20, "only {} usable commits", commits.len());
    let mut files = 0;
    for commit in &commits {
        // The references first: the diff and trees are right if they agree with the commit.
        let reference = tree_before(commit);
        std::fs::write(reference.path().join(".diff"), &commit.diff).expect("w");
        let o = Command::new("git")
            .current_dir(reference.path())
            .args(["apply", "--whitespace=nowarn", ".diff"])
            .output()
            .expect("git apply");
        assert!(
            o.status.success(),
            "git apply {}: {}",
            commit.id,
            String::from_utf8_lossy(&o.stderr)
        );
        matches_after(reference.path(), commit).expect("git apply gives the commit's tree");
        let gnu = tree_before(commit);
        let o = Command::new("patch")
            .current_dir(gnu.path())
            .args(["-p1", "-s", "-f", "--no-backup-if-mismatch", "-i"])
            .arg(reference.path().join(".diff"))
            .output()
            .expect("patch");
        assert!(
            o.status.success(),
            "patch {}: {}",
            commit.id,
            String::from_utf8_lossy(&o.stdout)
        );
        matches_after(gnu.path(), commit).expect("GNU patch gives the commit's tree");

        let ours = tree_before(commit);
        let mut c = client(ours.path());
        for (path, _) in &commit.before {
            c.call_ok("file_read", json!({"path": path, "limit": 1}));
        }
        let r = c.call("edit_patch", json!({"patch": commit.diff}));
        assert!(!r.is_error, "{}: {}", commit.id, r.text);
        assert_eq!(r.structured["format"], "unified");
        matches_after(ours.path(), commit).expect("edit_patch gives the commit's tree");
        files += commit.after.len();
    }
    eprintln!(
        "{} commits, {files} files: same trees as git apply and GNU patch",
        commits.len()
    );
}

fn codex() -> PathBuf {
    let bin = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("codex/node_modules/.bin/codex");
    assert!(
        bin.exists(),
        "Codex is not installed in testkit/codex (run scripts/test, or npm ci there)"
    );
    bin
}

/// A `git diff` rewritten as an apply_patch envelope: its hunks as `@@` sections (no line
/// numbers: Codex finds them by context), files added, deleted and moved.
fn to_apply_patch(c: &Commit) -> Option<String> {
    let mut out = String::from("*** Begin Patch\n");
    let mut section: Option<(String, Option<String>)> = None;
    let mut started = false;
    let flush = |out: &mut String, s: &Option<(String, Option<String>)>, started: bool| {
        if let Some((path, to)) = s
            && !started
        {
            out.push_str(&format!("*** Update File: {path}\n"));
            if let Some(to) = to {
                out.push_str(&format!("*** Move to: {to}\n"));
            }
        }
    };
    let lines: Vec<&str> = c.diff.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with("diff --git ") {
            if section.is_some() && !started {
                // A section with no hunks: a pure rename.
                flush(&mut out, &section, false);
            }
            section = None;
            started = false;
            let mut j = i + 1;
            let (mut from, mut to, mut new, mut gone) = (None, None, false, false);
            while j < lines.len()
                && !lines[j].starts_with("diff --git ")
                && !lines[j].starts_with("@@")
            {
                let h = lines[j];
                if let Some(p) = h.strip_prefix("rename from ") {
                    from = Some(p.to_string());
                }
                if let Some(p) = h.strip_prefix("rename to ") {
                    to = Some(p.to_string());
                }
                if let Some(p) = h.strip_prefix("--- a/") {
                    from.get_or_insert(p.to_string());
                }
                if let Some(p) = h.strip_prefix("+++ b/") {
                    to.get_or_insert(p.to_string());
                }
                new |= h.starts_with("new file mode");
                gone |= h.starts_with("deleted file mode");
                j += 1;
            }
            if gone {
                out.push_str(&format!("*** Delete File: {}\n", from?));
                started = true;
            } else if new {
                out.push_str(&format!("*** Add File: {}\n", to?));
                started = true;
                while j < lines.len() && !lines[j].starts_with("diff --git ") {
                    if let Some(t) = lines[j].strip_prefix('+') {
                        out.push_str(&format!("+{t}\n"));
                    }
                    if lines[j].starts_with('\\') {
                        return None;
                    }
                    j += 1;
                }
            } else {
                let from = from?;
                let to = to.filter(|t| *t != from);
                section = Some((from, to));
            }
            i = j;
            continue;
        }
        if l.starts_with("@@") && section.is_some() {
            flush(&mut out, &section, started);
            started = true;
            out.push_str("@@\n");
        } else if l.starts_with('\\') {
            return None; // no final newline: Codex always ends a file with one
        } else if started
            && section.is_some()
            && matches!(l.as_bytes().first(), Some(b' ' | b'-' | b'+'))
        {
            out.push_str(l);
            out.push('\n');
        }
        i += 1;
    }
    if section.is_some() && !started {
        flush(&mut out, &section, false);
    }
    out.push_str("*** End Patch\n");
    Some(out)
}

/// The same history as apply_patch envelopes: Codex's own `apply_patch` and edit_patch leave
/// the same files.
#[test]
fn apply_patch_envelopes_apply_like_codex_itself() {
    let codex = codex();
    let (mut compared, mut refused) = (0, 0);
    for commit in history(40) {
        let Some(envelope) = to_apply_patch(&commit) else {
            continue;
        };
        // Codex takes the patch as one argument: at most 128 KiB (MAX_ARG_STRLEN).
        if envelope.len() > 120 * 1024 || commit.before.iter().any(|(_, b)| b.contains(&b'\r')) {
            continue;
        }
        let theirs = tree_before(&commit);
        let o = Command::new(&codex)
            .current_dir(theirs.path())
            .arg("--codex-run-as-apply-patch")
            .arg(&envelope)
            .output()
            .expect("codex");
        if !o.status.success() {
            // Codex refuses what it cannot place (e.g. a hunk whose context repeats earlier):
            // edit_patch must then not claim more than its own check allows; compare only
            // envelopes Codex applies.
            refused += 1;
            continue;
        }
        let ours = tree_before(&commit);
        let mut c = client(ours.path());
        for (path, _) in &commit.before {
            c.call_ok("file_read", json!({"path": path, "limit": 1}));
        }
        let r = c.call("edit_patch", json!({"patch": envelope}));
        assert!(!r.is_error, "{}: {}\n{envelope}", commit.id, r.text);
        assert_eq!(r.structured["format"], "apply_patch");
        for (path, _) in &commit.after {
            assert_eq!(
                std::fs::read(ours.path().join(path)).ok(),
                std::fs::read(theirs.path().join(path)).ok(),
                "{}: {path} differs from Codex's",
                commit.id
            );
        }
        compared += 1;
    }
    assert!(
        compared >= 15,
        "only {compared} envelopes compared with Codex"
    );
    eprintln!("{compared} apply_patch envelopes: same files as Codex ({refused} Codex refused)");
}

/// What GNU `diff -ruN old new` writes — paths one directory up, timestamps, files added and
/// removed marked by the epoch, a file without a final newline, a CRLF file — applied to the
/// old tree gives the new one, as `patch -p1` does.
#[test]
fn gnu_diff_of_two_trees_turns_the_old_one_into_the_new_one() {
    let d = tempfile::tempdir().expect("tmp");
    let (old, new) = (d.path().join("old"), d.path().join("new"));
    let files_old = [
        ("src/main.c", "int main() {\n    return 0;\n}\n"),
        (
            "README",
            "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\n",
        ),
        ("gone.txt", "bye\n"),
        ("no-eol.txt", "a\nb"),
        ("win.ini", "[a]\r\nx=1\r\n"),
    ];
    let files_new = [
        (
            "src/main.c",
            "#include <stdio.h>\nint main() {\n    puts(\"hi\");\n    return 0;\n}\n",
        ),
        (
            "README",
            "line 1\nline 2\nLINE 3\nline 4\nline 5\nline 6\nline 7\nline eight\n",
        ),
        ("docs/new.md", "# New\n"),
        ("no-eol.txt", "a\nB"),
        ("win.ini", "[a]\r\nx=2\r\n"),
    ];
    for (tree, files) in [(&old, &files_old[..]), (&new, &files_new[..])] {
        for (p, c) in files {
            write(tree, p, c);
        }
    }
    let o = Command::new("diff")
        .current_dir(d.path())
        .args(["-ruN", "old", "new"])
        .output()
        .expect("diff");
    assert_eq!(o.status.code(), Some(1), "diff finds differences");
    let diff = String::from_utf8(o.stdout).expect("utf8");
    // The tree to patch: the old files, at the root.
    let root = tempfile::tempdir().expect("tmp");
    for (p, c) in files_old {
        write(root.path(), p, c);
    }
    let mut c = client(root.path());
    read_all(
        &mut c,
        &["src/main.c", "README", "gone.txt", "no-eol.txt", "win.ini"],
    );
    let r = c.call_ok("edit_patch", json!({"patch": diff}));
    assert_eq!(r.structured["format"], "unified");
    let mut want: Vec<String> = files_new
        .iter()
        .map(|(p, c)| format!("{p} {}", c.len()))
        .collect();
    want.sort();
    assert_eq!(walk(root.path()), want, "{}", r.structured);
    for (p, c) in files_new {
        assert_eq!(read(root.path(), p), c, "{p}");
    }
    // GNU patch agrees on the same input.
    let gnu = tempfile::tempdir().expect("tmp");
    for (p, c) in files_old {
        write(gnu.path(), p, c);
    }
    let o = Command::new("patch")
        .current_dir(gnu.path())
        .args(["-p1", "-s", "-E", "--no-backup-if-mismatch"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut ch| {
            use std::io::Write;
            ch.stdin.take().expect("stdin").write_all(diff.as_bytes())?;
            ch.wait_with_output()
        })
        .expect("patch");
    assert!(o.status.success());
    assert_eq!(walk(gnu.path()), want);
}
