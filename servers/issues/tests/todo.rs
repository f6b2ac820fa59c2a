//! The `todo` tool over stdio: the seed's kaged.todo tests, content-addressing coaching,
//! criteria and the operator, binding, the sticky reminder prompt, bad input.

mod common;

use common::{Env, Env as Backend, create};
use kitbag_testkit::on_both_backends;
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

on_both_backends!(
    view_happy_path_and_no_bound_issue,
    set_add_kind_phase_positions,
    start_done_drop_note,
    operator_may_drop_and_replace_criteria,
    content_addressing_lookup_and_coaching,
    bad_input_names_the_field_and_changes_nothing,
    sticky_reminder_prompt_and_modern_era,
    todo_and_bind_page_at_the_result_budget,
);

fn todo(c: &mut McpClient, args: Value) -> Value {
    c.call_ok("todo", args).structured
}

fn contents(v: &Value) -> Vec<String> {
    v["todos"]
        .as_array()
        .expect("todos")
        .iter()
        .map(|t| t["content"].as_str().expect("c").to_string())
        .collect()
}

fn find<'a>(v: &'a Value, content: &str) -> &'a Value {
    v["todos"]
        .as_array()
        .expect("todos")
        .iter()
        .find(|t| t["content"] == content)
        .unwrap_or_else(|| panic!("{content} not in {v}"))
}

/// A server bound to a fresh issue #1.
fn bound(env: &Env, extra: &[&str]) -> McpClient {
    let mut c = env.spawn(&[]);
    create(&mut c, "Auth rework", "Split the module.");
    drop(c);
    let mut args = vec!["--issue", "1"];
    args.extend_from_slice(extra);
    env.spawn(&args)
}

fn view_happy_path_and_no_bound_issue(env: &Env) {
    let mut c = bound(env, &[]);
    todo(
        &mut c,
        json!({"action": "add", "items": ["Implement auth module", "Write tests"]}),
    );
    todo(
        &mut c,
        json!({"action": "add", "items": ["All endpoints return 200"], "kind": "criterion"}),
    );
    todo(
        &mut c,
        json!({"action": "start", "content": "Implement auth module"}),
    );
    let v = todo(&mut c, json!({"action": "view"}));
    assert_eq!(v["issue"], 1);
    let t = v["todos"].as_array().expect("t");
    assert_eq!(t.len(), 3);
    for (i, (content, status, kind)) in [
        ("Implement auth module", "in_progress", "step"),
        ("Write tests", "pending", "step"),
        ("All endpoints return 200", "pending", "criterion"),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(t[i]["content"], *content);
        assert_eq!(t[i]["status"], *status);
        assert_eq!(t[i]["kind"], *kind);
        assert_eq!(t[i]["phase"], Value::Null);
        assert_eq!(t[i]["position"], i as i64);
        assert_eq!(t[i]["id"].as_str().expect("id").len(), 26);
    }
    assert_eq!(
        v["markdown"],
        "- [>] Implement auth module\n- [ ] Write tests\n- [ ] All endpoints return 200 (criterion)"
    );
    // The bound issue's todos show in issue_get too.
    let g = c.call_ok("issue_get", json!({"number": 1})).structured;
    assert_eq!(g["todos"].as_array().expect("t").len(), 3);

    // No bound issue.
    let mut free = env.spawn(&[]);
    let e = free.call_err("todo", json!({"action": "view"}), "no_bound_issue");
    assert!(e.text.contains("issue_bind"), "guidance: {}", e.text);
    assert!(e.text.contains("operator"), "{}", e.text);
    free.call_err(
        "todo",
        json!({"action": "add", "items": ["x"]}),
        "no_bound_issue",
    );
    // Binding with issue_bind, then unbinding.
    let b = free.call_ok("issue_bind", json!({"number": 1})).structured;
    assert_eq!(b["bound"], 1);
    assert_eq!(b["previous"], Value::Null);
    assert!(
        b["markdown"]
            .as_str()
            .expect("md")
            .contains("[>] Implement auth module")
    );
    assert_eq!(
        contents(&todo(&mut free, json!({"action": "view"}))).len(),
        3
    );
    free.call_err("issue_bind", json!({"number": 9}), "issue_not_found");
    free.call_err("issue_bind", json!({}), "invalid_params")
        .expect_field("number");
    free.call_err(
        "issue_bind",
        json!({"number": 1, "unbind": true}),
        "invalid_params",
    )
    .expect_field("unbind");
    let b = free
        .call_ok("issue_bind", json!({"unbind": true}))
        .structured;
    assert_eq!(
        (b["bound"].clone(), b["previous"].clone()),
        (Value::Null, json!(1))
    );
    free.call_err("todo", json!({"action": "view"}), "no_bound_issue");

    // A bound issue that does not exist answers issue_not_found.
    let mut ghost = env.spawn(&["--issue", "77"]);
    ghost.call_err("todo", json!({"action": "view"}), "issue_not_found");
}

