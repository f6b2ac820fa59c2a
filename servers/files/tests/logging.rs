//! stderr is the client's log of this server: a JSON-RPC error answer (an unknown tool, bad
//! arguments) is the client's mistake and already answered — no warning line per call.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

#[test]
fn error_answers_do_not_log_warnings() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kitbag-files"))
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}"#,
    ];
    for l in lines {
        writeln!(stdin, "{l}").expect("write");
    }
    stdin.flush().expect("flush");
    let mut answered = 0;
    let mut line = String::new();
    while answered < 3 {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "server closed stdout"
        );
        if line.contains("\"id\":") {
            answered += 1;
        }
    }
    assert!(line.contains("error"), "{line}");
    drop(stdin);
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    let _ = child.wait();
    assert!(
        !err.contains("response error"),
        "a warning per error answer on stderr:\n{err}"
    );
}
