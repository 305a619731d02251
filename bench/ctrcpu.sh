#!/usr/bin/env bash
# What one cold execute call costs: CPU of sluiced and its waited-for
# children (each container's init, helper and command), from
# /proc/PID/stat, and wall time per call (p50/p95, the CLI's own start
# included). N cold calls (pool 0) of /bin/true, one at a time, CPU read
# after the background destroys are done. Several --bin DIRs are run side
# by side, call for call interleaved, so an A/B on a busy machine sees the
# same load. --pool N makes the tool pooled instead (calls 40 ms apart, so
# the pool refills): then the CPU includes the refills, and the wall time
# is a pooled call's. Needs root and bin/ (make build).
#
#   bench/ctrcpu.sh [--bin DIR]... [--n 40] [--pool N]
set -euo pipefail
cd "$(dirname "$0")/.."
bins=() n=40 pool=0
while (($#)); do
  case $1 in
    --bin) bins+=("$2"); shift 2 ;;
    --n) n=$2; shift 2 ;;
    --pool) pool=$2; shift 2 ;;
    *) echo "usage: $0 [--bin DIR]... [--n N] [--pool N]" >&2; exit 2 ;;
  esac
done
((${#bins[@]})) || bins=(bin)
work=$(mktemp -d /var/tmp/sluice-ctrcpu.XXXXXX)
chmod 755 "$work"
mkdir "$work/ws"
cat >"$work/manifest.json" <<JSON
{"schema_version":1,"tools":{"true_cold":{"operation":"execute","commands":[["/bin/true"]],"mounts":["ws"],"cwd":"ws","pool":$pool}}}
JSON
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for i in "${!bins[@]}"; do
  b=${bins[$i]}
  "$b/sluiced" --manifest "$work/manifest.json" --socket "$work/s$i.sock" --state-dir "$work/state$i" \
    --run-dir "$work/run$i" --log-level error &
  pids+=($!)
  for _ in $(seq 200); do "$b/sluice" --socket "$work/s$i.sock" health >/dev/null 2>&1 && break; sleep 0.05; done
  "$b/sluice" --socket "$work/s$i.sock" call true_cold >/dev/null # warm up
done
sleep 0.5
cpu() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat"; }
before=()
for i in "${!bins[@]}"; do before+=("$(cpu "${pids[$i]}")"); : >"$work/lat$i"; done
for round in $(seq "$n"); do
  order=("${!bins[@]}")
  if ((round % 2)); then # alternate who goes first: a refill overlaps the next daemon's call
    order=()
    for ((k = ${#bins[@]} - 1; k >= 0; k--)); do order+=("$k"); done
  fi
  for i in "${order[@]}"; do
    t0=$(date +%s%N)
    "${bins[$i]}/sluice" --socket "$work/s$i.sock" call true_cold >/dev/null
    echo $((($(date +%s%N) - t0) / 1000)) >>"$work/lat$i"
  done
  ((pool == 0)) || sleep 0.04
done
sleep 1 # background destroys
tck=$(getconf CLK_TCK)
for i in "${!bins[@]}"; do
  after=$(cpu "${pids[$i]}")
  sort -n "$work/lat$i" | awk -v a="$after" -v b="${before[$i]}" -v n="$n" -v t="$tck" -v bin="${bins[$i]}" -v kind="$( ((pool)) && echo pooled || echo cold)" '
    { l[NR] = $1 }
    END { printf "%-28s %d %s calls: %5.1f ms CPU per call (sluiced + containers), wall p50 %5.1f ms, p95 %5.1f ms\n",
            bin, n, kind, (a-b)*1000/t/n, l[int(NR*0.5)+1]/1000, l[int(NR*0.95)]/1000 }'
done
