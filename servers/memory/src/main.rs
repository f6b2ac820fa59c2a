use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_memory::run(kitbag_memory::Args::parse()).await
}
