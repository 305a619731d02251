// The MCP part of `make demo` (scripts/demo.sh): the official TypeScript
// SDK (@modelcontextprotocol/sdk, pinned here) is the agent's MCP client.
// It spawns the command after "--" over stdio, as an agent would spawn
// `sluice mcp` (demo.sh passes setpriv, so the server runs as the agent's
// uid and sluiced's SO_PEERCRED sees the principal "agent"), and prints
// each step for a person watching. Every step checks its outcome: the
// first wrong one prints FAIL and the script exits 1.
//
// Environment: SLUICE_MANIFEST (the manifest sluiced serves: the tool
// list must be its tools), SLUICE_AUDIT (the ledger: the cancelled call's
// result record must say cancelled) and SLUICED_PID (the daemon: the
// cancelled command is its descendant, and must be gone). The server must
// be started with --task mcp-demo, which names this session's calls in
// the ledger.
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const sep = process.argv.indexOf("--");
const [command, ...args] = sep < 0 ? [] : process.argv.slice(sep + 1);
if (!command) {
  console.error("usage: node demo.mjs -- COMMAND [ARGS...]   (the MCP server to spawn)");
  process.exit(2);
}
const task = "mcp-demo";
const bold = (s) => console.log(`\n\x1b[1m${s}\x1b[0m`);
const show = (s, n = 8) => {
  const lines = s.replace(/\n$/, "").split("\n");
  for (const l of lines.slice(0, n)) console.log(`  | ${l}`);
  if (lines.length > n) console.log(`  | … (${lines.length} lines)`);
};
const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
const since = (t0) => `${String(Date.now() - t0).padStart(5)} ms`;

class Failed extends Error {}
function check(ok, what, detail) {
  if (!ok) throw new Failed(`${what}${detail === undefined ? "" : `: ${JSON.stringify(detail, null, 1)}`}`);
}

// ledger: the audit records of this session's calls of tool.
function ledger(tool) {
  const out = [];
  for (const line of readFileSync(process.env.SLUICE_AUDIT, "utf8").split("\n")) {
    try {
      const r = JSON.parse(line);
      if (r.tool === tool && r.task === task) out.push(r);
    } catch { /* the last line may be half written */ }
  }
  return out;
}

// sandboxed finds a descendant of sluiced running argv (the machine may
// run other "sleep 30"s).
function sandboxed(argv) {
  const want = argv.join("\0") + "\0";
  const parent = (pid) => {
    try { return Number(/^PPid:\s*(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]); } catch { return 0; }
  };
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    let cmd;
    try { cmd = readFileSync(`/proc/${e}/cmdline`, "utf8"); } catch { continue; }
    if (cmd !== want) continue;
    for (let p = parent(e), n = 0; p > 1 && n < 64; p = parent(p), n++) {
      if (String(p) === process.env.SLUICED_PID) return Number(e);
    }
  }
  return 0;
}

