use clap::Parser;
use kitbag_shared::runtime::{Threads, unblock_shutdown_signals};

/// The subcommands that build the hub (none: `serve`).
const HUB_COMMANDS: &[&str] = &["serve", "run", "daemon", "chat", "tools", "call"];

fn main() {
    // `kitbag server vm` mounts this binary into each instance as its agent.
    if let Some(args) = kitbag_vm::agent_args() {
        if let Err(e) = kitbag_vm::agent::main(&args) {
            eprintln!("kitbag agent: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    // Commands that serve the flat list list the host's own tools too: their schemas are
    // generated now, beside the argument parsing (not for `kitbag server FAMILY`, a child).
    let first = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if first.as_deref().is_none_or(|c| HUB_COMMANDS.contains(&c)) {
        // No thread: they are built in line when first needed.
        let _ = std::thread::Builder::new()
            .name("own-tools".into())
            .spawn(kitbag_hub::serve::prepare_own_tools);
    }
    let cli = kitbag::Cli::parse();
    // Before any thread exists: clients may start us with SIGINT/SIGTERM blocked.
    unblock_shutdown_signals();
    // The host only relays messages: one thread avoids cross-core wake-ups on every hop.
    // Embedded servers (`kitbag server <family>`) run on the runtime their own binary has.
    let threads = match &cli.command {
        Some(kitbag::Command::Server { family, .. }) => kitbag::families::threads(family),
        _ => Threads::Current,
    };
    let mut code = 0;
    let outcome = kitbag_shared::runtime::main(threads, || async {
        code = kitbag::run(cli).await?;
        Ok(())
    });
    if let Err(e) = outcome {
        // One line a person (or a host reporting a child) can read; no backtrace.
        eprintln!("kitbag: {e:#}");
        code = 1;
    }
    std::process::exit(code);
}
