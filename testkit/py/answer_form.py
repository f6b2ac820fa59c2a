"""What the test clients' operator types into a form a server asks for (MCP elicitation): the
first option, every option of a multi-select, a word per text field, 3, yes. Shared by
elicit_check.py and sweep.py."""

from __future__ import annotations


def fill(schema: dict) -> dict:
    out = {}
    for key, prop in schema.get("properties", {}).items():
        kind = prop.get("type")
        if kind == "array":
            out[key] = list(prop["items"]["enum"])
        elif "enum" in prop:
            out[key] = prop["enum"][0]
        elif kind in ("integer", "number"):
            out[key] = 3
        elif kind == "boolean":
            out[key] = True
        else:
            out[key] = f"typed {key}"
    return out


def schema_of(params) -> dict:
    """The requested schema of the SDK's `ElicitRequestParams`, as a plain dict."""
    schema = params.requested_schema
    return schema if isinstance(schema, dict) else schema.model_dump(exclude_none=True)
