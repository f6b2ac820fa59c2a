//! kitbag-cdp: the Chrome DevTools Protocol as its client speaks it.
//!
//! [`Connection`] numbers commands and matches their answers by `id`, and hands events on in
//! order with the session (a flattened target) they belong to, whatever carries the
//! messages. [`pipe`] carries them over the two descriptors a browser started with
//! `--remote-debugging-pipe` reads and writes, so no debugging port is ever open.

pub mod connection;
pub mod pipe;

pub use connection::{CdpError, Connection, Event, Inbound};
