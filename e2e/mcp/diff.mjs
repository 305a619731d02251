// A differential run: the same session of logical file operations, driven
// by the same client code (the official TypeScript SDK), through two MCP
// servers that each serve their own copy of one workspace: the official
// @modelcontextprotocol/server-filesystem ("peer") and `sluice mcp`
// ("sluice"). Each step is mapped to the server's own tool name and args;
// the outcome is classed (ok, denied, not_found, failed, error) and, for
// reads, listings, stats and searches, normalized so the two can be
// compared. One JSON line per step on stdout; e2e/mcp_diff_test.go checks
// them against the session's expectations and compares the final trees.
//
//   node diff.mjs CONFIG.json
//
// CONFIG: {"session": FILE, "sides": [SIDE, SIDE]}, SIDE:
//   {"name": "peer"|"sluice", "kind": "filesystem"|"sluice",
//    "command": ARGV0, "args": [...],
//    "ws": the workspace's absolute path on this side,
//    "parent": its parent's absolute path,
//    "prefix": what a workspace-relative path is prefixed with for this
//              server ("/abs/ws/" for the peer, "ws/" for sluice, whose
//              paths are relative to the manifest's base),
//    "tools": {op: tool name} (sluice: the manifest's names)}
//
// Session: {"steps": [{"id", "op", "path", "to"?, "content"?, "edits"?,
//   "name"?, "tail"?, "peer"?: "host"|"n/a", "needs"?: [step ids],
//   "unless"?: [step ids], ...}]}.
// A path that begins with "/" or "{" is used as given on both sides, after
// "{ws}" and "{parent}" are replaced by the side's own; any other path is
// workspace-relative and gets the side's prefix. A step whose tool (or an
// arg it needs, by the tool's inputSchema) one side does not offer is
// skipped on both sides, so that the trees stay comparable; so is a step
// that needs a skipped step, or one "unless" a step that ran. The peer has
// no delete tool: "peer": "host" does the delete on the peer's copy with
// fs.rmSync (no policy: the step's own path is inside the workspace);
// "peer": "n/a" runs the step on sluice only.
import { readFileSync, rmSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const session = JSON.parse(readFileSync(cfg.session, "utf8"));

const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
const short = (s) => (s.length > 300 ? s.slice(0, 300) + "…" : s);

// Refusals as sluice names them (unsupported_file_type: a write refuses a
// symlink at the last component, where the peer follows it and refuses
// the target outside); any other reason is "failed" (not_a_file,
// precondition_failed, …) except not_found.
const sluiceDenied = new Set(["outside_roots", "never_listed", "invalid_path", "unsupported_file_type",
  "principal_not_allowed", "unknown_tool"]);

function mapPath(side, p) {
  if (p === undefined) return undefined;
  if (p.startsWith("/") || p.startsWith("{")) return p.replaceAll("{ws}", side.ws).replaceAll("{parent}", side.parent);
  return side.prefix + p;
}

// Workspace-relative form of a path a server printed: strip the side's
// absolute workspace path or its prefix.
function relPath(side, p) {
  for (const pre of [side.ws + "/", side.prefix]) if (p.startsWith(pre)) return p.slice(pre.length);
  return p;
}

const sortedUnique = (a) => [...new Set(a)].sort();

// A mode as three octal digits of permission bits, from a number, an
// octal string ("0644", "100644") or ls's form ("-rw-r--r--").
function permBits(m) {
  if (m === undefined || m === null) return undefined;
  if (typeof m === "number") return (m & 0o777).toString(8).padStart(3, "0");
  const s = String(m);
  if (/^[0-7]+$/.test(s)) return s.slice(-3).padStart(3, "0");
  const rwx = s.slice(-9);
  if (/^[r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-]$/.test(rwx)) {
    let n = 0;
    for (const ch of rwx) n = (n << 1) | (ch === "-" || ch === "S" || ch === "T" ? 0 : 1);
    return n.toString(8).padStart(3, "0");
  }
  return s;
}

// Adapters: a logical step to {tool, args, needArgs} for one kind of server,
// and the server's successful result to a normalized observation.
const adapters = {
  filesystem: {
    call(side, st) {
      const path = mapPath(side, st.path);
      switch (st.op) {
        case "read": {
          const tool = side.has("read_text_file") ? "read_text_file" : "read_file";
          return { tool, args: st.tail ? { path, tail: st.tail } : { path }, needArgs: st.tail ? ["tail"] : [] };
        }
        case "list": return { tool: "list_directory", args: { path } };
        case "write": return { tool: "write_file", args: { path, content: st.content } };
        case "edit": return { tool: "edit_file", args: { path, dryRun: !!st.dry_run,
          edits: st.edits.map((e) => ({ oldText: e.old_text, newText: e.new_text })) } };
        case "mkdir": return { tool: "create_directory", args: { path } };
        case "move": return { tool: "move_file", args: { source: path, destination: mapPath(side, st.to) } };
        case "stat": return { tool: "get_file_info", args: { path } };
        case "search": return { tool: "search_files", args: { path, pattern: "**/" + st.name } };
      }
      throw new Error(`no peer tool for ${st.op}`);
    },
    classify(res) {
      if (!res.isError) return { class: "ok" };
      const t = text(res);
      if (/Access denied|outside allowed directories/i.test(t)) return { class: "denied" };
      if (/ENOENT|no such file|Parent directory does not exist/i.test(t)) return { class: "not_found" };
      return { class: "failed" };
    },
    observe(side, st, res) {
      const t = text(res);
      switch (st.op) {
        case "read": return t;
        case "list": return t.split("\n").filter(Boolean).map((l) => {
          const m = /^\[(DIR|FILE)\] (.*)$/.exec(l);
          return m ? (m[1] === "DIR" ? "d " : "f ") + m[2] : "? " + l;
        }).sort();
        case "stat": {
          const kv = Object.fromEntries(t.split("\n").map((l) => { const i = l.indexOf(": "); return [l.slice(0, i), l.slice(i + 2)]; }));
          const type = kv.isDirectory === "true" ? "dir" : kv.isFile === "true" ? "file" : "other";
          return type === "dir" ? { type, mode: kv.permissions } : { type, size: Number(kv.size), mode: kv.permissions };
        }
        case "search": return t === "No matches found" ? [] : sortedUnique(t.split("\n").filter(Boolean).map((p) => relPath(side, p)));
      }
      return null;
    },
  },
  sluice: {
    call(side, st) {
      const path = mapPath(side, st.path);
      const tool = side.tools[st.op];
      switch (st.op) {
        case "read": return { tool, args: st.tail ? { path, tail: st.tail } : { path }, needArgs: st.tail ? ["tail"] : [] };
        case "list": case "stat": case "delete": return { tool, args: { path } };
        case "write": return { tool, args: { path, content: st.content } };
        case "edit": return { tool, args: st.dry_run ? { path, edits: st.edits, dry_run: true } : { path, edits: st.edits },
          needArgs: st.dry_run ? ["edits", "dry_run"] : ["edits"] };
        case "mkdir": return { tool, args: { path, parents: true }, needArgs: ["parents"] };
        case "move": return { tool, args: { path, to: mapPath(side, st.to) }, needArgs: ["to"] };
        case "search": return { tool, args: { path, name: st.name }, needArgs: ["name"] };
      }
      throw new Error(`no sluice tool for ${st.op}`);
    },
    classify(res) {
      const reason = res.structuredContent && res.structuredContent.reason;
      if (!res.isError && reason === "allowed") return { class: "ok", reason };
      if (reason === "not_found") return { class: "not_found", reason };
      if (sluiceDenied.has(reason)) return { class: "denied", reason };
      return { class: "failed", reason };
    },
    observe(side, st, res) {
      const t = text(res);
      switch (st.op) {
        case "read": return t;
        case "list": return t.split("\n").filter(Boolean).map((l) => {
          const e = JSON.parse(l);
          return (e.type === "dir" ? "d " : "f ") + e.name;
        }).sort();
        case "stat": {
          // The stat result's shape is the stat operation's: JSON in the
          // text, or the fields in structuredContent.
          let o = res.structuredContent || {};
          try { o = { ...o, ...JSON.parse(t) }; } catch { /* fields only */ }
          const type = o.type === "dir" || o.type === "directory" ? "dir" : o.type === "file" || o.type === "regular" ? "file" : String(o.type);
          const mode = permBits(o.mode);
          return type === "dir" ? { type, mode } : { type, size: Number(o.size), mode }; // a directory's size means nothing here
        }
        case "search": {
          // The search operation's document ({"matches":[{"path",…}]}:
          // paths relative to the searched directory), else matches one a
          // line: a path, JSON with "path", or "path:line:…".
          try {
            const doc = JSON.parse(t);
            if (doc && Array.isArray(doc.matches)) return sortedUnique(doc.matches.map((m) => relPath(side, m.path)));
          } catch { /* not one document */ }
          const paths = t.split("\n").filter(Boolean).map((l) => {
            try { const o = JSON.parse(l); if (o && o.path) return o.path; } catch { /* not JSON */ }
            return l.split(":")[0];
          });
          return sortedUnique(paths.map((p) => relPath(side, p)));
        }
      }
      return null;
    },
  },
};

const sides = [];
for (const s of cfg.sides) {
  const transport = new StdioClientTransport({ command: s.command, args: s.args, stderr: "pipe" });
  let stderr = "";
  transport.stderr?.on("data", (d) => { stderr += d; });
  const client = new Client({ name: "sluice-e2e-diff", version: "0" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  sides.push({ ...s, client, byName, stderr: () => stderr, has: (n) => n in byName, adapter: adapters[s.kind] });
}
process.stdout.write(JSON.stringify({ tools: Object.fromEntries(sides.map((s) => [s.name, Object.keys(s.byName).sort()])) }) + "\n");

// Why side cannot run st, or "".
function missing(side, st) {
  if (side.kind === "filesystem" && st.peer) return "";
  let c;
  try { c = side.adapter.call(side, st); } catch (err) { return String(err.message); }
  const tool = side.byName[c.tool];
  if (!c.tool || !tool) return `${side.name} offers no tool for ${st.op}${c.tool ? ` (${c.tool})` : ""}`;
  const props = (tool.inputSchema && tool.inputSchema.properties) || {};
  const lacking = (c.needArgs || []).filter((a) => !(a in props));
  return lacking.length ? `${side.name}'s ${c.tool} takes no ${lacking.join(", ")}` : "";
}

async function runOn(side, st) {
  if (side.kind === "filesystem" && st.peer === "n/a") return { class: "n/a" };
  if (side.kind === "filesystem" && st.peer === "host") {
    // The peer has no delete tool: done on its copy by this script.
    try {
      rmSync(mapPath(side, st.path));
      return { class: "ok", host: true };
    } catch (err) {
      return { class: err.code === "ENOENT" ? "not_found" : "failed", host: true, detail: String(err) };
    }
  }
  const c = side.adapter.call(side, st);
  let res;
  try {
    res = await side.client.callTool({ name: c.tool, arguments: c.args });
  } catch (err) {
    return { class: "error", tool: c.tool, detail: short(String(err)) };
  }
  const out = { ...side.adapter.classify(res), tool: c.tool };
  if (out.class === "ok") {
    try {
      out.observed = side.adapter.observe(side, st, res);
    } catch (err) {
      out.observed = null;
      out.unparsed = short(`${err}: ${text(res)}`);
    }
  } else {
    out.detail = short(text(res));
  }
  return out;
}

const skipped = new Set(), ran = new Set();
for (const st of session.steps) {
  const why = (st.needs || []).filter((n) => skipped.has(n)).map((n) => `needs skipped step "${n}"`)
    .concat((st.unless || []).filter((n) => ran.has(n)).map((n) => `step "${n}" ran`))
    .concat(sides.map((s) => missing(s, st)).filter(Boolean));
  if (why.length) {
    skipped.add(st.id);
    process.stdout.write(JSON.stringify({ step: st.id, op: st.op, skipped: why.join("; ") }) + "\n");
    continue;
  }
  const line = { step: st.id, op: st.op };
  for (const s of sides) line[s.name] = await runOn(s, st);
  ran.add(st.id);
  process.stdout.write(JSON.stringify(line) + "\n");
}

for (const s of sides) await s.client.close();
process.stdout.write(JSON.stringify({ stderr: Object.fromEntries(sides.map((s) => [s.name, s.stderr().slice(-2000)])) }) + "\n");
