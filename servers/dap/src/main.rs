use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_dap::run(kitbag_dap::Args::parse()).await
}
