//! The built-in string and array reads `watch` lets JavaScript call on Bun, whose inspector
//! has no side-effect check of its own: `user.permissions.includes('write')` (seed 004's
//! example) reads and changes nothing — when `permissions` is an array and `includes` is
//! `Array.prototype.includes`. A call passes the lexical check only with a [`Guard`]: an
//! expression of reads alone that the caller evaluates in the paused program first, and that
//! must be `true` (the receiver is an array or a string, its method is the built-in one, each
//! argument has the type the method reads without converting it — a string method would call
//! an object's own `toString`). Receivers and arguments may not call anything themselves.

use super::{Lexed, Tok, is_call};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    Any,
    Str,
    Num,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    Array,
    String,
}

use Arg::{Any, Num, Str};
use Receiver::{Array, String as Text};

/// Methods that only read their receiver and arguments, with the argument types they take.
const METHODS: &[(Receiver, &str, &[Arg])] = &[
    (Array, "includes", &[Any, Num]),
    (Array, "indexOf", &[Any, Num]),
    (Array, "lastIndexOf", &[Any, Num]),
    (Array, "at", &[Num]),
    (Text, "includes", &[Str, Num]),
    (Text, "startsWith", &[Str, Num]),
    (Text, "endsWith", &[Str, Num]),
    (Text, "indexOf", &[Str, Num]),
    (Text, "lastIndexOf", &[Str, Num]),
    (Text, "at", &[Num]),
    (Text, "charAt", &[Num]),
    (Text, "charCodeAt", &[Num]),
    (Text, "slice", &[Num, Num]),
    (Text, "substring", &[Num, Num]),
    (Text, "toLowerCase", &[]),
    (Text, "toUpperCase", &[]),
    (Text, "trim", &[]),
    (Text, "trimStart", &[]),
    (Text, "trimEnd", &[]),
];

/// A built-in read the expression calls, and what must hold for it to be one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The call as written (`user.permissions.includes('write')`).
    pub call: String,
    /// A JavaScript expression of reads alone: `true` when the call is the built-in read.
    pub condition: String,
}

/// The guard for the call whose `(` is `toks[open]`, when it calls a built-in read by a
/// member name (`R.m(…)`) on a receiver and with arguments that call nothing; None otherwise.
pub(super) fn builtin_call(chars: &[char], toks: &[Lexed], open: usize) -> Option<Guard> {
    let Tok::Name(method) = &toks[open.checked_sub(1)?].tok else {
        return None;
    };
    let dot = open.checked_sub(2)?;
    if toks[dot].tok != Tok::Punct('.') {
        return None;
    }
    let first = receiver_start(toks, dot)?;
    let close = matching_close(toks, open)?;
    let text =
        |a: usize, b: usize| -> String { chars[toks[a].start..toks[b].end].iter().collect() };
    let receiver = text(first, dot - 1);
    let mut args = Vec::new();
    let mut from = open + 1;
    let mut depth = 0usize;
    for k in open + 1..close {
        match toks[k].tok {
            Tok::Punct('(') if is_call(Some(&toks[k - 1].tok)) => return None,
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => depth = depth.checked_sub(1)?,
            Tok::Punct(',') if depth == 0 => {
                args.push(text(from, k.checked_sub(1).filter(|e| *e >= from)?));
                from = k + 1;
            }
            _ => {}
        }
    }
    if from < close {
        args.push(text(from, close - 1));
    }
    let ways: Vec<String> = METHODS
        .iter()
        .filter(|(_, name, sig)| name == method && args.len() <= sig.len())
        .map(|(on, _, sig)| condition(*on, &receiver, method, &args, sig))
        .collect();
    if ways.is_empty() {
        return None;
    }
    Some(Guard {
        call: text(first, close),
        condition: ways.join(" || "),
    })
}

fn condition(on: Receiver, receiver: &str, method: &str, args: &[String], sig: &[Arg]) -> String {
    let (is, proto) = match on {
        Array => (format!("({receiver}) instanceof Array"), "Array"),
        Text => (format!("typeof ({receiver}) === \"string\""), "String"),
    };
    let mut parts = vec![
        is,
        format!("({receiver}).{method} === {proto}.prototype.{method}"),
    ];
    for (arg, kind) in args.iter().zip(sig) {
        match kind {
            Any => {}
            Str => parts.push(format!("typeof ({arg}) === \"string\"")),
            Num => parts.push(format!("typeof ({arg}) === \"number\"")),
        }
    }
    format!("({})", parts.join(" && "))
}

