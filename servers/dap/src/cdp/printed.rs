//! Where a Bun inspector listening on a port can be reached. Bun serves only the random path it
//! printed under "Listening:" (`ws://HOST:PORT/ID`) and has no `/json/list`, so an attach by
//! port alone (seed 004's example) finds that path where the program's output went: the
//! process listening on the port is found through `/proc/net/tcp{,6}` and its sockets, and its
//! standard output and error, when they are files (a log), are read for the address. Output
//! to a terminal or a pipe cannot be read back: then the caller passes `url`.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How much of the end of each output file is read.
const TAIL_BYTES: u64 = 256 * 1024;

/// The `ws://…:PORT/…` address the process listening on `port` printed last, if its output
/// went to a file this user can read.
pub fn printed_address(port: u16) -> Option<String> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return None;
    }
    let pid = owner_of(&inodes)?;
    ["1", "2"].iter().find_map(|fd| {
        let link = Path::new("/proc").join(&pid).join("fd").join(fd);
        let file = std::fs::File::open(&link).ok()?;
        file.metadata().ok()?.is_file().then_some(())?;
        last_address(&tail(file)?, port)
    })
}

/// The socket inodes listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let listening = *state == "0A";
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port && *inode != "0" {
                out.push((*inode).to_string());
            }
        }
    }
    out
}

/// The process (of those this user may look into) holding one of the sockets.
fn owner_of(inodes: &[String]) -> Option<String> {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .any(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
                .then_some(pid)
        })
}

fn tail(mut file: std::fs::File) -> Option<String> {
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
        .ok()?;
    let mut buf = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The last `ws://HOST:PORT/PATH` in `text` on `port`.
fn last_address(text: &str, port: u16) -> Option<String> {
    let suffix = format!(":{port}/");
    text.split_whitespace()
        .rev()
        .find(|w| w.starts_with("ws://") && w.contains(&suffix))
        .map(String::from)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_address_on_the_port_is_taken() {
        let banner = "--------------------- Bun Inspector ---------------------\nListening:\n  ws://localhost:9229/aaa\nInspect in browser:\n  https://debug.bun.sh/#localhost:9229/aaa\nListening:\n  ws://localhost:9229/bbb\n  ws://localhost:9230/ccc\n";
        assert_eq!(
            last_address(banner, 9229).as_deref(),
            Some("ws://localhost:9229/bbb")
        );
        assert_eq!(last_address(banner, 9231), None);
    }

    #[test]
    fn a_listener_s_own_log_gives_its_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // This test process listens: its own stdout is whatever the harness made it, so only
        // the socket lookup is checked here; the file read is covered by the Bun attach test.
        assert!(!listening_inodes(port).is_empty());
        assert_eq!(
            owner_of(&listening_inodes(port)).as_deref(),
            Some(std::process::id().to_string().as_str())
        );
        drop(listener);
    }
}
