//! Text for models and markdown for resources: issue lists, one issue, todo checklists.

use crate::model::{IssueSummary, Todo, TodoKind, TodoStatus, Update, UpdateKind};

/// `2026-11-22 13:52Z` from unix seconds (UTC).
pub fn ts(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// `#42 [triaged] Add dark mode (assigned: primary)`
pub fn summary_line(i: &IssueSummary) -> String {
    let mut s = format!("#{} [{}] {}", i.number, i.status, i.title);
    if let Some(a) = &i.assignment {
        s.push_str(&format!(" (assigned: {a})"));
    }
    s
}

/// One update as a markdown list item.
pub fn update_line(u: &Update) -> String {
    let when = ts(u.created_at);
    let vis = if u.visibility == crate::model::Visibility::OperatorOnly {
        " (operator only)"
    } else {
        ""
    };
    let meta = |k: &str| {
        u.metadata
            .as_ref()
            .and_then(|m| m.get(k))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => "none".to_string(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    match u.kind {
        UpdateKind::Comment => {
            let body = u.body.as_deref().unwrap_or("");
            let indented = body.replace('\n', "\n  ");
            format!("- {when} {} commented{vis}:\n  {indented}", u.author)
        }
        UpdateKind::StatusChange => format!(
            "- {when} {} changed status {} → {}{vis}",
            u.author,
            meta("old_status"),
            meta("new_status")
        ),
        UpdateKind::TitleEdit => format!(
            "- {when} {} retitled \"{}\" → \"{}\"{vis}",
            u.author,
            meta("old_title"),
            meta("new_title")
        ),
        UpdateKind::BodyEdit => format!("- {when} {} edited the body{vis}", u.author),
        UpdateKind::AssignmentChange => format!(
            "- {when} {} changed assignment {} → {}{vis}",
            u.author,
            meta("old_assignment"),
            meta("new_assignment")
        ),
    }
}

fn marker(t: &Todo) -> &'static str {
    match t.status {
        TodoStatus::Pending => "[ ]",
        TodoStatus::InProgress => "[>]",
        TodoStatus::Completed => "[x]",
        TodoStatus::Abandoned => "[-]",
    }
}

fn todo_line(t: &Todo, indent: &str, out: &mut String) {
    let content = if t.status == TodoStatus::Abandoned {
        format!("~~{}~~", t.content)
    } else {
        t.content.clone()
    };
    let suffix = match (t.kind, t.status) {
        (TodoKind::Criterion, TodoStatus::Completed) => " (criterion, claimed)",
        (TodoKind::Criterion, _) => " (criterion)",
        _ => "",
    };
    out.push_str(&format!("{indent}- {} {content}{suffix}\n", marker(t)));
    // Echo notes: the in-progress task's notes stay in view.
    if t.status == TodoStatus::InProgress {
        for n in &t.notes {
            let text = n.text.replace('\n', " ");
            out.push_str(&format!("{indent}  → {text}\n"));
        }
    }
}

/// The checklist as markdown: phases as headings (in list order), each subagent's
/// proposals as its own sublist after the root's items.
pub fn todos_markdown(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "(no todos)".to_string();
    }
    let mut phases: Vec<Option<&str>> = Vec::new();
    if todos.iter().any(|t| t.phase.is_none()) {
        phases.push(None);
    }
    for t in todos {
        if let Some(p) = t.phase.as_deref()
            && !phases.contains(&Some(p))
        {
            phases.push(Some(p));
        }
    }
    let mut out = String::new();
    for phase in phases {
        let group: Vec<&Todo> = todos
            .iter()
            .filter(|t| t.phase.as_deref() == phase)
            .collect();
        if let Some(p) = phase {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("### {p}\n"));
        }
        for t in group.iter().filter(|t| t.origin_agent.is_none()) {
            todo_line(t, "", &mut out);
        }
        let mut agents: Vec<&str> = Vec::new();
        for t in &group {
            if let Some(a) = t.origin_agent.as_deref()
                && !agents.contains(&a)
            {
                agents.push(a);
            }
        }
        for a in agents {
            out.push_str(&format!("- from {a}:\n"));
            for t in group
                .iter()
                .filter(|t| t.origin_agent.as_deref() == Some(a))
            {
                todo_line(t, "  ", &mut out);
            }
        }
    }
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

/// Most items a sticky reminder lists.
pub const REMINDER_MAX: usize = 5;

/// The sticky reminder: up to 5 open items (the in-progress one always among them), in
/// list order, as a markdown checklist. `None` when nothing is open.
pub fn reminder(number: i64, title: &str, todos: &[Todo]) -> Option<String> {
    let open: Vec<&Todo> = todos
        .iter()
        .filter(|t| matches!(t.status, TodoStatus::Pending | TodoStatus::InProgress))
        .collect();
    if open.is_empty() {
        return None;
    }
    let mut chosen: Vec<&Todo> = open
        .iter()
        .filter(|t| t.status == TodoStatus::InProgress)
        .copied()
        .collect();
    for t in &open {
        if chosen.len() >= REMINDER_MAX {
            break;
        }
        if t.status != TodoStatus::InProgress {
            chosen.push(t);
        }
    }
    chosen.truncate(REMINDER_MAX);
    chosen.sort_by_key(|t| t.position);
    let mut out = format!(
        "Open todos on #{number} {title} ({} of {} open):\n",
        chosen.len(),
        open.len()
    );
    for t in chosen {
        todo_line(t, "", &mut out);
    }
    while out.ends_with('\n') {
        out.pop();
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::Note;

    pub fn todo(content: &str, status: TodoStatus, kind: TodoKind, position: i64) -> Todo {
        Todo {
            id: format!("id{position}"),
            content: content.into(),
            status,
            kind,
            phase: None,
            position,
            notes: vec![],
            origin_agent: None,
            created_by: "agent:primary".into(),
            created_at: 0,
            updated_at: 0,
            started_at: None,
            completed_at: None,
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(ts(0), "1970-01-01 00:00Z");
        assert_eq!(ts(1_716_700_000), "2024-05-26 05:06Z");
        assert_eq!(ts(951_782_400), "2000-02-29 00:00Z");
    }

    #[test]
    fn markdown_matches_the_seed_and_groups() {
        let mut a = todo(
            "Implement auth module",
            TodoStatus::InProgress,
            TodoKind::Step,
            0,
        );
        a.notes.push(Note {
            text: "token code first".into(),
            author: "agent:primary".into(),
            created_at: 0,
        });
        let b = todo("Write tests", TodoStatus::Pending, TodoKind::Step, 1);
        let c = todo(
            "All endpoints return 200",
            TodoStatus::Pending,
            TodoKind::Criterion,
            2,
        );
        assert_eq!(
            todos_markdown(&[a.clone(), b.clone(), c.clone()]),
            "- [>] Implement auth module\n  → token code first\n- [ ] Write tests\n- [ ] All endpoints return 200 (criterion)"
        );
        let mut d = todo("Survey the API", TodoStatus::Completed, TodoKind::Step, 3);
        d.phase = Some("discovery".into());
        let mut e = todo("Check logs", TodoStatus::Pending, TodoKind::Step, 4);
        e.phase = Some("discovery".into());
        e.origin_agent = Some("primary/researcher".into());
        let md = todos_markdown(&[b, d, e]);
        assert_eq!(
            md,
            "- [ ] Write tests\n\n### discovery\n- [x] Survey the API\n- from primary/researcher:\n  - [ ] Check logs"
        );
        assert_eq!(todos_markdown(&[]), "(no todos)");
    }

    #[test]
    fn reminder_caps_at_five_and_keeps_in_progress() {
        let mut list: Vec<Todo> = (0..8)
            .map(|i| todo(&format!("t{i}"), TodoStatus::Pending, TodoKind::Step, i))
            .collect();
        list[7].status = TodoStatus::InProgress;
        list[0].status = TodoStatus::Completed;
        let r = reminder(3, "Auth", &list).unwrap();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "Open todos on #3 Auth (5 of 7 open):");
        assert_eq!(
            &lines[1..],
            ["- [ ] t1", "- [ ] t2", "- [ ] t3", "- [ ] t4", "- [>] t7"]
        );
        for t in &mut list {
            t.status = TodoStatus::Completed;
        }
        assert_eq!(reminder(3, "Auth", &list), None);
    }
}
