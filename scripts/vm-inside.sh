#!/usr/bin/env bash
# Runs inside the e2e VM, as root, from the synced tree (/vagrant):
# scripts/vagrant-e2e.sh calls it after provisioning. For now a smoke test
# of sluiced under the VM's real systemd (cgroup v2): make build; sluiced in
# a transient unit with a delegated cgroup on a small manifest; a read call
# and an execute call through bin/sluice; systemctl status; stop; nothing
# left behind. Every check fails the run; nothing is skipped.
#
# Under TCG every process spawn costs ~50x what it does on a host: keep it lean.
set -euo pipefail
cd "$(dirname "$0")/.."
[ ! -f /etc/sluice-vm.env ] || . /etc/sluice-vm.env

UNIT=sluiced-smoke
SMOKE=/var/lib/sluice-smoke
RUNDIR=/run/sluice-smoke
export SLUICE_SOCKET=$RUNDIR/sluice.sock

fail() { echo "vm-inside: FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }
declare -a T=()
t0=$(date +%s)
lap() { local now; now=$(date +%s); T+=("$(printf '  %-22s %4d s' "$1" $((now - t0)))"); t0=$now; }

[ "$(id -u)" = 0 ] || fail "run as root"
[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm), not systemd"

step "the VM: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(nproc) CPUs, $(systemctl --version | head -n 1)"
cgfs=$(stat -fc %T /sys/fs/cgroup)
echo "stat -fc %T /sys/fs/cgroup: $cgfs"
[ "$cgfs" = cgroup2fs ] || fail "/sys/fs/cgroup is $cgfs, not cgroup2fs (a unified cgroup v2 hierarchy)"

step "make build"
make build
lap "make build"

cleanup() {
  local rc=$?
  if systemctl -q is-active "$UNIT" 2>/dev/null; then
    echo "vm-inside: stopping $UNIT" >&2
    systemctl stop "$UNIT" || true
  fi
  systemctl reset-failed "$UNIT" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT

step "a small manifest: read_file (workspace/src) and echo (execute, a warm pool of 1)"
rm -rf "$SMOKE" "$RUNDIR"
mkdir -p "$SMOKE/workspace/src" "$RUNDIR"
echo "hello from the workspace" >"$SMOKE/workspace/src/hello.txt"
cat >"$SMOKE/manifest.json" <<'EOF'
{
  "schema_version": 1,
  "tools": {
    "read_file": {"operation": "read", "roots": ["workspace/src"], "max_bytes": 4096},
    "echo": {"operation": "execute", "commands": [["/bin/echo", "hello from the sandbox"]],
             "pool": 1, "timeout_ms": 60000}
  }
}
EOF

step "systemd-run --unit=$UNIT -p Delegate=yes ... bin/sluiced"
systemctl reset-failed "$UNIT" 2>/dev/null || true
systemd-run --unit="$UNIT" --description="sluiced smoke test" \
  -p Delegate=yes -p KillMode=mixed -p TimeoutStopSec=60 \
  "$PWD/bin/sluiced" --manifest "$SMOKE/manifest.json" --socket "$SLUICE_SOCKET" \
  --state-dir "$SMOKE/state" --run-dir "$RUNDIR/sandbox" --log-level info
ok=0
for _ in $(seq 600); do # up to 60 s: under TCG the first start is slow
  if bin/sluice health >/dev/null 2>&1; then ok=1; break; fi
  systemctl -q is-active "$UNIT" || break
  sleep 0.1
done
if ((!ok)); then
  systemctl status "$UNIT" --no-pager -l || true
  journalctl -u "$UNIT" --no-pager -n 50 || true
  fail "sluiced did not answer /v1/health"
fi
bin/sluice health
lap "sluiced up"

step "a read call: sluice call read_file"
out=$(bin/sluice call read_file --args '{"path":"workspace/src/hello.txt"}')
echo "read_file -> $out"
[ "$out" = "hello from the workspace" ] || fail "read_file returned '$out'"
rc=0
bin/sluice call read_file --args '{"path":"workspace/src/../manifest.json"}' >/dev/null 2>"$SMOKE/deny.err" || rc=$?
echo "read_file of workspace/src/../manifest.json -> exit $rc: $(cat "$SMOKE/deny.err")"
((rc == 3)) || fail "a read outside the root was not denied (exit $rc)"

step "an execute call: sluice call echo"
out=$(bin/sluice call echo)
echo "echo -> $out"
[ "$out" = "hello from the sandbox" ] || fail "echo returned '$out'"
lap "calls"

step "systemctl status $UNIT"
systemctl status "$UNIT" --no-pager -l
echo
echo "the unit's cgroup: $(systemctl show -P ControlGroup "$UNIT")"
echo "sandbox cgroups: $(find /sys/fs/cgroup -type d -path '*sluice*' ! -path '*sluiced-smoke*' | head -n 5 | tr '\n' ' ')"
if journalctl -u "$UNIT" --no-pager -o cat | grep -q '"level":"ERROR"'; then
  journalctl -u "$UNIT" --no-pager -o cat | grep '"level":"ERROR"' | tail -n 5
  fail "sluiced logged errors"
fi

step "systemctl stop $UNIT; nothing is left"
cg=$(systemctl show -P ControlGroup "$UNIT")
systemctl stop "$UNIT"
state=$(systemctl show -P ActiveState "$UNIT")
result=$(systemctl show -P Result "$UNIT")
echo "after stop: ActiveState=$state Result=$result"
[ "$state" = inactive ] || fail "$UNIT is $state after stop (result $result)"
left=()
[ -z "$cg" ] || [ ! -d "/sys/fs/cgroup$cg" ] || left+=("unit cgroup /sys/fs/cgroup$cg")
# (one process each, not one per /proc entry: spawns are dear under TCG)
while read -r p; do left+=("process $p running bin/sluiced"); done < <(
  find /proc -maxdepth 2 -name exe -lname "$PWD/bin/sluiced" 2>/dev/null | cut -d/ -f3)
while read -r f; do left+=("process $(cut -d/ -f3 <<<"$f") in a sluice cgroup"); done < <(
  grep -l '/sluice/' /proc/[0-9]*/cgroup 2>/dev/null || true)
while read -r d; do left+=("cgroup $d"); done < <(find /sys/fs/cgroup -mindepth 1 -type d -path '*/sluice/*' 2>/dev/null)
while read -r m; do left+=("mount $m"); done < <(awk -v r="$RUNDIR" -v s="$SMOKE" '$5 ~ "^(" r "|" s ")" { print $5 }' /proc/self/mountinfo)
if [ -d "$RUNDIR/sandbox/rootfs" ]; then
  for e in "$RUNDIR"/sandbox/rootfs/*; do [ -e "$e" ] && left+=("rootfs $e"); done
fi
if ((${#left[@]})); then
  printf '  left: %s\n' "${left[@]}" >&2
  fail "sluiced left ${#left[@]} things behind"
fi
echo "nothing left: no process, cgroup, mount or rootfs of sluiced"
[ ! -e "$SLUICE_SOCKET" ] || echo "(the socket file $SLUICE_SOCKET stays; a restart replaces it)"
lap "stop and check"

step "vm-inside timing"
printf '%s\n' "${T[@]}"
echo "vm-inside: ok"
