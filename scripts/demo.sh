#!/usr/bin/env bash
# A scripted agent session against the bundled example: sluiced starts on
# a temporary socket and state dir with a copy of the example manifest and
# workspace; the "agent" (uid 65534, as the manifest's principals say)
# makes calls through the CLI, each with its verdict and reason (secrets
# in a file redacted, each result's source); two approvers (root and uid
# 65533) approve a call from other CLIs; the agent hands a sub-agent a
# narrower delegation token; a task is cancelled; the same calls go through `sluice mcp` from the official
# TypeScript MCP client (e2e/mcp/demo.mjs); the audit ledger is verified
# and shown; the daemon stops.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/bin
tmp=$(mktemp -d /tmp/sluice-demo.XXXXXX)
chmod 0755 "$tmp"
export SLUICE_SOCKET=$tmp/sluice.sock
# A copy, so the demo's writes never touch the repository.
cp -a "$root/profiles/examples" "$tmp/example"
manifest=$tmp/example/manifest.json
# The agent's CLI runs as uid 65534 (principal "agent"); the operator's as
# root (principal "ops", the approver, who may call no tool itself).
install -m 0755 "$bin/sluice" "$tmp/sluice"
agent() { setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/sluice" "$@"; }
ops() { "$bin/sluice" "$@"; }
# A second approver (principal "lead", uid 65533): deploy needs both.
lead() { setpriv --reuid=65533 --regid=65533 --clear-groups "$tmp/sluice" "$@"; }

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
for _ in $(seq 100); do ops health >/dev/null 2>&1 && break; sleep 0.05; done
chmod 0666 "$SLUICE_SOCKET" # the demo's own socket: let the agent's uid connect
ops health

bold "== the tools this agent may call (sluice tools, as the agent)"
agent tools

step() {
  local title=$1 tool=$2 args=$3
  shift 3
  bold "-- $title"
  echo "\$ sluice call $tool --args '$args'${*:+ $*}"
  set +e
  out=$(agent call "$tool" --args "$args" "$@" 2>"$tmp/err")
  code=$?
  set -e
  if [ -n "$out" ]; then printf '%s\n' "$out" | sed -n '1,8p' | sed 's/^/  | /'; fi
  local n; n=$(printf '%s\n' "$out" | wc -l)
  if [ -n "$out" ] && [ "$n" -gt 8 ]; then echo "  | … ($n lines)"; fi
  { grep -v '^sluice: ' "$tmp/err" || true; } | sed '/^$/d' | tail -n 6 | sed 's/^/  ! /'
  case $code in
    0) echo "=> allow: allowed$(grep -q truncated "$tmp/err" && echo ' (output cut, flagged truncated)')$(sed -n 's/^sluice: \([0-9]*\) secret(s) replaced.*/ (\1 secrets redacted)/p' "$tmp/err")";;
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
step "a note inside the root with cloud keys pasted in: the keys never reach the agent (redact)" read_file '{"path":"workspace/src/deploy_notes.md"}'
bold "-- every result says where its content came from, and that it is untrusted data (source)"
echo "\$ sluice call read_file --args '{\"path\":\"workspace/src/calc.py\"}' --json   # the source field"
agent call read_file --args '{"path":"workspace/src/calc.py"}' --json |
  python3 -c 'import json,sys; print(json.dumps({"source": json.load(sys.stdin)["source"]}, indent=2))' | sed 's/^/  | /'
step "a large file: 22 KiB with max_bytes 4096" read_file '{"path":"workspace/src/big_log.txt"}'
step "a missing file inside the root" read_file '{"path":"workspace/src/missing.py"}'
step "a tool the manifest does not declare" delete_file '{"path":"workspace/src/calc.py"}'

bold "== writes commit atomically, and only if the file is still what the agent saw"
step "write a new file" write_file '{"path":"workspace/src/notes.md","content":"# notes\n","if_match":"absent"}'
sum=$(sed -n 's/.*"sha256": "\(sha256:[0-9a-f]*\)".*/\1/p' <(agent call write_file --json --args '{"path":"workspace/src/notes.md","content":"# notes\nv2\n"}'))
echo "  (overwritten; the write returned $sum for the next if_match)"
step "a stale write: if_match names content the file no longer has" write_file \
  '{"path":"workspace/src/notes.md","content":"# lost update\n","if_match":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}'
step "a write through a symlink (notes.txt -> ../secret.txt)" write_file '{"path":"workspace/src/notes.txt","content":"x"}'
step "a write to a never-listed name" write_file '{"path":"workspace/src/.env","content":"x"}'

bold "== the file tools agents use: ranged reads, deep lists, stat, search, edit, mkdir, move"
step "read two lines (offset/limit)" read_file '{"path":"workspace/src/calc.py","offset":4,"limit":2}'
echo "  (the result says $(agent call read_file --json --args '{"path":"workspace/src/calc.py","offset":4,"limit":2}' |
  sed -n 's/^ *"\(size\|next_offset\|truncated\)": \([0-9a-z]*\).*/\1 \2/p' | paste -sd, | sed 's/,/, /g'))"
