//! The kitbag servers linked into this binary. `kitbag server <family>` runs one on stdio;
//! the embedded default config re-executes this binary once per family, so every server is
//! still its own process. Adding a family is one line in `FAMILIES`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::runtime::Threads;

use clap::Parser;
use futures::future::BoxFuture;
use kitbag_hub::child_catalog::Families;
use kitbag_hub::registry::{CompiledTool, Known, KnownTools, Tools};
use rmcp::model::ResourceTemplate;

use kitbag_config::Config;
use kitbag_config::entry::{ServerEntry, ServerSpec};

type Runner = fn(Vec<String>) -> BoxFuture<'static, anyhow::Result<()>>;

fn argv(bin: &str, args: Vec<String>) -> Vec<String> {
    std::iter::once(bin.to_string()).chain(args).collect()
}

/// Each family: its name, the runtime its server runs on (as its own binary does), its server.
pub const FAMILIES: &[(&str, Threads, Runner)] = &[
    ("files", kitbag_files::THREADS, |a| {
        Box::pin(kitbag_files::run(kitbag_files::Args::parse_from(argv(
            "kitbag-files",
            a,
        ))))
    }),
    ("search", kitbag_search::THREADS, |a| {
        Box::pin(kitbag_search::run(kitbag_search::Args::parse_from(argv(
            "kitbag-search",
            a,
        ))))
    }),
    ("shell", kitbag_shell::THREADS, |a| {
        Box::pin(kitbag_shell::run(kitbag_shell::Args::parse_from(argv(
            "kitbag-shell",
            a,
        ))))
    }),
    ("web", kitbag_web::THREADS, |a| {
        Box::pin(kitbag_web::run(kitbag_web::Args::parse_from(argv(
            "kitbag-web",
            a,
        ))))
    }),
    ("memory", kitbag_memory::THREADS, |a| {
        Box::pin(kitbag_memory::run(kitbag_memory::Args::parse_from(argv(
            "kitbag-memory",
            a,
        ))))
    }),
    ("dap", kitbag_dap::THREADS, |a| {
        Box::pin(kitbag_dap::run(kitbag_dap::Args::parse_from(argv(
            "kitbag-dap",
            a,
        ))))
    }),
    ("lsp", kitbag_lsp::THREADS, |a| {
        Box::pin(kitbag_lsp::run(kitbag_lsp::Args::parse_from(argv(
            "kitbag-lsp",
            a,
        ))))
    }),
    ("issues", kitbag_issues::THREADS, |a| {
        Box::pin(kitbag_issues::run(kitbag_issues::Args::parse_from(argv(
            "kitbag-issues",
            a,
        ))))
    }),
    ("cron", kitbag_cron::THREADS, |a| {
        Box::pin(kitbag_cron::run(kitbag_cron::Args::parse_from(argv(
            "kitbag-cron",
            a,
        ))))
    }),
    ("vm", kitbag_vm::THREADS, |a| {
        Box::pin(kitbag_vm::run(kitbag_vm::Args::parse_from(argv(
            "kitbag-vm",
            a,
        ))))
    }),
];

/// A family whose server may wait for its first call, and what it offers until then.
struct Waiting {
    family: &'static str,
    /// What it declares beyond tools.
    families: Families,
    /// Its resource templates (routed to it before it ever ran).
    templates: fn() -> Vec<ResourceTemplate>,
    /// Whether an entry of this family must start with the host after all: it has work to do
    /// in the background from the start. It is still listed from its catalog at once and
    /// started in the background (`Known::start_now`): `tools/list` does not wait for it.
    busy_at_start: fn(&ServerEntry) -> bool,
    /// It keeps nothing between calls but caches, so it may stop when unused
    /// (`idle_stop_secs`) and start again on the next call without anyone noticing. Not
    /// files (its read record), shell (jobs, sessions), lsp (warm language servers), dap
    /// (a debug session), vm (instances), issues (the bound issue), cron (its scheduler).
    stateless: bool,
}

fn never(_: &ServerEntry) -> bool {
    false
}