fn set_add_kind_phase_positions(env: &Env) {
    let mut c = bound(env, &[]);
    let first = todo(&mut c, json!({"action": "set", "items": ["a", "b", "c"]}));
    let old_ids: Vec<String> = first["todos"]
        .as_array()
        .expect("t")
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect();
    // set replaces: the old ones are abandoned, the new ones created.
    let v = todo(&mut c, json!({"action": "set", "items": ["x", "y", "z"]}));
    assert_eq!(contents(&v), ["x", "y", "z"]);
    assert_eq!(v["abandoned_hidden"], 3);
    let all = todo(&mut c, json!({"action": "view", "include_abandoned": true}));
    for id in &old_ids {
        let t = all["todos"]
            .as_array()
            .expect("t")
            .iter()
            .find(|t| t["id"] == id.as_str())
            .expect("old todo kept");
        assert_eq!(t["status"], "abandoned");
    }
    assert!(
        all["markdown"]
            .as_str()
            .expect("md")
            .contains("- [-] ~~a~~")
    );

    // kind and phase persist.
    let v = todo(
        &mut c,
        json!({"action": "set", "items": ["Tests pass", "Docs updated"], "kind": "criterion"}),
    );
    assert_eq!(find(&v, "Tests pass")["kind"], "criterion");
    assert_eq!(
        contents(&v),
        ["Tests pass", "Docs updated"],
        "set replaces the whole list (seed 004), steps included"
    );
    todo(&mut c, json!({"action": "add", "items": ["x", "y", "z"]}));
    let v = todo(
        &mut c,
        json!({"action": "add", "items": ["Read the code", "Map callers"], "phase": "discovery"}),
    );
    assert_eq!(find(&v, "Read the code")["phase"], "discovery");
    assert!(
        v["markdown"]
            .as_str()
            .expect("md")
            .contains("### discovery\n- [ ] Read the code"),
        "{}",
        v["markdown"]
    );

    // add continues positions from the max.
    let before_max = v["todos"]
        .as_array()
        .expect("t")
        .iter()
        .map(|t| t["position"].as_i64().expect("p"))
        .max()
        .expect("max");
    let v = todo(&mut c, json!({"action": "add", "items": ["p", "q"]}));
    assert_eq!(find(&v, "p")["position"], before_max + 1);
    assert_eq!(find(&v, "q")["position"], before_max + 2);

    // Bubble-up: a subagent's proposal recorded as its sublist.
    let v = todo(
        &mut c,
        json!({"action": "add", "items": ["Check logs"], "origin_agent": "primary/researcher"}),
    );
    assert_eq!(find(&v, "Check logs")["origin_agent"], "primary/researcher");
    assert!(
        v["markdown"]
            .as_str()
            .expect("md")
            .contains("- from primary/researcher:\n  - [ ] Check logs")
    );

    // Persisted across processes.
    drop(c);
    let mut c = env.spawn(&["--issue", "1"]);
    let v = todo(&mut c, json!({"action": "view"}));
    assert_eq!(find(&v, "Tests pass")["kind"], "criterion");
    assert_eq!(find(&v, "Read the code")["phase"], "discovery");

    // set with an empty list clears the steps (criteria stay).
    let v = todo(&mut c, json!({"action": "set", "items": []}));
    assert_eq!(contents(&v), ["Tests pass", "Docs updated"]);
}

