use clap::Parser;

// One thread: a request is read, answered and written without crossing threads (slow work
// goes to the blocking pool).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kitbag_files::run(kitbag_files::Args::parse()).await
}
