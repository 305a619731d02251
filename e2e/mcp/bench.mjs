// Closing note of issue 14: a 4 KiB read through `sluice mcp` beside the
// official @modelcontextprotocol/server-filesystem reading the same file,
// both driven by the same TypeScript client in the same run, and the same
// read straight over sluiced's socket (no MCP, no second process) to say
// where the time goes. Prints latencies and ratios; asserts nothing.
//
// Environment: SLUICE_BIN, SLUICE_SOCKET, BENCH_ROOT (the directory the
// manifest's read tool "bench_read" reads, holding bench4k.txt),
// BENCH_REL (bench4k.txt's path as the manifest's tool takes it),
// BENCH_N (calls per side, default 500).
import http from "node:http";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const N = Number(process.env.BENCH_N || 500);
const root = process.env.BENCH_ROOT;
const rel = process.env.BENCH_REL;
const socket = process.env.SLUICE_SOCKET;
const fsServer = fileURLToPath(new URL("./node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", import.meta.url));

async function connect(command, args) {
  const c = new Client({ name: "sluice-bench", version: "0" });
  await c.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
  return c;
}

function direct() {
  const body = JSON.stringify({ tool: "bench_read", args: { path: rel } });
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: socket, path: "/v1/calls", method: "POST", agent,
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } }, (res) => {
      let data = "";
      res.on("data", (d) => { data += d; });
      res.on("end", () => resolve(JSON.parse(data)));
    });
    req.on("error", reject);
    req.end(body);
  });
}
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

const sluice = await connect(process.env.SLUICE_BIN, ["mcp", "--socket", socket]);
const fsc = await connect(process.execPath, [fsServer, root]);
// BENCH_FLOOR (bench/mcp.sh --floor): bench/mcpfloor, without and with
// its one synced write a call.
const floor = process.env.BENCH_FLOOR;
const fl0 = floor && await connect(floor, [root + "/bench4k.txt"]);
const fl1 = floor && await connect(floor, [root + "/bench4k.txt", "sync"]);
const fsTools = (await fsc.listTools()).tools.map((t) => t.name);
const fsRead = fsTools.includes("read_text_file") ? "read_text_file" : "read_file";

const sides = {
  "socket (POST /v1/calls, no MCP)": async () => {
    const r = await direct();
    if (r.bytes !== 4096) throw new Error("direct: " + JSON.stringify(r));
  },
  "sluice mcp": async () => {
    const r = await sluice.callTool({ name: "bench_read", arguments: { path: rel } });
    if (r.isError || r.content[0].text.length !== 4096) throw new Error("sluice: " + JSON.stringify(r));
  },
  ...(floor ? {
    "floor (mcpfloor, no write)": async () => {
      const r = await fl0.callTool({ name: "bench_read", arguments: {} });
      if (r.content[0].text.length !== 4096) throw new Error("floor: " + JSON.stringify(r));
    },
    "floor (mcpfloor, one synced write)": async () => {
      const r = await fl1.callTool({ name: "bench_read", arguments: {} });
      if (r.content[0].text.length !== 4096) throw new Error("floor: " + JSON.stringify(r));
    },
  } : {}),
  "server-filesystem": async () => {
    const r = await fsc.callTool({ name: fsRead, arguments: { path: root + "/bench4k.txt" } });
    if (r.isError || r.content[0].text.length !== 4096) throw new Error("server-filesystem: " + JSON.stringify(r));
  },
};
const times = Object.fromEntries(Object.keys(sides).map((k) => [k, []]));
for (let i = 0; i < 30; i++) for (const f of Object.values(sides)) await f(); // warm up
for (let i = 0; i < N; i++) {
  for (const [name, f] of Object.entries(sides)) { // interleaved: the same machine state for each
    const t0 = process.hrtime.bigint();
    await f();
    times[name].push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
}
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const stats = Object.fromEntries(Object.entries(times).map(([k, a]) => [k, { p50: q(a, 0.5), p90: q(a, 0.9), p99: q(a, 0.99) }]));
console.log(`4 KiB read, ${N} calls a side, interleaved; milliseconds`);
for (const [k, s] of Object.entries(stats)) {
  console.log(`  ${k.padEnd(34)} p50 ${s.p50.toFixed(3)}  p90 ${s.p90.toFixed(3)}  p99 ${s.p99.toFixed(3)}`);
}
const sp = stats["sluice mcp"].p50, fp = stats["server-filesystem"].p50, dp = stats["socket (POST /v1/calls, no MCP)"].p50;
console.log(`  sluice mcp / server-filesystem (p50): ${(sp / fp).toFixed(2)}`);
// Attached (docs/clients.md), sluice mcp skips node's HTTP client: it
// can be quicker than the socket call, and the difference negative.
console.log(`  sluice mcp − the socket call from node (p50): ${(sp - dp).toFixed(3)} ms (the socket call ${dp.toFixed(3)} ms)`);
await sluice.close();
await fsc.close();
if (floor) { await fl0.close(); await fl1.close(); }
agent.destroy();