fn start_done_drop_note(env: &Env) {
    let mut c = bound(env, &[]);
    todo(
        &mut c,
        json!({"action": "add", "items": ["Implement auth module", "Write tests", "Update docs"]}),
    );
    todo(
        &mut c,
        json!({"action": "add", "items": ["All endpoints return 200"], "kind": "criterion"}),
    );
    // start promotes.
    let v = todo(&mut c, json!({"action": "start", "content": "Write tests"}));
    assert_eq!(find(&v, "Write tests")["status"], "in_progress");
    assert_eq!(v["target"], "Write tests");
    assert!(find(&v, "Write tests")["started_at"].as_i64().is_some());
    // single in_progress: the first goes back to pending.
    let v = todo(&mut c, json!({"action": "start", "content": "Update docs"}));
    assert_eq!(find(&v, "Update docs")["status"], "in_progress");
    assert_eq!(find(&v, "Write tests")["status"], "pending");
    let in_progress = v["todos"]
        .as_array()
        .expect("t")
        .iter()
        .filter(|t| t["status"] == "in_progress")
        .count();
    assert_eq!(in_progress, 1);
    // done completes.
    let v = todo(&mut c, json!({"action": "done", "content": "Update docs"}));
    assert_eq!(find(&v, "Update docs")["status"], "completed");
    assert!(find(&v, "Update docs")["completed_at"].as_i64().is_some());
    assert!(
        v["markdown"]
            .as_str()
            .expect("md")
            .contains("- [x] Update docs")
    );
    // done on a criterion is a claim: completed_at set, issue not resolved.
    let v = todo(
        &mut c,
        json!({"action": "done", "content": "All endpoints return 200"}),
    );
    let crit = find(&v, "All endpoints return 200");
    assert_eq!(crit["status"], "completed");
    assert!(crit["completed_at"].as_i64().is_some());
    assert!(
        v["markdown"]
            .as_str()
            .expect("md")
            .contains("(criterion, claimed)")
    );
    let g = c.call_ok("issue_get", json!({"number": 1})).structured;
    assert_eq!(g["status"], "open");
    assert_eq!(g["resolved_at"], Value::Null);
    // drop abandons a step.
    let v = todo(
        &mut c,
        json!({"action": "drop", "content": "Implement auth module"}),
    );
    assert!(!contents(&v).contains(&"Implement auth module".to_string()));
    let all = todo(&mut c, json!({"action": "view", "include_abandoned": true}));
    assert_eq!(find(&all, "Implement auth module")["status"], "abandoned");
    // drop on a criterion is refused for the agent.
    let e = c.call_err(
        "todo",
        json!({"action": "drop", "content": "All endpoints"}),
        "invalid_transition",
    );
    assert!(
        e.text
            .contains("Only the operator can drop acceptance criteria."),
        "{}",
        e.text
    );
    // note appends (and is echoed under the in-progress task).
    todo(&mut c, json!({"action": "start", "content": "write tests"}));
    let v = todo(
        &mut c,
        json!({"action": "note", "content": "Write tests", "text": "cover the token path"}),
    );
    assert_eq!(
        find(&v, "Write tests")["notes"]
            .as_array()
            .expect("n")
            .len(),
        1
    );
    let v = todo(
        &mut c,
        json!({"action": "note", "content": "Write tests", "text": "and expiry"}),
    );
    let notes = find(&v, "Write tests")["notes"]
        .as_array()
        .expect("n")
        .clone();
    assert_eq!(notes.len(), 2);
    assert_eq!(notes[1]["text"], "and expiry");
    assert_eq!(notes[1]["author"], "agent:primary");
    assert!(
        v["markdown"]
            .as_str()
            .expect("md")
            .contains("- [>] Write tests\n  → cover the token path\n  → and expiry"),
        "{}",
        v["markdown"]
    );
    // note max length.
    let before = todo(&mut c, json!({"action": "view"}));
    c.call_err(
        "todo",
        json!({"action": "note", "content": "Write tests", "text": "n".repeat(2001)}),
        "invalid_params",
    )
    .expect_field("text");
    todo(
        &mut c,
        json!({"action": "note", "content": "Write tests", "text": "n".repeat(2000)}),
    );
    let after = todo(&mut c, json!({"action": "view"}));
    assert_eq!(
        find(&after, "Write tests")["notes"]
            .as_array()
            .expect("n")
            .len(),
        3
    );
    assert_eq!(
        find(&before, "Write tests")["notes"]
            .as_array()
            .expect("n")
            .len(),
        2
    );
}

