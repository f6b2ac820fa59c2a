//! The journal, checkpoints and restores on real files in a temporary root.

use std::fs;
use std::path::Path;

use kitbag_checkpoints::checkpoint::{self, ChangeKind};
use kitbag_checkpoints::restore::{Action, restore};
use kitbag_checkpoints::store::{self, Change, Image, Line};
use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::paths::{Access, Parents};
use kitbag_shared::{ErrorCode, PathPolicy, atomic};

fn policy(root: &Path) -> PathPolicy {
    PathPolicy::new(root, &[], false).expect("policy")
}

/// A kitbag write: the old content recorded, the file replaced atomically, the new recorded.
fn write(p: &PathPolicy, rel: &str, bytes: &[u8]) {
    let (r, parent) = p
        .parent(rel, "path", Access::Write, Parents::Create)
        .expect("parent");
    let mut rec = Recorder::begin(p, "file_write");
    rec.before(&r.abs, Content::At(&parent));
    atomic::write_atomic_at(&parent, bytes).expect("write");
    rec.after(&r.abs, Content::Bytes(bytes));
    rec.finish();
}

fn delete(p: &PathPolicy, rel: &str) {
    let (r, parent) = p
        .entry_parent(rel, "path", Access::Write, Parents::MustExist)
        .expect("parent");
    let mut rec = Recorder::begin(p, "file_delete");
    rec.before(&r.abs, Content::At(&parent));
    parent.remove_file().expect("rm");
    rec.after(&r.abs, Content::Absent);
    rec.finish();
}

fn read(root: &Path, rel: &str) -> Option<String> {
    fs::read_to_string(root.join(rel)).ok()
}

#[test]
fn a_restore_rewinds_every_change_since_the_checkpoint_and_only_those() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    let p = policy(root);
    fs::write(root.join("kept.txt"), "untouched\n").expect("w");
    write(&p, "a.txt", b"a1\n");
    write(&p, "b.txt", b"b1\n");

    let first = checkpoint::create(&p, "first", Some("two files")).expect("checkpoint");
    assert_eq!(first.id, 1);
    assert!(!first.reused);
    let kinds: Vec<_> = first
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.change))
        .collect();
    assert_eq!(
        kinds,
        [
            ("a.txt", ChangeKind::Created),
            ("b.txt", ChangeKind::Created)
        ]
    );

    write(&p, "a.txt", b"a2\n");
    write(&p, "a.txt", b"a3\n");
    write(&p, "src/new.rs", b"fn main() {}\n");
    delete(&p, "b.txt");
    let listing = checkpoint::list(&p).expect("list");
    assert_eq!(listing.changed, ["a.txt", "src/new.rs", "b.txt"]);
    assert_eq!(listing.checkpoints[0].changed_since, 3);

    // A preview changes nothing and shows the diffs.
    let shown = restore(&p, 1, None, true).expect("preview");
    assert!(shown.preview);
    let actions: Vec<_> = shown
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.action))
        .collect();
    assert_eq!(
        actions,
        [
            ("a.txt", Action::Write),
            ("src/new.rs", Action::Remove),
            ("b.txt", Action::Create)
        ]
    );
    let diff = shown.files[0].diff.as_deref().expect("diff");
    assert!(diff.contains("-a3") && diff.contains("+a1"), "{diff}");
    assert_eq!(read(root, "a.txt").as_deref(), Some("a3\n"));

    let done = restore(&p, 1, None, false).expect("restore");
    assert_eq!(done.files.len(), 3);
    assert_eq!(read(root, "a.txt").as_deref(), Some("a1\n"));
    assert_eq!(read(root, "b.txt").as_deref(), Some("b1\n"));
    assert_eq!(read(root, "src/new.rs"), None);
    assert_eq!(read(root, "kept.txt").as_deref(), Some("untouched\n"));

    // The restore is journaled: the same checkpoint again has nothing left to do, and a
    // second checkpoint taken before the restore could bring the later state back.
    let again = restore(&p, 1, None, false).expect("again");
    assert!(again.files.is_empty());
    assert_eq!(again.unchanged, 3);
}

