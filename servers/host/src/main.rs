use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = kitbag::Cli::parse();
    // The host only relays messages: one thread avoids cross-core wake-ups on every hop.
    // Embedded servers (`kitbag server <family>`) get the multi-threaded runtime they expect.
    let runtime = match cli.command {
        Some(kitbag::Command::Server { .. }) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
    };
    let code = runtime.block_on(kitbag::run(cli))?;
    std::process::exit(code);
}