fn operator_may_drop_and_replace_criteria(env: &Env) {
    let mut agent = bound(env, &[]);
    todo(
        &mut agent,
        json!({"action": "set", "items": ["Latency under 50 ms"], "kind": "criterion"}),
    );
    let e = agent
        .call_err(
            "todo",
            json!({"action": "set", "items": ["Something easier"], "kind": "criterion"}),
            "invalid_transition",
        )
        .expect_field("kind");
    assert!(e.text.contains("Only the operator"), "{}", e.text);
    assert_eq!(
        contents(&todo(&mut agent, json!({"action": "view"}))),
        ["Latency under 50 ms"]
    );
    let mut op = env.spawn(&["--issue", "1", "--principal", "operator"]);
    let v = todo(&mut op, json!({"action": "drop", "content": "latency"}));
    assert!(contents(&v).is_empty());
    // `set` replaces the list (seed 004), but an agent's keeps the criteria only the operator
    // may drop; the operator's replaces them too.
    todo(
        &mut agent,
        json!({"action": "add", "items": ["Errors under 1%"], "kind": "criterion"}),
    );
    let v = todo(&mut agent, json!({"action": "set", "items": ["Profile"]}));
    assert_eq!(contents(&v), ["Errors under 1%", "Profile"]);
    let v = todo(&mut op, json!({"action": "set", "items": ["Ship it"]}));
    assert_eq!(contents(&v), ["Ship it"]);
}

fn content_addressing_lookup_and_coaching(env: &Env) {
    let mut c = bound(env, &[]);
    // Empty list: not-found says so.
    let e = c
        .call_err(
            "todo",
            json!({"action": "start", "content": "anything"}),
            "todo_not_found",
        )
        .expect_field("content");
    assert!(e.text.contains("the list is empty"), "{}", e.text);
    todo(
        &mut c,
        json!({"action": "add", "items": ["Implement auth module", "Write unit tests", "Write docs"]}),
    );
    // Partial text: case-insensitive, trimmed, unique prefix or part.
    let v = todo(
        &mut c,
        json!({"action": "start", "content": "  IMPLEMENT auth "}),
    );
    assert_eq!(v["target"], "Implement auth module");
    let v = todo(&mut c, json!({"action": "start", "content": "unit"}));
    assert_eq!(v["target"], "Write unit tests");
    // Ambiguous.
    let e = c
        .call_err(
            "todo",
            json!({"action": "done", "content": "write"}),
            "multiple_matches",
        )
        .expect_field("content");
    assert!(
        e.text.contains("Write unit tests") && e.text.contains("Write docs"),
        "{}",
        e.text
    );
    // Not found lists what is there, and echoes what was searched.
    let e = c
        .call_err(
            "todo",
            json!({"action": "done", "content": "deploy"}),
            "todo_not_found",
        )
        .expect_field("content");
    assert!(e.text.contains("\"deploy\""), "{}", e.text);
    assert!(e.text.contains("available"), "{}", e.text);
    assert_eq!(
        e.structured["error"]["detail"]["available"],
        json!(["Implement auth module", "Write unit tests", "Write docs"])
    );
    // ID-like tokens get a hint.
    for id in ["task-1", "TODO-2", "item-3", "step-4", "id-5"] {
        let e = c
            .call_err(
                "todo",
                json!({"action": "done", "content": id}),
                "content_addressing_hint",
            )
            .expect_field("content");
        assert!(e.text.contains("text"), "{}", e.text);
    }
    c.call_err(
        "todo",
        json!({"action": "add", "items": ["task-9"]}),
        "content_addressing_hint",
    );
    // Nothing changed by any of that.
    let v = todo(&mut c, json!({"action": "view"}));
    assert_eq!(find(&v, "Write unit tests")["status"], "in_progress");
    assert_eq!(find(&v, "Write docs")["status"], "pending");
}