step "the last 3 lines of a 22 KiB log (tail)" read_file '{"path":"workspace/src/big_log.txt","tail":3}'
step "list two levels deep (private/ and .env stay hidden at every level)" list_dir '{"path":"workspace/src","depth":2}'
step "stat a file: type, size, mode, mtime, sha256" stat_file '{"path":"workspace/src/calc.py"}'
step "search lines by RE2 regex (never-listed files are not read)" find_code '{"path":"workspace/src","content":"def (add|mean)\\("}'
step "search names: *.pem finds nothing (id.pem is never-listed)" find_code '{"path":"workspace/src","name":"*.pem"}'
step "edit one line: exact text, exactly once; the result is a diff" edit_source \
  '{"path":"workspace/src/calc.py","edits":[{"old_text":"    return a + b","new_text":"    return a + b  # reviewed"}]}'
step "an edit whose old text is not in the file" edit_source \
  '{"path":"workspace/src/calc.py","edits":[{"old_text":"return a * b","new_text":"x"}]}'
step "make a directory" make_dir '{"path":"workspace/src/docs"}'
step "move notes.md into it" move_source '{"path":"workspace/src/notes.md","to":"workspace/src/docs/notes.md"}'
step "move a never-listed file (id.pem) to an innocent name" move_source '{"path":"workspace/src/id.pem","to":"workspace/src/key.txt"}'
step "a move never replaces: onto calc.py" move_source '{"path":"workspace/src/docs/notes.md","to":"workspace/src/calc.py"}'

bold "== execute tools run in a sandbox: read-only mounts, no network, seccomp, limits"
step "run the project's unit tests (a warm container; .env does not exist inside)" run_tests '{}'
step "a patterned command: one test file, only the tests matching -k" run_test_file \
  '{"argv":["python3","-m","unittest","-v","-k","add","tests/test_calc.py"]}'
step "the same pattern with a file outside its path roots (../secret.txt)" run_test_file \
  '{"argv":["python3","-m","unittest","-v","../secret.txt"]}'
step "the same tool with a command the manifest does not list" run_tests '{"argv":["sh","-c","cat src/.env"]}'
step "a tool that tries to reach the network" fetch_status '{}'
step "a command that prints 50 MB into a 2 KiB cap" noisy '{}'

bold "== commands that write: a scratch layer, then a changeset through the write policy"
step "a formatter edits src/pkg/util.py in its scratch layer; the change commits as a write would" format_code \
  '{"argv":["python3","tools/fmt.py","src"]}'
step "the file as the formatter left it" read_file '{"path":"workspace/src/pkg/util.py"}'
echo "\$ sluice call tidy_workspace --stream   # the agent: format and delete logs; a human sees the changeset"
agent call tidy_workspace --args '{"argv":["python3","tools/fmt.py","--drop-logs","src"]}' --stream \
  >"$tmp/tidy.out" 2>"$tmp/tidy.err" &
tidy=$!
for _ in $(seq 400); do ops approvals 2>/dev/null | grep -q tidy_workspace && break; sleep 0.05; done
tid=$(ops approvals | sed -n 's/^\(a-[0-9A-Z]*\) .*tidy_workspace.*/\1/p' | sed -n 1p)
echo "\$ sluice approvals                        # the operator sees every change, each deletion named"
ops approvals | sed 's/^/  | /'
echo "\$ sluice deny $tid --note 'keep the logs'"
ops deny "$tid" --note "keep the logs" | sed 's/^/  | /'
set +e; wait "$tidy"; set -e
sed 's/^/  ! /' "$tmp/tidy.err" | tail -n 4
step "the log is still there: a denied changeset leaves the workspace as it was" stat_file '{"path":"workspace/src/big_log.txt"}'

bold "== a call that needs two people: the agent waits; ops approves, then lead (two-person control)"
echo "\$ sluice call deploy --stream            # the agent"
agent call deploy --stream >"$tmp/deploy.out" 2>"$tmp/deploy.err" &
deploy=$!
for _ in $(seq 200); do grep -q 'waiting for approval' "$tmp/deploy.err" && break; sleep 0.05; done
sed 's/^/  ! /' "$tmp/deploy.err"
id=$(sed -n 's/.*waiting for approval \(a-[0-9A-Z]*\).*/\1/p' "$tmp/deploy.err")
echo "\$ sluice approvals                        # the operator"
ops approvals | sed 's/^/  | /'
echo "\$ sluice approve $id --note 'release 1.2, reviewed'     # ops (root): one of two"
ops approve "$id" --note "release 1.2, reviewed" | sed 's/^/  | /'
echo "\$ sluice approve $id --note 'second pair of eyes'       # lead (uid 65533): the second"
lead approve "$id" --note "second pair of eyes" | sed 's/^/  | /'
wait "$deploy" && echo "=> allow after approval:" && sed 's/^/  | /' "$tmp/deploy.out"

