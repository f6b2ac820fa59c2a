// Calls every tool a kitbag server lists through the official TypeScript SDK's client, at least
// once successfully and once failing, from the case table shared with the Python sweep
// (testkit/sweep/cases.json; its header in testkit/py/sweep.py says what a step is). The SDK
// holds every structuredContent, error results included, against the tool's outputSchema (the
// schema it cached from listTools) and throws when one does not match.
//
// usage: node sweep.mjs CASES_JSON RUNS_JSON
//   RUNS_JSON  a list of runs {name, target, cwd, env?, vars?, alone?}: target is [command, args...] (stdio,
//              started in cwd) or an http://.../mcp URL; the SDK speaks the handshake era only.
// Prints one JSON line {name: report}; exits 1 on any failed check.
import { mkdirSync, readFileSync, writeFileSync, existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { fill } from "./answer_form.mjs";

function writeFiles(root, files) {
  for (const [rel, text] of Object.entries(files)) {
    const path = join(root, rel);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, text);
  }
}

// The step's arguments with "$name.a.b" (a saved result's field) and "$var" filled in.
function resolve(value, saved, vars) {
  if (typeof value === "string" && value.startsWith("$") && value.length > 1) {
    const [name, ...path] = value.slice(1).split(".");
    let out = path.length ? saved[name] : vars[name];
    if (out === undefined) throw new Error(`reference ${value} not saved by an earlier step`);
    for (const key of path) {
      out = out?.[key];
      if (out === undefined) throw new Error(`reference ${value} not saved by an earlier step`);
    }
    return out;
  }
  if (Array.isArray(value)) return value.map((v) => resolve(v, saved, vars));
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v, saved, vars)]));
  }
  return value;
}

const textOf = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");

async function callStep(client, step, saved, vars, report) {
  const tool = step.tool;
  const tally = (report.tools[tool] ??= { ok: 0, failed: 0 });
  if (vars.alone && "alone" in step) {
    // Run by itself the tool has nothing to act on: its documented refusal stands in for the
    // successful call (see testkit/py/sweep.py).
    step = { ...step, expect: step.alone };
    tally.waived = (tally.waived ?? 0) + 1;
  }
  const expect = step.expect ?? "ok";
  const codes = Array.isArray(expect) ? expect : [expect];
  const label = `${tool} ${JSON.stringify(step.args).slice(0, 160)}`;
  const fail = (msg) => report.failures.push(`${label}: ${msg}`.slice(0, 1500));
  // `write` changes files for this call only: the old contents come back after it.
  const kept = [];
  for (const [rel, text] of Object.entries(step.write ?? {})) {
    const path = join(vars.cwd, rel);
    kept.push([path, existsSync(path) ? readFileSync(path, "utf8") : null]);
    writeFiles(vars.cwd, { [rel]: text });
  }
  try {
    let args;
    try {
      args = resolve(step.args, saved, vars);
    } catch (e) {
      return fail(e.message);
    }
    let result;
    try {
      result = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: 120000 });
    } catch (e) {
      // The SDK throws on a JSON-RPC error and on a result its outputSchema rejects.
      return fail(`threw: ${e.message}`);
    }
    const structured = result.structuredContent;
    if (result.isError) {
      const code = structured?.error?.code ?? null;
      if (codes.includes("ok") || !codes.includes(code)) {
        return fail(`wanted ${JSON.stringify(expect)}, got error ${code}: ${textOf(result).slice(0, 600)}`);
      }
      if (!textOf(result).includes(code)) fail(`the text content does not name the code ${code}`);
      tally.failed += 1;
    } else {
      if (!codes.includes("ok")) {
        return fail(`wanted error ${JSON.stringify(expect)}, got success: ${textOf(result).slice(0, 600)}`);
      }
      if (!structured) return fail("success without structuredContent");
      if (!(result.content ?? []).length) fail("success without text content");
      tally.ok += 1;
    }
    if (step.save) saved[step.save] = structured;
  } finally {
    for (const [path, text] of kept) {
      if (text === null) rmSync(path, { force: true });
      else writeFileSync(path, text);
    }
  }
}

async function run(spec, cases) {
  const report = { protocol: null, listed: 0, calls: 0, tools: {}, failures: [] };
  const t0 = Date.now();
  writeFiles(spec.cwd, cases.files ?? {});
  const http = typeof spec.target === "string";
  const transport = http
    ? new StreamableHTTPClientTransport(new URL(spec.target))
    : new StdioClientTransport({
        command: spec.target[0],
        args: spec.target.slice(1),
        cwd: spec.cwd,
        env: spec.env,
        stderr: "ignore",
      });
  const client = new Client(
    { name: "kitbag-ts-sweep", version: "1.0.0" },
    { capabilities: { elicitation: {} } },
  );
  // The operator: `ask` and `form` get their forms filled in (MCP elicitation).
  client.setRequestHandler(ElicitRequestSchema, async (request) => ({
    action: "accept",
    content: fill(request.params.requestedSchema),
  }));
  try {
    await client.connect(transport);
    report.protocol = transport.protocolVersion ?? client.getServerVersion()?.protocolVersion ?? null;
    const { tools } = await client.listTools();
    const listed = new Set(tools.map((t) => t.name));
    report.listed = listed.size;
    const saved = {};
    const vars = { ...(spec.vars ?? {}), cwd: spec.cwd, alone: spec.alone ?? false };
    for (const step of cases.steps) {
      if (!listed.has(step.tool)) continue;
      report.calls += 1;
      await callStep(client, step, saved, vars, report);
    }
    for (const tool of [...listed].sort()) {
      const tally = report.tools[tool] ?? { ok: 0, failed: 0 };
      if (!tally.ok && !tally.waived) report.failures.push(`${tool}: no successful call (add a case to cases.json)`);
      if (!tally.failed) report.failures.push(`${tool}: no failing call (add a case to cases.json)`);
    }
  } catch (e) {
    report.failures.push(`client error: ${e.message}`.slice(0, 2000));
  } finally {
    await client.close().catch(() => {});
  }
  report.ms = Date.now() - t0;
  return report;
}

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
// The runs, a few at a time: each has its own directory and processes.
const specs = JSON.parse(process.argv[3]);
const reports = {};
let next = 0;
const worker = async () => {
  while (next < specs.length) {
    const spec = specs[next++];
    reports[spec.name] = await run(spec, cases);
  }
};
await Promise.all([worker(), worker(), worker(), worker()]);
console.log(JSON.stringify(reports));
process.exit(Object.values(reports).some((r) => r.failures.length) ? 1 : 0);
