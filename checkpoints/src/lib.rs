//! kitbag-checkpoints: the change journal every kitbag write path records to, and the
//! checkpoints made from it — the undo for every client and every write path.
//!
//! - [`recorder`]: what a write path calls around its change (kitbag-files, kitbag-search's
//!   `edit_ast`, kitbag-lsp's rename, kitbag-vm's copies into the root);
//! - [`checkpoint`]: making a checkpoint (a content-addressed snapshot of the files changed
//!   since the last), sign-offs, the listing, pruning;
//! - [`restore`]: rewinding files to a checkpoint, all or nothing, refused for files changed
//!   outside kitbag since, with a diff preview;
//! - [`store`] and [`journal`]: the directory (`<root>/.kitbag/checkpoints`) and its journal.
//!
//! kitbag-files serves the tools over it.

pub mod checkpoint;
pub mod journal;
pub mod recorder;
pub mod restore;
pub mod store;

pub use recorder::{Content, Recorder};
