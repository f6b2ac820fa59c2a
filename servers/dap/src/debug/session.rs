//! A session's life: launch or attach (spawn or reach the adapter, initialize, configure,
//! start), status and output while it lives, disconnect at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, Resolved, ToolError, ToolResult, args};
use serde_json::{Value, json};

use crate::config::Transport;
use crate::dap::{Client, RequestError, error_message};

use super::params::{Action, DebugParams};
use super::result::{DebugResult, OutputChunk};
use super::runtime::{self, EntryStop, LaunchPlan, Runtime};
use super::{Core, DapState, REQUEST_TIMEOUT, Session, cap, control, need, no_session};

/// The temporary "stop on entry" function breakpoint, and the adapter's id for it.
#[derive(Debug, Clone)]
pub struct EntryBreakpoint {
    pub function: &'static str,
    pub adapter_id: Option<i64>,
}

/// How much of the adapter's start-up output a failed launch or attach quotes.
const START_OUTPUT_CHARS: usize = 4000;

pub async fn launch(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let mut guard = state.session.lock().await;
    clear_ended(&mut guard)?;
    let runtime = runtime::Runtime::parse(p.runtime.as_deref(), &state.config)?;
    let script = need(&p.script, "script", "a root-relative entry point to run")?;
    let (prog, cwd) = launch_paths(policy, p, script)?;
    let env = p.env.clone().unwrap_or_default();
    kitbag_shared::args::env("env", &env)?;
    let build_dir = go_build_dir(&runtime)?;
    let go_output = build_dir.as_ref().map(|d| d.path().join("debug_bin"));
    let stop_on_entry = p.stop_on_entry.unwrap_or(true);
    let plan = LaunchPlan {
        program: &prog.abs,
        args: p.args.as_deref().unwrap_or(&[]),
        cwd: &cwd,
        env: &env,
        stop_on_entry,
        go_output: go_output.as_deref(),
    };
    let mut launch_args = runtime::launch_arguments(&runtime, &plan);
    let configured = state.config.adapters.contains_key(runtime.name());
    let client = if let Some(inspector) = runtime.inspector().filter(|_| !configured) {
        crate::cdp::preflight(inspector, &prog.abs)?;
        crate::cdp::spawn(inspector)?
    } else {
        let cmd = runtime::adapter_command(&runtime, &state.config, &mut launch_args)?;
        spawn_adapter(&runtime, &cmd, &cwd).await?
    };
    let t0 = Instant::now();
    if let Err(m) = initialize(&client, &runtime, &state.config).await {
        client.kill();
        return Err(initialize_failed(state, &runtime, configured, m));
    }
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, "initialize answered");
    let entry = match runtime.entry_stop() {
        EntryStop::FunctionBreakpoint(function) if stop_on_entry => Some(EntryBreakpoint {
            function,
            adapter_id: None,
        }),
        _ => None,
    };
    let core = new_core(state, client, runtime, false, entry);
    if let Err(m) = start(state, &core, "launch", launch_args).await {
        core.client.kill();
        let message = with_start_output(&core.client, m);
        return Err(ToolError::new(ErrorCode::DapSessionEnded, message));
    }
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, "launch answered");
    started(state, &mut guard, &core, build_dir, script);
    drop(guard);
    let mut r = control::settle(state, &core, policy, p.action, p.wait_ms).await?;
    with_session_facts(&core, &mut r).await;
    Ok(r)
}

/// The script to run (a file) and the working directory (default the root).
fn launch_paths(
    policy: &PathPolicy,
    p: &DebugParams,
    script: &str,
) -> ToolResult<(Resolved, PathBuf)> {
    let prog = policy.resolve(script, "script", Access::Read)?;
    // Checked on a descriptor opened beneath the root. The adapter is then given the path
    // string and opens it itself: that second open is outside this server's reach.
    let is_file = policy
        .open_real_read(&prog.abs)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file());
    if !is_file {
        return Err(ToolError::invalid_field(
            "script",
            format!("{script} is not a file"),
        ));
    }
    let cwd = match &p.cwd {
        Some(c) => {
            let dir = policy.resolve(c, "cwd", Access::Read)?;
            if !dir.abs.is_dir() {
                return Err(ToolError::invalid_field(
                    "cwd",
                    format!("{c} is not a directory"),
                ));
            }
            dir.abs
        }
        None => policy.root().to_path_buf(),
    };
    Ok((prog, cwd))
}

/// Go programs are built before the launch: a temporary directory for the binary.
fn go_build_dir(runtime: &Runtime) -> ToolResult<Option<tempfile::TempDir>> {
    Ok(match runtime {
        Runtime::Go => Some(
            tempfile::Builder::new()
                .prefix("kitbag-dap-go-")
                .tempdir()
                .map_err(|e| ToolError::io(&std::env::temp_dir().to_string_lossy(), &e))?,
        ),
        _ => None,
    })
}

