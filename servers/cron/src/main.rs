use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_cron::Args::parse();
    run_main(kitbag_cron::THREADS, || kitbag_cron::run(args))
}