fn bad_input_names_the_field_and_changes_nothing(env: &Env) {
    let mut c = bound(env, &[]);
    todo(&mut c, json!({"action": "add", "items": ["one", "two"]}));
    let before = todo(&mut c, json!({"action": "view"}));
    for (args, field) in [
        (json!({"action": "start"}), "content"),
        (json!({"action": "done"}), "content"),
        (json!({"action": "drop", "content": "  "}), "content"),
        (json!({"action": "note", "content": "one"}), "text"),
        (json!({"action": "note", "text": "x"}), "content"),
        (json!({"action": "add"}), "items"),
        (json!({"action": "set"}), "items"),
        (json!({"action": "add", "items": []}), "items"),
        (json!({"action": "add", "items": ["ok", ""]}), "items[1]"),
        (json!({"action": "add", "items": ["One"]}), "items[0]"),
        (
            json!({"action": "add", "items": ["dup", " DUP "]}),
            "items[1]",
        ),
        (
            json!({"action": "add", "items": ["x".repeat(501)]}),
            "items[0]",
        ),
        (
            json!({"action": "add", "items": ["x"], "kind": "goal"}),
            "kind",
        ),
        (
            json!({"action": "add", "items": ["x"], "phase": ""}),
            "phase",
        ),
        (
            json!({"action": "start", "content": "one", "items": ["x"]}),
            "items",
        ),
        (json!({"action": "view", "content": "one"}), "content"),
        (json!({"action": "explode"}), "action"),
        (json!({}), "action"),
        (json!({"action": "view", "extra": 1}), "extra"),
    ] {
        c.call_err("todo", args, "invalid_params")
            .expect_field(field);
    }
    let many: Vec<String> = (0..101).map(|i| format!("item {i}")).collect();
    c.call_err(
        "todo",
        json!({"action": "add", "items": many}),
        "invalid_params",
    )
    .expect_field("items");
    assert_eq!(todo(&mut c, json!({"action": "view"})), before);
}

fn sticky_reminder_prompt_and_modern_era(env: &Env) {
    let mut c = bound(env, &[]);
    let p = c.request("prompts/get", json!({"name": "todo_reminder"}));
    assert_eq!(
        p["result"]["messages"],
        json!([]),
        "nothing open: nothing to remind"
    );
    let items: Vec<String> = (1..=8).map(|i| format!("step {i}")).collect();
    todo(&mut c, json!({"action": "add", "items": items}));
    todo(&mut c, json!({"action": "done", "content": "step 1"}));
    todo(&mut c, json!({"action": "start", "content": "step 8"}));
    let list = c.request("prompts/list", json!({}));
    assert_eq!(list["result"]["prompts"][0]["name"], "todo_reminder");
    let p = c.request("prompts/get", json!({"name": "todo_reminder"}));
    let text = p["result"]["messages"][0]["content"]["text"]
        .as_str()
        .expect("text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Open todos on #1 Auth rework (5 of 7 open):");
    assert_eq!(
        &lines[1..],
        [
            "- [ ] step 2",
            "- [ ] step 3",
            "- [ ] step 4",
            "- [ ] step 5",
            "- [>] step 8"
        ]
    );

    let mut m = env.spawn_era(Era::Modern, &["--issue", "1"]);
    let v = todo(&mut m, json!({"action": "view"}));
    assert_eq!(v["todos"].as_array().expect("t").len(), 8);
    let e = m.call_err(
        "todo",
        json!({"action": "done", "content": "task-3"}),
        "content_addressing_hint",
    );
    assert!(e.is_error);
}