/// The adapter did not answer `initialize` (it is killed already).
fn initialize_failed(
    state: &DapState,
    runtime: &Runtime,
    configured: bool,
    m: RequestError,
) -> ToolError {
    // The built-in python adapter is not probed up front (a python3 start-up per launch);
    // when it dies at once, find out whether debugpy is missing.
    if *runtime == Runtime::Python && !configured {
        let python = runtime::adapter_command(runtime, &state.config, &mut json!({}))
            .map(|c| c.program)
            .unwrap_or_default();
        if !runtime::debugpy_importable(&python) {
            return runtime::debugpy_missing(Some(&python));
        }
    }
    ToolError::new(ErrorCode::DapSessionEnded, m.to_string())
}

pub async fn attach(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let mut guard = state.session.lock().await;
    clear_ended(&mut guard)?;
    let runtime = runtime::Runtime::parse(p.runtime.as_deref(), &state.config)?;
    let how_to_start = runtime::attach_target(&runtime)?;
    let ws_url = inspector_url(&runtime, p.url.as_deref())?;
    let port = match &ws_url {
        Some(u) => u.port().unwrap_or(80),
        None => *need(
            &p.port,
            "port",
            &format!("the port of a `{how_to_start}` process"),
        )?,
    };
    let host = match &ws_url {
        Some(u) => u.host_str().unwrap_or("127.0.0.1").to_string(),
        None => p.host.clone().unwrap_or_else(|| "127.0.0.1".into()),
    };
    let host = if host == "localhost" {
        "127.0.0.1".to_string()
    } else {
        host
    };
    let unreachable = |e: &dyn std::fmt::Display| {
        let e = e.to_string();
        if e.contains(crate::cdp::BUN_NEEDS_URL) {
            return ToolError::invalid_field("url", format!("{host}:{port}: {e}"));
        }
        let field = if ws_url.is_some() { "url" } else { "port" };
        ToolError::invalid_field(
            field,
            format!("cannot connect to {host}:{port}: {e}; start the program with {how_to_start}"),
        )
    };
    let client = if let Some(inspector) = runtime.inspector() {
        crate::cdp::spawn(inspector)?
    } else {
        tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(&host, port))
            .await
            .map_err(|_| unreachable(&"no answer"))?
            .map_err(|e| unreachable(&e))?
    };
    if let Err(m) = initialize(&client, &runtime, &state.config).await {
        client.kill();
        return Err(ToolError::new(ErrorCode::DapSessionEnded, m.to_string()));
    }
    let core = new_core(state, client, runtime.clone(), true, None);
    let mut args = runtime::attach_arguments(&runtime, &host, port);
    if let Some(u) = &ws_url {
        args["connect"]["url"] = json!(u.as_str());
    }
    if let Err(m) = start(state, &core, "attach", args).await {
        core.client.kill();
        if runtime.is_inspector() {
            return Err(unreachable(&m));
        }
        let message = with_start_output(&core.client, m);
        return Err(ToolError::new(ErrorCode::DapSessionEnded, message));
    }
    started(state, &mut guard, &core, None, &format!("{host}:{port}"));
    drop(guard);
    let mut r = control::settle(
        state,
        &core,
        policy,
        p.action,
        Some(p.wait_ms.unwrap_or(500)),
    )
    .await?;
    with_session_facts(&core, &mut r).await;
    Ok(r)
}

/// attach's `url`: a `ws://` address, for the inspector runtimes only.
fn inspector_url(runtime: &Runtime, url: Option<&str>) -> ToolResult<Option<url::Url>> {
    let Some(raw) = url else { return Ok(None) };
    if !runtime.is_inspector() {
        return Err(ToolError::invalid_field(
            "url",
            "only node and bun attach by url; give `port` (and `host`)",
        ));
    }
    match url::Url::parse(raw) {
        Ok(u) if u.scheme() == "ws" && u.host_str().is_some() => Ok(Some(u)),
        _ => Err(ToolError::invalid_field(
            "url",
            format!("a ws://HOST:PORT/PATH address, as the runtime printed it (got {raw:?})"),
        )),
    }
}

/// A session whose program has ended is put away, so a launch or attach after the program's
/// exit needs no `disconnect` first; a live one refuses with `session_active`.
fn clear_ended(guard: &mut Option<Session>) -> ToolResult<()> {
    let Some(session) = guard.as_ref() else {
        return Ok(());
    };
    if !session.core.client.events().has_ended() {
        return Err(active());
    }
    session.core.ended("exited");
    *guard = None;
    Ok(())
}

fn active() -> ToolError {
    ToolError::new(
        ErrorCode::SessionActive,
        "a debug session is already active; call action \"disconnect\" first",
    )
}

