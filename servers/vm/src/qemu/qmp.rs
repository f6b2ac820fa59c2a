//! A QMP (QEMU Machine Protocol) client over the socket pair QEMU was started with: no
//! socket path on disk, so nothing else on the host can reach the VM's monitor.
//!
//! Blocking, with a short timeout: `stop`/`cont` answer in milliseconds, and pause/resume
//! are called where the instance table is locked (as the sandbox's freezer writes are).

use kitbag_shared::lock::LockExt;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

pub struct Qmp {
    conn: Mutex<BufReader<UnixStream>>,
}

impl Qmp {
    /// Read QEMU's greeting and leave capabilities negotiation (`timeout` for the greeting:
    /// QEMU writes it once it has set the machine up).
    pub fn open(stream: UnixStream, timeout: Duration) -> std::io::Result<Qmp> {
        stream.set_read_timeout(Some(timeout))?;
        let mut conn = BufReader::new(stream);
        let greeting = read_message(&mut conn)?;
        if greeting.get("QMP").is_none() {
            return Err(std::io::Error::other(format!(
                "not a QMP greeting: {greeting}"
            )));
        }
        conn.get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))?;
        let qmp = Qmp {
            conn: Mutex::new(conn),
        };
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// Run one command and return its `return` value (events in between are skipped).
    pub fn execute(&self, command: &str, arguments: Option<Value>) -> std::io::Result<Value> {
        let mut conn = self.conn.locked();
        let mut msg = json!({ "execute": command });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        let mut line = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        conn.get_mut().write_all(&line)?;
        loop {
            let reply = read_message(&mut conn)?;
            if let Some(r) = reply.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = reply.get("error") {
                return Err(std::io::Error::other(format!(
                    "QMP {command}: {}",
                    e.get("desc").and_then(Value::as_str).unwrap_or("error")
                )));
            }
        }
    }
}

fn read_message(conn: &mut BufReader<UnixStream>) -> std::io::Result<Value> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "QEMU closed its monitor",
        ));
    }
    serde_json::from_str(&line).map_err(std::io::Error::other)
}
