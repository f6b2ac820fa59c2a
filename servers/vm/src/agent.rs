//! The agent inside every instance: `kitbag-vm __agent --ctl /run/kitbag`.
//!
//! It is the sandbox's first process (bubblewrap's init reaps orphans as PID 1). It runs the
//! main command, if the instance has one, and serves one operation per connection on
//! `/run/kitbag/agent.sock` (see [`crate::proto`]): exec, connect to a guest port, copies,
//! restart of the main command, shutdown. It lives in the instance's namespaces, so it can
//! dial the instance's loopback — which the server, outside, cannot do without root.

use kitbag_shared::lock::LockExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::process::Command;
use tokio::sync::{Mutex, mpsc, watch};

use crate::proto::{
    self, AGENT_SOCKET, Answer, ExecRequest, ExitStatus, Frame, Hello, LOGS_DIR, MAIN_SPEC,
    MainSpec, ReadHalf, Request, Stream, WriteHalf,
};

struct Agent {
    ctl: PathBuf,
    /// The main command's process group, while it runs.
    main_pgid: Mutex<Option<i32>>,
    /// Bumped by each restart, so the old main's end does not end the instance.
    generation: std::sync::atomic::AtomicU64,
    /// Inside a VM (`--listen`): the agent outlives the main command (the server collects
    /// its logs, then shuts the VM down) and takes its environment from `setup`.
    vm: bool,
    /// The environment every command starts with, when `setup` gave one.
    env: std::sync::Mutex<Option<Vec<(String, String)>>>,
    /// How the main command ended, for `wait_main`.
    main_exit: watch::Sender<Option<ExitStatus>>,
}

impl Agent {
    /// `setup`'s environment in place of the agent's own (a VM's init has next to none).
    fn apply_env(&self, cmd: &mut Command) {
        if let Some(env) = self.env.locked().as_ref() {
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
    }
}

/// Where the agent serves.
enum Listen {
    /// `<ctl>/agent.sock` (bubblewrap).
    Unix,
    /// A TCP address inside a VM, and the token every connection must present first.
    Tcp(std::net::SocketAddr, String),
}

/// Entry point: `args` are the words after `__agent`.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let mut ctl = PathBuf::from(proto::CTL_DIR);
    let mut listen_addr = None;
    let mut token = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{a} needs {what}"))
        };
        match a.as_str() {
            "--ctl" => ctl = PathBuf::from(value("a directory")?),
            "--listen" => listen_addr = Some(value("an address")?.parse()?),
            "--token" => token = Some(value("a token")?),
            other => anyhow::bail!("kitbag-vm __agent: unknown argument {other}"),
        }
    }
    let listen = match (listen_addr, token) {
        (None, None) => Listen::Unix,
        (Some(addr), Some(token)) if token.len() >= 16 => Listen::Tcp(addr, token),
        _ => anyhow::bail!("kitbag-vm __agent: --listen needs --token (16 characters or more)"),
    };
    // Before the runtime, where they cannot hold up a task: through tokio::fs each would start
    // a blocking thread first, while the server waits for the socket.
    std::fs::create_dir_all(ctl.join(LOGS_DIR))?;
    if matches!(listen, Listen::Unix) {
        let _ = std::fs::remove_file(ctl.join(AGENT_SOCKET));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(ctl, listen))
}

