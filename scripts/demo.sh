#!/usr/bin/env bash
# A scripted agent session against the bundled example: sluiced starts on
# a temporary socket and state dir, the "agent" makes file-tool calls
# through the CLI, each with its verdict and reason, the audit ledger is
# verified and shown, and the daemon stops.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/bin
tmp=$(mktemp -d /tmp/sluice-demo.XXXXXX)
export SLUICE_SOCKET=$tmp/sluice.sock
manifest=$root/profiles/examples/manifest.json

cleanup() {
  if [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }

bold "== starting sluiced on $SLUICE_SOCKET (manifest $manifest)"
"$bin/sluiced" --manifest "$manifest" --socket "$SLUICE_SOCKET" --state-dir "$tmp/state" --run-dir "$tmp/run" \
  --log-level warn 2>"$tmp/sluiced.log" &
pid=$!
for _ in $(seq 100); do "$bin/sluice" health >/dev/null 2>&1 && break; sleep 0.05; done
"$bin/sluice" health

bold "== the tools this agent may call (sluice tools)"
"$bin/sluice" tools

step() {
  local title=$1 tool=$2 args=$3
  bold "-- $title"
  echo "\$ sluice call $tool --args '$args'"
  set +e
  out=$("$bin/sluice" call "$tool" --args "$args" 2>"$tmp/err")
  code=$?
  set -e
  if [ -n "$out" ]; then printf '%s\n' "$out" | head -n 8 | sed 's/^/  | /'; fi
  local n; n=$(printf '%s\n' "$out" | wc -l)
  if [ -n "$out" ] && [ "$n" -gt 8 ]; then echo "  | … ($n lines)"; fi
  { grep -v '^sluice: ' "$tmp/err" || true; } | sed '/^$/d' | tail -n 6 | sed 's/^/  ! /'
  case $code in
    0) echo "=> allow: allowed$(grep -q truncated "$tmp/err" && echo ' (output truncated at max_bytes, flagged)')";;
    1) echo "=> allow, but it failed: $(sed -n 's/^sluice: \(failed: \)\{0,1\}//p' "$tmp/err" | tail -n 1)";;
    3) echo "=> deny: $(sed -n 's/^sluice: denied: //p' "$tmp/err")";;
    *) echo "=> exit $code: $(cat "$tmp/err")";;
  esac
}

step "read a source file" read_file '{"path":"workspace/src/calc.py"}'
step "list the source directory (never-listed names are hidden)" list_dir '{"path":"workspace/src"}'
step "read through a symlink that stays inside the root" read_file '{"path":"workspace/src/calc_link.py"}'
step "traversal: ../ out of the root" read_file '{"path":"workspace/src/../secret.txt"}'
step "symlink escape: notes.txt -> ../secret.txt" read_file '{"path":"workspace/src/notes.txt"}'
step "absolute path" read_file '{"path":"/etc/passwd"}'
step "a secret inside the root: .env" read_file '{"path":"workspace/src/.env"}'
step "a private key: id.pem" read_file '{"path":"workspace/src/id.pem"}'
step "a large file: 22 KiB with max_bytes 4096" read_file '{"path":"workspace/src/big_log.txt"}'
step "a missing file inside the root" read_file '{"path":"workspace/src/missing.py"}'
step "a tool the manifest does not declare" delete_file '{"path":"workspace/src/calc.py"}'

bold "== execute tools run in a sandbox: read-only mounts, no network, seccomp, limits"
step "run the project's unit tests (a warm container; .env is masked inside)" run_tests '{}'
step "the same tool with a command the manifest does not list" run_tests '{"argv":["sh","-c","cat src/.env"]}'
step "a tool that tries to reach the network" fetch_status '{}'
step "a command that prints 50 MB into a 2 KiB cap" noisy '{}'

bold "== the audit ledger: sluice audit verify"
"$bin/sluice" audit verify "$tmp/state/audit.jsonl"
bold "== the last records: sluice audit tail -n 8"
"$bin/sluice" audit tail -n 8 "$tmp/state/audit.jsonl"
if grep -q "DEMO-SECRET" "$tmp/state/audit.jsonl"; then echo "FAIL: a secret reached the ledger" >&2; exit 1; fi
echo "(no secret from the workspace appears anywhere in the ledger)"

bold "== stopping sluiced (SIGTERM)"
kill -TERM "$pid"; wait "$pid"; pid=
if grep -q '"level":"ERROR"' "$tmp/sluiced.log"; then echo "sluiced logged errors:" >&2; cat "$tmp/sluiced.log" >&2; exit 1; fi
if [ -n "$(ls -A "$tmp/run/rootfs" 2>/dev/null)" ] || grep -q "$tmp/run" /proc/self/mountinfo; then
  echo "FAIL: sandbox leftovers after shutdown" >&2; exit 1
fi
echo "(no container, mount or rootfs left behind)"
echo "demo: done"
