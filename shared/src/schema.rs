//! Tool schemas every client accepts.
//!
//! schemars writes valid JSON Schema that real clients still choke on: the TypeScript SDK
//! (1.32) rejects a whole `tools/list` when one property schema is a bare `true`; ajv-based
//! clients warn on every call about `format: "uint64"` and strict ajv refuses it; `$schema`
//! and `"default": null` are dead weight. And because the TS SDK checks `structuredContent`
//! against the outputSchema even on an error result, an outputSchema must also admit the
//! `{"error": {...}}` object kitbag returns on failure, or every typed error is lost.
//!
//! [`input_schema`] and [`output_schema`] are the only way tool schemas are made.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

/// The format values of JSON Schema 2020-12's format vocabulary; anything else is dropped.
pub const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// A params type whose schema is not an object (an enum or a newtype at the root): a
/// programming error, found when the tool is registered.
#[derive(Debug, thiserror::Error)]
#[error("the input schema is not an object: {0}")]
pub struct NotAnObject(String);

/// The input schema of a params type (root `type: object`), cleaned for every client.
pub fn input_schema<P: JsonSchema + 'static>() -> Result<JsonObject, NotAnObject> {
    let generated = rmcp::handler::server::common::schema_for_input::<P>().map_err(NotAnObject)?;
    let mut schema = Value::Object(std::sync::Arc::unwrap_or_clone(generated));
    clean(&mut schema);
    drop_optional_nulls(&mut schema);
    inline_defs(&mut schema);
    split_type_lists(&mut schema);
    // A tool that takes nothing still lists its (empty) properties: LangChain's converter
    // reads `properties` of every tool and raised KeyError on one without.
    if let Value::Object(root) = &mut schema {
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(into_object(schema))
}

/// A result type with a top-level field named `error`: clients that validate
/// `structuredContent` hold that field against kitbag's error object (the Python SDK refused
/// every successful `instance_spawn` over an `error: null`). A programming error, found when
/// the tool is registered.
#[derive(Debug, thiserror::Error)]
#[error(
    "the result type has a top-level field named `error`, which clients read as the error object; rename it"
)]
pub struct ErrorFieldClash;

/// The output schema of a result type, cleaned, and admitting kitbag's error object.
pub fn output_schema<O: JsonSchema + 'static>() -> Result<JsonObject, ErrorFieldClash> {
    let generated = rmcp::handler::server::common::schema_for_output::<O>();
    let mut schema = Value::Object(std::sync::Arc::unwrap_or_clone(generated));
    clean(&mut schema);
    split_type_lists(&mut schema);
    if schema["properties"].get("error").is_some() {
        return Err(ErrorFieldClash);
    }
    admit_error(&mut schema);
    Ok(into_object(schema))
}

/// [`output_schema`] for a tool being registered: a clash is a programming error, reported
/// with the tool's name.
pub fn output_schema_for<O: JsonSchema + 'static>(tool: &str) -> JsonObject {
    match output_schema::<O>() {
        Ok(s) => s,
        Err(e) => panic!("tool {tool}: {e}"),
    }
}

