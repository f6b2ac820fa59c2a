//! A private PostgreSQL for one test: Debian's server binaries, a fresh cluster in a temporary
//! directory, reached only through a Unix socket in that directory (no TCP), stopped when the
//! value drops. Run as the `postgres` user when the tests run as root (the server refuses
//! root).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `postgresql://kitbag@%2Ftmp%2F…/postgres`: user `kitbag`, the socket directory as host.
    pub url: String,
    tcp_port: Option<u16>,
}

/// The testkit's CA and `localhost` certificate, the key readable by the server's user only;
/// `pg_hba.conf`: the socket trusted, TCP only with TLS.
fn tls_material(dir: &Path, data: &Path, who: Option<(u32, u32)>) {
    crate::test_certificates(dir);
    for (name, mode) in [("server.crt", 0o644), ("server.key", 0o600)] {
        let to = data.join(name);
        std::fs::copy(dir.join(name), &to).expect("copy into the data directory");
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if let Some((uid, gid)) = who {
            std::os::unix::fs::chown(&to, Some(uid), Some(gid)).expect("chown");
        }
    }
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
    )
    .expect("pg_hba.conf");
}

/// Where Debian keeps the server binaries (`/usr/lib/postgresql/<major>/bin`), newest first.
fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("postgres").is_file())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

/// The uid and gid of the `postgres` account, when running as root.
fn run_as() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    if std::fs::metadata("/proc/self").ok()?.uid() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"postgres") && f.len() > 3)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    })
}

fn command(bin: &Path, who: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(bin);
    if let Some((uid, gid)) = who {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// Percent-encode a socket directory for the host part of a URL.
fn encode(path: &Path) -> String {
    path.to_string_lossy()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl PgServer {
    /// A new cluster, started. `None` (with a SKIP line) when PostgreSQL is not installed here;
    /// under `CI=true` its absence fails the calling test (scripts/test installs it).
    pub fn start() -> Option<PgServer> {
        Self::launch(None)
    }

    /// A cluster that also listens on loopback TCP at `port`, TLS only there (`hostssl`;
    /// plain TCP is rejected), with a certificate for `localhost` signed by a CA of its own;
    /// [`PgServer::tls_ca`] is that CA's PEM file, [`PgServer::tls_url`] a URL to use it.
    pub fn start_tls() -> Option<PgServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Self::launch(Some(port))
    }

    /// The CA file of a [`PgServer::start_tls`] cluster.
    pub fn tls_ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// `postgresql://kitbag@localhost:PORT/DATABASE` with `params` (a TLS cluster only).
    pub fn tls_url(&self, database: &str, params: &str) -> String {
        let port = self.tcp_port.expect("a cluster started with start_tls");
        format!("postgresql://kitbag@localhost:{port}/{database}?{params}")
    }

    fn launch(tcp_port: Option<u16>) -> Option<PgServer> {
        let Some(bin) = bin_dir() else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "PostgreSQL is required under CI=true (scripts/test installs postgresql)"
            );
            eprintln!("SKIP: no PostgreSQL server under /usr/lib/postgresql");
            return None;
        };
        let who = run_as();
        let dir = tempfile::Builder::new()
            .prefix("kb-pg")
            .tempdir()
            .expect("tempdir");
        let data = dir.path().join("data");
        if let Some((uid, gid)) = who {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("chown the cluster directory");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let out = command(&bin.join("initdb"), who)
            .args(["-D"])
            .arg(&data)
            .args([
                "-A",
                "trust",
                "-U",
                "kitbag",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut listen = vec!["-c".to_string(), "listen_addresses=".to_string()];
        if let Some(port) = tcp_port {
            tls_material(dir.path(), &data, who);
            listen = [
                "-c",
                "listen_addresses=127.0.0.1",
                "-p",
                &port.to_string(),
                "-c",
                "ssl=on",
            ]
            .map(String::from)
            .to_vec();
        }
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
        if let Some((uid, gid)) = who {
            let _ = std::os::unix::fs::chown(dir.path().join("server.log"), Some(uid), Some(gid));
        }
        let child = command(&bin.join("postgres"), who)
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            // No TCP (unless asked for TLS); durability is not what a test needs.
            .args(&listen)
            .args(["-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start postgres");
        // With TCP the socket's name carries the port too (`.s.PGSQL.PORT`).
        let port = tcp_port.map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!("postgresql://kitbag@{}{port}/postgres", encode(dir.path()));
        let server = PgServer {
            dir,
            child: Some(child),
            url,
            tcp_port,
        };
        server.wait_ready();
        Some(server)
    }

    /// The server listens once its socket file exists and a client gets an answer.
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let socket = self
            .dir
            .path()
            .join(format!(".s.PGSQL.{}", self.tcp_port.unwrap_or(5432)));
        while Instant::now() < deadline {
            if socket.exists() && self.psql("SELECT 1").is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        panic!("postgres did not start: {}", self.log());
    }

    /// Run one SQL command with `psql` (the client binary beside the server's) in the
    /// `postgres` database.
    pub fn psql(&self, sql: &str) -> Result<String, String> {
        self.psql_in("postgres", sql)
    }

    /// Run one SQL command in `database`; its output unaligned, without headers.
    pub fn psql_in(&self, database: &str, sql: &str) -> Result<String, String> {
        let bin = bin_dir().ok_or("no PostgreSQL binaries")?;
        let url = self.url_of(database);
        let out = Command::new(bin.join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &url,
                "-c",
                sql,
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// A `psql` session on `url` held open between commands — to keep a transaction open
    /// while something else runs.
    pub fn session(&self, url: &str) -> PsqlSession {
        let bin = bin_dir().expect("no PostgreSQL binaries");
        let mut child = Command::new(bin.join("psql"))
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start psql");
        let stdin = child.stdin.take().expect("psql stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("psql stdout"));
        PsqlSession {
            child,
            stdin,
            stdout,
        }
    }

    /// A new empty database in this cluster, and its URL.
    pub fn database(&self, name: &str) -> String {
        self.psql(&format!("CREATE DATABASE \"{name}\""))
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        self.url_of(name)
    }

    /// The URL of `database` in this cluster (`url` names `postgres`).
    pub fn url_of(&self, database: &str) -> String {
        format!("{}{database}", self.url.trim_end_matches("postgres"))
    }

    /// The postmaster's pid (its children share its process group).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGQUIT: immediate shutdown, the postmaster ends its children first.
        use nix::sys::signal::{Signal, kill, killpg};
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGQUIT);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = child.wait();
    }
}

/// One `psql` process taking commands one at a time ([`PgServer::session`]); killed on drop.
pub struct PsqlSession {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl PsqlSession {
    /// Run `sql` (its last `;` may be left out) and return its output once it has run
    /// (panics if psql stops on an error).
    pub fn run(&mut self, sql: &str) -> String {
        use std::io::{BufRead, Write};
        const DONE: &str = "--psql-session-done--";
        let sql = sql.trim_end().trim_end_matches(';');
        writeln!(self.stdin, "{sql};\n\\echo {DONE}").expect("write to psql");
        self.stdin.flush().expect("flush psql");
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read psql");
            assert!(
                n > 0,
                "psql ended while running {sql:?}; output so far: {out}"
            );
            if line.trim_end() == DONE {
                return out.trim().to_string();
            }
            out.push_str(&line);
        }
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