/// Issue #37: 500 todos of 499 characters that escape to six bytes each made a default `todo`
/// answer ~3 MB (the list and its markdown) and `issue_bind` ~1.5 MB; both now stop under
/// 40 KB with `next_todos_offset`, and `todo` view pages on from there. A todo whose notes
/// alone pass the budget keeps its newest notes and says so.
fn todo_and_bind_page_at_the_result_budget(env: &Env) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let mut c = bound(env, &[]);
    let items: Vec<String> = (0..500)
        .map(|i| format!("{i:03} {}", "\u{1}".repeat(495)))
        .collect();
    for chunk in items.chunks(100) {
        let v = todo(&mut c, json!({"action": "add", "items": chunk}));
        assert!(json_len(&v) < RESULT_BUDGET_BYTES, "{}", json_len(&v));
    }
    let v = todo(&mut c, json!({"action": "view"}));
    assert!(json_len(&v) < RESULT_BUDGET_BYTES, "{}", json_len(&v));
    assert_eq!(v["todos_total"], 500);
    let shown = contents(&v);
    let k = shown.len();
    assert!(k > 0 && k < 500, "{k}");
    assert_eq!(
        v["next_todos_offset"], k as i64,
        "says where the rest starts"
    );
    assert_eq!(v["truncated"], true);
    let md = v["markdown"].as_str().expect("md");
    assert!(md.contains(&items[k - 1]) && !md.contains(&items[k]));
    // Every page in turn: each todo once, in order.
    let mut seen = shown;
    let mut next = k as i64;
    loop {
        let v = todo(&mut c, json!({"action": "view", "todos_offset": next}));
        assert!(json_len(&v) < RESULT_BUDGET_BYTES, "{}", json_len(&v));
        let page = contents(&v);
        assert_eq!(
            page.first(),
            Some(&items[next as usize]),
            "resumes at the offset"
        );
        assert!(v["markdown"].as_str().expect("md").contains(&page[0]));
        seen.extend(page);
        assert_eq!(v["truncated"], v["next_todos_offset"].is_i64());
        match v["next_todos_offset"].as_i64() {
            Some(n) => next = n,
            None => break,
        }
    }
    assert_eq!(seen, items, "nothing lost or repeated");

    // issue_bind answers the same first page of markdown, and todo view goes on from it.
    let b = c.call_ok("issue_bind", json!({"number": 1})).structured;
    assert!(json_len(&b) < RESULT_BUDGET_BYTES, "{}", json_len(&b));
    assert_eq!(b["todos_total"], 500);
    let m = b["next_todos_offset"].as_u64().expect("cut") as usize;
    let md = b["markdown"].as_str().expect("md");
    assert!(md.contains(&items[0]) && md.contains(&items[m - 1]) && !md.contains(&items[m]));
    let v = todo(&mut c, json!({"action": "view", "todos_offset": m}));
    assert_eq!(contents(&v)[0], items[m]);

    // One todo whose notes weigh ~360 KB: its newest notes, under the budget, flagged.
    create(&mut c, "notes", "b");
    c.call_ok("issue_bind", json!({"number": 2}));
    todo(&mut c, json!({"action": "add", "items": ["big"]}));
    todo(&mut c, json!({"action": "start", "content": "big"}));
    for i in 0..30 {
        let text = format!("n{i:02}{}", "\u{1}".repeat(1990));
        let v = todo(
            &mut c,
            json!({"action": "note", "content": "big", "text": text}),
        );
        assert!(json_len(&v) < RESULT_BUDGET_BYTES, "{}", json_len(&v));
    }
    let v = todo(&mut c, json!({"action": "view"}));
    assert!(json_len(&v) < RESULT_BUDGET_BYTES, "{}", json_len(&v));
    assert_eq!(v["text_truncated"], true);
    let notes = v["todos"][0]["notes"].as_array().expect("notes");
    assert!(!notes.is_empty() && notes.len() < 30, "{}", notes.len());
    assert!(
        notes.last().expect("n")["text"]
            .as_str()
            .expect("t")
            .starts_with("n29")
    );
    let b = c.call_ok("issue_bind", json!({"number": 2})).structured;
    assert!(json_len(&b) < RESULT_BUDGET_BYTES, "{}", json_len(&b));
    assert_eq!(c.shutdown(), Some(0));
}
