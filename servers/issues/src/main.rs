use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_issues::run(kitbag_issues::Args::parse()).await
}
