//! Pure pieces of the CDP bridge: how a V8 `RemoteObject` reads as a value and a type, how a
//! DAP logpoint becomes a breakpoint condition, and how a hit condition is judged.

use serde_json::Value;

/// The value text of a RemoteObject: `"alice"`, `42`, `{name: "kit", size: 3}`, `[1, 2]`.
pub fn value_text(o: &Value) -> String {
    match o["type"].as_str().unwrap_or("") {
        "undefined" => "undefined".into(),
        "string" => serde_json::to_string(o["value"].as_str().unwrap_or("")).unwrap_or_default(),
        "number" | "boolean" | "bigint" | "symbol" => o["description"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| o["value"].to_string()),
        "function" => {
            let d = o["description"].as_str().unwrap_or("function");
            let head = d.lines().next().unwrap_or(d).trim_end_matches('{').trim();
            format!("ƒ {}", head.trim_start_matches("function").trim())
        }
        "object" => {
            if o["subtype"] == "null" {
                return "null".into();
            }
            match o.get("preview") {
                Some(p) if p.is_object() => preview_text(p, o),
                _ => o["description"].as_str().unwrap_or("Object").to_string(),
            }
        }
        _ => o["description"].as_str().unwrap_or("").to_string(),
    }
}

fn preview_text(p: &Value, o: &Value) -> String {
    let props = p["properties"].as_array().cloned().unwrap_or_default();
    let more = if p["overflow"].as_bool() == Some(true) {
        ", …"
    } else {
        ""
    };
    let item = |q: &Value| -> String {
        let v = q["value"].as_str().unwrap_or("");
        match q["type"].as_str() {
            Some("string") => serde_json::to_string(v).unwrap_or_default(),
            _ => v.to_string(),
        }
    };
    match o["subtype"].as_str() {
        Some("array") | Some("typedarray") => {
            let items: Vec<String> = props.iter().map(item).collect();
            format!("[{}{more}]", items.join(", "))
        }
        Some("map") | Some("set") | Some("date") | Some("regexp") | Some("error")
        | Some("promise") => o["description"].as_str().unwrap_or("").to_string(),
        _ => {
            let fields: Vec<String> = props
                .iter()
                .map(|q| format!("{}: {}", q["name"].as_str().unwrap_or(""), item(q)))
                .collect();
            let class = o["className"].as_str().unwrap_or("Object");
            let body = format!("{{{}{more}}}", fields.join(", "));
            if class == "Object" {
                body
            } else {
                format!("{class} {body}")
            }
        }
    }
}

/// The type of a RemoteObject as a model reads it: `string`, `number`, `Array`, `User`, ...
pub fn type_text(o: &Value) -> String {
    match o["type"].as_str().unwrap_or("") {
        "object" if o["subtype"] == "null" => "null".into(),
        "object" => o["className"].as_str().unwrap_or("Object").to_string(),
        other => other.to_string(),
    }
}

/// The condition V8 evaluates for a logpoint: print the message (DAP `{expr}` interpolated,
/// as a template literal) and never pause; with a condition, only when it holds.
pub fn logpoint_condition(message: &str, condition: Option<&str>) -> String {
    let mut template = String::new();
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' => {
                let mut expr = String::new();
                let mut depth = 1;
                for d in chars.by_ref() {
                    match d {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    expr.push(d);
                }
                template.push_str(&format!("${{{expr}}}"));
            }
            '`' | '\\' => {
                template.push('\\');
                template.push(c);
            }
            '$' if chars.peek() == Some(&'{') => template.push_str("\\$"),
            _ => template.push(c),
        }
    }
    let log = format!("(console.log(`{template}`), false)");
    match condition {
        Some(c) if !c.trim().is_empty() => format!("(({c}) ? {log} : false)"),
        _ => log,
    }
}

/// A DAP hit condition: `>=3`, `>3`, `==3`, `<3`, `<=3`, `%2`, or a bare number (from that
/// hit on). None when it cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitCondition {
    op: HitOp,
    n: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HitOp {
    AtLeast,
    More,
    Exactly,
    Less,
    AtMost,
    Every,
}

impl HitCondition {
    pub fn parse(text: &str) -> Option<HitCondition> {
        let t = text.trim();
        let ops = [
            (">=", HitOp::AtLeast),
            ("<=", HitOp::AtMost),
            ("==", HitOp::Exactly),
            (">", HitOp::More),
            ("<", HitOp::Less),
            ("%", HitOp::Every),
            ("=", HitOp::Exactly),
        ];
        let (op, rest) = ops
            .iter()
            .find_map(|(p, op)| t.strip_prefix(p).map(|r| (*op, r)))
            .unwrap_or((HitOp::AtLeast, t));
        let n: u64 = rest.trim().parse().ok()?;
        if op == HitOp::Every && n == 0 {
            return None;
        }
        Some(HitCondition { op, n })
    }

