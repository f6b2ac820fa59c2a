use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_issues::Args::parse();
    run_main(kitbag_issues::THREADS, || kitbag_issues::run(args))
}