// until polls cond (a demo, not a test: the ledger has no event stream).
async function until(cond, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = cond();
    if (v) return v;
    check(Date.now() < end, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// call prints an MCP tools/call and its result, and checks it.
async function call(title, name, a, want) {
  bold(`-- ${title}`);
  console.log(`> tools/call ${name} ${JSON.stringify(a)}`);
  const res = await client.callTool({ name, arguments: a });
  const s = res.structuredContent || {};
  if (text(res)) show(text(res));
  console.log(`=> isError: ${!!res.isError}, verdict ${s.verdict}, reason ${s.reason}${s.truncated ? ", truncated" : ""}`);
  check(!!res.isError === want.isError && s.reason === want.reason, `${name}: want isError ${want.isError}, reason ${want.reason}`, res);
  return res;
}

bold(`== the MCP client (the official TypeScript SDK) spawns: ${command} ${args.join(" ")}`);
const transport = new StdioClientTransport({ command, args, stderr: "pipe" });
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const client = new Client({ name: "sluice-demo", version: "1" });

let failed = false;
try {
  await client.connect(transport);
  const info = client.getServerVersion();
  const instr = client.getInstructions() || "";
  console.log(`initialize: server ${info.name} ${info.version}`);
  const first = instr.split("\n")[0];
  const sentence = /^.*?\.(?=\s|$)/.exec(first)?.[0] || first;
  console.log(`  instructions: ${sentence}${instr.length > sentence.length ? ` … (${instr.length} chars)` : ""}`);
  check(info.name === "sluice" && /untrusted/.test(instr), "initialize: want server sluice, instructions that say results are untrusted", { info, instr });
  // Attached (docs/clients.md "Attached sessions"): sluice mcp handed its
  // stdin and stdout to sluiced, which serves the session as its uid.
  const fdOf = (pid, fd) => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return ""; } };
  const stdout = fdOf(transport.pid, 1);
  const held = stdout !== "" && readdirSync(`/proc/${process.env.SLUICED_PID}/fd`).some((fd) => fdOf(process.env.SLUICED_PID, fd) === stdout);
  console.log(`  attached: sluice mcp (pid ${transport.pid}) handed its stdin and stdout to sluiced, which serves the session as the agent's uid`);
  check(held, "attach: want sluiced to hold sluice mcp's stdout (an attached session)", { stdout, stderr });

  bold("== tools/list: one MCP tool per tool the agent may call, with annotations");
  const { tools } = await client.listTools();
  for (const t of tools) {
    const a = t.annotations || {};
    const hints = [a.readOnlyHint && "readOnly", a.destructiveHint && "destructive", a.idempotentHint && "idempotent",
      a.openWorldHint === false && "local"].filter(Boolean).join(", ");
    console.log(`  ${t.name.padEnd(13)} [${hints}]  ${t.description || ""}`);
  }
  const want = Object.keys(JSON.parse(readFileSync(process.env.SLUICE_MANIFEST, "utf8")).tools).sort();
  const got = tools.map((t) => t.name).sort();
  check(JSON.stringify(got) === JSON.stringify(want), "tools/list: want the manifest's tools", { got, want });
  const by = Object.fromEntries(tools.map((t) => [t.name, t.annotations || {}]));
  check(by.read_file.readOnlyHint === true && by.list_dir.readOnlyHint === true && by.write_file.destructiveHint === true &&
    by.run_tests.destructiveHint === false && tools.every((t) => t.annotations?.openWorldHint === false),
    "tools/list: want readOnly read/list, destructive write, local everything", by);

  const r = await call("an allowed read", "read_file", { path: "workspace/src/calc.py" }, { isError: false, reason: "allowed" });
  check(text(r).startsWith('"""A tiny calculator module'), "read_file: want calc.py's content", text(r));
  const d = await call("a never-listed name: a tool error, not a file", "read_file", { path: "workspace/src/.env" },
    { isError: true, reason: "never_listed" });
  check(!text(d).includes("DEMO-SECRET"), "a denial carried the secret", d);
  await call("outside the tool's roots", "read_file", { path: "workspace/secret.txt" }, { isError: true, reason: "outside_roots" });

  bold("-- run_tests with a progressToken: the output streams as progress notifications");
  console.log("> tools/call run_tests {} (onprogress)");
  const t0 = Date.now();
  const progress = [];
  const rt = await client.callTool({ name: "run_tests", arguments: {} }, undefined, {
    onprogress: (p) => {
      progress.push(p);
      const [head, ...rest] = (p.message || "").replace(/\n$/, "").split("\n");
      console.log(`  ~ ${since(t0)} progress ${p.progress}: ${head}`);
      for (const l of rest) console.log(`  ~ ${" ".repeat(String(p.progress).length + 20)}${l}`);
    },
  });
  const st = rt.structuredContent || {};
  console.log(`=> result after ${since(t0)}: isError ${!!rt.isError}, exit_code ${st.exit_code}, ${progress.length} progress notifications`);
  show(text(rt).split("\n").filter((l) => /^(Ran |OK|FAILED)/.test(l)).join("\n"));
  check(!rt.isError && st.exit_code === 0 && progress.length > 0 && /\nOK\n/.test(text(rt)),
    "run_tests: want exit 0, OK, and progress notifications before the result", { rt, progress });

  bold("-- cancel a long call (slow_job: sleep 30): notifications/cancelled ends it in sluiced");
  console.log("> tools/call slow_job {}, then the client aborts it");
  const ac = new AbortController();
  const c0 = Date.now();
  const running = client.callTool({ name: "slow_job", arguments: {} }, undefined, { signal: ac.signal, timeout: 120000 });
  running.catch(() => {});
  const dec = await until(() => ledger("slow_job").find((x) => x.kind === "decision"), 20000, "slow_job's decision record");
  console.log(`  ~ ${since(c0)} the ledger has its decision: ${dec.verdict} ${dec.reason}, call ${dec.call_id}`);
  const sleeper = await until(() => sandboxed(["sleep", "30"]), 20000, "sleep 30 to run in its sandbox");
  console.log(`  ~ ${since(c0)} sleep 30 runs in its sandbox (pid ${sleeper}); the client aborts the request`);
  ac.abort("the user pressed Esc");
  const outcome = await running.then((res) => ({ res }), (err) => ({ err }));
  check(outcome.err, "slow_job: want the aborted call to reject", outcome.res);
  console.log(`  ~ ${since(c0)} aborted: ${String(outcome.err.message || outcome.err).split("\n")[0]}`);
  const res = await until(() => ledger("slow_job").find((x) => x.kind === "result" && x.call_id === dec.call_id), 20000,
    "slow_job's result record");
  await until(() => !existsSync(`/proc/${sleeper}`), 10000, `sleep 30 (pid ${sleeper}) to be gone`);
  console.log(`  ~ ${since(c0)} pid ${sleeper} is gone`);
  console.log(`=> the ledger's result: reason ${res.reason} (${res.detail}), exit ${res.result?.exit_code}, after ${Math.round(res.result?.duration_ms ?? 0)} ms`);
  check(res.reason === "cancelled" && Date.now() - c0 < 20000, "slow_job: want the result record to say cancelled, well before 30 s", res);
} catch (err) {
  failed = true;
  console.error(`FAIL: ${err?.message || err}`);
  if (stderr) console.error(`sluice mcp's stderr:\n${stderr.slice(-4000)}`);
} finally {
  await client.close().catch(() => {});
}
process.exit(failed ? 1 : 0);