async fn run(ctl: PathBuf, listen: Listen) -> anyhow::Result<()> {
    // Non-dumpable: no other process of the instance (same user, no capabilities) may ptrace
    // the agent, read its memory or take its listening socket (`pidfd_getfd`), so the server
    // can trust the socket's listener to be the agent (crate::agent_link). The commands it
    // starts are dumpable again after their exec.
    nix::sys::prctl::set_dumpable(false)?;

    let agent = Arc::new(Agent {
        ctl: ctl.clone(),
        main_pgid: Mutex::new(None),
        generation: std::sync::atomic::AtomicU64::new(0),
        vm: matches!(listen, Listen::Tcp(..)),
        env: std::sync::Mutex::new(None),
        main_exit: watch::channel(None).0,
    });
    let serve_one = |agent: Arc<Agent>, stream: Stream| {
        tokio::spawn(async move {
            if let Err(e) = serve(agent, stream).await {
                eprintln!("kitbag-vm agent: {e}");
            }
        });
    };
    match listen {
        Listen::Unix => {
            let sock = ctl.join(AGENT_SOCKET);
            let listener = UnixListener::bind(&sock)?;
            loop {
                let (stream, _) = listener.accept().await?;
                serve_one(agent.clone(), Box::new(stream));
            }
        }
        Listen::Tcp(addr, token) => {
            let listener = TcpListener::bind(addr).await?;
            let token = Arc::new(token);
            loop {
                let (stream, _) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                let (agent, token) = (agent.clone(), token.clone());
                tokio::spawn(async move {
                    if let Some(stream) = greeted(stream, &token).await {
                        serve_one(agent, stream);
                    }
                });
            }
        }
    }
}

