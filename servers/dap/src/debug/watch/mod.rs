//! `evaluate` in `watch` context must not change the program. Node's inspector checks that
//! itself (V8 refuses a possible side effect); debugpy, Bun's JavaScriptCore, lldb-dap and
//! Delve have no such check, so there `watch` takes only expression forms that read: names,
//! member and index reads, literals, and operators over them. Calls, assignments (plain and
//! augmented), increments, `await`/`yield`, functions and lambdas, `new`/`delete`,
//! comprehensions and unpacking are refused before the adapter sees them. The check is
//! lexical and conservative: it may refuse a harmless expression (then `repl` runs it), it
//! never lets one of those forms through. A getter or an overloaded operator behind a read is
//! the program's own code and is not seen.

mod builtins;

pub use builtins::Guard;
use builtins::builtin_call;

/// The expression language, for the few forms that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Python,
    JavaScript,
    /// C, C++, Rust (lldb-dap).
    C,
    Go,
    /// A `--config` runtime: every language's keywords count.
    Other,
}

/// A token and the characters of the expression it covers (`start..end`).
#[derive(Debug, Clone)]
struct Lexed {
    tok: Tok,
    start: usize,
    end: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Number,
    Str,
    Op(&'static str),
    Punct(char),
}

/// Operators of more than one character, longest first.
const OPS: [&str; 37] = [
    ">>>=", "...", "**=", "//=", "<<=", ">>=", "&&=", "||=", "??=", "===", "!==", ">>>", "==",
    "!=", "<=", ">=", "=>", "->", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=",
    ":=", "<-", "**", "//", "&&", "||", "??", "?.",
];

/// Operators that write (or start a function): refused wherever they stand.
const WRITES: [&str; 21] = [
    ">>>=", "**=", "//=", "<<=", ">>=", "&&=", "||=", "??=", "+=", "-=", "*=", "/=", "%=", "&=",
    "|=", "^=", "@=", ":=", "++", "--", "=>",
];

/// Keywords before a `(` that groups rather than calls.
const OPERATOR_WORDS: [&str; 11] = [
    "not",
    "and",
    "or",
    "in",
    "is",
    "if",
    "else",
    "typeof",
    "instanceof",
    "void",
    "sizeof",
];

fn refused_words(syntax: Syntax) -> &'static [&'static str] {
    match syntax {
        Syntax::Python => &[
            "lambda", "await", "yield", "del", "import", "class", "def", "global", "nonlocal",
            "for", "while", "with", "raise", "async", "assert", "exec",
        ],
        Syntax::JavaScript => &[
            "function", "await", "yield", "new", "delete", "class", "var", "let", "const",
            "import", "throw", "for", "while",
        ],
        Syntax::C => &["new", "delete", "throw", "co_await", "co_yield"],
        Syntax::Go => &["go", "defer", "func", "chan"],
        Syntax::Other => &[
            "lambda", "await", "yield", "del", "import", "class", "def", "global", "nonlocal",
            "for", "while", "with", "raise", "async", "function", "new", "delete", "var", "let",
            "const", "throw", "go", "defer", "func",
        ],
    }
}

/// Why an expression may change the program: the form it has (`"a call"`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MayChange(pub String);

impl std::fmt::Display for MayChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for MayChange {
    fn from(s: String) -> Self {
        MayChange(s)
    }
}

impl From<&str> for MayChange {
    fn from(s: &str) -> Self {
        MayChange(s.to_string())
    }
}

/// Why `expr` may change the program, or None when it only reads.
pub fn side_effect(expr: &str, syntax: Syntax) -> Option<String> {
    check(expr, syntax, false).err().map(|m| m.0)
}

/// What `expr` needs to hold to only read, for JavaScript (Bun) `watch`: besides the reading
/// forms, calls of the built-in string and array reads (`includes`, `indexOf`, `startsWith`,
/// …) pass here, each with the [`Guard`] that must evaluate true in the paused program before
/// the expression runs (the receiver really is an array or a string, the method the built-in
/// one, the arguments of the types it reads without converting). Err: why it may change the
/// program.
pub fn guarded_reads(expr: &str, syntax: Syntax) -> Result<Vec<Guard>, MayChange> {
    check(expr, syntax, syntax == Syntax::JavaScript)
}

