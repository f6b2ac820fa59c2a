//! The session's issue in the loop (seed 004's amendment of 2026-06-05): at every turn the
//! session's issue is bound in kitbag-issues (`issue_bind`), and while the bound issue has
//! open todos a short checklist rides at the tail of every model request — up to five open
//! items, the one in progress always among them. The reminder is not kept in the session: it
//! is made fresh at each step, and left out when the last message already carries a `todo`
//! result (the model has just seen the list).

use kitbag_llm::{Block, Message, Role, ToolSpec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::host::ToolHost;

const TODO_TOOL: &str = "todo";
const BIND_TOOL: &str = "issue_bind";
/// Open items a reminder lists.
const MAX_ITEMS: usize = 5;

/// Why the session's issue could not be bound this turn, in words for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotBound(String);

/// Bind `issue` through the host's `issue_bind`, when the host offers it.
pub async fn bind(host: &dyn ToolHost, session: &str, issue: i64) -> Result<(), NotBound> {
    if !host.tools().iter().any(|t| t.name == BIND_TOOL) {
        return Err(NotBound(format!(
            "the session is bound to issue #{issue}, but no issue_bind tool is offered (add the issues server, or allow its tools)"
        )));
    }
    let args = json!({"number": issue});
    let r = host
        .call(
            BIND_TOOL,
            args.as_object().cloned(),
            format!("{session}/issue_bind"),
            CancellationToken::new(),
        )
        .await
        .map_err(|e| NotBound(e.message.to_string()))?;
    if r.is_error == Some(true) {
        let text = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(NotBound(text));
    }
    Ok(())
}

/// The reminder for this step, when the `todo` tool is among the step's `tools` (what the
/// policy and the pack offer the model), an issue is bound and it has open todos, and the last
/// message is not a `todo` result already.
pub async fn for_step(
    host: &dyn ToolHost,
    session: &str,
    tools: &[ToolSpec],
    messages: &[Message],
) -> Option<String> {
    if answered_by_todo(messages) || !tools.iter().any(|t| t.name == TODO_TOOL) {
        return None;
    }
    let args = json!({"action": "view"});
    let r = host
        .call(
            TODO_TOOL,
            args.as_object().cloned(),
            format!("{session}/todo_reminder"),
            CancellationToken::new(),
        )
        .await
        .ok()?;
    // No bound issue (`no_bound_issue`) or no todos: nothing to remind of.
    if r.is_error == Some(true) {
        return None;
    }
    checklist(r.structured_content.as_ref()?)
}

/// The reminder text for a `todo` view's answer: the open todos (in progress first, then
/// pending in list order), at most [`MAX_ITEMS`]; None when nothing is open.
pub fn checklist(view: &Value) -> Option<String> {
    let todos = view["todos"].as_array()?;
    let open = |status: &'static str| -> Vec<&str> {
        todos
            .iter()
            .filter(|t| t["status"] == status)
            .filter_map(|t| t["content"].as_str())
            .collect()
    };
    let started = open("in_progress");
    let pending = open("pending");
    let total = started.len() + pending.len();
    if total == 0 {
        return None;
    }
    let mut lines: Vec<String> = started.iter().map(|t| format!("- [>] {t}")).collect();
    lines.extend(pending.iter().map(|t| format!("- [ ] {t}")));
    lines.truncate(MAX_ITEMS.max(started.len()));
    let more = total - lines.len();
    let issue = view["issue"].as_i64().unwrap_or(0);
    let mut text = format!("Open todos of issue #{issue} (the `todo` tool updates them):\n");
    text.push_str(&lines.join("\n"));
    if more > 0 {
        text.push_str(&format!("\n… and {more} more (todo view lists them)"));
    }
    Some(text)
}

/// Whether the last message holds a result of a `todo` call made in the message before it.
pub fn answered_by_todo(messages: &[Message]) -> bool {
    let [.., call, last] = messages else {
        return false;
    };
    if call.role != Role::Assistant || last.role != Role::User {
        return false;
    }
    let todo_ids: Vec<&str> = call
        .content
        .iter()
        .filter_map(|b| match b {
            // The seed's spellings (`kaged.todo`) are the todo tool too.
            Block::ToolUse {
                id, name, input, ..
            } if name == TODO_TOOL
                || kitbag_shared::aliases::resolve(name, input.as_object(), |n| n == TODO_TOOL)
                    .is_some() =>
            {
                Some(id.as_str())
            }
            _ => None,
        })
        .collect();
    last.content.iter().any(|b| {
        matches!(b, Block::ToolResult { tool_use_id, .. } if todo_ids.contains(&tool_use_id.as_str()))
    })
}

/// Put `text` at the tail of the request: in the last user message (after its tool results),
/// or as a user message of its own.
pub fn attach(messages: &mut Vec<Message>, text: String) {
    match messages.last_mut() {
        Some(m) if m.role == Role::User => m.content.push(Block::Text { text }),
        _ => messages.push(Message::user_text(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(todos: &[(&str, &str)]) -> Value {
        let todos: Vec<Value> = todos
            .iter()
            .map(|(c, s)| json!({"content": c, "status": s}))
            .collect();
        json!({"issue": 7, "todos": todos})
    }

    #[test]
    fn the_checklist_holds_five_open_items_the_started_one_first() {
        let v = view(&[
            ("a", "completed"),
            ("b", "pending"),
            ("c", "pending"),
            ("d", "in_progress"),
            ("e", "pending"),
            ("f", "pending"),
            ("g", "pending"),
            ("h", "pending"),
        ]);
        let text = checklist(&v).expect("open todos");
        assert_eq!(
            text,
            "Open todos of issue #7 (the `todo` tool updates them):\n- [>] d\n- [ ] b\n- [ ] c\n- [ ] e\n- [ ] f\n… and 2 more (todo view lists them)"
        );
        assert!(checklist(&view(&[("a", "completed"), ("b", "abandoned")])).is_none());
        assert!(checklist(&view(&[])).is_none());
    }

    #[test]
    fn a_todo_result_last_suppresses_the_reminder() {
        let call = |name: &str| Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: "t1".into(),
                name: name.into(),
                input: json!({}),
                invalid_input: None,
            }],
        };
        let result = Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "t1".into(),
                content: vec![],
                is_error: false,
            }],
        };
        assert!(answered_by_todo(&[call("todo"), result.clone()]));
        // The seed's spelling of the same tool.
        assert!(answered_by_todo(&[call("kaged.todo"), result.clone()]));
        assert!(!answered_by_todo(&[call("file_read"), result.clone()]));
        assert!(!answered_by_todo(&[result]));
    }

    #[test]
    fn the_reminder_goes_after_the_last_results() {
        let mut m = vec![Message::user_text("hi")];
        attach(&mut m, "todos".into());
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].content.len(), 2);
        let mut m = vec![Message {
            role: Role::Assistant,
            content: vec![Block::Text { text: "x".into() }],
        }];
        attach(&mut m, "todos".into());
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].role, Role::User);
    }
}