fn no_templates() -> Vec<ResourceTemplate> {
    Vec::new()
}

/// cron's scheduler runs from the start when there is an entry to fire (or a store other
/// servers share); with none, cron waits for its first call like the others. The entry's
/// arguments are read as the server will read them: its own environment and working
/// directory included.
fn cron_has_work(e: &ServerEntry) -> bool {
    let url = e.env.get("KITBAG_DATABASE_URL");
    if url.is_some_and(|u| !u.trim().is_empty()) {
        return true;
    }
    let flags = e.args.get(2..).unwrap_or_default().to_vec();
    let Ok(mut args) = kitbag_cron::Args::try_parse_from(argv("kitbag-cron", flags)) else {
        return true;
    };
    if let Some(cwd) = &e.cwd {
        let root = args.common.root.take().unwrap_or_else(|| ".".into());
        args.common.root = Some(std::path::Path::new(cwd).join(root));
    }
    kitbag_cron::idle::has_work(&args)
}

const TOOLS_ONLY: Families = Families {
    prompts: false,
    resources: false,
    subscribe: false,
    logging: false,
};

const START_ON_FIRST_CALL: &[Waiting] = &[
    Waiting {
        family: "files",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: false,
    },
    Waiting {
        family: "search",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: true,
    },
    Waiting {
        family: "shell",
        // Its background jobs: `shell://jobs`, `shell://jobs/<id>`.
        families: Families {
            resources: true,
            subscribe: true,
            ..TOOLS_ONLY
        },
        busy_at_start: never,
        templates: kitbag_shell::resources::templates,
        stateless: false,
    },
    Waiting {
        family: "web",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: true,
    },
    Waiting {
        family: "lsp",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: false,
    },
    Waiting {
        family: "dap",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: false,
    },
    Waiting {
        family: "vm",
        families: TOOLS_ONLY,
        busy_at_start: never,
        templates: no_templates,
        stateless: false,
    },
    Waiting {
        family: "memory",
        families: Families {
            prompts: true,
            ..TOOLS_ONLY
        },
        busy_at_start: never,
        templates: no_templates,
        stateless: true,
    },
    Waiting {
        family: "issues",
        families: Families {
            prompts: true,
            resources: true,
            subscribe: true,
            logging: false,
        },
        busy_at_start: never,
        templates: kitbag_issues::resources::templates,
        stateless: false,
    },
    Waiting {
        family: "cron",
        families: TOOLS_ONLY,
        busy_at_start: cron_has_work,
        templates: no_templates,
        stateless: false,
    },
];

// `compiled(family)`: each family's tools as its server lists them —
// `manifests/<family>/tools.json`, which the catalog tests hold equal to the server's
// `tools/list` (and `catalogs_are_the_routers` here to its router) — compiled in by
// build.rs as per-tool text, read without a parse.
include!(concat!(env!("OUT_DIR"), "/catalogs.rs"));

/// Which servers the host may start on their first call: an entry that runs this binary's
/// `server FAMILY` for a family of [`START_ON_FIRST_CALL`], with what that family offers.
/// `idle_stop`: the `idle_stop_secs` setting, the default of the families that keep nothing
/// between calls.
pub fn known_tools(idle_stop: Duration) -> anyhow::Result<KnownTools> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    Ok(Arc::new(move |spec: &ServerSpec| {
        let e = &spec.entry;
        if e.lazy == Some(false)
            || e.command != exe
            || e.args.first().map(String::as_str) != Some("server")
        {
            return None;
        }
        let family = e.args.get(1)?;
        let waiting = START_ON_FIRST_CALL.iter().find(|w| w.family == family)?;
        Some(Known {
            tools: Tools::compiled(compiled(family)?),
            families: waiting.families,
            templates: (waiting.templates)(),
            // The family's default; the entry's own `idle_stop_secs` wins (the hub applies it).
            idle_stop: (waiting.stateless && !idle_stop.is_zero()).then_some(idle_stop),
            start_now: (waiting.busy_at_start)(e),
        })
    }))
}

