//! `--config` adapter overrides against the real debugpy adapter.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, have_debugpy};

fn python3_abs() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .unwrap();
    let p = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(p.starts_with('/'), "{p}");
    p
}

const PROG: &str = "a = 1\nb = a + 1\nprint(b)\n";

#[test]
fn bad_config_stops_start_up_naming_the_field() {
    let d = tempfile::tempdir().unwrap();
    for (body, needle) in [
        ("[dap.adapters.python]\ncomand = [\"x\"]\n", "comand"),
        (
            "[dap.adapters.python]\ncommand = []\n",
            "dap.adapters.python.command",
        ),
        ("[dap.adapterz.python]\ncommand = [\"x\"]\n", "adapterz"),
    ] {
        std::fs::write(d.path().join("bad.toml"), body).unwrap();
        let out = std::process::Command::new(bin())
            .args(["--config", "bad.toml"])
            .current_dir(d.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body}: {err}");
        assert!(err.contains(needle), "{body}: {err}");
        assert!(err.contains("bad.toml"), "{err}");
    }
    let out = std::process::Command::new(bin())
        .args(["--config", "missing.toml"])
        .current_dir(d.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

#[test]
fn configured_command_that_does_not_exist_is_adapter_not_found() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), PROG).unwrap();
    std::fs::write(
        d.path().join("dap.toml"),
        "[dap.adapters.python]\ncommand = [\"/nonexistent/kitbag-debugpy\", \"--stdio\"]\n\
         [dap.adapters.ruby]\ncommand = [\"kitbag-no-such-rdbg\"]\n",
    )
    .unwrap();
    let mut c = McpClient::spawn(bin(), &["--config", "dap.toml"], d.path(), Era::Modern);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "python", "program": "app.py"}),
    );
    assert_eq!(r.error_code(), Some("dap_adapter_not_found"), "{:?}", r.raw);
    assert!(r.text.contains("/nonexistent/kitbag-debugpy"), "{}", r.text);
    assert_eq!(
        r.structured["error"]["detail"]["command"],
        "/nonexistent/kitbag-debugpy"
    );
    // An added runtime is accepted as a runtime name, and its missing command is named too.
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "ruby", "program": "app.py"}),
    );
    assert_eq!(r.error_code(), Some("dap_adapter_not_found"), "{:?}", r.raw);
    assert!(r.text.contains("kitbag-no-such-rdbg"), "{}", r.text);
    // Unknown runtimes list the configured ones.
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "cobol", "program": "app.py"}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "runtime");
    assert!(r.text.contains("ruby"), "{}", r.text);
    // No session was left behind by the failures.
    let r = c.call("debug", json!({"action": "status"}));
    assert_eq!(r.structured["status"], "no_session", "{:?}", r.raw);
    c.shutdown();
}

#[test]
fn configured_adapters_are_the_ones_launched() {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), PROG).unwrap();
    // A wrapper that leaves a mark, so the test sees the override (not the built-in) ran.
    let wrapper = d.path().join("my-debugpy.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho used >> \"{}\"\nexec {} -m debugpy.adapter \"$@\"\n",
            d.path().join("marker").display(),
            python3_abs()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        d.path().join("dap.toml"),
        format!(
            "[dap.adapters.python]\ncommand = [\"{}\"]\n\n\
             [dap.adapters.py3]\ncommand = [\"{}\", \"-m\", \"debugpy.adapter\"]\nadapter_id = \"debugpy\"\n\
             [dap.adapters.py3.launch]\nconsole = \"internalConsole\"\njustMyCode = true\n",
            wrapper.display(),
            python3_abs()
        ),
    )
    .unwrap();
    let mut c = McpClient::spawn(bin(), &["--config", "dap.toml"], d.path(), Era::Modern);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 2}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    for runtime in ["python", "py3"] {
        let r = c.call(
            "debug",
            json!({"action": "launch", "runtime": runtime, "program": "app.py", "stop_on_entry": false}),
        );
        assert_eq!(r.structured["status"], "stopped", "{runtime}: {:?}", r.raw);
        assert_eq!(
            r.structured["location"]["line"], 2,
            "{runtime}: {:?}",
            r.raw
        );
        let r = c.call(
            "debug",
            json!({"action": "evaluate", "expression": "a + 40"}),
        );
        assert_eq!(r.structured["result"], "41", "{:?}", r.raw);
        let r = c.call("debug", json!({"action": "continue"}));
        assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
        let r = c.call("debug", json!({"action": "disconnect"}));
        assert!(!r.is_error, "{:?}", r.raw);
    }
    // The python override ran exactly once; py3 ran python3 directly.
    let marks = std::fs::read_to_string(d.path().join("marker")).unwrap();
    assert_eq!(marks.lines().count(), 1, "{marks}");
    c.shutdown();
}

#[test]
fn builtin_python_without_debugpy_is_adapter_not_found_at_once() {
    // A python3 first on PATH that cannot import debugpy (-S: no site-packages). kitbag no
    // longer probes python3 before each launch; the adapter's early exit must still answer
    // dap_adapter_not_found with the install command, promptly (not after a request timeout).
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), PROG).unwrap();
    let fake = d.path().join("fakebin");
    std::fs::create_dir(&fake).unwrap();
    let shim = fake.join("python3");
    std::fs::write(
        &shim,
        format!("#!/bin/sh\nexec {} -S \"$@\"\n", python3_abs()),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let no_debugpy = std::process::Command::new(&shim)
        .args(["-c", "import debugpy"])
        .status()
        .unwrap();
    if no_debugpy.success() {
        eprintln!("SKIP: debugpy importable without site-packages");
        return;
    }
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = McpClient::spawn_with_env(bin(), &[], d.path(), Era::Modern, &[("PATH", &path)]);
    let t = std::time::Instant::now();
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "python", "program": "app.py"}),
    );
    assert_eq!(r.error_code(), Some("dap_adapter_not_found"), "{:?}", r.raw);
    assert!(r.text.contains("pip install debugpy"), "{}", r.text);
    // It names the interpreter it checked (a venv's python3 may lack what the system's has).
    let shim_s = shim.to_str().unwrap();
    assert!(r.text.contains(shim_s), "{}", r.text);
    assert_eq!(r.structured["error"]["detail"]["interpreter"], shim_s);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    let r = c.call("debug", json!({"action": "status"}));
    assert_eq!(r.structured["status"], "no_session", "{:?}", r.raw);
    c.shutdown();
}
