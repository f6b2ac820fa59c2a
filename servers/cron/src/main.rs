use clap::Parser;
use kitbag_shared::runtime::{Threads, main as run_main};

fn main() -> anyhow::Result<()> {
    let args = kitbag_cron::Args::parse();
    run_main(Threads::Multi, || kitbag_cron::run(args))
}
