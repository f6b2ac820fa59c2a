//! What the change watcher needs of the store: its own connection, and on PostgreSQL a
//! LISTEN connection that hears other replicas' commits at once.

use std::path::Path;
use std::time::Duration;

use kitbag_shared::state::sql::{Conn, Store};
use postgres::fallible_iterator::FallibleIterator;

use super::NOTIFY_CHANNEL;

/// A second connection to the store `conn` is on (`path`: the SQLite file).
pub fn reopen(conn: &Store, path: Option<&Path>) -> anyhow::Result<Store> {
    let name = path
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.is_empty() && matches!(conn.conn(), Conn::Sqlite(_)) {
        anyhow::bail!("the database path has no file name");
    }
    conn.reopen(&name).map_err(|e| anyhow::anyhow!(e.message))
}

/// On PostgreSQL, call `changed` on every change any server commits (and once after each
/// (re)connection, for what was missed meanwhile), from a thread of its own, until `changed`
/// answers false. On SQLite, nothing: the watcher's poll finds other processes' changes.
pub fn listen(conn: &Store, mut changed: impl FnMut() -> bool + Send + 'static) {
    let Conn::Postgres(p) = conn.conn() else {
        return;
    };
    let mut client = match p.conn.reopen() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(
                "issues: no LISTEN connection ({e}); other replicas' changes are found by polling"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("issues-listen".into())
        .spawn(move || {
            loop {
                let listening = client
                    .client()
                    .and_then(|c| c.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}")));
                if let Err(e) = listening {
                    client.failed(&e);
                    tracing::debug!("issues: LISTEN: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                if !changed() {
                    return;
                }
                let Ok(c) = client.client() else { continue };
                let mut notes = c.notifications();
                let mut each = notes.blocking_iter();
                loop {
                    match each.next() {
                        Ok(Some(_)) => {
                            if !changed() {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!("issues: LISTEN connection lost: {e}");
                            break;
                        }
                    }
                }
                // The iterator ended: the connection closed; the next pass reconnects.
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("issues: no LISTEN thread ({e})");
    }
}
