//! A round-robin TCP relay: what a Kubernetes Service without session affinity does in front
//! of replicas — each new connection goes to the next backend.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Accepts connections and hands each to the next backend in turn, skipping one that refuses
/// the connection (a dead replica drops out; its open connections break).
pub struct Relay {
    pub address: String,
    stop: Arc<AtomicBool>,
}

impl Relay {
    pub fn start(backends: Vec<String>) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let next = AtomicUsize::new(0);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let start = next.fetch_add(1, Ordering::SeqCst);
                let upstream = (0..backends.len())
                    .map(|i| &backends[(start + i) % backends.len()])
                    .find_map(|b| TcpStream::connect(b).ok());
                let Some(upstream) = upstream else { continue };
                pipe(client, upstream);
            }
        });
        Relay { address, stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.address);
    }
}

/// Copy bytes both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    for (mut from, mut to) in [
        (a.try_clone().expect("clone"), b.try_clone().expect("clone")),
        (b, a),
    ] {
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }
}
