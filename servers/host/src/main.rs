use clap::Parser;
use kitbag_shared::runtime::{Threads, unblock_shutdown_signals};

fn main() {
    // `kitbag server vm` mounts this binary into each instance as its agent.
    if let Some(args) = kitbag_vm::agent_args() {
        if let Err(e) = kitbag_vm::agent::main(&args) {
            eprintln!("kitbag agent: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let cli = kitbag::Cli::parse();
    // Before any thread exists: clients may start us with SIGINT/SIGTERM blocked.
    unblock_shutdown_signals();
    // The host only relays messages: one thread avoids cross-core wake-ups on every hop.
    // Embedded servers (`kitbag server <family>`) get the multi-threaded runtime they expect.
    let threads = match cli.command {
        Some(kitbag::Command::Server { .. }) => Threads::Multi,
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
