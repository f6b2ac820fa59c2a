//! kitbag: the host. It starts the MCP servers named in a config (or every kitbag server
//! it contains), offers all their tools as one flat list over stdio, and forwards calls,
//! progress and cancellation. It is also the CLI: `serve`, `tools`, `call`, `doctor`,
//! and `server <family>` (the embedded servers, re-executed as child processes).

pub mod families;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};

use kitbag_config::Config;
use kitbag_hub::registry::{self as hub, Hub};
use kitbag_hub::serve::{self, HostServer};
use kitbag_hub::{access, http, lazy, oauth_client, pipeline, stdio};

#[derive(Debug, Parser)]
#[command(
    name = "kitbag",
    version,
    about = "Run MCP servers and offer their tools as one list"
)]
pub struct Cli {
    /// Config file: agent.json (`mcp` block) or, when named here, a Claude `.mcp.json` /
    /// `mcpServers` file. Default: $KITBAG_CONFIG, else ./agent.json, else every embedded
    /// server. A `.mcp.json` is the client's file and is never read unless named.
    #[arg(long, global = true, env = "KITBAG_CONFIG")]
    pub config: Option<PathBuf>,

    /// Serve as this agent of the config's `agents` block (allowlist, privilege groups, root).
    /// For `run`: also the agent pack .kitbag/agents/NAME.md, or `auto` to pick one.
    #[arg(long, global = true, env = "KITBAG_AGENT")]
    pub agent: Option<String>,

    /// Append one JSON line per tool call (agent, server, tool, request id, duration, outcome).
    #[arg(long, global = true, env = "KITBAG_AUDIT_LOG", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,