/// The runtime `kitbag server <family>` runs on: the family's own (an unknown family fails
/// in [`run`] anyway).
pub fn threads(family: &str) -> Threads {
    FAMILIES
        .iter()
        .find(|(name, ..)| *name == family)
        .map_or(Threads::Multi, |(_, threads, _)| *threads)
}

pub async fn run(family: &str, args: Vec<String>) -> anyhow::Result<()> {
    match FAMILIES.iter().find(|(name, ..)| *name == family) {
        Some((.., runner)) => runner(args).await,
        None => anyhow::bail!(
            "unknown server family `{family}`; embedded: {}",
            FAMILIES
                .iter()
                .map(|(n, ..)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Every embedded server, rooted at the working directory.
pub fn embedded_default() -> anyhow::Result<Config> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let cwd = std::env::current_dir()?.to_string_lossy().into_owned();
    let servers = FAMILIES
        .iter()
        .map(|(name, ..)| ServerSpec {
            name: name.to_string(),
            entry: ServerEntry {
                command: exe.clone(),
                args: vec![
                    "server".into(),
                    name.to_string(),
                    "--root".into(),
                    cwd.clone(),
                ],
                env: BTreeMap::new(),
                cwd: Some(cwd.clone()),
                enabled: true,
                ..Default::default()
            },
            error: None,
            skipped: None,
        })
        .collect();
    kitbag_config::with_env(
        Config {
            servers,
            source: None,
            ..Default::default()
        },
        |k| std::env::var(k).ok(),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rmcp::model::Tool;

    use super::*;

    /// The compiled-in catalogs are what each family's router lists (so a waiting server is
    /// listed exactly as it will answer once started), and what they read without a parse —
    /// names, descriptions, private arguments — says the same as the parsed tools.
    #[test]
    fn catalogs_are_the_routers() {
        let routers: [(&str, Vec<Tool>); 10] = [
            ("files", kitbag_files::router().list()),
            ("search", kitbag_search::router().list()),
            ("shell", kitbag_shell::router().list()),
            ("web", kitbag_web::router().list()),
            ("lsp", kitbag_lsp::router().list()),
            ("dap", kitbag_dap::router().list()),
            ("vm", kitbag_vm::router().list()),
            ("memory", kitbag_memory::router().list()),
            ("issues", kitbag_issues::router().list()),
            ("cron", kitbag_cron::router().list()),
        ];
        for (family, tools) in routers {
            let catalog = compiled(family).expect("a compiled catalog");
            let texts: Vec<serde_json::Value> = catalog
                .iter()
                .map(|t| serde_json::from_str(t.json).expect("compact JSON"))
                .collect();
            assert_eq!(
                serde_json::Value::Array(texts),
                serde_json::to_value(&tools).expect("json"),
                "manifests/{family}/tools.json differs from its router: regenerate it with KITBAG_UPDATE_CATALOG=1"
            );
            let parsed = Tools::parsed(tools);
            let read = Tools::compiled(catalog);
            assert!(
                read == *parsed.all(),
                "{family}: every tool parses as itself"
            );
            assert!(read.names().eq(parsed.names()), "{family}: names");
            for i in 0..parsed.len() {
                assert_eq!(read.description(i), parsed.description(i), "{family}");
                assert_eq!(read.private_args(i), parsed.private_args(i), "{family}");
            }
        }
        assert_eq!(
            START_ON_FIRST_CALL.len(),
            FAMILIES.len(),
            "every family can wait"
        );
    }

    #[test]
    fn the_example_config_is_valid() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent.json.example");
        let text = std::fs::read_to_string(&p).expect("agent.json.example");
        let c = kitbag_config::parse(&p, &text).expect("valid");
        let names: Vec<&str> = c.servers.iter().map(|s| s.name.as_str()).collect();
        for family in FAMILIES.iter().map(|(n, ..)| *n) {
            assert!(
                names.contains(&family),
                "{family} missing from agent.json.example"
            );
        }
        assert_eq!(c.file_settings.max_tokens, Some(8192));
    }
}
