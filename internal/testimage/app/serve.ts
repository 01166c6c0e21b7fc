// SPDX-License-Identifier: Apache-2.0
//
// Stand-in for the Executor self-hosted server, run by the real Bun from the
// hbx test image with `bun run src/serve.ts` in /app/apps/host-selfhost.
// It answers the parts of Executor's surface that hbx touches: /api/health,
// the setup page, the OAuth-protected MCP endpoint with the two tools
// `execute` and `resume`, and a data directory whose contents persist.
//
// Environment (as the image config and hbx set it):
//   EXECUTOR_HOST, PORT        listen address (default 0.0.0.0:4788)
//   EXECUTOR_DATA_DIR          data directory (default /data), created 0700
//   EXECUTOR_WEB_BASE_URL      public base URL in the MCP auth challenge
//   EXECUTOR_AUTH_TOKEN        the bearer key, fixed (as the CLI edition's
//                              `--auth-token KEY`); without it the server
//                              mints one in <data>/api-key on first start
// Test-only switches (never set by hbx):
//   HBXTEST_FORCE_HOST         listen on this address instead of EXECUTOR_HOST
//   HBXTEST_FAIL_HEALTH=1      /api/health answers 503
//   HBXTEST_EXIT_AT_START=N    exit with status N right after start-up
//   HBXTEST_REFUSE_OLDER_DATA=1  exit 1 at start-up on data an older release
//                              made (state.json's format below this one's),
//                              as Executor v1.5.30 to v1.5.32 crashed on it
//   HBXTEST_START_DELAY_MS=N   wait N ms before listening
//   HBXTEST_DEGRADED_IF=PATH   /api/health answers 200 {"status":"degraded"}
//                              while PATH exists (Executor's database failing)
//   HBXTEST_REQUIRE_KEY=1      every path answers 401 with a Bearer challenge
//                              without the key (the CLI edition,
//                              `executor web --auth-token KEY`)
//   HBXTEST_SKILLS=1           MCP offers a third tool, `skills` (v1.5.27)
//   HBXTEST_OPEN_MCP_IF=PATH   /mcp answers without the key while PATH exists
//                              (a bearer gate left open)
//   HBXTEST_EXTRA_LISTEN=H:P   also listen on host H, port P (a stray listener)
//   HBXTEST_ANY_KEY_IF=PATH    any Bearer key passes while PATH exists (a gate
//                              that checks only that a key is sent)
//   HBXTEST_NO_API_HEALTH=1    no /api/health: it answers 404 (the CLI
//                              edition's, with HBXTEST_REQUIRE_KEY=1)
//   HBXTEST_TREE=1             a process tree, as Executor since v1.5.30: a
//                              "tool bridge" listener on 127.0.0.1:<ephemeral>
//                              and a `workerd` child (bun -e) that ignores
//                              SIGTERM, listens on 127.0.0.1:<ephemeral> and
//                              keeps a temp directory executor-workerd-<pid>-*
//                              under TMPDIR; tools/call execute runs through
//                              the child, which calls the bridge back. On
//                              SIGTERM or SIGINT the server SIGKILLs the child
//                              (as upstream does), then exits
// Arguments:
//   --pid PATH                 write the process id to PATH at start-up
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { banner } from "@hbx-test/banner";
import { padLeft } from "hbx-pad";

const STATE_FORMAT_SUPPORTED = 1;
const PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

function fail(msg: string): never {
  console.error(`executor: ${msg}`);
  process.exit(1);
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch (err: any) {
    if (err?.code === "ENOENT") return undefined;
    fail(`read ${path}: ${err?.message ?? err}`);
  }
}

// writeDurable replaces path with data: temp file, fsync, rename.
function writeDurable(path: string, data: string, mode: number) {
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, "w", mode);
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

const appDir = `${import.meta.dir}/..`;
const version = (readText(`${appDir}/VERSION`) ?? fail(`missing ${appDir}/VERSION (was the last layer applied?)`)).trim();
const stateFormat = Number((readText(`${appDir}/STATE_FORMAT`) ?? "1").trim());
if (!Number.isInteger(stateFormat) || stateFormat < 1) fail(`bad STATE_FORMAT ${stateFormat}`);

