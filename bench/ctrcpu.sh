#!/usr/bin/env bash
# CPU one execute call costs sluiced, container included: N cold calls
# (pool 0) of /bin/true, one at a time, and the user+system time sluiced
# and its waited-for children (each container's init) used meanwhile, from
# /proc/PID/stat, after the background destroys are done. Needs root and
# bin/ (make build). --bin DIR compares another build, --n N calls.
#
#   bench/ctrcpu.sh [--bin DIR] [--n 40]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin n=40
while (($#)); do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    *) echo "usage: $0 [--bin DIR] [--n N]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /var/tmp/sluice-ctrcpu.XXXXXX)
chmod 755 "$work"
mkdir "$work/ws"
cat >"$work/manifest.json" <<JSON
{"schema_version":1,"tools":{"true_cold":{"operation":"execute","commands":[["/bin/true"]],"mounts":["ws"],"cwd":"ws","pool":0}}}
JSON
"$bin/sluiced" --manifest "$work/manifest.json" --socket "$work/s.sock" --state-dir "$work/state" \
  --run-dir "$work/run" --log-level error &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 200); do "$bin/sluice" --socket "$work/s.sock" health >/dev/null 2>&1 && break; sleep 0.05; done
cpu() { awk '{print $14+$15+$16+$17}' /proc/$pid/stat; }
"$bin/sluice" --socket "$work/s.sock" call true_cold >/dev/null # warm up
sleep 0.5
before=$(cpu)
t0=$(date +%s%N)
for _ in $(seq "$n"); do "$bin/sluice" --socket "$work/s.sock" call true_cold >/dev/null; done
t1=$(date +%s%N)
sleep 1 # background destroys
after=$(cpu)
tck=$(getconf CLK_TCK)
awk -v a="$after" -v b="$before" -v n="$n" -v t="$tck" -v w=$(((t1 - t0) / 1000)) -v bin="$bin" 'BEGIN {
  printf "%s: %d cold calls: %.1f ms CPU per call (sluiced + containers), %.1f ms wall per call\n", bin, n, (a-b)*1000/t/n, w/1000/n }'