/// The property names an object schema's `required` lists (none when it has no list).
pub fn required_names(schema: &Value) -> Vec<&str> {
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// What `structuredContent` holds when a call fails (see `error::ToolError`).
pub fn error_object_schema() -> Value {
    json!({
        "type": "object",
        "description": "Present, instead of the fields above, when the call failed (isError: true).",
        "properties": {
            "code": {"type": "string", "description": "Machine-readable error code, e.g. file_not_found, invalid_params."},
            "message": {"type": "string"},
            "detail": {"type": "object", "description": "Facts about the failure, e.g. the field that was wrong."}
        },
        "required": ["code", "message"]
    })
}

fn into_object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// Remove what clients reject or warn about, everywhere in the schema.
pub fn clean(schema: &mut Value) {
    if let Value::Object(root) = schema {
        root.remove("$schema");
    }
    clean_node(schema);
}

fn clean_node(node: &mut Value) {
    match node {
        Value::Object(map) => {
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            if let Some(Value::String(f)) = map.get("format")
                && !STANDARD_FORMATS.contains(&f.as_str())
            {
                // An unsigned integer's `minimum: 0` goes with its format: the decoder refuses
                // a negative anyway, and on every count and offset it costs model context.
                if f.starts_with("uint") && map.get("minimum") == Some(&json!(0)) {
                    map.remove("minimum");
                }
                map.remove("format");
            }
            for (key, child) in map.iter_mut() {
                if holds_schemas(key) {
                    for_each_subschema(key, child, &mut |s| {
                        replace_bool_schema(s);
                        clean_node(s);
                    });
                } else if key != "enum" && key != "const" && key != "default" && key != "examples" {
                    clean_node(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean_node),
        _ => {}
    }
}

/// Keywords whose value is a schema, a list of schemas or a map of schemas.
fn holds_schemas(key: &str) -> bool {
    matches!(
        key,
        "properties"
            | "patternProperties"
            | "$defs"
            | "definitions"
            | "dependentSchemas"
            | "items"
            | "prefixItems"
            | "additionalProperties"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "contains"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else"
            | "anyOf"
            | "allOf"
            | "oneOf"
    )
}

fn for_each_subschema(key: &str, value: &mut Value, f: &mut impl FnMut(&mut Value)) {
    match key {
        "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
            if let Value::Object(map) = value {
                map.values_mut().for_each(f);
            }
        }
        "anyOf" | "allOf" | "oneOf" | "prefixItems" => {
            if let Value::Array(items) = value {
                items.iter_mut().for_each(f);
            }
        }
        // `items` and `additionalProperties` may be a schema or (for
        // additionalProperties) `false`, which stays: it is not a property schema.
        "additionalProperties" | "unevaluatedProperties" if value.is_boolean() => {}
        _ => f(value),
    }
}

/// A bare `true` / `false` schema as the equivalent object: the MCP schema and the TS SDK
/// want objects wherever a schema may appear in a tool definition.
fn replace_bool_schema(s: &mut Value) {
    match s {
        Value::Bool(true) => *s = Value::Object(Map::new()),
        Value::Bool(false) => *s = json!({"not": {}}),
        _ => {}
    }
}

/// Marks an input field whose explicit `null` means something (`issue_update`'s
/// `assignment: null` unassigns): its `null` is kept. Use with
/// `#[schemars(extend("x-null-means" = "…"))]`; the key itself is removed.
pub const NULL_MEANS: &str = "x-null-means";

/// An optional input field may be omitted, so `null` in its type only adds noise (and
/// single-type dialects such as Gemini's reject `type: [X, "null"]`). The decoder still
/// accepts an explicit null for an optional field.
fn drop_optional_nulls(schema: &mut Value) {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if !required.contains(name) {
                strip_null(prop);
            }
        }
    }
    // Optional fields of nested parameter objects (e.g. one edit of a list) too.
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = schema.get_mut(key) {
            for def in defs.values_mut() {
                drop_optional_nulls(def);
            }
        }
    }
}

