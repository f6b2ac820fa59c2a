//! Whether a cron server has anything to fire: a host starts the server's scheduler with
//! itself only then, and otherwise leaves the server waiting for its first call (which is what
//! makes an entry, and starts the scheduler).

use crate::Args;
use crate::store::Store;

/// True when a server started with `args` would have an entry to fire: an enabled entry in its
/// SQLite store, or one in a `cron.json` it would import. Also true for a store other servers
/// share (PostgreSQL: another server may add an entry at any time), inside an instance (the
/// server holds its instance alive while it has entries), and whenever the store cannot be read
/// (the server then starts and reports why). Reads only: nothing is created or imported.
pub fn has_work(args: &Args) -> bool {
    if kitbag_shared::state::pg::url_given(args.database_url.as_deref()).is_some()
        || kitbag_shared::vmlink::socket().is_some()
    {
        return true;
    }
    let Ok(policy) = args.common.policy() else {
        return true;
    };
    match Store::new(&policy, args.history_max_bytes)
        .read_only(true)
        .load()
    {
        Ok(doc) => doc.entries().any(|e| e.enabled),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(root: &std::path::Path, extra: &[&str]) -> Args {
        let mut argv = vec!["kitbag-cron", "--root", root.to_str().unwrap_or_default()];
        argv.extend_from_slice(extra);
        Args::parse_from(argv)
    }

    #[test]
    fn an_empty_root_has_nothing_to_fire_and_is_left_as_it_was() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert!(!has_work(&args(d.path(), &[])));
        assert!(!d.path().join(".kitbag").exists(), "nothing is created");
    }

    #[test]
    fn a_cron_json_waiting_for_import_has_work_and_stays_unimported() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(d.path().join(".kitbag")).unwrap_or_else(|e| panic!("{e}"));
        let json = r#"[{"id": "cron-1", "schedule": "@daily", "message": "m"}]"#;
        std::fs::write(d.path().join(".kitbag/cron.json"), json).unwrap_or_else(|e| panic!("{e}"));
        assert!(has_work(&args(d.path(), &[])));
        assert!(d.path().join(".kitbag/cron.json").exists());
        assert!(!d.path().join(".kitbag/cron.db").exists());
    }

    #[test]
    fn a_shared_store_always_has_work() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let url = "postgres://nobody@%2Fnonexistent/db";
        assert!(has_work(&args(d.path(), &["--database-url", url])));
    }
}
