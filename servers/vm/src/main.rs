use clap::Parser;
use kitbag_shared::runtime::main as run_main;

fn main() -> anyhow::Result<()> {
    // The same binary is the agent inside every instance.
    if let Some(args) = kitbag_vm::agent_args() {
        return kitbag_vm::agent::main(&args);
    }
    let args = kitbag_vm::Args::parse();
    run_main(kitbag_vm::THREADS, || kitbag_vm::run(args))
}
