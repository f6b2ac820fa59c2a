use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_shell::run(kitbag_shell::Args::parse()).await
}
