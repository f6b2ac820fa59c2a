//! Skills (seed 001, Tier 2): `.kitbag/skills/*.md`, each with frontmatter `name` and
//! `description` and instructions as its body. Every turn the system prompt lists them; the
//! ones the prompt clearly concerns are injected whole, and the model can load any other by
//! name with the loop's own `skill_load` tool.

use std::path::Path;

use kitbag_llm::ToolSpec;
use serde_json::json;

use super::frontmatter::{self, DocError};

pub const LOAD_TOOL: &str = "skill_load";

/// Skills injected whole in one turn, at most.
const MAX_INJECTED: usize = 2;

#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
}

/// Every readable skill, sorted by name; files that cannot be used are reported, not fatal.
pub fn load_all(root: &Path) -> (Vec<Skill>, Vec<String>) {
    let dir = root.join(".kitbag").join("skills");
    let mut skills = Vec::new();
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (skills, problems);
    };
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("md") {
            continue;
        }
        // A problem is reported as text beside the others: unreadable or malformed.
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(s) if skills.iter().any(|o: &Skill| o.name == s.name) => {
                problems.push(format!(
                    "{}: a second skill named `{}`",
                    path.display(),
                    s.name
                ));
            }
            Ok(s) => skills.push(s),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    (skills, problems)
}

pub fn parse(text: &str) -> Result<Skill, DocError> {
    let d = frontmatter::parse(text)?;
    let name = d
        .scalar("name")?
        .filter(|n| !n.is_empty())
        .ok_or(DocError::Missing {
            key: "name",
            why: "",
        })?;
    let description =
        d.scalar("description")?
            .filter(|n| !n.is_empty())
            .ok_or(DocError::Missing {
                key: "description",
                why: " (it is how the skill is found)",
            })?;
    Ok(Skill {
        name: name.to_owned(),
        description: description.to_owned(),
        body: d.body,
    })
}

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "from", "into", "when", "what", "your", "you",
    "are", "how", "use", "using", "file", "files", "make", "should", "will", "have", "about",
];

fn words(s: &str) -> Vec<String> {
    s.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3 && !STOPWORDS.contains(w))
        .map(str::to_owned)
        .collect()
}

/// The skills the prompt clearly concerns: it names the skill, or shares at least two
/// distinct words with its name and description. Best first, at most two.
pub fn relevant<'a>(skills: &'a [Skill], prompt: &str) -> Vec<&'a Skill> {
    let asked = words(prompt);
    let lower = prompt.to_lowercase();
    let mut scored: Vec<(usize, &Skill)> = skills
        .iter()
        .filter_map(|s| {
            let mut own = words(&format!("{} {}", s.name, s.description));
            own.sort();
            own.dedup();
            let shared = own.iter().filter(|w| asked.contains(w)).count();
            let named = lower.contains(&s.name.to_lowercase());
            let score = shared + if named { 10 } else { 0 };
            (score >= 2).then_some((score, s))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.name.cmp(&b.1.name)));
    scored
        .into_iter()
        .take(MAX_INJECTED)
        .map(|(_, s)| s)
        .collect()
}

/// The part of the system prompt about skills: the index, then the injected ones whole.
pub fn block(skills: &[Skill], injected: &[&Skill]) -> String {
    let mut out = format!(
        "Skills (instructions for recurring tasks; call {LOAD_TOOL} with a name to read one):\n"
    );
    for s in skills {
        out.push_str(&format!("- {}: {}\n", s.name, s.description));
    }
    for s in injected {
        out.push_str(&format!(
            "\n<skill name=\"{}\">\n{}\n</skill>\n",
            s.name, s.body
        ));
    }
    out.trim_end().to_owned()
}

pub fn tool(skills: &[Skill]) -> ToolSpec {
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    ToolSpec {
        name: LOAD_TOOL.into(),
        description: "Read one of the skills listed in the system prompt: its full instructions."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names, "description": "The skill's name."}},
            "required": ["name"],
            "additionalProperties": false
        }),
    }
}

/// `skill_load`'s answer: the body, or an error naming the skills there are.
pub fn load(skills: &[Skill], input: &serde_json::Value) -> (String, bool) {
    let Some(name) = input.get("name").and_then(|n| n.as_str()) else {
        return (
            "error [invalid_params]: name: required, the name of a listed skill".into(),
            true,
        );
    };
    match skills.iter().find(|s| s.name == name) {
        Some(s) => (
            format!("<skill name=\"{}\">\n{}\n</skill>", s.name, s.body),
            false,
        ),
        None => (
            format!(
                "error [not_found]: name: no skill `{name}`; there are: {}",
                skills
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            true,
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            body: format!("steps for {name}"),
        }
    }

    #[test]
    fn skills_need_a_name_and_a_description() {
        let s = parse(
            "---\nname: release\ndescription: Cut a release and publish the crates\n---\n1. Bump.",
        )
        .expect("ok");
        assert_eq!(s.body, "1. Bump.");
        assert!(
            parse("---\nname: x\n---\n")
                .unwrap_err()
                .to_string()
                .contains("description")
        );
        assert!(
            parse("no frontmatter")
                .unwrap_err()
                .to_string()
                .contains("name")
        );
    }

    #[test]
    fn only_clearly_related_skills_are_injected() {
        let all = vec![
            skill(
                "release",
                "Cut a release: bump versions, tag, publish crates",
            ),
            skill("db-migration", "Write and test a database schema migration"),
            skill("triage", "Triage a failing CI run"),
        ];
        let names = |p: &str| {
            relevant(&all, p)
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("Please publish the crates for the new release"),
            ["release"]
        );
        assert_eq!(
            names("add a schema migration for the users database table"),
            ["db-migration"]
        );
        assert!(names("what time is it?").is_empty());
        // Named outright.
        assert_eq!(names("use triage"), ["triage"]);
        let b = block(&all, &relevant(&all, "use triage"));
        assert!(b.contains("- release: Cut a release") && b.contains("<skill name=\"triage\">"));
        assert!(!load(&all, &json!({"name": "release"})).1);
        let (e, is_error) = load(&all, &json!({"name": "nope"}));
        assert!(
            is_error && e.contains("release, db-migration, triage"),
            "{e}"
        );
    }
}
