//! End-to-end tests live in `tests/`; `src/bin/fixture-server.rs` is a deliberately odd MCP
//! server (dotted tool names, colliding names, garbage on stdout, crashing on command).

pub mod workspace;
