//! Which ast-grep languages this build contains.
//!
//! By default all of them (`all-languages`); a smaller build picks grammars with the
//! `lang-*` features, e.g. `--no-default-features --features lang-rust,lang-python`.
//! ast-grep-language panics when asked for a grammar that was not compiled in, so every
//! language a caller names or a file implies goes through [`compiled`] first.

use ast_grep_language::{Language, SupportLang};

/// Whether `lang`'s grammar is compiled into this build.
pub fn compiled(lang: SupportLang) -> bool {
    if cfg!(feature = "all-languages") {
        return true;
    }
    use SupportLang::*;
    match lang {
        Bash => cfg!(feature = "lang-bash"),
        C => cfg!(feature = "lang-c"),
        Cpp => cfg!(feature = "lang-cpp"),
        CSharp => cfg!(feature = "lang-csharp"),
        Css => cfg!(feature = "lang-css"),
        Dart => cfg!(feature = "lang-dart"),
        Elixir => cfg!(feature = "lang-elixir"),
        Go => cfg!(feature = "lang-go"),
        Haskell => cfg!(feature = "lang-haskell"),
        Hcl => cfg!(feature = "lang-hcl"),
        Html => cfg!(feature = "lang-html"),
        Java => cfg!(feature = "lang-java"),
        JavaScript => cfg!(feature = "lang-javascript"),
        Json => cfg!(feature = "lang-json"),
        Kotlin => cfg!(feature = "lang-kotlin"),
        Lua => cfg!(feature = "lang-lua"),
        Markdown => cfg!(feature = "lang-markdown"),
        Nix => cfg!(feature = "lang-nix"),
        Php => cfg!(feature = "lang-php"),
        Python => cfg!(feature = "lang-python"),
        Ruby => cfg!(feature = "lang-ruby"),
        Rust => cfg!(feature = "lang-rust"),
        Scala => cfg!(feature = "lang-scala"),
        Solidity => cfg!(feature = "lang-solidity"),
        Swift => cfg!(feature = "lang-swift"),
        Tsx | TypeScript => cfg!(feature = "lang-typescript"),
        Yaml => cfg!(feature = "lang-yaml"),
        Zig => cfg!(feature = "lang-zig"),
    }
}

/// Every language of this build.
pub fn available() -> Vec<SupportLang> {
    SupportLang::all_langs()
        .iter()
        .copied()
        .filter(|l| compiled(*l))
        .collect()
}

/// The compiled language of a file, by its extension.
pub fn of_path(path: &std::path::Path) -> Option<SupportLang> {
    SupportLang::from_path(path).filter(|l| compiled(*l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "all-languages")]
    #[test]
    fn the_default_build_has_every_language() {
        assert_eq!(available().len(), SupportLang::all_langs().len());
        assert!(available().len() >= 28);
    }

    /// Run with `--no-default-features --features lang-rust,lang-python`.
    #[cfg(all(
        not(feature = "all-languages"),
        feature = "lang-rust",
        feature = "lang-python",
        not(feature = "lang-typescript")
    ))]
    #[test]
    fn a_reduced_build_has_only_its_languages() {
        use ast_grep_core::tree_sitter::LanguageExt;
        assert_eq!(available(), vec![SupportLang::Python, SupportLang::Rust]);
        assert!(of_path(std::path::Path::new("a.ts")).is_none());
        assert_eq!(
            of_path(std::path::Path::new("a.rs")),
            Some(SupportLang::Rust)
        );
        // The grammars that are in really parse.
        let root = SupportLang::Rust.ast_grep("fn main() { let x = 1; }");
        assert_eq!(root.root().kind(), "source_file");
        let root = SupportLang::Python.ast_grep("x = 1\n");
        assert_eq!(root.root().kind(), "module");
    }
}
