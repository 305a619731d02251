// A real MCP client that no one here wrote: the official TypeScript SDK
// spawns `sluice mcp` over stdio, as an agent would, and runs the cases
// e2e/mcp_ts_test.go checks. One JSON line per case on stdout:
// {"case": NAME, "ok": BOOL, "detail": ...}.
//
// Environment: SLUICE_BIN (the sluice binary), SLUICE_SOCKET, SLUICE_MANIFEST
// (the manifest sluiced serves) and SLUICE_MANIFEST_NEXT (what a reload
// puts in its place). The caller's uid is an approver, so reloading uses
// the same binary; approving is done as ops, uid 65534, with
// SLUICE_APPROVER_BIN (nobody approves a call of its own principal).
import { execFileSync } from "node:child_process";
import { copyFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const bin = process.env.SLUICE_BIN;
const socket = process.env.SLUICE_SOCKET;

function report(name, ok, detail, ms) {
  process.stdout.write(JSON.stringify({ case: name, ok: !!ok, ms, detail }) + "\n");
}

async function run(name, fn) {
  const began = Date.now();
  try {
    const [ok, detail] = await fn();
    report(name, ok, detail, Date.now() - began);
  } catch (err) {
    report(name, false, String(err && err.stack ? err.stack : err));
  }
}

const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");

const transport = new StdioClientTransport({ command: bin, args: ["mcp", "--socket", socket], stderr: "pipe" });
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const client = new Client({ name: "sluice-e2e-ts", version: "0" });
let listChanged = null;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => { if (listChanged) listChanged(); });
await client.connect(transport);

await run("initialize", async () => {
  const info = client.getServerVersion();
  const instr = client.getInstructions() || "";
  return [info.name === "sluice" && instr.includes("untrusted data"), { info, instr: instr.slice(0, 80) }];
});

await run("list", async () => {
  const { tools } = await client.listTools();
  const by = Object.fromEntries(tools.map((t) => [t.name, t]));
  const rf = by.read_file, wf = by.write_file;
  const ok = rf && wf && by.run && rf.annotations.readOnlyHint === true && rf.annotations.openWorldHint === false &&
    wf.annotations.destructiveHint === true && rf.inputSchema.properties.path && rf.outputSchema.properties.call_id;
  return [ok, tools.map((t) => t.name)];
});

await run("read", async () => {
  const res = await client.callTool({ name: "read_file", arguments: { path: "workspace/src/a.py" } });
  return [!res.isError && text(res) === "print('hello')\n" && res.structuredContent.reason === "allowed", res];
});

await run("provenance", async () => {
  // Where the content came from, untrusted: in structuredContent (which
  // the SDK validated against the tool's outputSchema) and the same in
  // _meta; the text is the content alone. A denial carries neither.
  const res = await client.callTool({ name: "read_file", arguments: { path: "workspace/src/a.py" } });
  const s = res.structuredContent.source || {};
  const meta = (res._meta || {})["io.github.sluicehq/source"];
  const denied = await client.callTool({ name: "read_file", arguments: { path: "workspace/src/.env" } });
  const ok = s.untrusted === true && s.tool === "read_file" && s.operation === "read" &&
    typeof s.resource === "string" && s.resource.endsWith("/workspace/src/a.py") && /^sha256:[0-9a-f]{64}$/.test(s.sha256) &&
    s.call_id === res.structuredContent.call_id && /^sha256:/.test(s.policy_version) &&
    JSON.stringify(meta) === JSON.stringify(s) && text(res) === "print('hello')\n" &&
    denied.isError === true && denied.structuredContent.source === undefined && !(denied._meta || {})["io.github.sluicehq/source"];
  return [ok, { res, denied }];
});

await run("denials", async () => {
  const out = {};
  let ok = true;
  for (const [path, reason] of [["workspace/src/.env", "never_listed"], ["workspace/secret.txt", "outside_roots"]]) {
    const res = await client.callTool({ name: "read_file", arguments: { path } });
    out[path] = res;
    ok &&= res.isError === true && res.structuredContent.reason === reason && text(res).includes(reason);
  }
  return [ok, out];
});

await run("truncation", async () => {
  const res = await client.callTool({ name: "read_file", arguments: { path: "workspace/src/long.txt" } });
  const s = res.structuredContent;
  return [s.truncated === true && s.bytes === 64 && text(res).includes("output truncated at 64 bytes"), s];
});

await run("binary", async () => {
  const res = await client.callTool({ name: "read_file", arguments: { path: "workspace/src/blob.bin" } });
  const blob = (res.content || []).find((c) => c.type === "resource");
  const bytes = blob && Buffer.from(blob.resource.blob, "base64");
  return [!res.isError && bytes && bytes.equals(Buffer.from([0xff, 0xfe, 0, 1, 2, 0x80])), res.content];
});

await run("execute with progress", async () => {
  const msgs = [];
  const res = await client.callTool({ name: "run", arguments: {} }, undefined, {
    onprogress: (p) => msgs.push(p.message),
  });
  const ok = !res.isError && res.structuredContent.exit_code === 0 && text(res).includes("one\ntwo\n") &&
    msgs.some((m) => m && m.includes("one")) && msgs.some((m) => m && m.includes("two"));
  return [ok, { msgs, text: text(res) }];
});

await run("cancel", async () => {
  const ac = new AbortController();
  let started;
  const running = new Promise((resolve) => { started = resolve; });
  const call = client.callTool({ name: "hold", arguments: {} }, undefined, {
    signal: ac.signal, timeout: 120000,
    onprogress: (p) => { if (p.message && p.message.includes("started")) started(); },
  });
  await Promise.race([running, call]);
  ac.abort("the user pressed Esc");
  try {
    const res = await call;
    return [false, { unexpected: res }];
  } catch (err) {
    return [true, String(err)];
  }
});

await run("approval", async () => {
  let approved = null;
  const res = await client.callTool({ name: "ask_read", arguments: { path: "workspace/src/a.py" } }, undefined, {
    timeout: 120000,
    onprogress: (p) => {
      const m = /waiting for approval (\S+)/.exec(p.message || "");
      if (m && !approved) {
        approved = execFileSync(process.env.SLUICE_APPROVER_BIN, ["--socket", socket, "approve", m[1], "--note", "from the TypeScript e2e"],
          { uid: 65534, gid: 65534 }).toString();
      }
    },
  });
  return [approved !== null && !res.isError && text(res) === "print('hello')\nThe approver's note: from the TypeScript e2e" &&
    res.structuredContent?.approval_note === "from the TypeScript e2e", { approved, res }];
});

await run("reload changes the list", async () => {
  let timer;
  const changed = new Promise((resolve, reject) => {
    listChanged = resolve;
    timer = setTimeout(() => reject(new Error("no tools/list_changed within 20 s")), 20000);
  });
  copyFileSync(process.env.SLUICE_MANIFEST_NEXT, process.env.SLUICE_MANIFEST);
  execFileSync(bin, ["--socket", socket, "reload"]);
  await changed.finally(() => clearTimeout(timer));
  const { tools } = await client.listTools();
  return [tools.some((t) => t.name === "read_tests"), tools.map((t) => t.name)];
});

const closing = Date.now();
await client.close();
report("close", true, null, Date.now() - closing);
report("stderr", true, stderr.slice(-4000));