const port = Number(process.env.PORT ?? "4788");
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`bad PORT ${process.env.PORT}`);
const host = process.env.HBXTEST_FORCE_HOST || process.env.EXECUTOR_HOST || "0.0.0.0";
const dataDir = process.env.EXECUTOR_DATA_DIR || "/data";
const baseURL = (process.env.EXECUTOR_WEB_BASE_URL || `http://localhost:${port}`).replace(/\/+$/, "");

// Data directory, API key and state file.
try {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
} catch (err: any) {
  fail(`create data directory ${dataDir}: ${err?.message ?? err}`);
}
const keyPath = `${dataDir}/api-key`;
const fixedKey = process.env.EXECUTOR_AUTH_TOKEN;
let apiKey = fixedKey !== undefined ? fixedKey.trim() : readText(keyPath)?.trim();
if (fixedKey !== undefined && apiKey === "") {
  fail("EXECUTOR_AUTH_TOKEN is empty");
} else if (apiKey === undefined) {
  apiKey = randomBytes(32).toString("hex");
  writeDurable(keyPath, apiKey + "\n", 0o600);
} else if (apiKey === "") {
  fail(`${keyPath} is empty`);
}

const statePath = `${dataDir}/state.json`;
let starts = 0;
const prevText = readText(statePath);
if (prevText !== undefined) {
  let prev: any;
  try {
    prev = JSON.parse(prevText);
  } catch (err: any) {
    fail(`parse ${statePath}: ${err?.message ?? err}`);
  }
  if (!Number.isInteger(prev?.format) || !Number.isInteger(prev?.starts)) fail(`${statePath}: bad contents`);
  if (prev.format > stateFormat) {
    fail(`${statePath}: data format ${prev.format} is newer than this release (${version}) supports (${stateFormat})`);
  }
  if (process.env.HBXTEST_REFUSE_OLDER_DATA === "1" && prev.format < stateFormat) {
    fail(`${statePath}: data format ${prev.format} was made by an older release; ${version} crashes on it`);
  }
  starts = prev.starts;
}
starts++;
writeDurable(statePath, JSON.stringify({ format: stateFormat, version, starts }) + "\n", 0o600);

if (process.env.HBXTEST_EXIT_AT_START) {
  const code = Number(process.env.HBXTEST_EXIT_AT_START);
  console.log(`executor: exiting with status ${code} as HBXTEST_EXIT_AT_START asks`);
  process.exit(code);
}
const pidAt = process.argv.indexOf("--pid");
if (pidAt > 0) writeDurable(process.argv[pidAt + 1] ?? fail("--pid needs a path"), `${process.pid}\n`, 0o644);
const delay = Number(process.env.HBXTEST_START_DELAY_MS ?? "0");
if (delay > 0) await Bun.sleep(delay);

// The process tree (HBXTEST_TREE=1): the tool bridge, then the workerd child.
const WORKERD_JS = `
const { mkdtempSync } = require("node:fs");
process.on("SIGTERM", () => console.log("workerd: SIGTERM ignored"));
const tmp = mkdtempSync((process.env.TMPDIR || "/tmp") + "/executor-workerd-" + process.pid + "-");
const bridge = process.env.HBXTEST_BRIDGE;
const srv = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(req) {
    const code = await req.text();
    const via = await (await fetch(bridge, { method: "POST", body: code })).json();
    return Response.json({ status: "completed", code, workerd: process.pid, tmp, bridge: via });
  },
});
console.log("workerd " + srv.port);
`;
type Tree = { bridgePort: number; workerdPort: number; workerdPid: number; kill: () => void };
async function startTree(): Promise<Tree> {
  const bridge = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      return json({ bridged: (await req.text()).length });
    },
  });
  const child = Bun.spawn([process.execPath, "-e", WORKERD_JS], {
    env: { ...process.env, HBXTEST_BRIDGE: `http://127.0.0.1:${bridge.port}/bridge` },
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = child.stdout.getReader();
  let out = "";
  while (!/workerd \d+\n/.test(out)) {
    const { value, done } = await reader.read();
    if (done) fail(`workerd exited before listening: ${out}`);
    out += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  child.stdout.pipeTo(new WritableStream({ write: (b) => void process.stdout.write(b) })).catch(() => {});
  const workerdPort = Number(/workerd (\d+)/.exec(out)![1]);
  console.log(`executor: workerd pid ${child.pid} on 127.0.0.1:${workerdPort}, tool bridge on 127.0.0.1:${bridge.port}`);
  return { bridgePort: bridge.port, workerdPort, workerdPid: child.pid, kill: () => child.kill(9) };
}
const tree = process.env.HBXTEST_TREE === "1" ? await startTree() : undefined;

// HTTP surface.
function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json", ...headers },
  });
}

