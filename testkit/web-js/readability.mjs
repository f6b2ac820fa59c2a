// Readability.js over a directory of gzipped pages, for servers/web/benches/extract.rs:
//     node readability.mjs DIR
// prints one JSON object per DIR/*.html.gz (sorted): {"id", "text", "ms"} — the id is the file
// name before its first dot, the text Readability's textContent (empty when it finds no
// article), ms the extraction alone (jsdom's parse and Readability's pass; the page is already
// decoded). Each page gets a placeholder URL, as reader-view tests do.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { Readability } from "@mozilla/readability";
import { JSDOM, VirtualConsole } from "jsdom";

const dir = process.argv[2];
const quiet = new VirtualConsole();
for (const name of readdirSync(dir).filter((n) => n.endsWith(".html.gz")).sort()) {
  const html = gunzipSync(readFileSync(join(dir, name))).toString("utf8");
  const id = name.split(".")[0];
  const t = performance.now();
  let text = "";
  let dom = null;
  try {
    dom = new JSDOM(html, { url: "https://example.com/", virtualConsole: quiet });
    text = new Readability(dom.window.document).parse()?.textContent ?? "";
  } catch (e) {
    process.stderr.write(`warning: ${id}: ${e}\n`);
  }
  const ms = performance.now() - t;
  // Each page's window is closed (after the timing): left open, a thousand pages exhaust
  // node's heap.
  dom?.window.close();
  process.stdout.write(JSON.stringify({ id, text, ms }) + "\n");
}
