use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_lsp::Args::parse();
    run_main(kitbag_lsp::THREADS, || kitbag_lsp::run(args))
}
