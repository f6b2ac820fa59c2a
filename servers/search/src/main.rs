use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_search::run(kitbag_search::Args::parse()).await
}
