use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    let args = kitbag_web::Args::parse();
    run_main(kitbag_web::THREADS, || kitbag_web::run(args))
}