fn strip_null(prop: &mut Value) {
    let Value::Object(map) = prop else {
        return;
    };
    if map.remove(NULL_MEANS).is_some() {
        return;
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
        if let Some(Value::Array(values)) = map.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
        return;
    }
    // `Option<Struct>`: anyOf [{$ref}, {type: null}] → the $ref alone, keeping the description.
    if let Some(Value::Array(branches)) = map.get("anyOf") {
        let kept: Vec<Value> = branches
            .iter()
            .filter(|b| b.get("type") != Some(&json!("null")))
            .cloned()
            .collect();
        if kept.len() == 1 && kept.len() < branches.len() {
            map.remove("anyOf");
            if let Value::Object(branch) = &kept[0] {
                for (k, v) in branch {
                    map.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
}

/// Keywords that only annotate: a `$ref`'s own value for one of these may replace the
/// target's when the target is inlined, without changing what the schema accepts.
const ANNOTATIONS: [&str; 7] = [
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Replace `{"$ref": "#/$defs/X", ...}` by X's own keywords wherever that makes the input
/// schema no larger (always for a definition used once), and drop the definitions left
/// unused. A tool's inputSchema is read by a model on every turn: an inline enum is both
/// shorter and easier to follow than a reference, and some clients resolve no `$ref` at
/// all. Recursive definitions, and references whose siblings would overwrite one of the
/// target's validation keywords, stay references.
fn inline_defs(schema: &mut Value) {
    let names: Vec<String> = match schema.get("$defs") {
        Some(Value::Object(defs)) => defs.keys().cloned().collect(),
        _ => return,
    };
    for name in names {
        let target = format!("#/$defs/{name}");
        let Some(def) = schema.get("$defs").and_then(|d| d.get(&name)).cloned() else {
            continue;
        };
        if refers_to(&def, &target) {
            continue;
        }
        let mut trial = schema.clone();
        if let Some(Value::Object(defs)) = trial.get_mut("$defs") {
            defs.remove(&name);
        }
        if !replace_refs(&mut trial, &target, &def) {
            continue;
        }
        if refers_to(&trial, &target) || size(&trial) > size(schema) {
            continue;
        }
        *schema = trial;
    }
    if let Value::Object(root) = schema
        && root
            .get("$defs")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        root.remove("$defs");
    }
}

fn size(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// Whether `v` holds a `$ref` to `target` anywhere (data keywords excluded).
fn refers_to(v: &Value, target: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, c)| {
            (k == "$ref" && c.as_str() == Some(target)) || (!is_data(k) && refers_to(c, target))
        }),
        Value::Array(a) => a.iter().any(|c| refers_to(c, target)),
        _ => false,
    }
}

/// `type: [X, "null"]` becomes `anyOf: [{type: X, …}, {type: "null"}]`: the same values, in the
/// spelling that single-type dialects (Gemini's function declarations, OpenAPI-style mappers)
/// take and that the MCP Inspector's portability check asks for. Annotations stay outside;
/// every other keyword goes with each non-null type (a validator ignores the ones that do not
/// apply to it).
fn split_type_lists(node: &mut Value) {
    match node {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if !is_data(key) {
                    split_type_lists(child);
                }
            }
            let Some(Value::Array(types)) = map.get("type") else {
                return;
            };
            if types.len() < 2 {
                if let Some(only) = types.first().cloned() {
                    map.insert("type".into(), only);
                }
                return;
            }
            let types = types.clone();
            map.remove("type");
            let (mut outer, mut inner) = (serde_json::Map::new(), serde_json::Map::new());
            for (key, value) in std::mem::take(map) {
                if ANNOTATIONS.contains(&key.as_str()) {
                    outer.insert(key, value);
                } else {
                    inner.insert(key, value);
                }
            }
            let branches: Vec<Value> = types
                .into_iter()
                .map(|t| {
                    if t == "null" {
                        json!({"type": "null"})
                    } else {
                        let mut branch = inner.clone();
                        branch.insert("type".into(), t);
                        Value::Object(branch)
                    }
                })
                .collect();
            outer.insert("anyOf".into(), Value::Array(branches));
            *map = outer;
        }
        Value::Array(items) => items.iter_mut().for_each(split_type_lists),
        _ => {}
    }
}

/// Keywords whose value is instance data, never a schema.
fn is_data(key: &str) -> bool {
    matches!(key, "enum" | "const" | "default" | "examples")
}