fn check(expr: &str, syntax: Syntax, builtins: bool) -> Result<Vec<Guard>, MayChange> {
    let chars: Vec<char> = expr.chars().collect();
    let toks = lex(&chars, syntax).map_err(|Refusal(why)| MayChange::from(why))?;
    let mut guards = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| &toks[p].tok);
        let after_member = matches!(prev, Some(Tok::Punct('.')) | Some(Tok::Op("?." | "->")));
        match &t.tok {
            Tok::Punct('=') => return Err("an assignment (`=`)".into()),
            Tok::Punct(';') => return Err("a statement separator (`;`)".into()),
            Tok::Op(op) if WRITES.contains(op) => {
                return Err(MayChange(match *op {
                    "++" | "--" => format!("an increment or decrement (`{op}`)"),
                    "=>" => "a function (`=>`)".into(),
                    _ => format!("an assignment (`{op}`)"),
                }));
            }
            Tok::Op("<-") if matches!(syntax, Syntax::Go | Syntax::Other) => {
                return Err("a channel operation (`<-`)".into());
            }
            Tok::Op("...") if syntax != Syntax::Python => {
                return Err("a spread (`...`), which runs an iterator".into());
            }
            Tok::Punct('*') if syntax == Syntax::Python && is_operand_start(prev) => {
                return Err("unpacking (`*`), which runs an iterator".into());
            }
            Tok::Op("**") if syntax == Syntax::Python && is_operand_start(prev) => {
                return Err("unpacking (`**`)".into());
            }
            Tok::Name(w) if !after_member && refused_words(syntax).contains(&w.as_str()) => {
                return Err(MayChange(format!("`{w}`")));
            }
            Tok::Punct('(') if is_call(prev) => {
                match builtins.then(|| builtin_call(&chars, &toks, k)).flatten() {
                    Some(guard) => guards.push(guard),
                    None => return Err("a call".into()),
                }
            }
            _ => {}
        }
    }
    Ok(guards)
}

/// Whether a `(` after `prev` calls (rather than groups).
fn is_call(prev: Option<&Tok>) -> bool {
    match prev {
        // A name calls, unless it is an operator word (`not (a)`, `typeof (x)`).
        Some(Tok::Name(w)) => !OPERATOR_WORDS.contains(&w.as_str()),
        Some(Tok::Punct(')' | ']')) | Some(Tok::Str) | Some(Tok::Op("?.")) => true,
        _ => false,
    }
}

/// Whether the next token starts an operand (so `*` there is unary).
fn is_operand_start(prev: Option<&Tok>) -> bool {
    matches!(
        prev,
        None | Some(Tok::Punct('(' | '[' | '{' | ',' | ':')) | Some(Tok::Op(_))
    ) || matches!(prev, Some(Tok::Name(w)) if OPERATOR_WORDS.contains(&w.as_str()))
}

/// Python's string prefixes (`r`, `b`, `f`, `rb`, …): a name of these letters right before a
/// quote is part of the string.
fn python_prefix(name: &str) -> bool {
    name.len() <= 2
        && !name.is_empty()
        && name
            .chars()
            .all(|c| matches!(c.to_ascii_lowercase(), 'r' | 'b' | 'u' | 'f'))
}

/// Why the lexer refused an expression outright: the kind of form, for the error message.
#[derive(Debug)]
struct Refusal(&'static str);

fn lex(chars: &[char], syntax: Syntax) -> Result<Vec<Lexed>, Refusal> {
    let mut out: Vec<Lexed> = Vec::new();
    let push = |out: &mut Vec<Lexed>, tok, start, end| out.push(Lexed { tok, start, end });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if matches!(c, '"' | '\'' | '`') {
            let mut prefix = String::new();
            let mut start = i;
            // A Python prefix lexed as a name just before: it belongs to this string.
            if syntax == Syntax::Python
                && let Some(Lexed {
                    tok: Tok::Name(n),
                    start: at,
                    ..
                }) = out.last()
                && python_prefix(n)
                && i > 0
                && !chars[i - 1].is_whitespace()
            {
                prefix = n.to_ascii_lowercase();
                start = *at;
                out.pop();
            }
            // JavaScript: a template right after a value is a tagged template, a call.
            if c == '`'
                && syntax != Syntax::Go
                && matches!(
                    out.last().map(|l| &l.tok),
                    Some(Tok::Name(_)) | Some(Tok::Punct(')' | ']')) | Some(Tok::Str)
                )
            {
                return Err(Refusal("a call (a tagged template)"));
            }
            let (end, body) = string_end(chars, i)?;
            if c == '`' && syntax != Syntax::Go && body.contains("${") {
                return Err(Refusal("a template literal with `${…}`"));
            }
            if prefix.contains('f') && body.contains('{') {
                return Err(Refusal("an f-string with `{…}`"));
            }
            push(&mut out, Tok::Str, start, end);
            i = end;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let start = i;
            i += 1;
            while i < chars.len() {
                let d = chars[i];
                let exponent_sign =
                    matches!(d, '+' | '-') && matches!(chars[i - 1], 'e' | 'E' | 'p' | 'P');
                if d.is_alphanumeric() || d == '_' || d == '.' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            push(&mut out, Tok::Number, start, i);
            continue;
        }
        if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            push(
                &mut out,
                Tok::Name(chars[start..i].iter().collect()),
                start,
                i,
            );
            continue;
        }
        if let Some(op) = OPS.iter().find(|op| {
            op.chars()
                .enumerate()
                .all(|(k, oc)| chars.get(i + k) == Some(&oc))
        }) {
            let start = i;
            i += op.chars().count();
            push(&mut out, Tok::Op(op), start, i);
            continue;
        }
        push(&mut out, Tok::Punct(c), i, i + 1);
        i += 1;
    }
    Ok(out)
}

