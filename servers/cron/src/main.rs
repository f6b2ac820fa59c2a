use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_cron::run(kitbag_cron::Args::parse()).await
}