#[test]
fn a_file_changed_outside_kitbag_is_never_overwritten() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path();
    let p = policy(root);
    write(&p, "a.txt", b"one\n");
    write(&p, "b.txt", b"bee\n");
    checkpoint::create(&p, "before the edits", None).expect("checkpoint");
    write(&p, "a.txt", b"two\n");
    write(&p, "b.txt", b"bee two\n");
    // Someone else edits a.txt (a shell command, an editor).
    fs::write(root.join("a.txt"), "three, by hand\n").expect("w");

    let e = restore(&p, 1, None, false).expect_err("refused");
    assert_eq!(e.code, ErrorCode::ChangedOutsideSession, "{e:?}");
    assert_eq!(e.detail["files"][0]["path"], "a.txt");
    let shown = e.detail["files"][0]["restore_diff"].as_str().expect("diff");
    assert!(
        shown.contains("-three, by hand") && shown.contains("+one"),
        "{shown}"
    );
    assert_eq!(read(root, "a.txt").as_deref(), Some("three, by hand\n"));
    assert_eq!(
        read(root, "b.txt").as_deref(),
        Some("bee two\n"),
        "nothing restored"
    );

    // The other file alone can be restored.
    let done = restore(&p, 1, Some(&["b.txt".to_string()]), false).expect("b only");
    assert_eq!(done.files.len(), 1);
    assert_eq!(read(root, "b.txt").as_deref(), Some("bee\n"));
    let e = restore(&p, 1, Some(&["nope".to_string()]), false).expect_err("unknown path");
    assert_eq!(e.code, ErrorCode::InvalidParams);
    assert_eq!(e.detail["field"], "paths[0]");
    let e = restore(&p, 9, None, false).expect_err("unknown id");
    assert_eq!(e.code, ErrorCode::CheckpointNotFound);
}

#[test]
fn an_unanswered_checkpoint_asked_again_is_the_same_checkpoint() {
    let d = tempfile::tempdir().expect("tmp");
    let p = policy(d.path());
    write(&p, "a.txt", b"x");
    let one = checkpoint::create(&p, "review", None).expect("1");
    let again = checkpoint::create(&p, "review", None).expect("again");
    assert_eq!((again.id, again.reused), (one.id, true));
    assert_eq!(again.files, one.files);
    checkpoint::sign_off(&p, one.id, "approve", Some("fine")).expect("sign");
    let next = checkpoint::create(&p, "review", None).expect("next");
    assert_eq!((next.id, next.reused), (2, false));
    assert!(next.files.is_empty());
    let other = checkpoint::create(&p, "another reason", None).expect("other");
    assert_eq!(other.id, 3);
    let listing = checkpoint::list(&p).expect("list");
    let ids: Vec<u64> = listing.checkpoints.iter().map(|c| c.id).collect();
    assert_eq!(ids, [3, 2, 1]);
    assert_eq!(listing.checkpoints[2].decision.as_deref(), Some("approve"));
    assert_eq!(listing.checkpoints[2].comment.as_deref(), Some("fine"));
}

/// The journal lives in the root, where the agent's commands can write: a line naming a path
/// outside the root, or an object whose content no longer matches its digest, restores
/// nothing.
#[test]
fn a_tampered_journal_cannot_write_outside_the_root() {
    let d = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let root = d.path();
    let p = policy(root);
    let victim = outside.path().join("victim.txt");
    fs::write(&victim, "safe\n").expect("w");
    write(&p, "a.txt", b"one\n");
    checkpoint::create(&p, "c", None).expect("checkpoint");
    write(&p, "a.txt", b"two\n");
    let forged = Line::Change(Change {
        ts: 0,
        tool: "file_write".into(),
        path: victim.display().to_string(),
        before: Image::Absent,
        after: Image::Content {
            sha256: store::digest(b"safe\n"),
            size: 5,
        },
    });
    let journal = root.join(store::DIR).join("journal.jsonl");
    let mut text = fs::read_to_string(&journal).expect("journal");
    text.push_str(&serde_json::to_string(&forged).expect("json"));
    text.push('\n');
    fs::write(&journal, text).expect("w");
    let e = restore(&p, 1, None, false).expect_err("the forged path is refused");
    assert_eq!(e.code, ErrorCode::ChangedOutsideSession, "{e:?}");
    assert_eq!(
        e.detail["files"][0]["path"],
        victim.display().to_string(),
        "{e:?}"
    );
    assert_eq!(fs::read_to_string(&victim).expect("r"), "safe\n");
    assert_eq!(read(root, "a.txt").as_deref(), Some("two\n"));
    // The genuine change still restores; the forged one never touches the file outside.
    restore(&p, 1, Some(&["a.txt".to_string()]), false).expect("a.txt alone");
    assert_eq!(read(root, "a.txt").as_deref(), Some("one\n"));
    assert_eq!(fs::read_to_string(&victim).expect("r"), "safe\n");

    // An object altered in place.
    let d2 = tempfile::tempdir().expect("tmp");
    let p2 = policy(d2.path());
    write(&p2, "a.txt", b"one\n");
    checkpoint::create(&p2, "c", None).expect("checkpoint");
    write(&p2, "a.txt", b"two\n");
    let object = d2
        .path()
        .join(store::DIR)
        .join("objects")
        .join(store::digest(b"one\n"));
    fs::write(&object, "evil\n").expect("w");
    let e = restore(&p2, 1, None, false).expect_err("altered");
    assert_eq!(e.code, ErrorCode::NotRestorable, "{e:?}");
    assert_eq!(read(d2.path(), "a.txt").as_deref(), Some("two\n"));
}