bold "== a sub-agent gets less than its parent: a delegation token"
install -d -o 65534 -g 65534 -m 0700 "$tmp/sub"
echo "\$ sluice token create --tools read_file --roots workspace/src/pkg --subject reviewer --ttl 10m > tok   # the agent"
agent token create --tools read_file --roots workspace/src/pkg --subject reviewer --ttl 10m >"$tmp/sub/tok" 2>"$tmp/tok.err"
chown 65534:65534 "$tmp/sub/tok"
chmod 0600 "$tmp/sub/tok"
sed 's/^/  ! /' "$tmp/tok.err"
tokid=$(sed -n 's/^token \(t-[^,]*\),.*/\1/p' "$tmp/tok.err")
step "the sub-agent reads beneath its token's root" read_file '{"path":"workspace/src/pkg/util.py"}' --token-file "$tmp/sub/tok"
step "the sub-agent reads calc.py: its parent may, the token's root does not reach it" read_file '{"path":"workspace/src/calc.py"}' --token-file "$tmp/sub/tok"
step "the sub-agent climbs out with ../" read_file '{"path":"workspace/src/pkg/../calc.py"}' --token-file "$tmp/sub/tok"
step "the sub-agent writes: the token names read_file only" write_file '{"path":"workspace/src/pkg/x.py","content":"x"}' --token-file "$tmp/sub/tok"
echo "\$ sluice token revoke $tokid"
agent token revoke "$tokid" | sed 's/^/  | /'
step "the revoked token: never the peer's own rights instead" read_file '{"path":"workspace/src/pkg/util.py"}' --token-file "$tmp/sub/tok"

bold "== cancelling a task ends its running command"
echo "\$ sluice call slow_job --task demo-task --stream --json &   # the agent: sleep 30"
agent call slow_job --task demo-task --stream --json >"$tmp/slow.out" 2>"$tmp/slow.err" &
slow=$!
for _ in $(seq 200); do grep -q '"event":"decision"' "$tmp/slow.out" 2>/dev/null && break; sleep 0.05; done
echo "\$ sluice tasks cancel demo-task"
start_ns=$(date +%s%N)
agent tasks cancel demo-task | sed 's/^/  | /'
set +e; wait "$slow"; set -e
echo "=> the job ended after $(( ($(date +%s%N) - start_ns) / 1000000 )) ms: $(sed -n 's/.*"reason":"\([a-z_]*\)".*/\1/p' "$tmp/slow.out" | tail -n 1)"
step "a new call with the cancelled task" read_file '{"path":"workspace/src/calc.py"}' --task demo-task

bold "== the same daemon through MCP: sluice mcp, driven by the official TypeScript SDK"
if [ ! -d e2e/mcp/node_modules/@modelcontextprotocol/sdk ]; then
  (cd e2e/mcp && npm ci --prefer-offline --no-audit --no-fund)
fi
# The client spawns the server as an agent would, as the agent's uid.
SLUICE_MANIFEST=$manifest SLUICE_AUDIT=$tmp/state/audit.jsonl SLUICED_PID=$pid node e2e/mcp/demo.mjs -- \
  setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/sluice" mcp --socket "$SLUICE_SOCKET" --task mcp-demo

bold "== the audit ledger: sluice audit verify"
ops audit verify "$tmp/state/audit.jsonl"
bold "== the last records: sluice audit tail -n 8"
ops audit tail -n 8 "$tmp/state/audit.jsonl"
if grep -q -e "DEMO-SECRET" -e "AKIADEMO7SLUICE5XMPL" -e "DEMOSECRET" -e "slt_" "$tmp/state/audit.jsonl"; then echo "FAIL: a secret reached the ledger" >&2; exit 1; fi
echo "(no secret from the workspace appears anywhere in the ledger)"

bold "== stopping sluiced (SIGTERM)"
kill -TERM "$pid"; wait "$pid"; pid=
if grep -q '"level":"ERROR"' "$tmp/sluiced.log"; then echo "sluiced logged errors:" >&2; cat "$tmp/sluiced.log" >&2; exit 1; fi
if [ -n "$(ls -A "$tmp/run/rootfs" 2>/dev/null)" ] || grep -q "$tmp/run" /proc/self/mountinfo; then
  echo "FAIL: sandbox leftovers after shutdown" >&2; exit 1
fi
echo "(no container, mount or rootfs left behind)"
echo "demo: done"
