//! A browser's DevTools over its own pipe. Started with `--remote-debugging-pipe`, Chromium
//! reads commands on descriptor 3 and writes answers and events on descriptor 4, each message
//! ending in a NUL byte. No port is opened, so no other local process can drive the browser
//! (a debugging port on loopback would hand any of them the browser, its files and its
//! network).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::OFlag;
use tokio::sync::mpsc;

use crate::connection::{Connection, Event};

/// A started browser and its DevTools connection.
pub struct Piped {
    pub child: tokio::process::Child,
    pub connection: Arc<Connection>,
    /// Events of no subscribed session (the browser's own, targets being made and lost).
    pub events: mpsc::UnboundedReceiver<Event>,
}

/// Start `cmd` (the caller adds `--remote-debugging-pipe` and sets the process group) with
/// the pipe on descriptors 3 and 4. Commands wait `timeout` for their answers.
pub fn spawn(mut cmd: tokio::process::Command, timeout: Duration) -> std::io::Result<Piped> {
    let (commands_read, commands_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (events_read, events_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (input, output) = (commands_read.as_raw_fd(), events_write.as_raw_fd());
    // One of the five places kitbag uses `unsafe` (see kitbag_shared::process::die_with_parent
    // for the others): `pre_exec` runs between fork and exec, where only async-signal-safe
    // calls are allowed; fcntl and dup2 are, and nothing is allocated or locked.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || place(input, output));
    }
    let child = cmd.spawn()?;
    // The child holds its ends now; ours would keep the pipe open after it exits.
    drop(commands_read);
    drop(events_write);
    let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
    let (connection, inbound, events) = Connection::new(out_tx, timeout);
    std::thread::Builder::new()
        .name("cdp-pipe-write".into())
        .spawn(move || write_loop(commands_write, out_rx))?;
    std::thread::Builder::new()
        .name("cdp-pipe-read".into())
        .spawn(move || {
            let mut reader = BufReader::new(std::fs::File::from(events_read));
            let mut message = Vec::new();
            loop {
                message.clear();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if message.last() == Some(&0) {
                            message.pop();
                        }
                        inbound.handle(&String::from_utf8_lossy(&message));
                    }
                }
            }
            // `inbound` dropped here: waiting commands fail as Closed.
        })?;
    Ok(Piped {
        child,
        connection,
        events,
    })
}

/// In the child: the command pipe's read end on 3, the event pipe's write end on 4. Both are
/// first lifted above 10, since either may already be 3 or 4 (dup2 onto itself would keep
/// its close-on-exec flag).
fn place(input: RawFd, output: RawFd) -> std::io::Result<()> {
    #[allow(unsafe_code)]
    let ok = unsafe {
        let high_in = libc::fcntl(input, libc::F_DUPFD_CLOEXEC, 10);
        let high_out = libc::fcntl(output, libc::F_DUPFD_CLOEXEC, 10);
        high_in >= 0 && high_out >= 0 && libc::dup2(high_in, 3) == 3 && libc::dup2(high_out, 4) == 4
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write_loop(fd: OwnedFd, mut out: mpsc::UnboundedReceiver<String>) {
    let mut pipe = std::fs::File::from(fd);
    while let Some(message) = out.blocking_recv() {
        let mut bytes = message.into_bytes();
        bytes.push(0);
        if pipe.write_all(&bytes).is_err() {
            break;
        }
    }
    // Every sender is gone (or the browser is): closing descriptor 3 tells the browser.
}