const keyBytes = Buffer.from(apiKey);
function authorized(req: Request): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "");
  if (!m) return false;
  if (process.env.HBXTEST_ANY_KEY_IF && existsSync(process.env.HBXTEST_ANY_KEY_IF)) return true;
  const got = Buffer.from(m[1]);
  return got.length === keyBytes.length && timingSafeEqual(got, keyBytes);
}

const TOOLS = [
  {
    name: "execute",
    description: "Run code against the connected integrations.",
    inputSchema: {
      type: "object",
      properties: { code: { type: "string", description: "TypeScript to run" } },
      required: ["code"],
    },
  },
  {
    name: "resume",
    description: "Resume a paused execution.",
    inputSchema: {
      type: "object",
      properties: { executionId: { type: "string" }, response: { type: "string" } },
      required: ["executionId"],
    },
  },
];
if (process.env.HBXTEST_SKILLS === "1") {
  TOOLS.push({
    name: "skills",
    description: "List the skills of the connected integrations.",
    inputSchema: { type: "object", properties: { query: { type: "string" } }, required: [] },
  });
}

const sessions = new Set<string>();

type RPC = { jsonrpc?: string; id?: string | number | null; method?: string; params?: any };

// handleRPC answers one JSON-RPC message; undefined means "no response"
// (notifications and client responses).
async function handleRPC(msg: RPC): Promise<object | undefined> {
  const isRequest = msg && typeof msg.method === "string" && msg.id !== undefined && msg.id !== null;
  if (!isRequest) return undefined;
  const ok = (result: unknown) => ({ jsonrpc: "2.0", id: msg.id, result });
  const err = (code: number, message: string) => ({ jsonrpc: "2.0", id: msg.id, error: { code, message } });
  switch (msg.method) {
    case "initialize": {
      const asked = msg.params?.protocolVersion;
      return ok({
        protocolVersion: PROTOCOL_VERSIONS.includes(asked) ? asked : PROTOCOL_VERSIONS[0],
        capabilities: { tools: { listChanged: false } },
        serverInfo: { name: "executor", version },
      });
    }
    case "ping":
      return ok({});
    case "tools/list":
      return ok({ tools: TOOLS });
    case "tools/call": {
      const name = msg.params?.name;
      const args = msg.params?.arguments ?? {};
      if (name === "execute" && tree) {
        const res = await fetch(`http://127.0.0.1:${tree.workerdPort}/run`, { method: "POST", body: String(args.code ?? "") });
        return ok({ content: [{ type: "text", text: await res.text() }], isError: !res.ok });
      }
      if (name === "skills" && TOOLS.some((t) => t.name === "skills")) {
        return ok({ content: [{ type: "text", text: JSON.stringify({ skills: [] }) }], isError: false });
      }
      if (name === "execute") {
        return ok({ content: [{ type: "text", text: JSON.stringify({ status: "completed", code: String(args.code ?? "") }) }], isError: false });
      }
      if (name === "resume") {
        return ok({ content: [{ type: "text", text: `no paused execution ${String(args.executionId ?? "")}` }], isError: true });
      }
      return err(-32602, `unknown tool ${JSON.stringify(name)}`);
    }
    default:
      return err(-32601, `method ${JSON.stringify(msg.method)} not found`);
  }
}

function unauthorized(): Response {
  return json({ error: "unauthorized" }, 401, {
    "WWW-Authenticate": `Bearer realm="executor", resource_metadata="${baseURL}/.well-known/oauth-protected-resource/mcp"`,
  });
}