/// A TCP connection that presented the token, byte by byte so nothing after the line is
/// read ahead. Anything else is dropped without an answer.
async fn greeted(mut stream: tokio::net::TcpStream, token: &str) -> Option<Stream> {
    let mut line = Vec::with_capacity(96);
    let read = async {
        let mut byte = [0u8; 1];
        while line.len() < 1024 {
            stream.read_exact(&mut byte).await.ok()?;
            if byte[0] == b'\n' {
                return Some(());
            }
            line.push(byte[0]);
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()??;
    let hello: Hello = serde_json::from_slice(&line).ok()?;
    let same = hello.token.len() == token.len()
        && hello
            .token
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    same.then(|| Box::new(stream) as Stream)
}

fn read_main_spec(ctl: &Path) -> anyhow::Result<Option<MainSpec>> {
    match std::fs::read(ctl.join(MAIN_SPEC)) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Start the main command in its own process group, output to `logs/main.log`. When it ends
/// (and no restart replaced it) its status goes to `logs/main.exit` and the agent exits with
/// it: the instance ends with its command.
async fn start_main(agent: &Arc<Agent>, spec: MainSpec) {
    let logs = agent.ctl.join(LOGS_DIR);
    let spawned = log_file(&logs.join("main.log")).and_then(|out| {
        let err = out.try_clone()?;
        let mut cmd = Command::new(&spec.argv[0]);
        agent.apply_env(&mut cmd);
        cmd.args(&spec.argv[1..])
            .current_dir(&spec.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("cannot start {:?}: {e}\n", spec.argv[0]);
            let _ = append(&logs.join("main.log"), msg.as_bytes());
            let status = ExitStatus {
                code: 127,
                signal: None,
            };
            write_exit(&logs.join("main.exit"), &status);
            main_ended(agent, status);
            return;
        }
    };
    let pid = child.id().map(|p| p as i32);
    *agent.main_pgid.lock().await = pid;
    let generation = agent
        .generation
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        + 1;
    let agent = agent.clone();
    tokio::spawn(async move {
        let status = match child.wait().await {
            Ok(s) => ExitStatus::from_std(s),
            Err(_) => ExitStatus {
                code: -1,
                signal: None,
            },
        };
        if agent.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
            return; // restarted: the new main owns the instance now
        }
        write_exit(&logs.join("main.exit"), &status);
        main_ended(&agent, status);
    });
}

/// The instance ends with its main command: a sandbox's agent exits with its status; a VM's
/// tells the server (`wait_main`), which collects the logs and shuts the VM down.
fn main_ended(agent: &Agent, status: ExitStatus) {
    if !agent.vm {
        std::process::exit(status.code.clamp(0, 255));
    }
    agent.main_exit.send_replace(Some(status));
}

fn log_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    log_file(path)?.write_all(bytes)
}

fn write_exit(path: &Path, status: &ExitStatus) {
    let tmp = path.with_extension("exit.tmp");
    if std::fs::write(&tmp, serde_json::to_vec(status).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(tmp, path);
    }
}

async fn serve(agent: Arc<Agent>, stream: Stream) -> anyhow::Result<()> {
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    let req: Request = proto::read_line(&mut read).await?;
    match req {
        Request::Ping => {
            let mut a = Answer::ok();
            a.pid = Some(std::process::id() as i32);
            proto::write_line(&mut write, &a).await?;
        }
        Request::Exec(req) => exec(&agent, req, read, write).await?,
        Request::Connect { port } => connect(port, read, write).await?,
        Request::CopyIn {
            path,
            size,
            overwrite,
        } => {
            let answer = copy_in(Path::new(&path), size, overwrite, &mut read).await;
            proto::write_line(&mut write, &answer).await?;
        }
        Request::CopyOut {
            path,
            max_bytes,
            tree,
        } => copy_out(Path::new(&path), max_bytes, tree, write).await?,
        Request::CopyInTree {
            path,
            overwrite,
            max_bytes,
        } => {
            let answer = copy_in_tree(Path::new(&path), overwrite, max_bytes, &mut read).await;
            proto::write_line(&mut write, &answer).await?;
        }
        Request::Shutdown { grace_ms } => {
            stop_everything(Duration::from_millis(grace_ms)).await;
            proto::write_line(&mut write, &Answer::ok()).await?;
            let _ = write.shutdown().await;
            std::process::exit(0);
        }
        Request::StartMain => {
            let answer = match read_main_spec(&agent.ctl) {
                Ok(Some(spec)) if agent.main_pgid.lock().await.is_none() => {
                    start_main(&agent, spec).await;
                    let mut a = Answer::ok();
                    a.pid = *agent.main_pgid.lock().await;
                    a
                }
                Ok(Some(_)) => Answer::fail("exists", "the main command already runs"),
                Ok(None) => Answer::fail("no_main", "this instance has no main command"),
                Err(e) => Answer::fail("io", e.to_string()),
            };
            proto::write_line(&mut write, &answer).await?;
        }
        Request::RestartMain { grace_ms } => {
            let answer = restart_main(&agent, Duration::from_millis(grace_ms)).await;
            proto::write_line(&mut write, &answer).await?;
        }
        Request::Setup { env, main } => {
            let answer = setup(&agent, env, main);
            proto::write_line(&mut write, &answer).await?;
        }
        Request::LogsSince { has } => logs_since(&agent.ctl.join(LOGS_DIR), &has, write).await?,
        Request::Hold => {
            proto::write_line(&mut write, &Answer::ok()).await?;
            let mut sink = [0u8; 64];
            // Anything but more bytes — EOF or an error — means the server is gone.
            while matches!(read.read(&mut sink).await, Ok(n) if n > 0) {}
            eprintln!("kitbag-vm agent: the server's line closed; stopping the instance");
            stop_everything(Duration::from_secs(1)).await;
            std::process::exit(137);
        }
        Request::WaitMain => {
            let mut rx = agent.main_exit.subscribe();
            let status = match rx.wait_for(|s| s.is_some()).await {
                Ok(s) => *s,
                Err(_) => None,
            };
            let mut a = Answer::ok();
            a.exit = status;
            proto::write_line(&mut write, &a).await?;
        }
    }
    Ok(())
}

/// Run one command. Foreground: stream its output as frames; when the client goes away
/// (timeout, cancellation) its whole process group is killed. Background (`job`): output to
/// the job's log, status to its `.exit` file, and the answer is just `Started`.
/// Each log file's bytes past what the server has (all of it when new or shorter).
async fn logs_since(
    dir: &Path,
    has: &std::collections::BTreeMap<String, u64>,
    mut write: WriteHalf,
) -> anyhow::Result<()> {
    let listed = dir.to_path_buf();
    let mut names: Vec<(String, u64)> = kitbag_shared::blocking::unblock(move || {
        Ok(std::fs::read_dir(listed)?
            .flatten()
            .filter_map(|e| {
                let meta = e.metadata().ok().filter(|m| m.is_file())?;
                Some((e.file_name().to_str()?.to_string(), meta.len()))
            })
            .collect())
    })
    .await?;
    names.sort();
    for (name, size) in names {
        let offset = has.get(&name).copied().filter(|&h| h <= size).unwrap_or(0);
        if offset == size && has.contains_key(&name) {
            continue;
        }
        let mut file = tokio::fs::File::open(dir.join(&name)).await?;
        use tokio::io::AsyncSeekExt;
        file.seek(std::io::SeekFrom::Start(offset)).await?;
        let len = size - offset;
        proto::write_line(&mut write, &proto::LogChunk { name, offset, len }).await?;
        // The file may grow meanwhile: exactly `len` bytes go, the rest next time.
        let sent = tokio::io::copy(&mut file.take(len), &mut write).await?;
        anyhow::ensure!(sent == len, "a log shrank while it was read");
    }
    proto::write_line(&mut write, &proto::LogChunk::default()).await?;
    write.flush().await?;
    Ok(())
}

/// A VM's environment and main command (a sandbox has both from bwrap and its control
/// directory). Only once: a later `setup` could swap what `restart_main` runs.
fn setup(agent: &Agent, env: Vec<(String, String)>, main: Option<MainSpec>) -> Answer {
    let mut guard = agent.env.locked();
    if !agent.vm || guard.is_some() {
        return Answer::fail("refused", "setup is for a VM's agent, once");
    }
    if let Some(main) = main {
        let written = serde_json::to_vec(&main)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(agent.ctl.join(MAIN_SPEC), bytes));
        if let Err(e) = written {
            return Answer::fail("io", format!("main.json: {e}"));
        }
    }
    *guard = Some(env);
    Answer::ok()
}

async fn exec(
    agent: &Agent,
    req: ExecRequest,
    mut read: BufReader<ReadHalf>,
    mut write: WriteHalf,
) -> anyhow::Result<()> {
    let mut stdin_bytes = vec![0u8; req.stdin_len.min(16 << 20) as usize];
    read.read_exact(&mut stdin_bytes).await?;
    let Some(program) = req.argv.first() else {
        proto::write_frame(&mut write, &Frame::Error("empty command".into())).await?;
        return Ok(());
    };
    let mut cmd = Command::new(program);
    agent.apply_env(&mut cmd);
    cmd.args(&req.argv[1..])
        .envs(&req.env)
        .current_dir(&req.cwd)
        .process_group(0)
        .kill_on_drop(false);
    if let Some(job) = &req.job {
        return start_job(agent, cmd, program, job, &mut write).await;
    }
    cmd.stdin(if stdin_bytes.is_empty() {
        std::process::Stdio::null()
    } else {
        std::process::Stdio::piped()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            proto::write_frame(&mut write, &Frame::Error(spawn_error(program, &e))).await?;
            return Ok(());
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(-1);
    let (tx, rx) = mpsc::channel::<Frame>(16);
    tx.send(Frame::Started(pgid)).await.ok();
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&stdin_bytes).await;
        });
    }
    let waiter = watch_child(child, tx);
    relay(rx, &mut read, &mut write, pgid).await;
    waiter.abort();
    Ok(())
}

