use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_search::Args::parse();
    run_main(kitbag_search::THREADS, || kitbag_search::run(args))
}
