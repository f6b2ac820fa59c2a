use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kitbag_lsp::run(kitbag_lsp::Args::parse()).await
}