/// A background job: its output goes to its log, its exit status to a file beside it; the
/// client only learns that it started.
async fn start_job(
    agent: &Agent,
    mut cmd: Command,
    program: &str,
    job: &str,
    write: &mut WriteHalf,
) -> anyhow::Result<()> {
    let logs = agent.ctl.join(LOGS_DIR);
    let out = log_file(&logs.join(format!("job-{job}.log")))?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    match cmd.spawn() {
        Ok(mut child) => {
            let pid = child.id().map(|p| p as i32).unwrap_or(-1);
            let exit_path = logs.join(format!("job-{job}.exit"));
            tokio::spawn(async move {
                let status = match child.wait().await {
                    Ok(s) => ExitStatus::from_std(s),
                    Err(_) => ExitStatus {
                        code: -1,
                        signal: None,
                    },
                };
                write_exit(&exit_path, &status);
            });
            proto::write_frame(write, &Frame::Started(pid)).await?;
        }
        Err(e) => proto::write_frame(write, &Frame::Error(spawn_error(program, &e))).await?,
    }
    Ok(())
}

/// Pump the child's output into `tx` and send its exit status last.
fn watch_child(
    mut child: tokio::process::Child,
    tx: mpsc::Sender<Frame>,
) -> tokio::task::JoinHandle<()> {
    let pipes = [
        child
            .stdout
            .take()
            .map(|p| pump(p, tx.clone(), Frame::Stdout)),
        child
            .stderr
            .take()
            .map(|p| pump(p, tx.clone(), Frame::Stderr)),
    ];
    let pipes: Vec<_> = pipes.into_iter().flatten().collect();
    tokio::spawn(async move {
        let status = child.wait().await;
        // Processes it left in the background may hold the pipes open: drain briefly, then
        // answer anyway (they keep running, as after an ssh command).
        let drain = futures::future::join_all(pipes);
        let _ = tokio::time::timeout(Duration::from_millis(200), drain).await;
        let status = match status {
            Ok(s) => ExitStatus::from_std(s),
            Err(_) => ExitStatus {
                code: -1,
                signal: None,
            },
        };
        let _ = tx.send(Frame::Exit(status)).await;
    })
}