    /// Which tools `serve` lists: every tool (full) or tool_search / tool_schema / tool_call
    /// for progressive discovery (lazy). Direct calls by name work in both.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "full",
        env = "KITBAG_TOOLS"
    )]
    pub tools: lazy::ToolsMode,

    /// Log level (to stderr).
    #[arg(long, global = true, default_value = "warn", env = "KITBAG_LOG_LEVEL")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Answer the question a session stopped at — a tool of a `kitbag run` or `daemon` turn
    /// asked the operator (exit code 3) — and go on with that turn: one KEY=VALUE per field
    /// (an option by its number or text; several comma-separated), or --decline / --cancel.
    Answer {
        session: String,
        answers: Vec<String>,
        #[arg(long)]
        decline: bool,
        #[arg(long, conflicts_with = "decline")]
        cancel: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Each workflow's name, steps and description.
    List,
    /// Run a workflow in this process until it ends; print the run as JSON.
    Run {
        name: String,
        /// The inputs, a JSON object.
        inputs: Option<String>,
    },
    /// Print a run as JSON.
    Status { run_id: String },
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the flat tool list over stdio (what MCP clients run), or over MCP Streamable
    /// HTTP with --http / --unix.
    Serve {
        #[command(flatten)]
        serving: Box<kitbag_shared::http::HttpArgs>,
    },
    /// Print the flat tool list.
    Tools {
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its result: kitbag call TOOL '{"arg": 1}'.
    Call { tool: String, args: Option<String> },
    /// Start every server and report: started or why not, time to ready, tools, collisions.
    Doctor,
    /// Run one agent turn: send PROMPT to the model (the `model` setting, or the API key that
    /// is set) with every tool, run the tools it asks for, print its answer. Progress goes to
    /// stderr; the conversation to .kitbag/sessions/SESSION.jsonl.
    Run {
        /// The session to continue (created if new).
        #[arg(long, default_value = "default")]
        session: String,
        /// An image to send with the prompt (.png, .jpg, .gif, .webp); repeatable.
        #[arg(long, value_name = "FILE")]
        image: Vec<PathBuf>,
        /// Set the session's own instructions (kept for its later turns; "" clears them).
        #[arg(long, value_name = "TEXT")]
        session_prompt: Option<String>,
        /// Work on this issue (kept for the session's later turns; 0 unbinds): bound in the
        /// issues server every turn, its open todos shown to the model at every step.
        #[arg(long, value_name = "N")]
        issue: Option<i64>,
        /// Print the turn as JSON lines on stdout instead of the answer: `start`,
        /// `tool_start`, `tool_done`, `usage`, and a last `result` (for scripts and
        /// agent_delegate).
        #[arg(long)]
        json: bool,
        /// At most this many model calls in the turn (default 100).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
        max_steps: Option<u32>,
        /// Offer and run only tools that change nothing (tier `read`).
        #[arg(long)]
        read_only: bool,
        prompt: String,
    },
    /// List the sessions with turns and token totals, show one as text, or answer the
    /// question one waits at (`sessions answer`).
    #[command(args_conflicts_with_subcommands = true)]
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsCommand>,
        name: Option<String>,
    },
    /// The declared workflows: `kitbag workflow list`, `run NAME ['{"input": 1}']` (runs it
    /// here to the end: exit 0 when it succeeded — what a cron entry's command can call),
    /// `status RUN_ID`.
    Workflow {
        #[command(subcommand)]
        action: WorkflowCommand,
    },
    /// Talk with the agent: one turn per line of input, in one session. Ctrl-C cancels the
    /// turn in flight; Ctrl-D or /exit leaves; /help lists the commands.
    Chat {
        /// The session to continue (created if new).
        #[arg(long, default_value = "default")]
        session: String,
        /// Set the session's own instructions (kept for its later turns; "" clears them).
        #[arg(long, value_name = "TEXT")]
        session_prompt: Option<String>,
        /// Work on this issue (as `run --issue`; kept for the session's later turns).
        #[arg(long, value_name = "N")]
        issue: Option<i64>,
    },
    /// Keep every server and the agent running: each kitbag-cron firing becomes a user
    /// message in its entry's session and runs a turn there. SIGTERM or Ctrl-C stops.
    Daemon,
    /// OAuth logins to the config's remote servers: `kitbag auth login NAME`, `status`,
    /// `logout NAME` (tokens in this user's store).
    Auth {
        #[command(subcommand)]
        action: oauth_client::login::AuthCommand,
    },
    /// Kubernetes manifests: `kitbag deploy render --profile team|single`.
    Deploy {
        #[command(subcommand)]
        action: DeployCommand,
    },
    /// Run one embedded kitbag server on stdio (used as a child process).
    Server {
        family: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeployCommand {
    /// Write the manifests (stdout, or one file per object with --output DIR).
    Render(Box<kitbag_deploy::RenderArgs>),
}

/// The config file to read: `--config` / `$KITBAG_CONFIG`, else `./agent.json`. Never
/// `./.mcp.json` on its own: that is the client's file, and it usually lists this host.
fn config_path(cli: &Cli) -> Option<PathBuf> {
    if let Some(p) = &cli.config {
        return Some(p.clone());
    }
    Some(PathBuf::from("agent.json")).filter(|p| p.exists())
}

pub fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    match config_path(cli) {
        Some(p) => load_file(&p),
        None => families::embedded_default(),
    }
}

/// A config file as the host runs it: a file without a server list (say one that only sets
/// `model`, or declares agents) serves the embedded default with its settings and agents;
/// `"mcp": {}` means no server.
fn load_file(path: &std::path::Path) -> anyhow::Result<Config> {
    let mut cfg = kitbag_config::load(path)?;
    if !cfg.servers_given {
        cfg.servers = families::embedded_default()?.servers;
        // The file's timeouts and memory limit reach the default's servers too.
        cfg = kitbag_config::with_env(cfg, |k| std::env::var(k).ok())?;
    }
    Ok(cfg)
}

type Started = (
    Arc<Hub>,
    Option<Arc<kitbag_config::policy::Policy>>,
    kitbag_config::policy::Agents,
    Vec<kitbag_config::settings::Setting>,
);

/// `everything`: start every server now (`kitbag doctor` checks them all); else the
/// embedded families that can wait start on their first call.
async fn start(cli: &Cli, agent: Option<&str>, everything: bool) -> anyhow::Result<Started> {
    let cfg = load_config(cli)?;
    let policy = kitbag_config::policy::for_agent(&cfg, agent)?;
    let agents = kitbag_config::policy::Agents::new(&cfg);
    let known = if everything {
        None
    } else {
        let secs = kitbag_config::settings::get(&cfg.settings, "idle_stop_secs")
            .and_then(|s| s.value.as_u64())
            .unwrap_or(kitbag_config::settings::DEFAULT_IDLE_STOP.as_secs());
        Some(families::known_tools(std::time::Duration::from_secs(secs))?)
    };
    let busy_poll = kitbag_config::settings::get(&cfg.settings, "busy_poll_us")
        .and_then(|s| s.value.as_u64())
        .map_or(
            kitbag_config::settings::DEFAULT_BUSY_POLL,
            std::time::Duration::from_micros,
        );
    kitbag_shared::busy_poll::set_budget(busy_poll);
    let catalogs = kitbag_hub::catalog_cache::CatalogCache::for_user();
    let hub = Hub::new(cfg.servers, config_file(cli), known, catalogs);
    hub.start_all().await;
    Ok((hub, policy, agents, cfg.settings))
}

pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    if let Some(code) = run_without_hub(&cli).await {
        return code;
    }
    // An unparsable level falls back to warn rather than stopping the host.
    let filter = kitbag_shared::flags::log_filter(&cli.log_level)
        .or_else(|_| kitbag_shared::flags::log_filter("warn"))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let serve_stdio = Command::Serve {
        serving: Box::default(),
    };
    let command = match &cli.command {
        Some(c) => c,
        // On a terminal a person is looking: show the status and how to use it.
        None if std::io::stdin().is_terminal() => {
            println!(
                "kitbag {}: MCP servers, one tool list.\n",
                env!("CARGO_PKG_VERSION")
            );
            &Command::Doctor
        }
        None => &serve_stdio,
    };
    // Checked before anything starts: a bad flag must not cost a fleet of children.
    let http_options = match command {
        Command::Serve { serving } => serving.options()?,
        _ => None,
    };
    // A span per request served (the OTEL_* variables, or --otlp-endpoint): started before
    // the children, which read the same variables from the environment they inherit.
    if let Command::Serve { serving } = command {
        kitbag_shared::otel::init(serving.otlp_endpoint.as_deref(), "kitbag")?;
    }
    kitbag_config::recursion::refuse_nested_host()?;
    let (prepared_run, prepared_agent) = prepare_agent(&cli, command).await?;
    // For the agent, --agent names a pack; the config's profile of that name applies if there
    // is one.
    let policy_agent = match (&prepared_run, &prepared_agent) {
        (Some(run), _) => run.agent.policy_agent.clone(),
        (_, Some(Prepared::Daemon(d))) => d.policy_agent.clone(),
        (_, Some(Prepared::Chat(kitbag_agent::chat::Agent::Pinned { agent, .. }))) => {
            agent.policy_agent.clone()
        }
        (_, Some(Prepared::Chat(kitbag_agent::chat::Agent::Auto))) => None,
        _ => cli.agent.clone(),
    };
    let started = Instant::now();
    let everything = matches!(command, Command::Doctor);
    let (hub, policy, agents, settings) = start(&cli, policy_agent.as_deref(), everything).await?;
    let host = HostServer {
        hub: hub.clone(),
        started,
        access: access::Access::new(policy, agents),
        audit: match &cli.audit_log {
            Some(p) => Some(kitbag_shared::audit::AuditLog::open(p)?),
            None => None,
        },
        loader: config_loader(&cli),
        settings: Arc::new(std::sync::Mutex::new(settings)),
        tools_mode: cli.tools,
        workflows: Arc::default(),
        jobs: Arc::default(),
    };
    if let Ok(cfg) = load_config(&cli) {
        host.workflows.set(&cfg);
    }
    if matches!(
        command,
        Command::Serve { .. }
            | Command::Run { .. }
            | Command::Daemon
            | Command::Chat { .. }
            | Command::Sessions {
                action: Some(_),
                ..
            }
    ) {
        reload_on_sighup(&host);
    }
    let code = match command {
        Command::Serve { .. } => serve(host, http_options).await?,
        Command::Tools { json } => print_tools(&host, *json)?,
        Command::Call { tool, args } => call(&host, tool, args.as_deref()).await?,
        Command::Doctor => doctor(&host, started, cli.command.is_none()).await,
        Command::Run { .. }
        | Command::Sessions {
            action: Some(_), ..
        } => match prepared_run {
            Some(run) => kitbag_agent::run_command(&host, run).await?,
            None => 1,
        },
        Command::Daemon => match prepared_agent {
            Some(Prepared::Daemon(d)) => {
                let as_host: Arc<dyn kitbag_agent::host::ToolHost> = Arc::new(host.clone());
                let queue = kitbag_hub::workflow_tools::queue(&host.workflows, as_host);
                kitbag_agent::daemon::run(&host, *d, queue).await?
            }
            _ => 1,
        },
        Command::Chat {
            session,
            session_prompt,
            issue,
        } => match prepared_agent {
            Some(Prepared::Chat(a)) => {
                kitbag_agent::chat::run(
                    &host,
                    a,
                    &load_config(&cli)?,
                    session,
                    session_prompt.as_deref(),
                    *issue,
                )
                .await?
            }
            _ => 1,
        },
        Command::Workflow { action } => workflow_command(&host, action).await?,
        Command::Server { .. }
        | Command::Sessions { action: None, .. }
        | Command::Deploy { .. }
        | Command::Auth { .. } => 0,
    };
    hub.stop_all(hub::STOP_GRACE);
    Ok(code)
}

