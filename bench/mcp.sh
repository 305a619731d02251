#!/usr/bin/env bash
# A 4 KiB read through `sluice mcp` beside the official
# @modelcontextprotocol/server-filesystem reading the same file, both driven
# by the same TypeScript client in one interleaved run, and the same read
# straight over sluiced's socket (no MCP hop). Prints p50/p95 and ratios;
# asserts nothing. Needs bin/ (make build), node and npm.
#   bench/mcp.sh [N]    N calls per side (default 500)
#   bench/mcp.sh [--runs K] [--alternate DIR] [--floor] [N]
#     K runs (default 1); with --alternate, each run is two: sluiced and
#     sluice from DIR (another build's bin/, e.g. a copy made before a
#     change) and from bin/, which of them first alternating from run to
#     run, then a line per run and build: p50s in ms and the ratio.
#     --floor adds bench/mcpfloor, a few-line Go MCP server, without and
#     with one 4 KiB O_DIRECT|O_DSYNC write a call: the least any MCP
#     server that keeps a durable record per call costs here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=1 alt= floor=
while [ $# -gt 0 ]; do
  case $1 in
    --floor) floor=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --alternate) alt=$(cd "$2" && pwd); shift 2 ;;
    *) break ;;
  esac
done
n=${1:-500}
[ -x bin/sluiced ] && [ -x bin/sluice ] || { echo "bench/mcp.sh: run make build first" >&2; exit 1; }
if [ -n "$alt" ] && ! { [ -x "$alt/sluiced" ] && [ -x "$alt/sluice" ]; }; then
  echo "bench/mcp.sh: $alt has no sluiced and sluice" >&2; exit 1
fi
if [ ! -d e2e/mcp/node_modules/@modelcontextprotocol/server-filesystem ]; then
  (cd e2e/mcp && npm ci --prefer-offline --no-audit --no-fund)
fi
tmp=$(mktemp -d /tmp/sluice-mcpbench.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/ws"
if [ -n "$floor" ]; then
  go build -o "$tmp/mcpfloor" ./bench/mcpfloor
  export BENCH_FLOOR=$tmp/mcpfloor
fi
head -c 4096 /dev/zero | tr '\0' 'x' >"$tmp/ws/bench4k.txt"
cat >"$tmp/manifest.json" <<JSON
{"schema_version":1,"tools":{"bench_read":{"operation":"read","roots":["ws"],"max_bytes":65536}}}
JSON
sock=$tmp/sluice.sock

# once BINDIR: one run with BINDIR's sluiced and sluice, on a fresh state dir.
once() {
  local bindir=$1
  rm -rf "$tmp/state" "$tmp/run"
  "$bindir/sluiced" --manifest "$tmp/manifest.json" --socket "$sock" --state-dir "$tmp/state" --run-dir "$tmp/run" \
    --log-level warn 2>"$tmp/sluiced.log" &
  pid=$!
  for _ in $(seq 200); do "$bindir/sluice" --socket "$sock" health >/dev/null 2>&1 && break; sleep 0.05; done
  "$bindir/sluice" --socket "$sock" health >/dev/null
  SLUICE_BIN=$bindir/sluice SLUICE_SOCKET=$sock BENCH_ROOT=$tmp/ws BENCH_REL=ws/bench4k.txt BENCH_N=$n \
    node e2e/mcp/bench.mjs
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
}

# summary LABEL RUN: one line of the run's output file.
summary() {
  awk -v label="$1" -v run="$2" '
    /socket \(POST/ { s = $(NF-4) } /^  sluice mcp  / { m = $(NF-4) } /server-filesystem  / { f = $(NF-4) }
    /sluice mcp \/ server-filesystem/ { r = $NF }
    END { printf "run %2d %-10s socket %s  sluice mcp %s  server-filesystem %s  ratio %s\n", run, label, s, m, f, r }' "$3"
}

if [ -z "$alt" ]; then
  for i in $(seq "$runs"); do
    once "$root/bin" | tee "$tmp/out"
    [ "$runs" -gt 1 ] && summary bin "$i" "$tmp/out" >>"$tmp/summary"
  done
  [ -f "$tmp/summary" ] && cat "$tmp/summary"
  exit 0
fi
for i in $(seq "$runs"); do
  order="alt bin"
  [ $((i % 2)) -eq 0 ] && order="bin alt"
  for side in $order; do
    dir=$root/bin
    [ "$side" = alt ] && dir=$alt
    echo "== run $i, $side ($dir)"
    once "$dir" | tee "$tmp/out"
    summary "$side" "$i" "$tmp/out" >>"$tmp/summary"
  done
done
echo "== alt: $alt; bin: $root/bin; $n calls a side"
cat "$tmp/summary"