/// Forward frames to the client until the exit; a client gone kills the process group.
async fn relay(
    mut rx: mpsc::Receiver<Frame>,
    read: &mut BufReader<ReadHalf>,
    write: &mut WriteHalf,
    pgid: i32,
) {
    // The client never writes after stdin: any read result means it is gone.
    let mut probe = [0u8; 1];
    loop {
        tokio::select! {
            frame = rx.recv() => match frame {
                Some(f) => {
                    let done = matches!(f, Frame::Exit(_));
                    if proto::write_frame(write, &f).await.is_err() {
                        kill_group(pgid);
                        break;
                    }
                    if done { break; }
                }
                None => break,
            },
            _ = read.read(&mut probe) => {
                kill_group(pgid);
                break;
            }
        }
    }
}

fn spawn_error(program: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("{program}: command not found (or the working directory does not exist)")
    } else {
        format!("{program}: {e}")
    }
}

fn kill_group(pgid: i32) {
    kitbag_shared::process::signal_group(pgid, Signal::SIGKILL);
}

fn pump<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    mut pipe: R,
    tx: mpsc::Sender<Frame>,
    wrap: fn(Vec<u8>) -> Frame,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; proto::MAX_FRAME_BYTES];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(wrap(buf[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
            }
        }
    })
}

async fn connect(port: u16, read: BufReader<ReadHalf>, mut write: WriteHalf) -> anyhow::Result<()> {
    match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(tcp) => {
            proto::write_line(&mut write, &Answer::ok()).await?;
            let mut unix = read.into_inner().unsplit(write);
            let mut tcp = tcp;
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut unix,
                &mut tcp,
                proto::RELAY_BUF,
                proto::RELAY_BUF,
            )
            .await;
        }
        Err(e) => {
            let answer = Answer::fail("refused", format!("127.0.0.1:{port}: {e}"));
            proto::write_line(&mut write, &answer).await?;
        }
    }
    Ok(())
}