/// The subcommands that need no hub (and no logging set up): a server family, the session
/// list, rendering a deployment. `None` for the others.
async fn run_without_hub(cli: &Cli) -> Option<anyhow::Result<i32>> {
    match &cli.command {
        Some(Command::Server { family, args }) => {
            Some(families::run(family, args.clone()).await.map(|()| 0))
        }
        Some(Command::Sessions { action: None, name }) => {
            Some(kitbag_agent::sessions_command(name.as_deref()))
        }
        Some(Command::Deploy {
            action: DeployCommand::Render(args),
        }) => Some(kitbag_deploy::render_command(args)),
        Some(Command::Auth { action }) => Some(match load_config(cli) {
            Ok(cfg) => oauth_client::login::command(&cfg, action).await,
            Err(e) => Err(e),
        }),
        _ => None,
    }
}

/// What `daemon` and `chat` run with, prepared before any child starts.
enum Prepared {
    Daemon(Box<kitbag_agent::PreparedAgent>),
    Chat(kitbag_agent::chat::Agent),
}

/// The agent commands check their arguments and build their model client before any child
/// starts: `run` its prompt and session (and routes it with `--agent auto`), `daemon` and
/// `chat` their agent.
async fn prepare_agent(
    cli: &Cli,
    command: &Command,
) -> anyhow::Result<(Option<kitbag_agent::PreparedRun>, Option<Prepared>)> {
    let agent = cli.agent.as_deref();
    Ok(match command {
        Command::Run {
            session,
            image,
            prompt,
            session_prompt,
            issue,
            json,
            max_steps,
            read_only,
        } => (
            Some(
                kitbag_agent::prepare_run(
                    &load_config(cli)?,
                    agent,
                    session,
                    prompt,
                    image,
                    session_prompt.as_deref(),
                )
                .await?
                .with_issue(*issue)
                .with_json(*json)
                .with_bounds(*max_steps, *read_only),
            ),
            None,
        ),
        Command::Sessions {
            action:
                Some(SessionsCommand::Answer {
                    session,
                    answers,
                    decline,
                    cancel,
                }),
            ..
        } => {
            let refusal = match (decline, cancel) {
                (true, _) => Some("decline"),
                (_, true) => Some("cancel"),
                _ => None,
            };
            let config = load_config(cli)?;
            let run =
                kitbag_agent::prepare_answer(&config, agent, session, answers, refusal).await?;
            (Some(run), None)
        }
        Command::Daemon => (
            None,
            Some(Prepared::Daemon(Box::new(
                kitbag_agent::prepare_agent(&load_config(cli)?, agent, None).await?,
            ))),
        ),
        Command::Chat { session, .. } => {
            kitbag_agent::record::check_name(session)?;
            let config = load_config(cli)?;
            let chat = if agent == Some("auto") {
                // The model and every pack are checked now; each line is routed as it comes.
                kitbag_agent::prepare_agent(&config, None, None).await?;
                kitbag_agent::router::load_packs(&std::env::current_dir()?)?;
                kitbag_agent::chat::Agent::Auto
            } else {
                kitbag_agent::chat::Agent::Pinned {
                    name: agent.map(str::to_owned),
                    agent: Box::new(kitbag_agent::prepare_agent(&config, agent, None).await?),
                }
            };
            (None, Some(Prepared::Chat(chat)))
        }
        _ => (None, None),
    })
}

