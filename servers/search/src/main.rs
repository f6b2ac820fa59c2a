use clap::Parser;
use kitbag_shared::runtime::{Threads, main as run_main};

fn main() -> anyhow::Result<()> {
    let args = kitbag_search::Args::parse();
    run_main(Threads::Multi, || kitbag_search::run(args))
}
