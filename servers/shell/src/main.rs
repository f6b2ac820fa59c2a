use clap::Parser;
use kitbag_shared::runtime::{Threads, main as run_main};

fn main() -> anyhow::Result<()> {
    let args = kitbag_shell::Args::parse();
    run_main(Threads::Multi, || kitbag_shell::run(args))
}
