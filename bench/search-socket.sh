#!/usr/bin/env bash
# search through sluiced's socket (`sluice call`, the decision and its
# audit sync included) beside grep -rn and find on the same 10,000-file
# tree that bench/search.sh makes (never-listed .env, *.pem and secrets/
# holding the needle: grep finds them, search must not). One warm-up, then
# RUNS interleaved runs of each; wall times and the ratio of medians.
# Needs root (sluiced), bin/ (make build).
#
#   bench/search-socket.sh [RUNS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
runs=${1:-3}
dir=/tmp/sluice-searchbench
[ -d "$dir/tree" ] || bench/search.sh --dir "$dir" >/dev/null
tmp=$(mktemp -d /tmp/sluice-searchsock.XXXXXX)
cleanup() {
  if [ -n "${pid:-}" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
cat >"$tmp/manifest.json" <<JSON
{"schema_version":1,"base":"$dir","tools":{
  "search":{"operation":"search","roots":["tree"],"never":[".env","*.pem","secrets"],"max_bytes":16777216}}}
JSON
sock=$tmp/sluice.sock
bin/sluiced --manifest "$tmp/manifest.json" --socket "$sock" --state-dir "$tmp/state" --run-dir "$tmp/run" --log-level warn 2>"$tmp/log" &
pid=$!
for _ in $(seq 200); do bin/sluice --socket "$sock" health >/dev/null 2>&1 && break; sleep 0.05; done
needle=SLUICE_NEEDLE_7f3a
content=(bin/sluice --socket "$sock" call search --args "{\"path\":\"tree\",\"content\":\"$needle\",\"max_results\":10000}")
names=(bin/sluice --socket "$sock" call search --args '{"path":"tree","name":"*_test.go","max_results":10000}')
grep_=(grep -rn -e "$needle" "$dir/tree")
find_=(find "$dir/tree" -name '*_test.go')
secs() { local t0 t1; t0=$(date +%s%N); "$@" >"$tmp/out" 2>&1 || true; t1=$(date +%s%N); echo $(((t1 - t0) / 1000)); }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in content names grep_ find_; do eval "secs \"\${$c[@]}\"" >/dev/null; done # warm-up: caches, daemon
declare -A t
for _ in $(seq "$runs"); do
  for c in content grep_ names find_; do eval "t[$c]+=\" \$(secs \"\${$c[@]}\")\""; done
done
hits_sluice=$("${content[@]}" | grep -o '"path"' | wc -l)
hits_grep=$("${grep_[@]}" | wc -l)
printf 'search on %s (%s files), %d runs each, median wall ms\n' "$dir/tree" "$(find "$dir/tree" -type f | wc -l)" "$runs"
for pair in "content grep_ content, rare needle: sluice search / grep -rn" "names find_ names *_test.go: sluice search / find -name"; do
  set -- $pair
  a=$(tr ' ' '\n' <<<"${t[$1]}" | sed '/^$/d' | median); b=$(tr ' ' '\n' <<<"${t[$2]}" | sed '/^$/d' | median)
  shift 2
  printf '  %-52s %7.1f / %7.1f  ratio %.2f\n' "$*" "$(bc -l <<<"$a/1000")" "$(bc -l <<<"$b/1000")" "$(bc -l <<<"$a/$b")"
done
echo "  needle lines: sluice $hits_sluice (never-listed files skipped), grep $hits_grep"
