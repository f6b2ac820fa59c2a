use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_dap::Args::parse();
    run_main(kitbag_dap::THREADS, || kitbag_dap::run(args))
}
