// What the test clients' operator types into a form a server asks for (MCP elicitation): the
// first option, every option of a multi-select, a word per text field, 3, yes. Shared by
// ts_elicit_check.mjs and sweep.mjs.
export function fill(schema) {
  const out = {};
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    if (prop.type === "array") out[key] = [...prop.items.enum];
    else if (prop.enum) out[key] = prop.enum[0];
    else if (prop.type === "integer" || prop.type === "number") out[key] = 3;
    else if (prop.type === "boolean") out[key] = true;
    else out[key] = `typed ${key}`;
  }
  return out;
}
