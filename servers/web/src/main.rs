use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_web::run(kitbag_web::Args::parse()).await
}