fn new_core(
    state: &DapState,
    client: Arc<Client>,
    runtime: Runtime,
    attached: bool,
    entry: Option<EntryBreakpoint>,
) -> Arc<Core> {
    let n = state.sessions_started.fetch_add(1, Ordering::SeqCst) + 1;
    Arc::new(Core {
        id: format!("dap_{}_{n}", std::process::id()),
        client,
        runtime,
        attached,
        entry: std::sync::Mutex::new(entry),
        reported_stop: AtomicU64::new(0),
        audit: state.audit.clone(),
        ended_logged: AtomicBool::new(false),
    })
}

/// The session is up: keep it, and log it.
fn started(
    _state: &DapState,
    guard: &mut tokio::sync::MutexGuard<'_, Option<Session>>,
    core: &Arc<Core>,
    build_dir: Option<tempfile::TempDir>,
    target: &str,
) {
    core.audit(
        "debug.session_started",
        json!({"runtime": core.runtime.name(), "attached": core.attached, "target": target}),
    );
    **guard = Some(Session {
        core: core.clone(),
        _build_dir: build_dir,
    });
}

/// A launch or attach result also names the session and its threads (the seed's shape).
async fn with_session_facts(core: &Core, r: &mut Reply<DebugResult>) {
    r.data.debug_session_id = Some(core.id.clone());
    if (r.data.status == "stopped" || r.data.status == "running")
        && let Ok(all) = super::inspect::thread_list(&core.client).await
    {
        // Held to the result budget; the `threads` action pages through them all.
        let (list, cut) = super::within_budget(&r.data, all);
        if cut {
            r.data.truncated = Some(true);
        }
        r.data.threads = Some(list);
    }
}

async fn spawn_adapter(
    runtime: &Runtime,
    cmd: &runtime::AdapterCommand,
    cwd: &Path,
) -> ToolResult<Arc<Client>> {
    let started = match cmd.transport {
        Transport::Stdio => Client::spawn(&cmd.program, &cmd.args, cwd),
        Transport::ClientAddr => {
            Client::spawn_dialing_in(&cmd.program, &cmd.args, cwd, REQUEST_TIMEOUT).await
        }
    };
    started.map_err(|e| {
        ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!("cannot start {}: {e}", cmd.program),
        )
        .with_detail(json!({"runtime": runtime.name(), "command": cmd.program}))
    })
}

async fn initialize(
    client: &Client,
    runtime: &Runtime,
    config: &crate::config::Config,
) -> Result<(), RequestError> {
    let adapter_id = config
        .adapters
        .get(runtime.name())
        .and_then(|a| a.adapter_id.clone())
        .unwrap_or_else(|| runtime.name().to_string());
    client
        .request(
            "initialize",
            runtime::initialize_arguments(&adapter_id),
            REQUEST_TIMEOUT,
        )
        .await
        .map(|_| ())
}

/// The start-up launch and attach share: send `command` right away (debugpy sends
/// `initialized` before answering it, others after), wait for `initialized` or a refusal, send
/// the breakpoints and exception filters and `configurationDone`, then take the answer —
/// never deadlocking on either order.
async fn start(
    state: &DapState,
    core: &Core,
    command: &str,
    args: Value,
) -> Result<(), RequestError> {
    let client = &core.client;
    let t0 = Instant::now();
    let mut answer = StartAnswer::new(
        client
            .start(command, args)
            .await
            .map_err(RequestError::Unsent)?,
    );
    await_initialized(client, &mut answer).await?;
    let configured = match super::breakpoints::configure(state, core, command == "launch").await {
        Ok(()) => {
            client
                .request("configurationDone", json!({}), REQUEST_TIMEOUT)
                .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = configured {
        // A refused launch can fail the configuration first (lldb-dap 22 answers
        // configurationDone with "Expected process to be stopped"): the launch's own answer
        // says why, so prefer it when it comes.
        return match answer.wait(Duration::from_secs(1)).await {
            Some(resp) if resp["success"].as_bool() != Some(true) => Err(RequestError::Refused(
                error_message(&resp, &format!("{command} failed")),
            )),
            _ => Err(e),
        };
    }
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, command, "configured");
    match answer.wait(REQUEST_TIMEOUT).await {
        Some(resp) if resp["success"].as_bool() == Some(true) => Ok(()),
        Some(resp) => Err(RequestError::Refused(error_message(
            &resp,
            &format!("{command} failed"),
        ))),
        None => Err(RequestError::NoAnswer(command.to_string())),
    }
}

/// Wait for the adapter's `initialized` event (or the end of its stream), at most the
/// request timeout: adapters send it before or after answering launch/attach.
async fn await_initialized(client: &Client, answer: &mut StartAnswer) -> Result<(), RequestError> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        tokio::select! {
            // First: an `initialized` already on record wins over an answer ready too.
            biased;
            started = client.events().started(deadline) => {
                return if started { Ok(()) } else { Err(RequestError::NoInitialized) };
            }
            early = answer.early() => {
                // A refusal before `initialized` (a Go build error, a missing program) is the
                // whole story: say it now instead of waiting for an event that never comes.
                if let Some(resp) = early
                    && resp["success"].as_bool() != Some(true)
                {
                    return Err(RequestError::Refused(error_message(
                        resp,
                        "the adapter refused to start",
                    )));
                }
            }
        }
    }
}