#[test]
fn old_checkpoints_are_pruned_by_count_and_their_objects_removed() {
    let d = tempfile::tempdir().expect("tmp");
    let p = policy(d.path());
    for i in 0..store::MAX_CHECKPOINTS + 5 {
        write(&p, "a.txt", format!("version {i}\n").as_bytes());
        checkpoint::create(&p, &format!("c{i}"), None).expect("checkpoint");
    }
    let listing = checkpoint::list(&p).expect("list");
    assert_eq!(listing.checkpoints.len(), store::MAX_CHECKPOINTS);
    assert_eq!(listing.checkpoints.last().expect("oldest").id, 6);
    let objects = fs::read_dir(d.path().join(store::DIR).join("objects"))
        .expect("ls")
        .count();
    assert!(
        objects <= store::MAX_CHECKPOINTS + 1,
        "{objects} objects kept"
    );
    assert_eq!(
        restore(&p, 1, None, true).expect_err("pruned").code,
        ErrorCode::CheckpointNotFound
    );
    restore(&p, 6, None, false).expect("the oldest kept");
    assert_eq!(read(d.path(), "a.txt").as_deref(), Some("version 5\n"));
}

#[test]
fn without_a_checkpoint_only_paths_are_journaled() {
    let d = tempfile::tempdir().expect("tmp");
    let p = policy(d.path());
    write(&p, "a.txt", b"one\n");
    write(&p, "a.txt", b"two\n");
    assert!(
        !d.path().join(store::DIR).join("objects").exists(),
        "no content stored"
    );
    let listing = checkpoint::list(&p).expect("list");
    assert_eq!(listing.changed, ["a.txt"]);
    assert_eq!(listing.stored_bytes, 0);
    // The first checkpoint knows the file was created (its first write made it).
    let made = checkpoint::create(&p, "c", None).expect("checkpoint");
    assert_eq!(made.files[0].change, ChangeKind::Created);
    assert_eq!(made.files[0].bytes, Some(4));
}

/// Writers in flight while checkpoints are made (threads here; the lock is `flock`, per open
/// file, so processes behave the same): a restore gives every file exactly the content the
/// checkpoint's snapshot recorded for it — no write slips between a snapshot and its journal.
#[test]
fn a_checkpoint_taken_during_writes_restores_to_its_own_snapshot() {
    let d = tempfile::tempdir().expect("tmp");
    let p = policy(d.path());
    for i in 0..4 {
        write(&p, &format!("t{i}.txt"), b"start\n");
    }
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || {
                for k in 0..60 {
                    write(&p, &format!("t{i}.txt"), format!("t{i} v{k}\n").as_bytes());
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let made = checkpoint::create(&p, "mid-flight", None).expect("checkpoint");
    for w in writers {
        w.join().expect("writer");
    }
    let journal = d.path().join(store::DIR).join("journal.jsonl");
    let marker = fs::read_to_string(&journal)
        .expect("journal")
        .lines()
        .map(|l| serde_json::from_str::<Line>(l).expect("line"))
        .find_map(|l| match l {
            Line::Checkpoint(m) if m.id == made.id => Some(m),
            _ => None,
        })
        .expect("marker");
    restore(&p, made.id, None, false).expect("restore");
    for f in &marker.files {
        let now = fs::read(d.path().join(&f.path)).expect("read");
        match &f.now {
            Image::Content { sha256, .. } => assert_eq!(&store::digest(&now), sha256, "{}", f.path),
            other => panic!("{}: {other:?}", f.path),
        }
    }
}