async function handleMCP(req: Request): Promise<Response> {
  const open = process.env.HBXTEST_OPEN_MCP_IF && existsSync(process.env.HBXTEST_OPEN_MCP_IF);
  if (!open && !authorized(req)) return unauthorized();
  if (req.method !== "POST") {
    return new Response(null, { status: 405, headers: { Allow: "POST" } });
  }
  const sid = req.headers.get("mcp-session-id");
  if (sid !== null && !sessions.has(sid)) {
    return json({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "session not found" } }, 404);
  }
  let body: any;
  try {
    body = await req.json();
  } catch {
    return json({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } }, 400);
  }
  const batch = Array.isArray(body);
  const msgs: RPC[] = batch ? body : [body];
  const headers: Record<string, string> = {};
  if (msgs.some((m) => m?.method === "initialize" && m.id !== undefined)) {
    const id = randomUUID();
    sessions.add(id);
    headers["Mcp-Session-Id"] = id;
  }
  const out = (await Promise.all(msgs.map(handleRPC))).filter((r) => r !== undefined);
  if (out.length === 0) return new Response(null, { status: 202 });
  return json(batch ? out : out[0], 200, headers);
}

const setupPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Executor setup</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 36rem; margin: 4rem auto; padding: 0 1rem; color: #222; }
code { background: #f2f2f2; padding: 0 .25rem; }
</style>
</head>
<body>
<h1>Executor</h1>
<p>Set up your self-hosted Executor.</p>
<p>This is the hbx test image, release <code>${version}</code>. MCP endpoint: <code>${baseURL}/mcp</code>.</p>
</body>
</html>
`;

const server = Bun.serve({
  hostname: host,
  port,
  async fetch(req) {
    const url = new URL(req.url);
    if (process.env.HBXTEST_REQUIRE_KEY === "1" && !authorized(req)) return unauthorized();
    if (url.pathname === "/mcp") return handleMCP(req);
    if (req.method !== "GET" && req.method !== "HEAD") return json({ error: "method not allowed" }, 405);
    switch (url.pathname) {
      case "/api/health":
        if (process.env.HBXTEST_NO_API_HEALTH === "1") return json({ error: "not found" }, 404);
        if (process.env.HBXTEST_FAIL_HEALTH === "1") return json({ status: "unhealthy" }, 503);
        if (process.env.HBXTEST_DEGRADED_IF && existsSync(process.env.HBXTEST_DEGRADED_IF)) return json({ status: "degraded" });
        return json({ status: "ok" });
      case "/":
        return new Response(setupPage, { headers: { "Content-Type": "text/html; charset=utf-8" } });
      case "/.well-known/oauth-protected-resource/mcp":
        return json({
          resource: `${baseURL}/mcp`,
          authorization_servers: [baseURL],
          bearer_methods_supported: ["header"],
          resource_name: "Executor",
        });
      case "/api/hbxtest/info":
        // Test-only: lets tests check the environment hbx gave the payload.
        return json({
          version,
          starts,
          pid: process.pid,
          uid: process.getuid?.(),
          tree: tree && { bridgePort: tree.bridgePort, workerdPort: tree.workerdPort, workerdPid: tree.workerdPid },
          cwd: process.cwd(),
          argv: process.argv,
          bun: Bun.version,
          envKeys: Object.keys(process.env).sort(),
          env: Object.fromEntries(
            Object.entries(process.env).filter(([k]) => /^(EXECUTOR_|BUN_|HBXTEST_|NODE_ENV$|PORT$|PATH$|HOME$)/.test(k)),
          ),
        });
      default:
        return json({ error: "not found" }, 404);
    }
  },
});

if (process.env.HBXTEST_EXTRA_LISTEN) {
  const at = process.env.HBXTEST_EXTRA_LISTEN.lastIndexOf(":");
  Bun.serve({
    hostname: process.env.HBXTEST_EXTRA_LISTEN.slice(0, at).replace(/^\[|\]$/g, ""),
    port: Number(process.env.HBXTEST_EXTRA_LISTEN.slice(at + 1)),
    fetch: () => json({ error: "not found" }, 404),
  });
}

function stop(signal: string) {
  console.log(`executor: ${signal}, stopping`);
  tree?.kill();
  server.stop(true);
  process.exit(0);
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));

console.log(`${banner(version)} (start ${padLeft(String(starts), 3, "0")}) listening on http://${server.hostname}:${server.port}`);