/// The answer to `launch` / `attach`, which adapters send before or after `initialized`.
struct StartAnswer {
    rx: Option<tokio::sync::oneshot::Receiver<Value>>,
    got: Option<Value>,
}

impl StartAnswer {
    fn new(rx: tokio::sync::oneshot::Receiver<Value>) -> Self {
        StartAnswer {
            rx: Some(rx),
            got: None,
        }
    }

    /// Wait for the answer while it has not come; pending forever once it has (or once the
    /// adapter's stream ended without one).
    async fn early(&mut self) -> Option<&Value> {
        let Some(rx) = self.rx.as_mut() else {
            return std::future::pending().await;
        };
        let r = rx.await;
        self.rx = None;
        self.got = r.ok();
        self.got.as_ref()
    }

    /// The answer, waiting up to `timeout` if it has not come yet.
    async fn wait(mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.got.take() {
            return Some(v);
        }
        let rx = self.rx.take()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

/// A failed start's message with what the adapter printed meanwhile (its tail): the reason
/// is often only there (Delve: "Build error: Check the debug console for details").
fn with_start_output(client: &Client, failure: RequestError) -> String {
    let message = failure.to_string();
    let printed = client.events().output_text();
    let printed = printed.trim();
    if printed.is_empty() {
        return message;
    }
    let skip = printed.chars().count().saturating_sub(START_OUTPUT_CHARS);
    let tail: String = printed.chars().skip(skip).collect();
    let cut = if skip > 0 { "…" } else { "" };
    format!("{message}\nadapter output:\n{cut}{tail}")
}

/// How long an adapter told `disconnect` may take to end by itself.
const DISCONNECT_GRACE: Duration = Duration::from_secs(2);

pub async fn disconnect(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let session = state.session.lock().await.take();
    let Some(session) = session else {
        return Err(no_session());
    };
    let core = session.core.clone();
    // Seed 004: true, after an attach too (`false` detaches and leaves it running).
    let terminate = p.terminate_debuggee.unwrap_or(true);
    let _ = core
        .client
        .request(
            "disconnect",
            json!({"terminateDebuggee": terminate}),
            Duration::from_secs(3),
        )
        .await;
    // Let the adapter finish its own clean-up before the kill that follows.
    core.client.exited_within(DISCONNECT_GRACE).await;
    core.ended("disconnect");
    drop(session);
    let mut r = DebugResult::new(Action::Disconnect, "ok");
    r.debug_session_id = Some(core.id.clone());
    r.disconnected = Some(true);
    r.debuggee_terminated = Some(terminate);
    let text = if terminate {
        "disconnected; debuggee terminated"
    } else {
        "detached; debuggee left running"
    };
    Ok(Reply::new(r, text.to_string()))
}

pub async fn status(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let core = match state.live().await {
        Ok(c) => c,
        Err(_) => {
            return Ok(Reply::new(
                DebugResult::new(p.action, "no_session"),
                "no debug session".to_string(),
            ));
        }
    };
    let mut r = control::settle(state, &core, policy, p.action, Some(0)).await?;
    r.data.debug_session_id = Some(core.id.clone());
    Ok(r)
}

/// Most output chunks one call returns.
const OUTPUT_PAGE: usize = 500;

pub async fn output(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    // The cursor from the last output call.
    let since = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let (items, more) = core.client.events().output_page(since, OUTPUT_PAGE);
    let mut r = DebugResult::new(p.action, "ok");
    let chunks = items
        .into_iter()
        .map(|(category, text)| OutputChunk {
            category,
            text: cap(&text),
        })
        .collect();
    // Held to the result budget: the cursor stops after the last chunk shown.
    let (chunks, cut) = super::within_budget(&r, chunks);
    let cursor = since + chunks.len();
    let text: String = chunks.iter().map(|c| c.text.as_str()).collect();
    r.output = Some(chunks);
    r.cursor = Some(cursor as u64);
    r.truncated = (cut || more).then_some(true);
    let more = if cut || more {
        format!(" — more: offset {cursor}")
    } else {
        String::new()
    };
    Ok(Reply::new(
        r,
        format!("{}\n[cursor {cursor}{more}]", cap(&text)),
    ))
}
