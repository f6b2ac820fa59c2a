use clap::Parser;
use kitbag_shared::runtime::{Threads, main as run_main};

// One thread: a request is read, answered and written without crossing threads (slow work
// goes to the blocking pool).
fn main() -> anyhow::Result<()> {
    let args = kitbag_files::Args::parse();
    run_main(Threads::Current, || kitbag_files::run(args))
}