/// SIGHUP re-reads the configuration, like host_reload — in every command that keeps the
/// servers running (`serve`, and the agent's `run`, `chat`, `daemon`: kitbag-vm's
/// `self_restart` sends it, and without a handler it would end the agent mid-turn).
fn reload_on_sighup(host: &HostServer) {
    let on_hup = host.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            match on_hup.reload().await {
                Ok(r) => tracing::warn!(
                    "SIGHUP reload: started {:?}, stopped {:?}",
                    r.started,
                    r.stopped
                ),
                Err(e) => tracing::warn!("SIGHUP reload failed: {e}"),
            }
        }
    });
}

/// `kitbag serve`: MCP over stdio, or HTTP when asked.
async fn serve(
    host: HostServer,
    http_options: Option<kitbag_shared::http::HttpOptions>,
) -> anyhow::Result<i32> {
    let served = match http_options {
        Some(options) => http::serve_http(host, options).await,
        None => stdio::serve_stdio(host).await,
    };
    // The last spans go out before the children are stopped and the host exits.
    kitbag_shared::otel::shutdown(kitbag_shared::server::OTEL_FLUSH_LIMIT).await;
    served?;
    Ok(0)
}

/// `kitbag tools`: one line per tool (its description's first line), or JSON.
fn print_tools(host: &HostServer, json: bool) -> anyhow::Result<i32> {
    let tools = host.tools();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "tools": tools }))?
        );
    } else {
        for t in tools {
            println!(
                "{:<28} {}",
                t.name,
                t.description
                    .as_deref()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
    }
    Ok(0)
}

/// `kitbag call TOOL ARGS`: exit 0 on success, 1 for a tool error, 2 for no such tool.
/// `kitbag workflow …`: the host's workflow tools from the command line; `run` waits for the
/// run's end (exit 0 when it succeeded, 1 when it failed).
async fn workflow_command(host: &HostServer, action: &WorkflowCommand) -> anyhow::Result<i32> {
    use kitbag_hub::workflow_tools;
    let caller = "operator:cli";
    let print = |v: &serde_json::Value| {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    };
    match action {
        WorkflowCommand::List => {
            let l = workflow_tools::list(&host.workflows);
            if l.workflows.is_empty() {
                println!(
                    "no workflows: declare them in agent.json's `workflows` or .kitbag/workflows/NAME.json"
                );
            }
            for w in &l.workflows {
                println!("{:<24} {:>3} steps  {}", w.name, w.steps, w.description);
            }
            Ok(0)
        }
        WorkflowCommand::Run { name, inputs } => {
            let inputs: serde_json::Value = match inputs {
                Some(s) => {
                    serde_json::from_str(s).map_err(|e| anyhow::anyhow!("inputs: not JSON: {e}"))?
                }
                None => serde_json::json!({}),
            };
            let Some(inputs) = inputs.as_object().cloned() else {
                anyhow::bail!("inputs: must be a JSON object");
            };
            let host_arc: Arc<dyn kitbag_agent::host::ToolHost> = Arc::new(host.clone());
            match workflow_tools::run_to_end(&host.workflows, host_arc, caller, name, inputs).await
            {
                Ok(run) => {
                    print(&serde_json::to_value(&run)?);
                    Ok(i32::from(
                        run.status != kitbag_agent::workflow::run::RunStatus::Succeeded,
                    ))
                }
                Err(e) => {
                    eprintln!("kitbag workflow run: {} ({})", e.message, e.code);
                    Ok(2)
                }
            }
        }
        WorkflowCommand::Status { run_id } => match workflow_tools::status(&host.workflows, run_id)
        {
            Ok(run) => {
                print(&serde_json::to_value(&run)?);
                Ok(0)
            }
            Err(e) => {
                eprintln!("kitbag workflow status: {} ({})", e.message, e.code);
                Ok(2)
            }
        },
    }
}

async fn call(host: &HostServer, tool: &str, args: Option<&str>) -> anyhow::Result<i32> {
    let args: serde_json::Value = match args {
        Some(a) => {
            serde_json::from_str(a).map_err(|e| anyhow::anyhow!("arguments: not JSON: {e}"))?
        }
        None => serde_json::json!({}),
    };
    let Some(obj) = args.as_object().cloned() else {
        anyhow::bail!("arguments: must be a JSON object");
    };
    // A tool that asks the operator (`ask`, `form`) asks the person at this command's stdin.
    kitbag_agent::host::ToolHost::set_operator(
        host,
        Some(kitbag_agent::operator::StdinOperator::new()),
    );
    // Through dispatch, as an MCP client's call goes: the host's own tools too, the
    // agent policy, the audit log.
    Ok(match call_with_progress_bar(host, tool, obj).await {
        Ok(r) => {
            for c in &r.content {
                if let Some(t) = c.as_text() {
                    println!("{}", t.text);
                }
            }
            i32::from(r.is_error.unwrap_or(false))
        }
        Err(e) => {
            eprintln!("{}; `kitbag tools` lists them", e.message);
            2
        }
    })
}

/// `kitbag doctor` (and a bare `kitbag` on a terminal, `first_look`): each server's state,
/// collisions and overridden settings. Exit 1 when something is wrong.
async fn doctor(host: &HostServer, started: Instant, first_look: bool) -> i32 {
    let status = host.status();
    let mut problems = 0;
    for s in &status.servers {
        let ok = matches!(
            s.state,
            hub::State::Ready | hub::State::Disabled | hub::State::Skipped
        );
        problems += usize::from(!ok);
        println!(
            "{} {:<12} {:<10} {:>4} tools  {}",
            match s.state {
                hub::State::Skipped => "skip",
                _ if ok => "ok  ",
                _ => "FAIL",
            },
            s.name,
            format!("{:?}", s.state).to_lowercase(),
            s.tools,
            match (&s.ready_ms, &s.last_error) {
                (_, Some(e)) => e.clone(),
                (Some(ms), None) => format!("ready in {ms} ms"),
                _ => String::new(),
            }
        );
    }
    for c in &status.collisions {
        problems += 1;
        println!("collision: {c}");
    }
    if let Some(problem) = cron_store_problem(host).await {
        problems += 1;
        println!("{problem}");
    }
    // A grant that matches nothing does nothing: said, not dropped.
    let offered: Vec<String> = host
        .hub
        .flat()
        .listed
        .iter()
        .map(|t| t.name.clone())
        .chain(["host_status".to_string(), "host_reload".to_string()])
        .collect();
    let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
    for note in host.access.unmatched_grants(&offered) {
        println!("note: {note}");
    }
    println!(
        "{} tools from {} servers in {} ms",
        status.tools,
        status.servers.len(),
        started.elapsed().as_millis()
    );
    let overridden: Vec<String> = status
        .settings
        .iter()
        .filter(|s| s.source != kitbag_config::settings::Source::Default)
        .map(|s| {
            let from = match s.source {
                kitbag_config::settings::Source::Env => s.env.to_string(),
                _ => "config".to_string(),
            };
            format!("{} = {} (from {from})", s.key, s.value)
        })
        .collect();
    if !overridden.is_empty() {
        println!("settings: {}", overridden.join(", "));
    }
    if first_look {
        println!("\nAdd it to Claude Code:  claude mcp add kitbag -- kitbag serve");
        println!("More: kitbag tools · kitbag call TOOL '{{...}}' · kitbag doctor");
    }
    i32::from(problems > 0)
}

/// What kitbag-cron could not import from a hand-written `.kitbag/cron.json` (kept in place,
/// never dropped): a store it cannot read at all, or entries kept as written.
async fn cron_store_problem(host: &HostServer) -> Option<String> {
    use kitbag_agent::host::ToolHost;
    const TOOL: &str = "cron_status";
    if !host.tools().iter().any(|t| t.name == TOOL) {
        return None;
    }
    let r = host
        .call(
            TOOL,
            None,
            "doctor/cron_status".into(),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .ok()?;
    if r.is_error == Some(true) {
        let text: Vec<String> = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        return Some(format!("cron: {}", text.join(" ")));
    }
    let unparsable = r.structured_content?["unparsable_entries"].as_u64()?;
    (unparsable > 0).then(|| {
        format!("cron: {unparsable} entries of cron.json kept as written, not scheduled (cron_list lists them under problems)")
    })
}

/// `kitbag call`: forward the call with a progress token and draw the progress on stderr.
async fn call_with_progress_bar(
    host: &HostServer,
    tool: &str,
    args: serde_json::Map<String, serde_json::Value>,
) -> Result<rmcp::model::CallToolResult, rmcp::ErrorData> {
    let hub = &host.hub;
    let mut rx = hub.local_progress();
    let bar = tokio::spawn(async move {
        let mut drew = false;
        while let Some(p) = rx.recv().await {
            let total = p.total.map(|t| format!("/{t}")).unwrap_or_default();
            let msg = p.message.unwrap_or_default();
            eprint!("\r\x1b[2K[progress {}{total}] {msg}", p.progress);
            drew = true;
        }
        if drew {
            eprintln!();
        }
    });
    let token =
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("kitbag-cli".into()));
    let meta = pipeline::CallMeta {
        request_id: "kitbag-call".into(),
        progress: Some((token, None)),
        ct: Default::default(),
        trace: None,
    };
    let result = host.dispatch(tool, Some(args), meta).await;
    hub.clear_local_progress(); // the bar task ends with the stream
    let _ = bar.await;
    result
}

/// The config file in force as an absolute path (None: the embedded default). Resolved
/// once, at start: a reload re-reads this file even if the working directory changed, and
/// children get it as `KITBAG_HOST_CONFIG`.
fn config_file(cli: &Cli) -> Option<PathBuf> {
    let path = config_path(cli)?;
    Some(
        std::fs::canonicalize(&path)
            .or_else(|_| std::path::absolute(&path))
            .unwrap_or(path),
    )
}

/// How `host_reload` re-reads the configuration: the same file, found the same way.
fn config_loader(cli: &Cli) -> Option<serve::ConfigLoader> {
    let path = config_file(cli)?;
    Some(Arc::new(move || load_file(&path)))
}