async fn copy_in(
    path: &Path,
    size: u64,
    overwrite: bool,
    read: &mut BufReader<ReadHalf>,
) -> Answer {
    if !path.is_absolute() {
        return Answer::fail("invalid", "guest_path must be absolute");
    }
    if !overwrite && tokio::fs::symlink_metadata(path).await.is_ok() {
        return Answer::fail("exists", format!("{} exists", path.display()));
    }
    if let Some(parent) = path.parent()
        && let Err(e) = tokio::fs::create_dir_all(parent).await
    {
        return Answer::fail("io", format!("{}: {e}", parent.display()));
    }
    let tmp = path.with_file_name(format!(
        ".{}.kitbag-copy-{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = async {
        let mut f = tokio::fs::File::create(&tmp).await?;
        let copied = tokio::io::copy(&mut read.take(size), &mut f).await?;
        if copied != size {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the content ended early",
            ));
        }
        f.sync_all().await?;
        if !overwrite && tokio::fs::symlink_metadata(path).await.is_ok() {
            return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
        }
        tokio::fs::rename(&tmp, path).await?;
        Ok(copied)
    }
    .await;
    match result {
        Ok(n) => Answer {
            ok: true,
            size: Some(n),
            ..Default::default()
        },
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            let code = match e.kind() {
                std::io::ErrorKind::AlreadyExists => "exists",
                std::io::ErrorKind::IsADirectory => "is_dir",
                _ => "io",
            };
            Answer::fail(code, format!("{}: {e}", path.display()))
        }
    }
}

async fn copy_out(
    path: &Path,
    max_bytes: u64,
    tree: bool,
    mut write: WriteHalf,
) -> anyhow::Result<()> {
    let file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                "not_found"
            } else {
                "io"
            };
            let a = Answer::fail(code, format!("{}: {e}", path.display()));
            return Ok(proto::write_line(&mut write, &a).await?);
        }
    };
    let meta = file.metadata().await?;
    if meta.is_dir() && tree {
        let walked = {
            let p = path.to_path_buf();
            tokio::task::spawn_blocking(move || crate::tree::walk(&p, max_bytes)).await?
        };
        return match walked {
            Ok((entries, total)) => {
                let mut a = Answer::ok();
                a.kind = Some("tree".into());
                a.size = Some(total);
                proto::write_line(&mut write, &a).await?;
                crate::tree::send(&mut write, &entries, crate::tree::open_plain).await?;
                Ok(())
            }
            Err(e) => {
                let code = if e.kind() == std::io::ErrorKind::FileTooLarge {
                    "too_large"
                } else {
                    "io"
                };
                let a = Answer::fail(code, format!("{}: {e}", path.display()));
                Ok(proto::write_line(&mut write, &a).await?)
            }
        };
    }
    if meta.is_dir() {
        let a = Answer::fail("is_dir", format!("{} is a directory", path.display()));
        return Ok(proto::write_line(&mut write, &a).await?);
    }
    if meta.len() > max_bytes {
        let mut a = Answer::fail(
            "too_large",
            format!("{} has {} bytes", path.display(), meta.len()),
        );
        a.size = Some(meta.len());
        return Ok(proto::write_line(&mut write, &a).await?);
    }
    let mut a = Answer::ok();
    a.size = Some(meta.len());
    proto::write_line(&mut write, &a).await?;
    tokio::io::copy(&mut file.take(meta.len()), &mut write).await?;
    write.shutdown().await?;
    Ok(())
}

