use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_shell::Args::parse();
    run_main(kitbag_shell::THREADS, || kitbag_shell::run(args))
}
