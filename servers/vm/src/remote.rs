//! An agent reached over a network rather than a socket in a shared directory — a QEMU
//! guest's (through a forwarded port) or a pod's (through `pods/portforward`): the token
//! greeting, the set-up after boot, the main command's watch and copying the logs back.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;

use crate::error::{VmError, VmResult};
use crate::proto::{self, Answer, ExitStatus, Hello, MainSpec, Request, Stream};

/// Greet the agent with the instance's token: the first line on every connection.
pub async fn hello(mut stream: Stream, token: &str) -> std::io::Result<Stream> {
    let mut line = serde_json::to_vec(&Hello {
        token: token.to_string(),
    })
    .map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    Ok(stream)
}

/// What the agent needs after it comes up: the environment and the main command.
pub struct Setup {
    pub id: String,
    pub hostname: String,
    pub env: Vec<(String, String)>,
    pub command: Option<Vec<String>>,
    pub cwd: String,
}

/// Hand the agent its environment and main command, and start that command. Returns
/// whether there is a main command (then the caller watches it with [`wait_main`]).
pub async fn set_up<F, Fut>(mut stream: F, s: &Setup) -> VmResult<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<Stream>>,
{
    let main = s.command.as_ref().map(|argv| MainSpec {
        argv: argv.clone(),
        cwd: s.cwd.clone(),
    });
    let setup = Request::Setup {
        env: crate::bwrap::instance_env(&s.id, &s.hostname, &s.env),
        main: main.clone(),
    };
    match request(stream().await, &setup).await {
        Ok(a) if a.ok => {}
        other => {
            return Err(VmError::engine(format!(
                "the agent refused setup: {other:?}"
            )));
        }
    }
    if main.is_none() {
        return Ok(false);
    }
    match request(stream().await, &Request::StartMain).await {
        Ok(a) if a.ok => Ok(true),
        other => Err(VmError::engine(format!(
            "the main command did not start: {other:?}"
        ))),
    }
}

async fn request(stream: std::io::Result<Stream>, req: &Request) -> std::io::Result<Answer> {
    proto::request(stream?, req).await
}

/// What becomes of an instance once its main command has ended, given by whoever runs it: it
/// is stopped the way every engine's instance stops (`Engine::stop`), which the engine itself
/// does not know.
pub type MainEnded<T> = fn(Arc<T>) -> BoxFuture<'static, ()>;

/// Wait until the main command ends (the agent answers `wait_main` then); `None` when the
/// connection ended first (the instance was stopped or lost).
pub async fn wait_main(stream: std::io::Result<Stream>) -> Option<ExitStatus> {
    match request(stream, &Request::WaitMain).await {
        Ok(Answer {
            ok: true,
            exit: Some(status),
            ..
        }) => Some(status),
        _ => None,
    }
}

/// Ping until the agent answers or `deadline` passes; `alive` says whether it is still
/// worth waiting (the instance did not end).
pub async fn until_answers<F, Fut>(
    mut stream: F,
    deadline: std::time::Instant,
    poll: Duration,
    alive: impl Fn() -> bool,
) -> Result<(), &'static str>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<Stream>>,
{
    loop {
        if let Ok(Ok(a)) = tokio::time::timeout(
            Duration::from_secs(2),
            request(stream().await, &Request::Ping),
        )
        .await
            && a.ok
        {
            return Ok(());
        }
        if !alive() {
            return Err("the instance ended while it started");
        }
        if std::time::Instant::now() > deadline {
            return Err("the agent did not answer in time");
        }
        tokio::time::sleep(poll).await;
    }
}

/// The length of each log this host already has of an instance.
fn log_lengths(logs: &Path) -> std::io::Result<std::collections::BTreeMap<String, u64>> {
    let mut has = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(logs)?.flatten() {
        if let (Some(name), Ok(meta)) = (e.file_name().to_str(), e.metadata())
            && meta.is_file()
        {
            has.insert(name.to_string(), meta.len());
        }
    }
    Ok(has)
}

/// A log of this host's copy, opened (never through a link) to be written from `offset` on.
fn open_log_at(path: &Path, offset: u64) -> std::io::Result<std::fs::File> {
    use std::io::Seek;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .custom_flags(kitbag_shared::rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("log {} is not a regular file here", path.display()),
        ));
    }
    file.set_len(offset)?;
    file.seek(std::io::SeekFrom::Start(offset))?;
    Ok(file)
}

/// Copy the agent's new log bytes into the instance's directory on this host, where
/// instance_logs reads them (and finds them after the instance is gone). Logs only grow:
/// each file is asked for past the length this host already has.
pub async fn pull_logs(dir: &Path, stream: Stream) -> std::io::Result<()> {
    use kitbag_shared::blocking::unblock;
    use tokio::io::AsyncReadExt;
    let logs = crate::instance_dir::guest_logs_dir(dir);
    let has = unblock({
        let logs = logs.clone();
        move || log_lengths(&logs)
    })
    .await?;
    let mut s = tokio::io::BufReader::new(stream);
    proto::write_line(&mut s, &Request::LogsSince { has }).await?;
    loop {
        let chunk: proto::LogChunk = proto::read_line(&mut s).await?;
        if chunk.name.is_empty() {
            return Ok(());
        }
        // A plain file name: the instance names it, this host writes it.
        if crate::tree::safe_rel(&chunk.name).is_none_or(|p| p.components().count() != 1) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a log named {:?}", chunk.name),
            ));
        }
        let path = logs.join(&chunk.name);
        let offset = chunk.offset;
        let file = unblock(move || open_log_at(&path, offset)).await?;
        // Streamed: the length is the instance's word, never a size to allocate.
        let mut file = tokio::fs::File::from_std(file);
        let copied = tokio::io::copy(&mut (&mut s).take(chunk.len), &mut file).await?;
        if copied != chunk.len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}
