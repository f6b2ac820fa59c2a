use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_files::run(kitbag_files::Args::parse()).await
}
