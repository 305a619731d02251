#!/usr/bin/env bash
# Runs inside the e2e VM, as root, from the synced tree (/vagrant):
# scripts/vagrant-e2e.sh calls it after provisioning. sluice as a user
# gets it: make build; scripts/install.sh (twice: idempotent); the socket
# enabled and the service started by socket activation (Type=notify); its
# cgroups in its delegated subtree; calls on the example manifest;
# systemctl reload; an upgrade and a rollback; the black-box e2e suite driving that systemd-managed
# daemon (SLUICE_E2E_SOCKET) and the sandbox's tests on pure cgroup v2;
# sluice audit verify; systemctl stop with a command running, then a leak
# check; restart through the socket; install.sh --uninstall. Every check
# fails the run; nothing is skipped.
#
# SLUICE_VM_BENCH=1 also runs bench/exec.sh (short: --n 20 --seconds 2).
#
# Under TCG every process spawn costs ~50x what it does on a host: checks
# read /proc and /sys with the shell's builtins where they can.
set -euo pipefail
cd "$(dirname "$0")/.."
[ ! -f /etc/sluice-vm.env ] || . /etc/sluice-vm.env

SVC=sluiced.service
SOCK=/run/sluice/sluice.sock
MANIFEST=/etc/sluice/manifest.json
LEDGER=/var/lib/sluice/audit.jsonl
RUNDIR=/run/sluice/sandbox
E2E_TMP=/srv/sluice/e2e
SLUICE=/usr/local/bin/sluice
export SLUICE_SOCKET=$SOCK

