//! kitbag-issues over stdio: the seed's project-management tests, the state machine,
//! bad input, both protocol eras, the catalog, resources, several processes, export/import.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Env, Env as Backend, bin, create};
use kitbag_testkit::on_both_backends;
use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::{Value, json};

on_both_backends!(
    both_eras_catalog_and_root_only_meta,
    list_happy_path_filter_search_and_pagination,
    get_detail_not_found_and_operator_only_updates,
    create_numbers_limits_and_author,
    update_bodies_assignment_and_bad_input,
    comments_and_visibility,
    the_state_machine,
    concurrent_creates_from_two_processes_get_unique_sequential_numbers,
    export_import_round_trips_exactly,
    resources_read_and_notify_in_both_eras,
    get_pages_updates_and_todos_at_the_result_budget,
    list_pages_at_the_result_budget,
    list_pages_say_when_they_are_cut,
);

fn get(c: &mut McpClient, n: i64) -> Value {
    c.call_ok("issue_get", json!({"number": n})).structured
}

fn both_eras_catalog_and_root_only_meta(env: &Env) {
    for era in [Era::Handshake, Era::Modern] {
        let mut c = env.spawn_era(era, &[]);
        let tools = c.list_tools();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "ask",
                "form",
                "issue_bind",
                "issue_comment",
                "issue_create",
                "issue_get",
                "issue_list",
                "issue_transition",
                "issue_update",
                "todo"
            ]
        );
        for t in &tools {
            assert_eq!(
                t["_meta"]["kitbag/principal_scope"], "root-only",
                "{}",
                t["name"]
            );
            assert_eq!(t["outputSchema"]["type"], "object", "{}", t["name"]);
        }
        let n = create(&mut c, &format!("era {era:?}"), "works");
        let g = get(&mut c, n);
        assert_eq!(g["title"], format!("era {era:?}"));
        if era == Era::Handshake {
            assert_catalog_matches(
                &mut c,
                &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/issues/tools.json"),
            );
        }
        assert!(c.stdout_garbage().is_empty());
        assert_eq!(c.shutdown(), Some(0));
    }
}

fn list_happy_path_filter_search_and_pagination(env: &Env) {
    let mut c = env.spawn(&[]);
    create(
        &mut c,
        "Add dark mode support",
        "The UI should support a dark palette.",
    );
    create(
        &mut c,
        "Login crash",
        "Submitting the form with an empty password crashes.",
    );
    create(
        &mut c,
        "Refactor auth module",
        "Split token validation from sessions.",
    );
    // Happy path: all three with their fields, newest first.
    let r = c.call_ok("issue_list", json!({}));
    let s = &r.structured;
    assert_eq!(s["total"], 3);
    assert_eq!(
        (s["limit"].as_i64(), s["offset"].as_i64()),
        (Some(25), Some(0))
    );
    let issues = s["issues"].as_array().expect("issues");
    assert_eq!(issues.len(), 3);
    assert_eq!(issues[0]["number"], 3);
    for i in issues {
        assert_eq!(i["id"].as_str().expect("id").len(), 26, "ULID: {i}");
        assert_eq!(i["status"], "open");
        assert_eq!(i["assignment"], Value::Null);
        assert_eq!(i["created_by"], "agent:primary");
        assert!(i["created_at"].as_i64().expect("ts") > 1_700_000_000);
        assert!(i["updated_at"].as_i64().is_some());
        for k in ["title", "number"] {
            assert!(!i[k].is_null(), "{k}: {i}");
        }
    }
    assert!(
        r.text.contains("#1 [open] Add dark mode support"),
        "{}",
        r.text
    );

    // Status filter: only triaged.
    c.call_ok("issue_transition", json!({"number": 2, "to": "triaged"}));
    let r = c.call_ok("issue_list", json!({"status": "triaged"}));
    let nums: Vec<i64> = r.structured["issues"]
        .as_array()
        .expect("a")
        .iter()
        .map(|i| i["number"].as_i64().expect("n"))
        .collect();
    assert_eq!(nums, [2]);
    assert_eq!(r.structured["issues"][0]["status"], "triaged");

    // Search: title words and body words.
    let r = c.call_ok("issue_list", json!({"search": "dark"}));
    assert_eq!(r.structured["total"], 1);
    assert_eq!(r.structured["issues"][0]["number"], 1);
    let r = c.call_ok("issue_list", json!({"search": "password"}));
    assert_eq!(r.structured["total"], 1, "body words: {}", r.text);
    assert_eq!(r.structured["issues"][0]["number"], 2);
    let r = c.call_ok("issue_list", json!({"search": "token OR palette"}));
    assert_eq!(r.structured["total"], 2);
    // A query that is bad FTS5 syntax still works as plain words.
    let r = c.call_ok("issue_list", json!({"search": "\"empty password"}));
    assert_eq!(r.structured["total"], 1, "{}", r.text);
    // Resolved issues leave the default list but not status=all.
    c.call_ok(
        "issue_transition",
        json!({"number": 3, "to": "resolved", "comment": "Done."}),
    );
    assert_eq!(c.call_ok("issue_list", json!({})).structured["total"], 2);
    assert_eq!(
        c.call_ok("issue_list", json!({"status": "all"})).structured["total"],
        3
    );

    // Pagination: 30 issues, limit 10, offset 10.
    let env = env.sibling();
    let mut c = env.spawn(&[]);
    for i in 1..=30 {
        create(&mut c, &format!("issue {i}"), "");
    }
    let r = c.call_ok("issue_list", json!({"limit": 10, "offset": 10}));
    let nums: Vec<i64> = r.structured["issues"]
        .as_array()
        .expect("a")
        .iter()
        .map(|i| i["number"].as_i64().expect("n"))
        .collect();
    assert_eq!(nums, (11..=20).rev().collect::<Vec<_>>());
    assert_eq!(r.structured["total"], 30);
    assert_eq!(r.structured["next_offset"], 20);
    assert!(r.text.contains("next page: offset 20"), "{}", r.text);
    let last = c.call_ok("issue_list", json!({"limit": 10, "offset": 20}));
    assert!(last.structured.get("next_offset").is_none());

    // Bad arguments name their field.
    c.call_err("issue_list", json!({"status": "closed"}), "invalid_params")
        .expect_field("status");
    c.call_err("issue_list", json!({"limit": 101}), "invalid_params")
        .expect_field("limit");
    c.call_err("issue_list", json!({"limit": 0}), "invalid_params")
        .expect_field("limit");
    c.call_err("issue_list", json!({"offset": -1}), "invalid_params")
        .expect_field("offset");
    c.call_err("issue_list", json!({"search": "  "}), "invalid_params")
        .expect_field("search");
    c.call_err("issue_list", json!({"sort": "x"}), "invalid_params")
        .expect_field("sort");
}

