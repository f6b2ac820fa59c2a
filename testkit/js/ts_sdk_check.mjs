// Drives a kitbag server with the official TypeScript SDK's client, as Inspector v1 and every
// TS-SDK-based client do: list the tools (the SDK validates the whole list), call one tool
// successfully and one that fails, and check the failure comes back as a result carrying
// the typed error code (SDK 1.32 validates structuredContent against the outputSchema even
// when isError is set, and throws -32602 when it does not match).
//
// usage: node ts_sdk_check.mjs CWD COMMAND [ARGS...]   (stdio: the command started in CWD)
//        node ts_sdk_check.mjs CWD http://HOST:PORT/mcp  (Streamable HTTP; the server's root is CWD)
// Prints one JSON line with what it saw; exits 1 on any failed check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [cwd, command, ...args] = process.argv.slice(2);
const http = /^https?:\/\//.test(command);
const report = { transport: http ? "http" : "stdio", tools: 0, success: null, error: null, failures: [] };
const fail = (msg) => report.failures.push(msg);

const client = new Client({ name: "kitbag-ts-sdk-check", version: "1.0.0" });
const transport = http
  ? new StreamableHTTPClientTransport(new URL(command))
  : new StdioClientTransport({ command, args, cwd, stderr: "ignore" });
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  report.tools = tools.length;
  if (tools.length === 0) fail("listTools returned no tools");
  const names = new Set(tools.map((t) => t.name));
  if (names.has("file_read")) {
    const ok = await client.callTool({ name: "file_read", arguments: { path: "a.txt" } });
    report.success = { isError: ok.isError ?? false, hasStructured: !!ok.structuredContent };
    if (ok.isError) fail("file_read a.txt failed: " + JSON.stringify(ok.content));
    try {
      const bad = await client.callTool({ name: "file_read", arguments: { path: "no/such.txt" } });
      report.error = { isError: bad.isError, code: bad.structuredContent?.error?.code ?? null,
                       text: bad.content?.[0]?.text ?? null };
      if (!bad.isError) fail("the failing call was not isError");
      if (report.error.code !== "file_not_found") fail("typed code lost: " + JSON.stringify(bad));
    } catch (e) {
      fail("the failing call threw instead of returning a result: " + e.message);
    }
  } else if (names.has("debug")) {
    try {
      const bad = await client.callTool({ name: "debug", arguments: { action: "bogus" } });
      report.error = { isError: bad.isError, code: bad.structuredContent?.error?.code ?? null };
      if (report.error.code !== "invalid_params") fail("typed code lost: " + JSON.stringify(bad));
    } catch (e) {
      fail("the failing call threw instead of returning a result: " + e.message);
    }
  }
} catch (e) {
  fail("client error: " + e.message);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
process.exit(report.failures.length ? 1 : 0);