/// Put `def` in place of every reference to `target`; false when one reference cannot be
/// merged without changing its meaning (the caller then keeps them all).
fn replace_refs(v: &mut Value, target: &str, def: &Value) -> bool {
    match v {
        Value::Object(m) => {
            if m.get("$ref").and_then(Value::as_str) == Some(target) {
                let Value::Object(def) = def else {
                    return false;
                };
                // The reference's own keywords first (its description above the type), then
                // the definition's; a clash is only allowed on annotations.
                let mut merged = Map::new();
                for (k, c) in m.iter().filter(|(k, _)| *k != "$ref") {
                    if def.contains_key(k) && !ANNOTATIONS.contains(&k.as_str()) {
                        return false;
                    }
                    merged.insert(k.clone(), c.clone());
                }
                for (k, c) in def {
                    merged.entry(k.clone()).or_insert_with(|| c.clone());
                }
                *m = merged;
                return true;
            }
            m.iter_mut()
                .filter(|(k, _)| !is_data(k))
                .all(|(_, c)| replace_refs(c, target, def))
        }
        Value::Array(a) => a.iter_mut().all(|c| replace_refs(c, target, def)),
        _ => true,
    }
}

/// Let the outputSchema describe both outcomes: the result's own fields, or `error`.
fn admit_error(schema: &mut Value) {
    let Value::Object(root) = schema else {
        return;
    };
    let props = root
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(props) = props {
        props.insert("error".into(), error_object_schema());
    }
    if let Some(required) = root.remove("required") {
        let non_empty = required.as_array().is_some_and(|r| !r.is_empty());
        if non_empty {
            root.insert(
                "anyOf".into(),
                json!([{"required": required}, {"required": ["error"]}]),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Nothing {}

    #[derive(Serialize, JsonSchema)]
    struct Clashing {
        error: Option<String>,
    }

    #[test]
    fn a_tool_without_params_lists_empty_properties() {
        let s = input_schema::<Nothing>().expect("object");
        assert_eq!(s["type"], "object");
        assert_eq!(s["properties"], json!({}));
    }

    #[test]
    fn a_result_field_named_error_is_refused() {
        assert!(output_schema::<Clashing>().is_err());
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Edit {
        old: String,
        new: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Params {
        path: String,
        limit: Option<u64>,
        edits: Option<Vec<Edit>>,
        nested: Option<Edit>,
    }

    #[derive(Serialize, JsonSchema)]
    struct Out {
        total: u64,
        data: Value,
        maybe: Option<u32>,
    }

    fn walk(v: &Value, f: &mut impl FnMut(&str, &Value)) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    f(k, c);
                    walk(c, f);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, f)),
            _ => {}
        }
    }

    #[test]
    fn inputs_lose_nulls_formats_and_schema_key() {
        let s = Value::Object(input_schema::<Params>().expect("schema"));
        assert!(s.get("$schema").is_none());
        assert_eq!(s["properties"]["limit"], json!({"type": "integer"}));
        assert_eq!(s["required"], json!(["path"]));
        walk(&s, &mut |k, v| {
            assert!(!(k == "default" && v.is_null()), "default null left");
            if k == "format" {
                assert!(STANDARD_FORMATS.contains(&v.as_str().unwrap_or("")), "{v}");
            }
            if k == "type" {
                assert!(v != &json!("null"), "null type left in {s}");
            }
        });
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Unassign {
        #[schemars(extend("x-null-means" = "unassign"))]
        who: Option<String>,
        other: Option<String>,
    }

    #[test]
    fn a_null_that_means_something_is_kept() {
        let s = Value::Object(input_schema::<Unassign>().expect("schema"));
        assert_eq!(
            s["properties"]["who"]["anyOf"],
            json!([{"type": "string"}, {"type": "null"}])
        );
        assert!(
            s["properties"]["who"].get(NULL_MEANS).is_none(),
            "marker removed"
        );
        assert_eq!(s["properties"]["other"]["type"], "string");
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "snake_case")]
    /// Doc of the enum.
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        value: u32,
        children: Vec<Tree>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct WithDefs {
        /// The mode to use.
        mode: Option<Mode>,
        other: Mode,
        edits: Vec<Edit>,
        tree: Option<Tree>,
    }

    #[test]
    fn definitions_are_inlined_where_that_is_no_larger() {
        let s = Value::Object(input_schema::<WithDefs>().expect("schema"));
        // Used twice but small: inlined both times, the field's description kept first.
        assert_eq!(
            s["properties"]["mode"],
            json!({"description": "The mode to use.", "type": "string", "enum": ["fast", "slow"]})
        );
        assert_eq!(s["properties"]["other"]["enum"], json!(["fast", "slow"]));
        // Used once: inlined, with its optional fields' nulls already gone.
        assert_eq!(s["properties"]["edits"]["items"]["type"], "object");
        assert_eq!(
            s["properties"]["edits"]["items"]["properties"]["new"]["type"],
            "string"
        );
        // Recursive: stays a reference, and its definition stays.
        assert_eq!(s["properties"]["tree"]["$ref"], "#/$defs/Tree");
        assert_eq!(s["$defs"].as_object().map(|d| d.len()), Some(1), "{s}");
        assert_eq!(
            s["$defs"]["Tree"]["properties"]["children"]["items"]["$ref"],
            "#/$defs/Tree"
        );
    }

    #[test]
    fn a_reference_with_clashing_validation_keywords_is_kept() {
        let mut s = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A", "type": "integer"}},
            "$defs": {"A": {"type": "string"}}
        });
        let before = s.clone();
        inline_defs(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn outputs_have_object_properties_and_admit_errors() {
        let s = Value::Object(output_schema::<Out>().expect("no clash"));
        assert_eq!(s["type"], "object");
        assert!(
            s["properties"]["data"].is_object(),
            "bare true replaced: {s}"
        );
        assert!(s["properties"]["error"].is_object());
        assert!(s.get("required").is_none());
        assert_eq!(s["anyOf"][1], json!({"required": ["error"]}));
        // Nullable outputs keep their null (the result may carry one), spelled as anyOf.
        assert_eq!(
            s["properties"]["maybe"]["anyOf"],
            json!([{"type": "integer"}, {"type": "null"}]),
            "{s}"
        );
    }

    #[test]
    fn type_lists_become_single_type_branches() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "a": {"description": "d", "type": ["string", "null"], "maxLength": 5},
                "b": {"type": "array", "items": {"type": ["integer", "null"], "minimum": 1}},
                "c": {"type": ["string"], "enum": ["x"], "default": {"type": ["not", "a schema"]}},
            }
        });
        split_type_lists(&mut s);
        assert_eq!(
            s["properties"]["a"],
            json!({"description": "d", "anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]})
        );
        assert_eq!(
            s["properties"]["b"]["items"],
            json!({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]})
        );
        // A list of one is its type; instance data is never rewritten.
        assert_eq!(s["properties"]["c"]["type"], "string");
        assert_eq!(
            s["properties"]["c"]["default"]["type"],
            json!(["not", "a schema"])
        );
        assert_eq!(s["type"], "object");
    }

    #[test]
    fn boolean_schemas_become_objects_everywhere() {
        let mut s = json!({
            "type": "object",
            "properties": {"a": true, "b": {"type": "array", "items": true}, "c": false},
            "additionalProperties": false,
            "$defs": {"D": {"anyOf": [true, {"type": "string", "format": "uint8"}]}},
            "enum_holder": {"enum": [true, null], "default": null}
        });
        clean(&mut s);
        assert_eq!(s["properties"]["a"], json!({}));
        assert_eq!(s["properties"]["b"]["items"], json!({}));
        assert_eq!(s["properties"]["c"], json!({"not": {}}));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["$defs"]["D"]["anyOf"], json!([{}, {"type": "string"}]));
        assert_eq!(s["enum_holder"]["enum"], json!([true, null]), "data kept");
    }
}
