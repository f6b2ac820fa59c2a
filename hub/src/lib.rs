//! kitbag-hub: the gateway. It starts child MCP servers (and connects remote ones), offers
//! all their tools, prompts and resources as one flat list, and takes every tool call
//! through one pipeline, over stdio or HTTP.
//!
//! Its layers, each pointing only down:
//! - failures and the OAuth client: [`failure`], [`oauth_client`];
//! - children and remote connections: [`fastpath`] (the byte-level link to a child),
//!   [`remote`], [`relay`] (a child's requests asked of the client), [`mrtr`], [`upstream`];
//! - the registry: [`registry`] (`Hub`: children, the flat list and its routes, reload),
//!   [`wake`] (servers that start on their first call), [`child_catalog`] (prompts and
//!   resources: the data; the registry keeps it current), [`catalog_cache`] (what lazy
//!   external servers offered at their last start);
//! - who may call what: [`access`]; a call's record: [`ledger`];
//! - the one call pipeline: [`pipeline`] (route → permit → record → forward through rmcp)
//!   and [`byte_call`] (forward as bytes), [`host_tools`] (`host_status`, `host_reload`),
//!   [`lazy`] (`--tools lazy`);
//! - fronts: [`serve`] (`HostServer`, the rmcp `ServerHandler`), [`catalog`] (prompt and
//!   resource requests), [`stdio`], [`http`], and [`agent_host`] (the gateway as
//!   kitbag-agent's `ToolHost`).

pub mod access;
pub mod agent_host;
pub mod asking;
pub mod byte_call;
pub mod catalog;
pub mod catalog_cache;
pub mod child_catalog;
pub mod delegate_tool;
pub mod failure;
pub mod fastpath;
pub mod host_tools;
pub mod http;
pub mod job_tools;
pub mod lazy;
pub mod ledger;
pub mod line_out;
pub mod mrtr;
pub mod oauth_client;
pub mod own_answer;
pub mod pipeline;
pub mod registry;
pub mod relay;
pub mod remote;
pub mod serve;
pub mod stdio;
pub mod upstream;
pub mod wake;
pub mod workflow_tools;