    /// Whether the `hits`-th hit (1-based) breaks.
    pub fn breaks(&self, hits: u64) -> bool {
        match self.op {
            HitOp::AtLeast => hits >= self.n,
            HitOp::More => hits > self.n,
            HitOp::Exactly => hits == self.n,
            HitOp::Less => hits < self.n,
            HitOp::AtMost => hits <= self.n,
            HitOp::Every => hits.is_multiple_of(self.n),
        }
    }
}

/// The names a script declares at its top level (`var`/`let`/`const`, `function`, `class`,
/// `export`ed or not), in order: a plain scan of unindented lines, enough for a module's
/// bindings. Destructuring patterns are skipped.
pub fn top_level_names(source: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in source.lines() {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let rest = line.strip_prefix("export ").unwrap_or(line);
        let rest = rest.strip_prefix("default ").unwrap_or(rest);
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        let after = [
            "var ",
            "let ",
            "const ",
            "function* ",
            "function ",
            "class ",
        ]
        .iter()
        .find_map(|k| rest.strip_prefix(k));
        let Some(after) = after else { continue };
        let name: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn remote_objects_read_as_values() {
        assert_eq!(
            value_text(&json!({"type": "string", "value": "al\"ice"})),
            "\"al\\\"ice\""
        );
        assert_eq!(
            value_text(&json!({"type": "number", "value": 42, "description": "42"})),
            "42"
        );
        assert_eq!(value_text(&json!({"type": "undefined"})), "undefined");
        assert_eq!(
            value_text(&json!({"type": "object", "subtype": "null", "value": null})),
            "null"
        );
        let user = json!({"type": "object", "className": "User", "description": "User",
            "preview": {"properties": [
                {"name": "name", "type": "string", "value": "alice"},
                {"name": "id", "type": "number", "value": "42"}], "overflow": false}});
        assert_eq!(value_text(&user), "User {name: \"alice\", id: 42}");
        assert_eq!(type_text(&user), "User");
        let plain = json!({"type": "object", "className": "Object", "preview": {"properties": [
            {"name": "a", "type": "number", "value": "1"}], "overflow": true}});
        assert_eq!(value_text(&plain), "{a: 1, …}");
        let arr = json!({"type": "object", "subtype": "array", "className": "Array",
            "description": "Array(2)", "preview": {"properties": [
                {"name": "0", "type": "number", "value": "1"},
                {"name": "1", "type": "string", "value": "b"}]}});
        assert_eq!(value_text(&arr), "[1, \"b\"]");
        let f =
            json!({"type": "function", "description": "function add(a, b) {\n return a + b;\n}"});
        assert_eq!(value_text(&f), "ƒ add(a, b)");
        assert_eq!(
            type_text(&json!({"type": "boolean", "value": true})),
            "boolean"
        );
    }

    #[test]
    fn logpoints_become_conditions_that_print() {
        assert_eq!(
            logpoint_condition("i={i} sq={i * i}", None),
            "(console.log(`i=${i} sq=${i * i}`), false)"
        );
        assert_eq!(
            logpoint_condition("a `tick` ${x} \\", Some("i > 2")),
            "((i > 2) ? (console.log(`a \\`tick\\` \\$${x} \\\\`), false) : false)"
        );
        assert_eq!(
            logpoint_condition("obj={ {a: 1}.a }", None),
            "(console.log(`obj=${ {a: 1}.a }`), false)"
        );
    }

    #[test]
    fn top_level_names_of_a_module() {
        let src = "function add(a, b) {\n  const inner = 1;\n}\nconst user = { a: 1 };\nlet count = 41, other = 2;\nexport class Shape {}\nexport async function go() {}\nconst { x } = obj;\nvar $v = 1;\n";
        assert_eq!(
            top_level_names(src),
            ["add", "user", "count", "Shape", "go", "$v"]
        );
    }

    #[test]
    fn hit_conditions() {
        let at3 = HitCondition::parse(">=3").unwrap();
        assert!(!at3.breaks(2) && at3.breaks(3) && at3.breaks(4));
        let bare = HitCondition::parse(" 3 ").unwrap();
        assert_eq!(bare, at3);
        let every = HitCondition::parse("%2").unwrap();
        assert!(!every.breaks(1) && every.breaks(2) && !every.breaks(3));
        assert!(HitCondition::parse("==2").unwrap().breaks(2));
        assert!(!HitCondition::parse("==2").unwrap().breaks(3));
        assert!(HitCondition::parse("<2").unwrap().breaks(1));
        assert!(HitCondition::parse("%0").is_none());
        assert!(HitCondition::parse("lots").is_none());
    }
}
