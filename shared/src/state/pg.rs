//! State on a shared PostgreSQL (`--database-url` / `KITBAG_DATABASE_URL`): the connection
//! every family's store keeps, and the versioned migrations they share one table for.
//!
//! Memory, issues and cron may live in one database: each family keeps its schema version in
//! its own row of `kitbag_migrations`, and every migration runs under one advisory lock, so
//! servers starting together on a new database create each schema exactly once.

use postgres::{Client, NoTls};

use super::pg_tls::{self, Rustls, TlsSetupError};
use crate::audit::redact_url;

/// How to reach one database: its URL as the client takes it, and TLS (see `pg_tls`).
#[derive(Clone)]
pub struct Connector {
    url: String,
    tls: Option<Rustls>,
}

impl Connector {
    /// Read `url` (kitbag's own parameters taken out) and load the TLS roots. Without any
    /// roots, `sslmode=require` is refused here and other modes connect without TLS.
    pub fn new(url: &str) -> Result<Connector, TlsSetupError> {
        let (url, root) = pg_tls::split_url(url);
        let tls = match pg_tls::connector(root.as_deref()) {
            Ok(t) => Some(t),
            Err(e) if root.is_some() || url.contains("sslmode=require") => return Err(e),
            Err(_) => None,
        };
        Ok(Connector { url, tls })
    }

    /// A new connection.
    pub fn connect(&self) -> Result<Client, postgres::Error> {
        match &self.tls {
            Some(tls) => Client::connect(&self.url, tls.clone()),
            None => Client::connect(&self.url, NoTls),
        }
    }
}

/// The advisory lock every migration takes (fixed: shared by every process and family).
const MIGRATE_LOCK: i64 = 0x6b69_7462_6167_0001;

/// The URL a `--database-url` flag gives, `None` when unset or blank (a blank value in an
/// environment file means "no database" rather than an error).
pub fn url_given(flag: Option<&str>) -> Option<&str> {
    flag.filter(|u| !u.trim().is_empty())
}

/// A connection that reconnects after it broke (a database restart, a failover): a lost
/// connection costs at most the one call that found it lost, not a dead server.
pub struct PgConn {
    /// Always `Some` but while being dropped (see `Drop`).
    client: Option<Client>,
    url: String,
    connector: Connector,
    broken: bool,
    generation: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("{what} database {url}: {source}")]
    Connect {
        what: &'static str,
        url: String,
        source: postgres::Error,
    },
    #[error("{what} database {url}: {source}")]
    Tls {
        what: &'static str,
        url: String,
        source: TlsSetupError,
    },
    #[error("migrating the {family} schema: {source}")]
    Migrate {
        family: &'static str,
        #[source]
        source: MigrateError,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "schema version {found} is newer than this kitbag-{family} understands ({known}); use a newer kitbag"
    )]
    Newer {
        family: &'static str,
        found: i32,
        known: i32,
    },
    #[error("{0}")]
    Db(#[from] postgres::Error),
}

impl PgConn {
    /// Connect to `url` (`what` names the store in errors; the URL's password is redacted)
    /// and bring `family`'s schema up to date: `steps[i]` takes version `i` to `i + 1`.
    pub fn open(
        url: &str,
        what: &'static str,
        family: &'static str,
        steps: &[&str],
    ) -> Result<PgConn, PgError> {
        let connector = Connector::new(url).map_err(|source| PgError::Tls {
            what,
            url: redact_url(url),
            source,
        })?;
        let mut client = connector.connect().map_err(|source| PgError::Connect {
            what,
            url: redact_url(url),
            source,
        })?;
        migrate(&mut client, family, steps)
            .map_err(|source| PgError::Migrate { family, source })?;
        Ok(PgConn {
            client: Some(client),
            url: url.to_owned(),
            connector,
            broken: false,
            generation: 0,
        })
    }

    /// Another connection to the same database (a watcher), the schema already current.
    pub fn reopen(&self) -> Result<PgConn, postgres::Error> {
        Ok(PgConn {
            client: Some(self.connector.connect()?),
            url: self.url.clone(),
            connector: self.connector.clone(),
            broken: false,
            generation: 0,
        })
    }

    /// A plain client on the same database (a LISTEN connection).
    pub fn another(&self) -> Result<Client, postgres::Error> {
        self.connector.connect()
    }

    /// The client, reconnected first when the last call lost the connection.
    pub fn client(&mut self) -> Result<&mut Client, postgres::Error> {
        if self.broken || self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.broken = false;
            self.generation += 1;
        }
        let client = match self.client.take() {
            Some(c) => c,
            None => self.connector.connect()?,
        };
        Ok(self.client.insert(client))
    }

    /// How many times the connection was reopened: statements prepared on an earlier one
    /// are gone.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Note a failed call: an error the server did not answer with (I/O, a closed
    /// connection) means the connection is not to be trusted again.
    pub fn failed(&mut self, e: &postgres::Error) {
        if connection_lost(e) {
            self.broken = true;
        }
    }

    /// The URL with its password hidden, for messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }
}

/// Whether `e` means the connection is gone (I/O, a closed connection, or the server ending
/// the session: an administrator's `pg_terminate_backend`, a shutdown, a failover), rather
/// than a statement the server refused.
pub fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => e.as_db_error().is_none(),
        // Class 08: connection exception; 57P01–57P03: admin or crash shutdown, cannot
        // connect now.
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
    }
}

impl Drop for PgConn {
    /// Closing a client blocks on its own small runtime, which cannot run inside another:
    /// dropped on an async runtime's thread (a server's state at shutdown), it is closed on
    /// a thread of its own.
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            std::thread::scope(|s| {
                s.spawn(move || drop(client));
            });
        }
    }
}

/// Versioned migrations, one process at a time (the others wait on the lock, then find the
/// version current).
pub fn migrate(
    client: &mut Client,
    family: &'static str,
    steps: &[&str],
) -> Result<(), MigrateError> {
    let known = steps.len() as i32;
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS kitbag_migrations (family TEXT PRIMARY KEY, version INTEGER NOT NULL)",
    )?;
    let found: i32 = tx
        .query_opt(
            "SELECT version FROM kitbag_migrations WHERE family = $1",
            &[&family],
        )?
        .map_or(0, |r| r.get(0));
    if found > known {
        return Err(MigrateError::Newer {
            family,
            found,
            known,
        });
    }
    for step in &steps[found as usize..] {
        tx.batch_execute(step)?;
    }
    tx.execute(
        "INSERT INTO kitbag_migrations (family, version) VALUES ($1, $2)
         ON CONFLICT (family) DO UPDATE SET version = EXCLUDED.version",
        &[&family, &known],
    )?;
    tx.commit()?;
    Ok(())
}
