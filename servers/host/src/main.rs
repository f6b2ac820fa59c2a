use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let code = kitbag::run(kitbag::Cli::parse()).await?;
    std::process::exit(code);
}
