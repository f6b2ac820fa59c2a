//! The web server as the tests reach it: alone, or through `kitbag serve`.

use std::path::Path;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-web"))
}

pub fn client(args: &[&str]) -> McpClient {
    let d = std::env::temp_dir();
    McpClient::spawn(bin(), args, &d, Era::Handshake)
}

/// The web server with `args`: alone, or as the one server of a `kitbag serve` (the host
/// binary built beside this crate's; its temporary config dir is returned to keep).
pub fn client_via(args: &[&str], through_host: bool) -> (McpClient, Option<tempfile::TempDir>) {
    if !through_host {
        return (client(args), None);
    }
    let d = tempfile::tempdir().expect("tmp");
    let kitbag = kitbag_testkit::sibling_binary("kitbag");
    let mut web_args = vec!["server".to_string(), "web".to_string()];
    web_args.extend(args.iter().map(|a| a.to_string()));
    let cfg = d.path().join("agent.json");
    let entry = json!({"command": kitbag, "args": web_args});
    std::fs::write(&cfg, json!({"mcp": {"web": entry}}).to_string()).expect("agent.json");
    let c = McpClient::spawn(
        &kitbag,
        &["--config", &cfg.to_string_lossy(), "serve"],
        d.path(),
        Era::Handshake,
    );
    assert_eq!(c.server_info["name"], "kitbag", "the host answers");
    (c, Some(d))
}
