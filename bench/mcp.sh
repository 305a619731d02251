#!/usr/bin/env bash
# A 4 KiB read through `sluice mcp` beside the official
# @modelcontextprotocol/server-filesystem reading the same file, both driven
# by the same TypeScript client in one interleaved run, and the same read
# straight over sluiced's socket (no MCP hop). Prints p50/p95 and ratios;
# asserts nothing. Needs bin/ (make build), node and npm.
#   bench/mcp.sh [N]    N calls per side (default 500)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -x bin/sluiced ] && [ -x bin/sluice ] || { echo "bench/mcp.sh: run make build first" >&2; exit 1; }
if [ ! -d e2e/mcp/node_modules/@modelcontextprotocol/server-filesystem ]; then
  (cd e2e/mcp && npm ci --prefer-offline --no-audit --no-fund)
fi
tmp=$(mktemp -d /tmp/sluice-mcpbench.XXXXXX)
cleanup() {
  if [ -n "${pid:-}" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/ws"
head -c 4096 /dev/zero | tr '\0' 'x' >"$tmp/ws/bench4k.txt"
cat >"$tmp/manifest.json" <<JSON
{"schema_version":1,"tools":{"bench_read":{"operation":"read","roots":["ws"],"max_bytes":65536}}}
JSON
sock=$tmp/sluice.sock
bin/sluiced --manifest "$tmp/manifest.json" --socket "$sock" --state-dir "$tmp/state" --run-dir "$tmp/run" \
  --log-level warn 2>"$tmp/sluiced.log" &
pid=$!
for _ in $(seq 200); do bin/sluice --socket "$sock" health >/dev/null 2>&1 && break; sleep 0.05; done
bin/sluice --socket "$sock" health >/dev/null
SLUICE_BIN=$root/bin/sluice SLUICE_SOCKET=$sock BENCH_ROOT=$tmp/ws BENCH_REL=ws/bench4k.txt BENCH_N=${1:-500} \
  node e2e/mcp/bench.mjs
