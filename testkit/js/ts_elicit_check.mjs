// Answers kitbag's `ask` and `form` with the official TypeScript SDK's client (1.32), as a
// Node agent's operator would: the client declares `elicitation`, its `elicitation/create`
// handler fills in the form the server sends from the requested schema, and the tool's typed
// result must carry those answers. A second `ask` is declined (`action: "decline"`).
//
// usage: node ts_elicit_check.mjs CWD COMMAND [ARGS...]   (stdio: the command started in CWD)
//        node ts_elicit_check.mjs CWD http://HOST:PORT/mcp  (Streamable HTTP with a session)
// Prints one JSON line with what it saw; exits 1 on any failed check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { fill } from "./answer_form.mjs";

const [cwd, command, ...args] = process.argv.slice(2);
const http = /^https?:\/\//.test(command);
const report = { transport: http ? "http" : "stdio", forms: [], failures: [] };
const fail = (msg) => report.failures.push(msg);

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const sorted = (o) => (o && typeof o === "object" && !Array.isArray(o)
  ? Object.fromEntries(Object.keys(o).sort().map((k) => [k, sorted(o[k])])) : o);

const client = new Client(
  { name: "kitbag-ts-elicit-check", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const { message, requestedSchema } = request.params;
  report.forms.push(message);
  if (message === "Decline me") return { action: "decline" };
  return { action: "accept", content: fill(requestedSchema) };
});
const transport = http
  ? new StreamableHTTPClientTransport(new URL(command))
  : new StdioClientTransport({ command, args, cwd, stderr: "ignore" });
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const names = new Set(tools.map((t) => t.name));
  if (!names.has("ask") || !names.has("form")) fail("ask/form not listed");
  const asked = await client.callTool({ name: "ask", arguments: { questions: [
    { id: "target", title: "Deploy where?", options: ["staging", "production"] },
    { id: "checks", title: "Which checks?", options: ["unit", "e2e"], multiple: true },
    { id: "note", title: "Anything to add?" },
  ] } });
  report.ask = asked.structuredContent;
  const wantAsk = { action: "accept", answers: { checks: ["unit", "e2e"], note: "typed note", target: "staging" } };
  if (asked.isError || !same(sorted(asked.structuredContent), sorted(wantAsk))) fail("ask: " + JSON.stringify(asked));
  const formed = await client.callTool({ name: "form", arguments: { message: "Release", fields: [
    { name: "version", label: "Version", required: true },
    { name: "replicas", label: "Replicas", type: "integer", required: true },
    { name: "notify", label: "Notify?", type: "boolean" },
  ] } });
  report.form = formed.structuredContent;
  const wantForm = { action: "accept", answers: { notify: true, replicas: 3, version: "typed version" } };
  if (formed.isError || !same(sorted(formed.structuredContent), sorted(wantForm))) fail("form: " + JSON.stringify(formed));
  const declined = await client.callTool({ name: "ask", arguments: { questions: [{ id: "q", title: "Decline me" }] } });
  report.declined = declined.structuredContent;
  if (declined.isError || !same(declined.structuredContent, { action: "decline" })) fail("decline: " + JSON.stringify(declined));
  if (report.forms.length !== 3) fail(`the handler saw ${report.forms.length} forms, not 3`);
} catch (e) {
  fail("client error: " + e.message);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
process.exit(report.failures.length ? 1 : 0);
