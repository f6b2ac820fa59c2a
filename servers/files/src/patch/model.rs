//! What a patch asks for, whatever its format: a list of file changes.

/// The patch formats `edit_patch` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Codex's `*** Begin Patch` envelope.
    ApplyPatch,
    /// `diff -u` / `git diff` output.
    Unified,
    /// Claude's text-editor commands as JSON (`str_replace`, `create`, `insert`).
    StrReplace,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::ApplyPatch => "apply_patch",
            Format::Unified => "unified",
            Format::StrReplace => "str_replace",
        }
    }
}

/// One file's change, its path as the patch names it (root-relative or absolute in the root).
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange {
    pub path: String,
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A new file with this text (it must not exist).
    Add(String),
    Delete,
    /// Changes to an existing file, which may also move: groups of edits, each applied to
    /// what the one before left (none: a pure move).
    Update {
        move_to: Option<String>,
        edits: Vec<Edits>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Edits {
    /// Context hunks, in file order, numbered against the text the group starts from.
    Hunks(Vec<Hunk>),
    /// An exact replacement (`old` → `new`; every occurrence when `all`, else it must be
    /// unique).
    Replace(Replace),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Replace {
    pub old: String,
    pub new: String,
    pub all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Context,
    Remove,
    Add,
}

/// A hunk: lines of context, removed and added, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hunk {
    /// apply_patch's `@@ text` lines: lines (e.g. `impl Foo {`, then `fn bar() {`) the hunk
    /// follows, in order.
    pub anchors: Vec<String>,
    /// The 1-based line of the old file where the hunk starts, when the format says it
    /// (for a hunk without old lines: the line it is inserted after).
    pub old_start: Option<usize>,
    pub lines: Vec<(Kind, String)>,
    /// The hunk ends at the end of the file (apply_patch `*** End of File`).
    pub at_end: bool,
    /// `\ No newline at end of file` after the old side's last line / the new side's.
    pub old_no_newline: bool,
    pub new_no_newline: bool,
}

impl Hunk {
    /// The lines the file must hold: context and removed.
    pub fn old_lines(&self) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != Kind::Add)
            .map(|(_, l)| l.as_str())
    }
}
