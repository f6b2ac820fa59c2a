use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_memory::Args::parse();
    run_main(kitbag_memory::THREADS, || kitbag_memory::run(args))
}
