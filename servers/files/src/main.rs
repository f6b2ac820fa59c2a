use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_files::Args::parse();
    run_main(kitbag_files::THREADS, || kitbag_files::run(args))
}