/// Receive a directory's entries under `path` (made if missing). Without `overwrite` an
/// existing file stops the copy before it is touched.
async fn copy_in_tree(
    path: &Path,
    overwrite: bool,
    max_bytes: u64,
    read: &mut BufReader<ReadHalf>,
) -> Answer {
    use crate::tree::Kind;
    if !path.is_absolute() {
        return Answer::fail("invalid", "guest_path must be absolute");
    }
    if let Err(e) = tokio::fs::create_dir_all(path).await {
        return Answer::fail("io", format!("{}: {e}", path.display()));
    }
    let mut budget = max_bytes;
    let mut total = 0u64;
    loop {
        let (entry, rel, bytes) = match crate::tree::next(read, &mut budget).await {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                return Answer::fail("too_large", e.to_string());
            }
            Err(e) => return Answer::fail("io", e.to_string()),
        };
        let dest = path.join(&rel);
        if entry.kind == Kind::End {
            break;
        }
        let size = bytes.len() as u64;
        let placed = {
            let dest = dest.clone();
            kitbag_shared::blocking::unblock(move || place(&dest, entry, &bytes, overwrite)).await
        };
        match placed {
            Ok(true) => total += size,
            Ok(false) => return Answer::fail("exists", format!("{} exists", dest.display())),
            Err(e) => return Answer::fail("io", format!("{}: {e}", dest.display())),
        }
    }
    Answer {
        ok: true,
        size: Some(total),
        kind: Some("tree".into()),
        ..Default::default()
    }
}

/// Put one received entry at `dest`: false when it exists and `overwrite` is off (a file or
/// a link; directories merge). A file goes through a temporary name, so it is whole or absent.
fn place(
    dest: &Path,
    entry: crate::tree::Entry,
    bytes: &[u8],
    overwrite: bool,
) -> std::io::Result<bool> {
    use crate::tree::Kind;
    let exists = std::fs::symlink_metadata(dest).is_ok();
    match entry.kind {
        Kind::Dir => std::fs::create_dir_all(dest)?,
        Kind::File | Kind::Symlink if exists && !overwrite => return Ok(false),
        Kind::File => {
            let tmp = dest.with_file_name(format!(
                ".{}.kitbag-copy",
                dest.file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default()
            ));
            std::fs::write(&tmp, bytes)?;
            use std::os::unix::fs::PermissionsExt;
            let _ =
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(entry.mode & 0o777));
            std::fs::rename(&tmp, dest)?;
        }
        Kind::Symlink => {
            if exists {
                let _ = std::fs::remove_file(dest);
            }
            std::os::unix::fs::symlink(entry.target.unwrap_or_default(), dest)?;
        }
        Kind::End => {}
    }
    Ok(true)
}

/// Every process of the instance but init and this agent: `kill(-1, …)` inside the
/// instance's PID namespace reaches exactly them.
struct EveryoneElse;

impl kitbag_shared::process::Stoppable for EveryoneElse {
    fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(-1), signal);
    }

    /// Whether any process other than PID 1 and this agent runs (zombies do not count).
    fn alive(&self) -> bool {
        let me = std::process::id();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return false;
        };
        dir.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
                .is_some_and(|pid| {
                    pid != 1 && pid as u32 != me && kitbag_shared::proc_stat::running(pid)
                })
        })
    }
}

/// Stop every process of the instance but init and this agent (the one stop sequence).
async fn stop_everything(grace: Duration) {
    kitbag_shared::process::stop_async(&EveryoneElse, grace).await;
}

async fn restart_main(agent: &Arc<Agent>, grace: Duration) -> Answer {
    let spec = match read_main_spec(&agent.ctl) {
        Ok(Some(s)) => s,
        Ok(None) => return Answer::fail("no_main", "this instance has no main command"),
        Err(e) => return Answer::fail("io", e.to_string()),
    };
    // The old main's end must not end the instance: bump the generation first.
    agent
        .generation
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if let Some(pgid) = agent.main_pgid.lock().await.take() {
        use kitbag_shared::process::{Group, stop_async};
        stop_async(&Group(pgid), grace).await;
    }
    let _ = tokio::fs::remove_file(agent.ctl.join(LOGS_DIR).join("main.exit")).await;
    start_main(agent, spec).await;
    let mut a = Answer::ok();
    a.pid = *agent.main_pgid.lock().await;
    a
}