fail() {
  echo "vm-inside: FAIL: $*" >&2
  if systemctl cat "$SVC" >/dev/null 2>&1; then
    systemctl status "$SVC" --no-pager -l >&2 || true
    journalctl -u "$SVC" --no-pager -o cat -n 40 >&2 || true
  fi
  exit 1
}
step() { printf '\n== %s\n' "$*"; }
declare -a T=()
t0=$(date +%s)
lap() { local now; now=$(date +%s); T+=("$(printf '  %-28s %4d s' "$1" $((now - t0)))"); t0=$now; }
# wait_for SECONDS WHAT CMD...: polls CMD (a condition, every 0.1 s) up to
# SECONDS. CMD's words are expanded once: a condition that reads state is a
# function.
wait_for() {
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  fail "$what: not within $secs s"
}
prop() { systemctl show -P "$1" "$SVC"; }
is_active() { [ "$(prop ActiveState)" = active ]; }
# jlog: what this run of sluiced logged (not earlier ones: a kept VM's
# journal has those too)
jlog() { journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$(prop InvocationID)"; }
# policy: the policy version sluiced serves now
policy() { "$SLUICE" health | awk '$1 == "policy_version" { print $2 }'; }
# agent CMD...: as uid 65534 (the example manifest's agent), a member of
# group sluice, as an agent's user would be (docs/operating.md, "Install as a service", step 2).
agent() { setpriv --reuid 65534 --regid 65534 --groups "$SLUICE_GID" "$@"; }

[ "$(id -u)" = 0 ] || fail "run as root"
[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm), not systemd"

step "the VM: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(nproc) CPUs, $(systemctl --version | head -n 1)"
cgfs=$(stat -fc %T /sys/fs/cgroup)
echo "stat -fc %T /sys/fs/cgroup: $cgfs"
[ "$cgfs" = cgroup2fs ] || fail "/sys/fs/cgroup is $cgfs, not cgroup2fs (a unified cgroup v2 hierarchy)"

step "make build"
make build
lap "make build"

step "scripts/install.sh"
scripts/install.sh | tee /tmp/install1.log
grep -q '^install: installed /usr/local/bin/sluiced$' /tmp/install1.log || fail "install.sh did not install sluiced"
for f in /usr/local/bin/sluiced /usr/local/bin/sluice /usr/local/bin/sluice-helper /usr/local/bin/sluice-init /etc/systemd/system/sluiced.service \
  /etc/systemd/system/sluiced.socket /etc/tmpfiles.d/sluice.conf "$MANIFEST"; do
  [ -e "$f" ] || fail "install.sh did not make $f"
done
SLUICE_GID=$(getent group sluice | cut -d: -f3)
[ -n "$SLUICE_GID" ] || fail "install.sh made no group sluice"
[ "$(stat -c '%a %U %G' /run/sluice)" = "750 root sluice" ] || fail "/run/sluice is $(stat -c '%a %U %G' /run/sluice)"
step "scripts/install.sh again: nothing changes"
scripts/install.sh | tee /tmp/install2.log
if grep -E '^install: (installed|updated|created) ' /tmp/install2.log; then fail "the second install.sh changed things"; fi
systemd-analyze verify /etc/systemd/system/sluiced.socket /etc/systemd/system/sluiced.service
lap "install.sh x2"

step "systemctl enable --now sluiced.socket: the service waits for its first connection"
systemctl enable --now sluiced.socket
[ "$(systemctl is-active sluiced.socket)" = active ] || fail "sluiced.socket is not active"
[ "$(prop ActiveState)" = inactive ] || fail "$SVC is $(prop ActiveState) before any connection"
[ "$(stat -c '%a %U %G' "$SOCK")" = "660 root sluice" ] || fail "$SOCK is $(stat -c '%a %U %G' "$SOCK")"
echo "$SVC: $(prop ActiveState) (Type=$(prop Type)); $SOCK: $(stat -c '%A %U:%G' "$SOCK")"
agent "$SLUICE" health
echo "after the first connection: $SVC $(prop ActiveState)"
# READY=1 comes once the warm pool is filled: under TCG that takes a while.
wait_for 180 "$SVC active (READY=1)" is_active
echo "$SVC: $(prop ActiveState)/$(prop SubState), status: $(prop StatusText)"
[[ "$(prop StatusText)" == *policy* ]] || fail "no STATUS= with the policy: '$(prop StatusText)'"
jlog | grep -q '"socket_activated":true' || fail "sluiced did not log socket_activated true"
# The unit's hardening must leave openat2 to sluiced (RestrictSUIDSGID= would not).
jlog | grep -q '"resolver":"openat2"' || fail "sluiced under the unit does not resolve with openat2"
lap "socket activation"

step "cgroups: the daemon in its leaf, containers in the service's delegated subtree"
CG=$(prop ControlGroup)
PID=$(prop MainPID)
read -r self </proc/"$PID"/cgroup
echo "ControlGroup=$CG; sluiced (pid $PID): $self"
[ "$self" = "0::$CG/daemon" ] || fail "sluiced is in $self, not $CG/daemon"
wait_for 60 "a warm container's cgroup under $CG/containers" compgen -G "/sys/fs/cgroup$CG/containers/*/*/cgroup.procs"
ls -d /sys/fs/cgroup"$CG"/containers/*/*/ | sed 's/^/  /'
if compgen -G "/sys/fs/cgroup/sluice/*/*/" >/dev/null; then fail "containers' cgroups outside the service: $(ls -d /sys/fs/cgroup/sluice/*/*/)"; fi

step "calls on the example manifest, as the agent (uid 65534, group sluice)"
out=$(agent "$SLUICE" call read_file --args '{"path":"workspace/src/calc.py"}')
[[ "$out" == *"def "* ]] || fail "read_file calc.py: $out"
echo "read_file workspace/src/calc.py: $(wc -l <<<"$out") lines"
rc=0
agent "$SLUICE" call read_file --args '{"path":"workspace/src/../../../etc/shadow"}' 2>/tmp/deny.err || rc=$?
echo "read_file of ../../../etc/shadow: exit $rc, $(cat /tmp/deny.err)"
((rc == 3)) || fail "a read outside the roots was not denied (exit $rc)"
out=$(agent "$SLUICE" call run_tests 2>&1) || fail "run_tests: $out"
[[ "$out" == *OK* ]] || fail "run_tests: $out"
echo "run_tests: $(tail -n 1 <<<"$out")"
rc=0
"$SLUICE" call read_file --args '{"path":"workspace/src/calc.py"}' 2>/tmp/root.err || rc=$?
echo "root (principal ops: no tools) calling read_file: exit $rc, $(cat /tmp/root.err)"
((rc == 3)) || fail "root's call was not denied (exit $rc)"
if jlog | grep '"level":"ERROR"'; then fail "sluiced logged errors"; fi
lap "calls"

step "systemctl reload sluiced"
before=$(policy)
systemctl reload "$SVC"
reloaded() { jlog | grep -q "manifest reloaded"; }
wait_for 60 "the reload logged" reloaded
[ "$(prop ActiveState)" = active ] || fail "$SVC is $(prop ActiveState) after reload"
[ "$(prop MainPID)" = "$PID" ] || fail "the reload restarted sluiced"
after=$(policy)
[ "$before" = "$after" ] || fail "an unchanged manifest changed the policy version"
echo "reloaded in place (pid $PID, $after)"
lap "reload"

step "upgrade and roll back (docs/operating.md \"Upgrade and rollback\")"
# A "new release": the same binaries with bytes appended (an ELF runs as
# before with trailing data), so install.sh sees them differ.
rm -rf /tmp/newbin && mkdir /tmp/newbin && cp bin/sluiced bin/sluice bin/sluice-helper bin/sluice-init /tmp/newbin/
printf 'upgrade' >>/tmp/newbin/sluiced
scripts/install.sh --bin /tmp/newbin | tee /tmp/upgrade.log | grep -E 'updated|running the previous'
grep -q '^install: updated /usr/local/bin/sluiced$' /tmp/upgrade.log || fail "install.sh --bin did not update sluiced"
grep -q 'running the previous binaries' /tmp/upgrade.log || fail "install.sh did not say sluiced runs the old binaries"
restart_and_check() {
  local old_pid new_pid
  old_pid=$(prop MainPID)
  systemctl restart "$SVC"
  wait_for 180 "$SVC active after restart" is_active
  new_pid=$(prop MainPID)
  [ "$new_pid" != "$old_pid" ] || fail "systemctl restart kept pid $old_pid"
  cmp -s /proc/"$new_pid"/exe "$1" || fail "sluiced (pid $new_pid) does not run $1"
  out=$(agent "$SLUICE" call read_file --args '{"path":"workspace/src/calc.py"}') || fail "a call after the restart: $out"
  "$SLUICE" audit verify "$LEDGER" >/dev/null || fail "the ledger does not verify across the restart"
  echo "restarted: pid $old_pid -> $new_pid, running $1; a call works; the ledger verifies"
}
restart_and_check /tmp/newbin/sluiced
scripts/install.sh --bin bin | grep -E 'updated'
restart_and_check bin/sluiced
PID=$(prop MainPID)
lap "upgrade and rollback"

# Under the unit's sandbox sluiced still sets its threads' timer slack
# (docs/operating.md: it needs CAP_SYS_NICE, which the unit keeps).
slack=$(cat /proc/"$PID"/timerslack_ns)
[ "$slack" = 500000 ] || fail "sluiced's timer slack is $slack ns under the unit, want 500000"
echo "timer slack of sluiced (pid $PID): $slack ns"

# All of it but the MCP test with the TypeScript client: it needs npm's
# registry, which the VM has not; make test runs it on the host, and
# TestMCPStdio drives the same bridge here with the Go SDK.
step "the e2e suite against the systemd-managed daemon (SLUICE_E2E_SOCKET=$SOCK)"
mkdir -p "$E2E_TMP"
set +e
SLUICE_E2E_SOCKET=$SOCK TMPDIR=$E2E_TMP SLUICE_BIN_DIR=/usr/local/bin \
  go test -trimpath -tags seccomp -count=1 -timeout 30m -v -skip '^TestMCPTypeScriptClient$' ./e2e/ 2>&1 | tee /tmp/e2e.log | grep -E '^(---|ok|FAIL|PASS|e2e:|panic)|^\s+\S+_test\.go:'
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || fail "the e2e suite failed (exit $rc; /tmp/e2e.log in the VM)"
lap "e2e suite (managed daemon)"

step "the sandbox's tests on pure cgroup v2 (limits, OOM, pids, leftovers)"
set +e
go test -trimpath -tags seccomp -count=1 -timeout 30m -v ./sandbox/ 2>&1 | tee /tmp/sandbox.log | grep -E '^(---|ok|FAIL|PASS|panic)|^\s+\S+_test\.go:'
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || fail "the sandbox tests failed (exit $rc; /tmp/sandbox.log in the VM)"
lap "sandbox tests (v2)"

if [ "${SLUICE_VM_BENCH:-0}" = 1 ]; then
  step "bench/exec.sh --n 20 --seconds 2 (SLUICE_VM_BENCH=1)"
  bench/exec.sh --n 20 --seconds 2
  lap "bench/exec.sh"
fi

step "sluice audit verify $LEDGER"
"$SLUICE" audit verify "$LEDGER"
# The ledger's syncs go through its write-ahead ring under the unit's
# sandbox (ProtectSystem=strict, the state dir writable): 2 MiB and its
# 4 KiB header, written when sluiced first started.
ring="$(dirname "$LEDGER")/audit.wal"
[ "$(stat -c %s "$ring" 2>/dev/null)" = 2101248 ] || fail "no write-ahead ring of 2 MiB + 4 KiB at $ring: $(ls -l "$ring" 2>&1)"
echo "write-ahead ring: $ring, $(stat -c %s "$ring") bytes"
lap "audit verify"

step "user namespaces restricted (user.max_user_namespaces=0): bwrap fails for a user, sluice works"
# What Ubuntu's AppArmor restriction and container runtimes' seccomp
# profiles do to an unprivileged caller: no new user namespace. bwrap (not
# setuid on Debian) needs one; sluice's containers are made by sluiced, as
# root, without one (docs/operating.md "Hosts where user namespaces are
# restricted").
userns_was=$(</proc/sys/user/max_user_namespaces)
echo 0 >/proc/sys/user/max_user_namespaces
rc=0
agent bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true 2>/tmp/bwrap.err || rc=$?
echo "bwrap as uid 65534: exit $rc: $(head -c 300 /tmp/bwrap.err)"
if ((rc == 0)); then
  echo "$userns_was" >/proc/sys/user/max_user_namespaces
  fail "bwrap ran for uid 65534 with user.max_user_namespaces=0"
fi
out=$(agent "$SLUICE" call read_file --args '{"path":"workspace/src/calc.py"}' 2>&1) && ok_read=1 || ok_read=0
run=$(agent "$SLUICE" call run_tests 2>&1) && ok_run=1 || ok_run=0
echo "$userns_was" >/proc/sys/user/max_user_namespaces
((ok_read)) && [[ "$out" == *"def "* ]] || fail "read_file with user namespaces off: $out"
((ok_run)) && [[ "$run" == *OK* ]] || fail "run_tests with user namespaces off: $run"
echo "the same user through sluice: read_file calc.py $(wc -l <<<"$out") lines; run_tests: $(tail -n 1 <<<"$run")"
echo "user.max_user_namespaces restored to $userns_was"
lap "user namespaces restricted"

step "systemctl stop sluiced with a command running: nothing is left"
cp "$MANIFEST" /tmp/manifest.orig
python3 - "$MANIFEST" <<'EOF'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m["tools"]["slow"] = {"operation": "execute", "commands": [["sleep", "600"]], "timeout_ms": 600000, "pool": 0}
open(p + ".new", "w").write(json.dumps(m, indent=2))
EOF
mv "$MANIFEST.new" "$MANIFEST"
before=$(policy)
systemctl reload "$SVC"
version_changed() { [ "$(policy)" != "$before" ]; }
wait_for 60 "the manifest with the slow tool loaded" version_changed
agent "$SLUICE" call slow --json >/tmp/slow.out 2>&1 &
slow=$!
# argv PID: its command line, words joined by spaces (bash builtins only)
argv() {
  local -a a=()
  mapfile -d '' -t a </proc/"$1"/cmdline 2>/dev/null || return 1
  echo "${a[*]}"
}
sleeping() {
  local f p
  for f in /sys/fs/cgroup"$CG"/containers/*/*/cgroup.procs; do
    [ -r "$f" ] || continue
    while read -r p; do
      [ "$(argv "$p")" = "sleep 600" ] && return 0
    done <"$f"
  done
  return 1
}
wait_for 120 "sleep 600 running in a container" sleeping
echo "sleep 600 runs in $CG/containers; systemctl stop $SVC"
s0=$(date +%s.%N)
systemctl stop "$SVC"
s1=$(date +%s.%N)
wait $slow || true
echo "stopped in $(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.1f", b - a }') s; ActiveState=$(prop ActiveState) Result=$(prop Result)"
echo "the call's end: $(tr -d '\n ' </tmp/slow.out)"
grep -Eq '"reason": ?"shutdown"' /tmp/slow.out || fail "the running call did not end with reason shutdown: $(cat /tmp/slow.out)"
[ "$(prop ActiveState)" = inactive ] || fail "$SVC is $(prop ActiveState) after stop"
[ "$(prop Result)" = success ] || fail "$SVC stopped with result $(prop Result)"
leftovers() {
  local -a left=()
  local f p c d
  [ ! -d "/sys/fs/cgroup$CG" ] || left+=("the unit's cgroup /sys/fs/cgroup$CG")
  # (the tests' own daemons, outside systemd, leave the empty parent dirs
  # /sys/fs/cgroup/sluice/<scope>; a container would be a dir below them)
  for d in /sys/fs/cgroup/sluice/*/*/; do [ -d "$d" ] && left+=("cgroup $d"); done
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    c=$(argv "$p") || continue
    case $c in "sleep 600" | /usr/local/bin/sluiced* | *sluice-helper*) left+=("process $p: $c") ;; esac
  done
  while read -r _ _ _ _ m _; do
    case $m in /run/sluice/*) left+=("mount $m") ;; esac
  done </proc/self/mountinfo
  for d in "$RUNDIR"/rootfs/*; do [ -e "$d" ] && left+=("rootfs $d"); done
  for d in "$RUNDIR"/containers/*; do [ -e "$d" ] && left+=("container state $d"); done
  ((${#left[@]} == 0)) && return 0
  printf '  left: %s\n' "${left[@]}" >&2
  return 1
}
leftovers || fail "systemctl stop left things behind"
"$SLUICE" audit verify "$LEDGER"
grep '"tool":"slow"' "$LEDGER" | grep -q '"reason":"shutdown"' || fail "the ledger lacks the slow call's shutdown"
echo "nothing left: no process, cgroup, mount, rootfs or container state; the ledger holds the shutdown"
mv /tmp/manifest.orig "$MANIFEST"
lap "stop with a call running"

step "the socket starts sluiced again on the next connection"
"$SLUICE" health
wait_for 180 "$SVC active again" is_active
echo "$SVC: $(prop ActiveState), pid $(prop MainPID)"
systemctl stop sluiced.socket "$SVC"
[ ! -e "$SOCK" ] || fail "$SOCK is left after sluiced.socket stopped"
leftovers || fail "stopping again left things behind"
lap "restart and stop"

step "the first hour: sluice init --install for a user's own project, then that user's client setup and check"
# README "Your project, your agent: the first hour": make install (done
# above), sluice init --install, and, as the agent's user, sluice client
# setup and check: nothing else.
id alice >/dev/null 2>&1 || useradd -m -s /bin/bash alice
proj=/home/alice/myproj
install -d -o alice -g alice "$proj" "$proj/tests"
printf 'def add(a, b):\n    return a + b\n' >"$proj/calc.py"
printf 'import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n' >"$proj/tests/test_calc.py"
chown -R alice:alice "$proj"
cp "$MANIFEST" /tmp/manifest.before-init
"$SLUICE" init --install --agent alice --output /root/.config/sluice/myproj.toml --force "$proj"
wait_for 60 "sluiced answering with the project's manifest" "$SLUICE" health
su - alice -c "cd $proj && $SLUICE client setup claude && $SLUICE client check claude" ||
  fail "alice's client check after sluice init --install"
out=$(su - alice -c "cd $proj && $SLUICE call read_file --args '{\"path\":\"calc.py\"}'") || fail "alice's read_file: $out"
[[ "$out" == *"def add"* ]] || fail "alice's read_file printed: $out"
echo "alice read calc.py through sluice: $(wc -l <<<"$out") lines"
systemctl stop sluiced.socket "$SVC"
rm -f /etc/systemd/system/sluiced.service.d/50-sluice-init.conf /etc/sluice/manifest.toml
mv /tmp/manifest.before-init "$MANIFEST"
systemctl daemon-reload
lap "first hour: init --install"

step "scripts/install.sh --uninstall"
scripts/install.sh --uninstall
for f in /usr/local/bin/sluiced /usr/local/bin/sluice /usr/local/bin/sluice-helper /usr/local/bin/sluice-init /etc/systemd/system/sluiced.service \
  /etc/systemd/system/sluiced.socket /etc/tmpfiles.d/sluice.conf; do
  [ ! -e "$f" ] || fail "--uninstall left $f"
done
if systemctl cat sluiced.service >/dev/null 2>&1; then fail "systemd still knows sluiced.service"; fi
[ -f "$MANIFEST" ] && [ -f "$LEDGER" ] || fail "--uninstall removed the manifest or the ledger"
echo "removed; kept $MANIFEST and $LEDGER"
lap "uninstall"

step "vm-inside timing"
printf '%s\n' "${T[@]}"
echo "vm-inside: ok"