fn get_detail_not_found_and_operator_only_updates(env: &Env) {
    let mut c = env.spawn(&[]);
    for i in 1..=42 {
        create(&mut c, &format!("issue {i}"), &format!("body {i}"));
    }
    c.call_ok("issue_transition", json!({"number": 42, "to": "triaged"}));
    c.call_ok(
        "issue_comment",
        json!({"number": 42, "body": "public note"}),
    );
    c.call_ok(
        "issue_comment",
        json!({"number": 42, "body": "internal note", "visibility": "operator_only"}),
    );
    let g = get(&mut c, 42);
    assert_eq!(g["number"], 42);
    assert_eq!(g["title"], "issue 42");
    assert_eq!(g["body"], "body 42");
    assert_eq!(g["original_body"], Value::Null);
    assert_eq!(g["status"], "triaged");
    assert_eq!(g["resolved_at"], Value::Null);
    assert_eq!(g["resolved_by"], Value::Null);
    assert_eq!(g["updates_total"], 3);
    let u = g["updates"].as_array().expect("updates");
    let kinds: Vec<&str> = u.iter().filter_map(|x| x["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["status_change", "comment", "comment"],
        "chronological"
    );
    assert_eq!(
        u[0]["metadata"],
        json!({"old_status": "open", "new_status": "triaged"})
    );
    assert_eq!(u[0]["body"], Value::Null);
    assert_eq!(
        u[2]["visibility"], "operator_only",
        "operator-only updates included"
    );
    assert_eq!(u[2]["body"], "internal note");
    assert_eq!(u[1]["visibility"], "all");
    for x in u {
        assert_eq!(x["author"], "agent:primary");
        assert_eq!(x["id"].as_str().expect("id").len(), 26);
    }

    let e = c.call_err("issue_get", json!({"number": 43}), "issue_not_found");
    assert_eq!(e.structured["error"]["detail"]["number"], 43);
    assert!(e.text.contains("#43"), "{}", e.text);
    c.call_err("issue_get", json!({"number": 0}), "invalid_params")
        .expect_field("number");
    c.call_err("issue_get", json!({}), "invalid_params")
        .expect_field("number");
    c.call_err("issue_get", json!({"number": "x"}), "invalid_params")
        .expect_field("number");

    // Update paging.
    let g = c
        .call_ok("issue_get", json!({"number": 42, "updates_limit": 2}))
        .structured;
    assert_eq!(g["updates"].as_array().expect("u").len(), 2);
    assert_eq!(g["next_updates_offset"], 2);
    assert_eq!(g["truncated"], true);
    let g = c
        .call_ok("issue_get", json!({"number": 42, "updates_offset": 2}))
        .structured;
    assert_eq!(g["updates"][0]["body"], "internal note");
}

fn create_numbers_limits_and_author(env: &Env) {
    let mut c = env.spawn(&[]);
    let r = c.call_ok(
        "issue_create",
        json!({"title": "Refactor auth module", "body": "800 lines."}),
    );
    assert_eq!(r.structured["number"], 1);
    assert_eq!(r.structured["status"], "open");
    assert!(r.structured["created_at"].as_i64().is_some());
    assert_eq!(r.structured["id"].as_str().expect("id").len(), 26);
    assert_eq!(create(&mut c, "second", "b"), 2);
    assert_eq!(get(&mut c, 1)["created_by"], "agent:primary");

    // Bad input changes nothing.
    let long = "x".repeat(201);
    let e = c
        .call_err(
            "issue_create",
            json!({"title": long, "body": ""}),
            "invalid_params",
        )
        .expect_field("title");
    assert!(e.text.contains("200"), "{}", e.text);
    c.call_ok(
        "issue_create",
        json!({"title": "é".repeat(200), "body": ""}),
    );
    c.call_err(
        "issue_create",
        json!({"title": "  ", "body": ""}),
        "invalid_params",
    )
    .expect_field("title");
    c.call_err(
        "issue_create",
        json!({"title": "a\nb", "body": ""}),
        "invalid_params",
    )
    .expect_field("title");
    c.call_err(
        "issue_create",
        json!({"title": "big", "body": "b".repeat(16 * 1024 + 1)}),
        "invalid_params",
    )
    .expect_field("body");
    c.call_ok(
        "issue_create",
        json!({"title": "just fits", "body": "b".repeat(16 * 1024)}),
    );
    c.call_err("issue_create", json!({"title": "t"}), "invalid_params")
        .expect_field("body");
    c.call_err(
        "issue_create",
        json!({"title": "t", "body": "", "status": "open"}),
        "invalid_params",
    )
    .expect_field("status");
    assert_eq!(
        c.call_ok("issue_list", json!({"status": "all"})).structured["total"],
        4,
        "only the valid creates happened"
    );
    drop(c);

    // --principal sets the author of every change.
    let mut c = env.spawn(&["--principal", "operator:alice"]);
    let n = create(&mut c, "by alice", "");
    c.call_ok("issue_comment", json!({"number": n, "body": "hi"}));
    c.call_ok(
        "issue_transition",
        json!({"number": n, "to": "resolved", "comment": "Done."}),
    );
    let g = get(&mut c, n);
    assert_eq!(g["created_by"], "operator:alice");
    assert_eq!(g["resolved_by"], "operator:alice");
    for u in g["updates"].as_array().expect("u") {
        assert_eq!(u["author"], "operator:alice");
    }
    assert_eq!(n, 5, "numbers continue across processes");
}

fn update_bodies_assignment_and_bad_input(env: &Env) {
    let mut c = env.spawn(&["--workflow", "deploy"]);
    let n = create(&mut c, "Dark mode", "first body");
    let r = c.call_ok(
        "issue_update",
        json!({"number": n, "body": "second body", "assignment": "primary"}),
    );
    assert_eq!(
        r.structured["updated_fields"],
        json!(["body", "assignment"])
    );
    assert_eq!(r.structured["number"], n);
    let g = get(&mut c, n);
    assert_eq!(g["body"], "second body");
    assert_eq!(g["original_body"], "first body", "preserved on first edit");
    assert_eq!(g["assignment"], "primary");
    c.call_ok("issue_update", json!({"number": n, "body": "third body"}));
    let g = get(&mut c, n);
    assert_eq!(g["body"], "third body");
    assert_eq!(
        g["original_body"], "first body",
        "unchanged by the second edit"
    );
    let kinds: Vec<&str> = g["updates"]
        .as_array()
        .expect("u")
        .iter()
        .filter_map(|u| u["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["body_edit", "assignment_change", "body_edit"]);
    assert_eq!(
        g["updates"][1]["metadata"],
        json!({"old_assignment": null, "new_assignment": "primary"})
    );

    // Assignment to a workflow, a session, and unassignment.
    c.call_ok(
        "issue_update",
        json!({"number": n, "assignment": "workflow:deploy"}),
    );
    assert_eq!(get(&mut c, n)["assignment"], "workflow:deploy");
    c.call_ok(
        "issue_update",
        json!({"number": n, "assignment": "session:01HXAB"}),
    );
    assert_eq!(get(&mut c, n)["assignment"], "session:01HXAB");
    c.call_ok("issue_update", json!({"number": n, "assignment": null}));
    assert_eq!(get(&mut c, n)["assignment"], Value::Null);
    c.call_ok("issue_update", json!({"number": n, "title": "Night mode"}));
    let g = get(&mut c, n);
    assert_eq!(g["title"], "Night mode");
    let before = g.to_string();

    // Nonexistent workflow → invalid_assignment; nothing changes.
    let e = c
        .call_err(
            "issue_update",
            json!({"number": n, "assignment": "workflow:nope", "title": "changed?"}),
            "invalid_assignment",
        )
        .expect_field("assignment");
    assert_eq!(
        e.structured["error"]["detail"]["known_workflows"],
        json!(["deploy"])
    );
    c.call_err(
        "issue_update",
        json!({"number": n, "assignment": "bob"}),
        "invalid_params",
    )
    .expect_field("assignment");
    c.call_err("issue_update", json!({"number": n}), "invalid_params")
        .expect_field("title");
    c.call_err(
        "issue_update",
        json!({"number": n, "title": ""}),
        "invalid_params",
    )
    .expect_field("title");
    c.call_err(
        "issue_update",
        json!({"number": n, "title": "t".repeat(201)}),
        "invalid_params",
    )
    .expect_field("title");
    c.call_err(
        "issue_update",
        json!({"number": n, "body": "b".repeat(16385)}),
        "invalid_params",
    )
    .expect_field("body");
    c.call_err(
        "issue_update",
        json!({"number": 99, "title": "x"}),
        "issue_not_found",
    )
    .expect_field("number");
    c.call_err(
        "issue_update",
        json!({"number": n, "title": "Night mode"}),
        "no_change",
    );
    c.call_err(
        "issue_update",
        json!({"number": n, "status": "resolved"}),
        "invalid_params",
    )
    .expect_field("status");
    assert_eq!(
        get(&mut c, n).to_string(),
        before,
        "bad input changed nothing"
    );
}

fn comments_and_visibility(env: &Env) {
    let mut c = env.spawn(&[]);
    let n = create(&mut c, "c", "");
    let r = c.call_ok(
        "issue_comment",
        json!({"number": n, "body": "Analysis complete."}),
    );
    assert_eq!(r.structured["issue_number"], n);
    let id = r.structured["update_id"].as_str().expect("id").to_string();
    let r = c.call_ok(
        "issue_comment",
        json!({"number": n, "body": "secret-ish", "visibility": "operator_only"}),
    );
    assert_eq!(r.structured["visibility"], "operator_only");
    let g = get(&mut c, n);
    let u = g["updates"].as_array().expect("u");
    assert_eq!(u[0]["id"], id.as_str());
    assert_eq!(u[0]["kind"], "comment");
    assert_eq!(u[0]["body"], "Analysis complete.");
    assert_eq!(u[0]["author"], "agent:primary");
    assert_eq!(u[1]["visibility"], "operator_only");
    c.call_err(
        "issue_comment",
        json!({"number": n, "body": ""}),
        "invalid_params",
    )
    .expect_field("body");
    c.call_err(
        "issue_comment",
        json!({"number": n, "body": " \n "}),
        "invalid_params",
    )
    .expect_field("body");
    c.call_err(
        "issue_comment",
        json!({"number": n, "body": "x", "visibility": "everyone"}),
        "invalid_params",
    )
    .expect_field("visibility");
    c.call_err(
        "issue_comment",
        json!({"number": 7, "body": "x"}),
        "issue_not_found",
    );
    assert_eq!(get(&mut c, n)["updates_total"], 2);
}

fn the_state_machine(env: &Env) {
    let mut c = env.spawn(&[]);
    let n = create(&mut c, "s", "");
    let r = c.call_ok("issue_transition", json!({"number": n, "to": "triaged"}));
    assert_eq!(
        (r.structured["from"].as_str(), r.structured["to"].as_str()),
        (Some("open"), Some("triaged"))
    );
    let g = get(&mut c, n);
    assert_eq!(g["status"], "triaged");
    assert_eq!(g["updates"][0]["kind"], "status_change");

    // Illegal: triaged → triaged (same), triaged → reopened; detail lists legal targets.
    for to in ["triaged", "reopened"] {
        let e = c
            .call_err(
                "issue_transition",
                json!({"number": n, "to": to}),
                "invalid_transition",
            )
            .expect_field("to");
        assert_eq!(
            e.structured["error"]["detail"]["legal_transitions"],
            json!(["assigned", "in_progress", "resolved", "rejected"]),
            "{}",
            e.text
        );
        assert!(
            e.text.contains("assigned, in_progress, resolved, rejected"),
            "{}",
            e.text
        );
    }
    let m = create(&mut c, "open one", "");
    let e = c.call_err(
        "issue_transition",
        json!({"number": m, "to": "reopened"}),
        "invalid_transition",
    );
    assert_eq!(
        e.structured["error"]["detail"]["legal_transitions"],
        json!(["triaged", "assigned", "in_progress", "resolved", "rejected"])
    );
    c.call_err(
        "issue_transition",
        json!({"number": m, "to": "open"}),
        "invalid_params",
    )
    .expect_field("to");
    c.call_err(
        "issue_transition",
        json!({"number": m, "to": "done"}),
        "invalid_params",
    )
    .expect_field("to");
    c.call_err(
        "issue_transition",
        json!({"number": 99, "to": "triaged"}),
        "issue_not_found",
    );

    // Rejected needs a comment.
    for args in [
        json!({"number": m, "to": "rejected"}),
        json!({"number": m, "to": "rejected", "comment": "   "}),
    ] {
        let e = c
            .call_err("issue_transition", args, "invalid_params")
            .expect_field("comment");
        assert!(
            e.text
                .ends_with("Rejection requires an explanatory comment."),
            "{}",
            e.text
        );
        assert_eq!(
            e.structured["error"]["message"],
            "Rejection requires an explanatory comment."
        );
    }
    assert_eq!(get(&mut c, m)["status"], "open", "unchanged");
    // So does resolved (seed 004's amendment).
    let e = c
        .call_err(
            "issue_transition",
            json!({"number": m, "to": "resolved"}),
            "invalid_params",
        )
        .expect_field("comment");
    assert!(
        e.text
            .ends_with("Resolution requires an explanatory comment."),
        "{}",
        e.text
    );
    assert_eq!(get(&mut c, m)["status"], "open", "unchanged");
    let r = c.call_ok(
        "issue_transition",
        json!({"number": m, "to": "rejected", "comment": "Duplicate of #1."}),
    );
    assert!(r.structured["comment_id"].is_string());
    let g = get(&mut c, m);
    let kinds: Vec<&str> = g["updates"]
        .as_array()
        .expect("u")
        .iter()
        .filter_map(|u| u["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["status_change", "comment"]);
    assert_eq!(g["resolved_at"], Value::Null);

    // Full path: triaged → assigned → in_progress → resolved → reopened → resolved.
    for to in ["assigned", "in_progress"] {
        c.call_ok("issue_transition", json!({"number": n, "to": to}));
    }
    let e = c.call_err(
        "issue_transition",
        json!({"number": n, "to": "assigned"}),
        "invalid_transition",
    );
    assert_eq!(
        e.structured["error"]["detail"]["legal_transitions"],
        json!(["resolved", "rejected"])
    );
    c.call_ok(
        "issue_transition",
        json!({"number": n, "to": "resolved", "comment": "Fixed in abc123."}),
    );
    let g = get(&mut c, n);
    assert_eq!(g["status"], "resolved");
    assert!(g["resolved_at"].as_i64().expect("resolved_at") > 0);
    assert_eq!(g["resolved_by"], "agent:primary");
    let e = c.call_err(
        "issue_transition",
        json!({"number": n, "to": "in_progress"}),
        "invalid_transition",
    );
    assert_eq!(
        e.structured["error"]["detail"]["legal_transitions"],
        json!(["reopened"])
    );
    c.call_ok("issue_transition", json!({"number": n, "to": "reopened"}));
    let g = get(&mut c, n);
    assert_eq!(g["status"], "reopened");
    assert_eq!(g["resolved_at"], Value::Null);
    assert_eq!(g["resolved_by"], Value::Null);
    c.call_ok(
        "issue_transition",
        json!({"number": n, "to": "resolved", "comment": "Done."}),
    );
    let g = get(&mut c, n);
    assert_eq!(g["status"], "resolved");
    assert_eq!(g["resolved_by"], "agent:primary");
    let statuses: Vec<String> = g["updates"]
        .as_array()
        .expect("u")
        .iter()
        .filter(|u| u["kind"] == "status_change")
        .map(|u| u["metadata"]["new_status"].as_str().expect("s").to_string())
        .collect();
    assert_eq!(
        statuses,
        [
            "triaged",
            "assigned",
            "in_progress",
            "resolved",
            "reopened",
            "resolved"
        ]
    );
}

fn concurrent_creates_from_two_processes_get_unique_sequential_numbers(env: &Env) {
    // Create the schema once so both start on the same file.
    drop(env.spawn(&[]));
    let per = 40;
    let handles: Vec<_> = (0..2)
        .map(|p| {
            let mut c = env.spawn(&[]);
            std::thread::spawn(move || {
                (0..per)
                    .map(|i| create(&mut c, &format!("p{p} i{i}"), ""))
                    .collect::<Vec<i64>>()
            })
        })
        .collect();
    let mut all: Vec<i64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("thread"))
        .collect();
    all.sort();
    assert_eq!(
        all,
        (1..=2 * per).collect::<Vec<_>>(),
        "unique and gap-free"
    );
    let mut c = env.spawn(&[]);
    assert_eq!(
        c.call_ok("issue_list", json!({"limit": 1})).structured["total"],
        2 * per
    );
    // Another project on the same database counts from 1.
    let mut other = env.spawn_project(Era::Handshake, "other", &[]);
    assert_eq!(create(&mut other, "first of other", ""), 1);
}

#[test]
fn corrupted_database_is_a_clear_startup_error() {
    let env = Env::new();
    std::fs::create_dir_all(env.db().parent().expect("p")).expect("mkdir");
    std::fs::write(
        env.db(),
        b"this is not sqlite at all, just text".repeat(200),
    )
    .expect("w");
    let out = Command::new(bin())
        .args(["--db", env.db().to_str().expect("u")])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("issues database"), "{stderr}");
    assert!(stderr.contains("not a usable SQLite database"), "{stderr}");
    assert!(
        stderr.contains(env.db().to_str().expect("u")),
        "names the file: {stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout");

    // A real database damaged in its pages.
    let env = Env::new();
    {
        let mut c = env.spawn(&[]);
        for i in 0..200 {
            create(&mut c, &format!("issue {i}"), &"lorem ipsum ".repeat(100));
        }
        assert_eq!(c.shutdown(), Some(0));
    }
    let mut bytes = std::fs::read(env.db()).expect("read");
    assert!(bytes.len() > 64 * 1024, "checkpointed into the main file");
    for b in &mut bytes[8192..40960] {
        *b = 0xA5;
    }
    std::fs::write(env.db(), &bytes).expect("write");
    let out = Command::new(bin())
        .args(["--db", env.db().to_str().expect("u")])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("corrupted") || stderr.contains("not a usable SQLite database"),
        "{stderr}"
    );
}

#[test]
fn default_database_lives_under_the_root() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(
        bin(),
        &["--root", d.path().to_str().expect("u")],
        d.path(),
        Era::Handshake,
    );
    create(&mut c, "rooted", "");
    assert!(d.path().join(".kitbag/issues.db").exists());
}

fn export(env: &Env) -> String {
    let out = env.command(&["export"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn import(env: &Env, file: &std::path::Path) -> std::process::Output {
    env.command(&["import", file.to_str().expect("u")])
}

fn export_import_round_trips_exactly(a: &Env) {
    {
        let mut c = a.spawn(&["--issue", "1", "--workflow", "deploy"]);
        create(
            &mut c,
            "First",
            "body with \"quotes\", unicode é and\nnewlines",
        );
        create(&mut c, "Second", "two");
        c.call_ok(
            "issue_update",
            json!({"number": 1, "body": "edited", "assignment": "workflow:deploy"}),
        );
        c.call_ok(
            "issue_comment",
            json!({"number": 1, "body": "hidden", "visibility": "operator_only"}),
        );
        c.call_ok(
            "issue_transition",
            json!({"number": 2, "to": "rejected", "comment": "dup"}),
        );
        c.call_ok(
            "todo",
            json!({"action": "set", "items": ["one", "two"], "phase": "p1"}),
        );
        c.call_ok("todo", json!({"action": "add", "items": ["crit"], "kind": "criterion", "origin_agent": "primary/sub"}));
        c.call_ok("todo", json!({"action": "start", "content": "one"}));
        c.call_ok(
            "todo",
            json!({"action": "note", "content": "one", "text": "a note"}),
        );
        c.call_ok("todo", json!({"action": "drop", "content": "two"}));
    }
    let mut o = a.spawn_project(Era::Handshake, "other", &[]);
    create(&mut o, "Other project", "x");
    drop(o);
    let first = export(a);
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 3, "{first}");
    let rec: Value = serde_json::from_str(lines[0]).expect("json");
    assert_eq!(rec["project"], "other");
    let rec: Value = serde_json::from_str(lines[1]).expect("json");
    assert_eq!(rec["number"], 1);
    assert_eq!(
        rec["original_body"],
        "body with \"quotes\", unicode é and\nnewlines"
    );
    assert_eq!(rec["updates"].as_array().expect("u").len(), 3);
    assert_eq!(rec["todos"].as_array().expect("t").len(), 3);

    // Into a fresh database: byte-identical export.
    let b = a.sibling();
    let file = a.dir.path().join("issues.jsonl");
    std::fs::write(&file, &first).expect("w");
    let out = import(&b, &file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 new"));
    assert_eq!(export(&b), first, "round trip is exact");
    // Importing again replaces in place: still identical, and numbering continues.
    let out = import(&b, &file);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("3 replaced"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(export(&b), first);
    let mut c = b.spawn(&[]);
    assert_eq!(create(&mut c, "Third", ""), 3);
    assert!(
        c.call_ok("issue_list", json!({"search": "edited"}))
            .structured["total"]
            == 1,
        "FTS rebuilt"
    );

    // A bad line imports nothing and says where.
    let bad = b.dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{}\n{{\"nope\": 1}}\n",
            lines[0].replace("Other project", "Renamed")
        ),
    )
    .expect("w");
    let out = import(&b, &bad);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!export(&b).contains("Renamed"));
    // A number clash with a different id is refused.
    let clash = b.dir.path().join("clash.jsonl");
    let mut rec: Value = serde_json::from_str(lines[1]).expect("j");
    rec["id"] = json!("01JAAAAAAAAAAAAAAAAAAAAAAA");
    std::fs::write(&clash, format!("{rec}\n")).expect("w");
    let out = import(&b, &clash);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another id"));
}

fn wait_for_update(c: &McpClient, uri: &str) -> bool {
    wait_for_update_within(c, uri, Duration::from_secs(10))
}

fn wait_for_update_within(c: &McpClient, uri: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen.extend(c.take_notifications());
        if seen
            .iter()
            .any(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri)
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn resources_read_and_notify_in_both_eras(env: &Env) {
    let mut c = env.spawn(&[]);
    create(&mut c, "Add dark mode", "palette");
    let n = create(&mut c, "Fix login", "crash");
    c.call_ok(
        "issue_transition",
        json!({"number": 1, "to": "resolved", "comment": "Done."}),
    );
    let list = c.request("resources/list", json!({}));
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(uris, ["issues://open", "issues://2"], "{list}");
    let t = c.request("resources/templates/list", json!({}));
    assert_eq!(
        t["result"]["resourceTemplates"][0]["uriTemplate"],
        "issues://{number}"
    );
    let r = c.request("resources/read", json!({"uri": "issues://open"}));
    let text = r["result"]["contents"][0]["text"].as_str().expect("text");
    assert!(text.contains("#2 [open] Fix login"), "{text}");
    assert!(
        !text.contains("dark mode"),
        "resolved issues are not open: {text}"
    );
    let r = c.request("resources/read", json!({"uri": "issues://1"}));
    let text = r["result"]["contents"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("# #1 Add dark mode"), "{text}");
    assert!(text.contains("status: resolved"), "{text}");
    let r = c.request("resources/read", json!({"uri": "issues://9"}));
    assert!(r.get("error").is_some(), "{r}");

    // Handshake era: resources/subscribe, then changes here and from another process.
    let s = c.request(
        "resources/subscribe",
        json!({"uri": format!("issues://{n}")}),
    );
    assert!(s.get("result").is_some(), "{s}");
    c.take_notifications();
    c.call_ok("issue_comment", json!({"number": n, "body": "looking"}));
    assert!(wait_for_update(&c, "issues://2"), "own change announced");
    let mut other = env.spawn(&[]);
    other.call_ok("issue_transition", json!({"number": n, "to": "triaged"}));
    // On PostgreSQL the watcher polls only every 30 s: in time means NOTIFY carried it.
    assert!(
        wait_for_update_within(&c, "issues://2", Duration::from_secs(5)),
        "another process's change announced"
    );
    let u = c.request("resources/unsubscribe", json!({"uri": "issues://2"}));
    assert!(u.get("result").is_some(), "{u}");
    let bad = c.request("resources/subscribe", json!({"uri": "file:///etc/passwd"}));
    assert!(bad.get("error").is_some(), "{bad}");

    // 2026-07-28: subscriptions/listen.
    let mut m = env.spawn_era(Era::Modern, &[]);
    let _listen = m.send_request(
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": ["issues://open", "issues://2"]}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    other.call_ok(
        "issue_comment",
        json!({"number": n, "body": "from elsewhere"}),
    );
    assert!(wait_for_update(&m, "issues://2"), "modern subscription");
    let n3 = create(&mut other, "third", "");
    assert!(wait_for_update(&m, "issues://open"));
    let _ = n3;
}

/// On PostgreSQL change numbers are taken in one order and committed in another: a change
/// whose transaction commits after a later change was announced is still announced (the
/// watcher once moved past it for good, and a subscriber never heard of it).
#[test]
fn a_change_committed_after_a_later_one_is_announced() {
    let Some(env) = Env::postgres() else { return };
    let mut c = env.spawn(&[]);
    let (first, second) = (create(&mut c, "first", ""), create(&mut c, "second", ""));
    for n in [first, second] {
        let s = c.request(
            "resources/subscribe",
            json!({"uri": format!("issues://{n}")}),
        );
        assert!(s.get("result").is_some(), "{s}");
    }
    std::thread::sleep(Duration::from_millis(300));
    c.take_notifications();
    // A writer takes the next change number and holds its transaction open…
    let mut slow = env.psql_session().expect("postgres");
    slow.run("BEGIN");
    slow.run(&format!(
        "INSERT INTO change_log (project, number) VALUES ('test', {first}); \
         SELECT pg_notify('kitbag_issues', 'test')"
    ));
    // …while another process's later change commits and is announced.
    let mut other = env.spawn(&[]);
    other.call_ok("issue_comment", json!({"number": second, "body": "later"}));
    assert!(
        wait_for_update_within(&c, &format!("issues://{second}"), Duration::from_secs(5)),
        "the later change announced"
    );
    c.take_notifications();
    slow.run("COMMIT");
    assert!(
        wait_for_update_within(&c, &format!("issues://{first}"), Duration::from_secs(5)),
        "the change committed last announced too"
    );
}

/// Several servers starting at once on a new store: none fails with "database is locked"
/// (switching a new file to WAL takes a lock SQLite does not wait for).
#[test]
fn servers_starting_together_on_a_new_store_all_start() {
    for _ in 0..3 {
        let d = tempfile::tempdir().expect("tmp");
        let db = d.path().join(".kitbag/issues.db");
        let starts: Vec<_> = (0..4)
            .map(|_| {
                let (db, dir) = (db.clone(), d.path().to_path_buf());
                std::thread::spawn(move || {
                    let mut c = McpClient::spawn(
                        bin(),
                        &["--db", db.to_str().expect("u"), "--project", "test"],
                        &dir,
                        Era::Handshake,
                    );
                    assert!(!c.list_tools().is_empty());
                })
            })
            .collect();
        for s in starts {
            s.join().expect("every server started");
        }
    }
}

/// Issue #37: a default `issue_get` stays under 40 KB of structuredContent however long the
/// update stream and the checklist are (the old cut was 256 KB of update bodies, todos uncut),
/// and its paging fields resume exactly where a page stopped.
fn get_pages_updates_and_todos_at_the_result_budget(env: &Env) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let mut c = env.spawn(&[]);
    // Quotes and newlines escape to twice their bytes.
    let n = create(&mut c, "budget", &"\"\n".repeat(8000));
    for i in 0..30 {
        let body = format!("c{i} {}", "\"\n".repeat(2000));
        c.call_ok("issue_comment", json!({"number": n, "body": body}));
    }
    let mut seen: Vec<String> = Vec::new();
    let mut args = json!({"number": n});
    loop {
        let g = c.call_ok("issue_get", args.clone()).structured;
        assert!(json_len(&g) < RESULT_BUDGET_BYTES, "{}", json_len(&g));
        assert_eq!(g["body"].as_str().map(str::len), Some(16000), "body whole");
        let u = g["updates"].as_array().expect("updates");
        assert!(!u.is_empty());
        seen.extend(
            u.iter()
                .map(|x| x["body"].as_str().expect("body")[..4].to_string()),
        );
        match g["next_updates_offset"].as_i64() {
            Some(next) => {
                assert_eq!(next as usize, seen.len(), "resumes where it stopped");
                args = json!({"number": n, "updates_offset": next});
            }
            None => break,
        }
    }
    let want: Vec<String> = (0..30)
        .map(|i| format!("c{i} \"")[..4].to_string())
        .collect();
    assert_eq!(seen, want, "every comment once, in order");

    // 100 todos of ~490 characters: ~50 KB of checklist.
    c.call_ok("issue_bind", json!({"number": n}));
    let items: Vec<String> = (0..100)
        .map(|i| format!("todo {i:03} {}", "x".repeat(480)))
        .collect();
    c.call_ok("todo", json!({"action": "add", "items": items}));
    let g = c.call_ok("issue_get", json!({"number": n})).structured;
    assert!(json_len(&g) < RESULT_BUDGET_BYTES, "{}", json_len(&g));
    assert_eq!(g["todos_total"], 100);
    let first = g["todos"].as_array().expect("todos").len();
    assert!(first > 0 && first < 100, "{first}");
    assert_eq!(g["next_todos_offset"], first as i64);
    assert_eq!(g["next_updates_offset"], 0, "updates come after the todos");
    assert_eq!(g["truncated"], true);
    let g2 = c
        .call_ok("issue_get", json!({"number": n, "todos_offset": first}))
        .structured;
    assert!(json_len(&g2) < RESULT_BUDGET_BYTES);
    assert_eq!(
        g2["todos"][0]["content"], items[first],
        "nothing lost or repeated"
    );
    assert_eq!(c.shutdown(), Some(0));
}

/// Issue #37: 25 titles of 200 control characters (six bytes each escaped) by a long
/// principal made a default `issue_list` ~60 KB; it now stops under 40 KB.
fn list_pages_at_the_result_budget(env: &Env) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let principal = format!("agent:{}", "\u{1}".repeat(190));
    let mut c = env.spawn(&["--principal", &principal]);
    for i in 0..30 {
        create(&mut c, &format!("{i:02}{}", "\u{1}".repeat(198)), "b");
    }
    let r = c.call_ok("issue_list", json!({})).structured;
    assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
    let shown = r["issues"].as_array().expect("issues").len();
    assert!(shown > 0 && shown < 25, "{shown}");
    assert_eq!(r["next_offset"], shown as i64);
    // Newest first: #30 down.
    assert_eq!(r["issues"][shown - 1]["number"], 30 - (shown as i64 - 1));
    let r2 = c.call_ok("issue_list", json!({"offset": shown})).structured;
    assert_eq!(r2["issues"][0]["number"], 30 - shown as i64);
}

/// Issue #41: every page says whether it is cut (`truncated`), of how many (`total`,
/// `total_exact`), and `next_offset` walks the list without overlap or gap.
fn list_pages_say_when_they_are_cut(env: &Env) {
    let mut c = env.spawn(&[]);
    for i in 1..=13 {
        let word = if i % 2 == 0 { "even" } else { "odd" };
        create(&mut c, &format!("{word} issue {i}"), "");
    }
    for (args, total) in [(json!({}), 13), (json!({"search": "odd"}), 7)] {
        let whole = c.call_ok("issue_list", args.clone()).structured;
        assert_eq!(whole["truncated"], false, "{args}");
        assert_eq!(whole["total"], total);
        let mut paged = Vec::new();
        let mut offset = 0;
        loop {
            let mut a = args.clone();
            a["limit"] = json!(5);
            a["offset"] = json!(offset);
            let r = c.call_ok("issue_list", a).structured;
            assert_eq!(r["total"], total, "{r}");
            assert_eq!(r["total_exact"], true);
            let page = r["issues"].as_array().expect("issues").clone();
            assert_eq!(
                page.len() as i64,
                (total - offset).min(5),
                "{args} @{offset}"
            );
            paged.extend(page);
            if r["truncated"] == false {
                assert!(r.get("next_offset").is_none(), "{r}");
                break;
            }
            assert_eq!(r["next_offset"], offset + 5, "{args}");
            offset += 5;
        }
        assert_eq!(
            &paged,
            whole["issues"].as_array().expect("issues"),
            "{args}"
        );
    }
}