/// Where the receiver of the member read at `toks[dot]` starts: a chain of names, literals,
/// groups, member and index reads, with no call in it. None when it is anything else.
fn receiver_start(toks: &[Lexed], dot: usize) -> Option<usize> {
    let mut j = dot;
    loop {
        let end = j.checked_sub(1)?;
        let start = match toks[end].tok {
            Tok::Name(_) | Tok::Str | Tok::Number => end,
            Tok::Punct(')') => {
                let open = matching_open(toks, end)?;
                if is_call(open.checked_sub(1).map(|p| &toks[p].tok)) {
                    return None;
                }
                open
            }
            Tok::Punct(']') => {
                let open = matching_open(toks, end)?;
                // An index read: what it indexes comes before the `[`.
                if open > 0
                    && matches!(
                        toks[open - 1].tok,
                        Tok::Name(_) | Tok::Str | Tok::Punct(')' | ']')
                    )
                {
                    j = open;
                    continue;
                }
                open
            }
            _ => return None,
        };
        match start.checked_sub(1).map(|p| &toks[p].tok) {
            Some(Tok::Punct('.')) | Some(Tok::Op("?.")) => j = start - 1,
            _ => return Some(start),
        }
    }
}

fn matching_open(toks: &[Lexed], close: usize) -> Option<usize> {
    let mut depth = 0usize;
    for k in (0..=close).rev() {
        match toks[k].tok {
            Tok::Punct(')' | ']' | '}') => depth += 1,
            Tok::Punct('(' | '[' | '{') => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

fn matching_close(toks: &[Lexed], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{Syntax, guarded_reads, side_effect};

    fn guards(expr: &str) -> Vec<String> {
        guarded_reads(expr, Syntax::JavaScript)
            .unwrap_or_else(|why| panic!("{expr:?} refused: {why}"))
            .into_iter()
            .map(|g| format!("{} => {}", g.call, g.condition))
            .collect()
    }

    #[test]
    fn the_seed_example_passes_with_its_guard() {
        assert_eq!(
            guards("user.permissions.includes('write')"),
            [concat!(
                "user.permissions.includes('write') => ",
                "((user.permissions) instanceof Array && (user.permissions).includes === Array.prototype.includes)",
                " || (typeof (user.permissions) === \"string\" && (user.permissions).includes === String.prototype.includes && typeof ('write') === \"string\")"
            )]
        );
        // The lexical check alone (every other runtime) still refuses it.
        assert!(side_effect("user.permissions.includes('write')", Syntax::JavaScript).is_some());
    }

    #[test]
    fn receivers_and_arguments_of_reads_pass() {
        assert_eq!(
            guards("items[0].name.startsWith(prefix, 2) && !done").len(),
            1
        );
        assert_eq!(guards("(a || b).trim()").len(), 1);
        assert_eq!(
            guards("user?.tags.indexOf(x) > -1 && name.at(0) === 'a'").len(),
            2
        );
        assert_eq!(guards("'abc'.toUpperCase()").len(), 1);
        assert!(guards("user.role === 'admin'").is_empty());
    }

    #[test]
    fn anything_else_that_calls_is_refused() {
        for e in [
            "users.push(x)",
            "list.sort()",
            "s.replace(a, b)",
            "f().includes(x)",
            "a.b(c).includes(x)",
            "tags.includes(pick())",
            "tags.includes(x.toString())",
            "includes(x)",
            "name.trim(1)",
            "tags.at(0, 1)",
            "x.includes(...args)",
            "tags?.includes(x)",
            "a[b()].includes(c)",
        ] {
            assert!(
                guarded_reads(e, Syntax::JavaScript).is_err(),
                "{e:?} should be refused"
            );
        }
        // Python keeps the lexical check: no built-in reads there.
        assert!(guarded_reads("'a'.startswith('b')", Syntax::Python).is_err());
    }
}