/// Where the string starting at `start` ends (the index after its closing quote), and its
/// body. Triple quotes (Python) and backslash escapes are honoured.
fn string_end(chars: &[char], start: usize) -> Result<(usize, String), Refusal> {
    let q = chars[start];
    let triple = q != '`' && chars.get(start + 1) == Some(&q) && chars.get(start + 2) == Some(&q);
    let mut i = start + if triple { 3 } else { 1 };
    let mut body = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            body.push(c);
            if let Some(n) = chars.get(i + 1) {
                body.push(*n);
            }
            i += 2;
            continue;
        }
        if c == q {
            if !triple {
                return Ok((i + 1, body));
            }
            if chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q) {
                return Ok((i + 3, body));
            }
        }
        body.push(c);
        i += 1;
    }
    Err(Refusal("an unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(expr: &str, syntax: Syntax) {
        assert_eq!(
            side_effect(expr, syntax),
            None,
            "{expr:?} should be accepted"
        );
    }

    fn refused(expr: &str, syntax: Syntax) {
        assert!(
            side_effect(expr, syntax).is_some(),
            "{expr:?} should be refused"
        );
    }

    #[test]
    fn python_reads_pass() {
        for e in [
            "users",
            "len_",
            "user.name",
            "cfg['key']",
            "items[0].name",
            "items[1:3]",
            "count * 2 + 1",
            "count == 41 and not done",
            "not (a or b)",
            "x if (y) else z",
            "-count",
            "a ** 2",
            "\"a = b(c)\"",
            "'it''s'",
            "r'\\d+(x)'",
            "b'bytes'",
            "f'plain'",
            "(1, 2, [3, {'k': None}])",
            "a is None",
            "'x' in cfg",
            "...",
            "a @ b",
            "d[k] != 3.5e-2",
        ] {
            ok(e, Syntax::Python);
        }
    }

    #[test]
    fn python_side_effects_are_refused() {
        for e in [
            "users.append(None)",
            "len(users)",
            "x = 1",
            "x += 1",
            "cfg['k'] = 2",
            "(y := 3)",
            "lambda: 1",
            "[u for u in users]",
            "del cfg['k']",
            "await task",
            "[*gen]",
            "{**d}",
            "f'{x.pop()}'",
            "F\"{a}\"",
            "obj.method\t()",
            "a; b",
            "import os",
            "(f)(x)",
            "x[0](1)",
            "'abc'.upper()",
            "'unterminated",
            "i--",
        ] {
            refused(e, Syntax::Python);
        }
    }

    #[test]
    fn javascript_reads_pass() {
        for e in [
            "user",
            "user.role === 'admin'",
            "user?.address?.city",
            "items[0]",
            "a !== b && c >= 2 || d ?? e",
            "typeof user",
            "typeof (user)",
            "`plain template`",
            "obj.delete",
            "obj.new.class",
            "x instanceof (Y)",
            "!flag",
            "0x1f + 1_000",
            "$el.value",
            "#private in obj",
        ] {
            ok(e, Syntax::JavaScript);
        }
    }

    #[test]
    fn javascript_side_effects_are_refused() {
        for e in [
            "isValid = false",
            "count++",
            "--count",
            "a.b = 1",
            "a ||= b",
            "a ??= b",
            "x >>>= 1",
            "user.permissions.includes('write')",
            "fn?.()",
            "new Date",
            "delete obj.k",
            "await p",
            "yield x",
            "() => 1",
            "function f() {}",
            "[...it]",
            "`${x()}`",
            "tag`x`",
            "let y",
            "x = 1; y",
        ] {
            refused(e, Syntax::JavaScript);
        }
    }

    #[test]
    fn c_and_go_forms() {
        for e in [
            "*p",
            "p->next->value",
            "arr[i] * 2",
            "(int)x",
            "&x",
            "sizeof(x)",
        ] {
            ok(e, Syntax::C);
        }
        for e in ["x = 1", "f(x)", "i++", "p->f(1)", "new T", "a |= 1"] {
            refused(e, Syntax::C);
        }
        for e in ["*p", "s.field[2]", "m[\"k\"]", "`raw ${x}`"] {
            ok(e, Syntax::Go);
        }
        for e in ["call f()", "<-ch", "x := 1", "go f"] {
            refused(e, Syntax::Go);
        }
        refused("go f", Syntax::Other);
        ok("go", Syntax::Python);
    }
}
