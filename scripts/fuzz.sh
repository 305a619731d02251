#!/usr/bin/env bash
# Every fuzz target, FUZZTIME each (default 10m). The one list of targets:
# `make fuzz` runs it with --save, scripts/test.sh (make test) with
# FUZZTIME=5s. It fails if a Fuzz function in the tree is missing here.
#
#   scripts/fuzz.sh [--save] [pkg:FuzzName ...]
#
# --save copies the inputs this run found interesting (go keeps them in its
# cache, $(go env GOCACHE)/fuzz/<import path>/<FuzzName>/) into the
# package's testdata/fuzz/<FuzzName>/, where every `go test` replays them:
# commit them. A failing input is written there by go itself; the FAIL line
# names it, and `go test -run '<FuzzName>/<file>' ./<pkg>/` replays it.
#
# Prints a line per target (ok/FAIL, execs, new inputs) and a final
# "fuzz: N passed, N failed"; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
TAGS="-tags seccomp"
FUZZTIME=${FUZZTIME:-10m}

TARGETS=(
  audit:FuzzRingTail
  authz:FuzzParse
  authz:FuzzManifestErrorPlace
  authz:FuzzNeverFolded
  authz:FuzzParseTOML
  authz:FuzzTOMLJSONTwins
  authz:FuzzCommandPattern
  client:FuzzDecodeEvent
  daemon:FuzzCallBody
  daemon:FuzzStreamEvents
  daemon:FuzzLoadMounts
  daemon:FuzzCallResultJSON
  internal/foldname:FuzzKey
  internal/securefs:FuzzResolve
  internal/strictjson:FuzzCheckKeys
  egress/netpolicy:FuzzParseURL
  egress/netpolicy:FuzzAuthorizeConnect
  egress/netpolicy:FuzzAuthorizeWebhook
  internal/termsafe:FuzzEscape
  internal/walk:FuzzLines
  internal/secretscan:FuzzStream
)

save=0
if [ "${1:-}" = --save ]; then save=1; shift; fi
if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  # Every func FuzzX in a _test.go is in the list, and every listed one exists.
  found=$(git grep --untracked -o -E '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' |
    sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz.*)$|\1:\2|' | sort)
  listed=$(printf '%s\n' "${TARGETS[@]}" | sort)
  if [ "$found" != "$listed" ]; then
    echo "fuzz: scripts/fuzz.sh's TARGETS and the tree's Fuzz functions differ (< in the tree, > listed):" >&2
    diff <(echo "$found") <(echo "$listed") >&2
    echo "fuzz: 0 passed, 1 failed"
    exit 1
  fi
fi

# deadline_flake: the run failed with nothing but the coordinator's
# "context deadline exceeded": no failing input written, no panic, no
# error of the target's own.
deadline_flake() {
  grep -q '^    context deadline exceeded$' "$1" &&
    ! grep -q -e 'Failing input written' -e 'panic:' -e '_test\.go:[0-9]*:' "$1"
}

module=$(go list -m)
cache="$(go env GOCACHE)/fuzz"
out=$(mktemp)
stamp=$(mktemp)
trap 'rm -f "$out" "$stamp"' EXIT
passed=0 failed=0
for target in "${TARGETS[@]}"; do
  pkg=${target%%:*} fn=${target##*:}
  touch "$stamp"
  start=$SECONDS
  # -timeout 0: the test binary's own 10m default would cut a 10m run.
  fuzz() { go test $TAGS -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" -timeout 0 "./$pkg/" >"$out" 2>&1; }
  if fuzz; then
    status=ok passed=$((passed + 1))
  elif deadline_flake "$out" && fuzz; then
    # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as
    # a failure ("context deadline exceeded", no failing input written:
    # go.dev/issue/75804, fixed in Go 1.27). That alone, and only once,
    # is run again; anything else fails.
    status=ok passed=$((passed + 1))
  else
    status=FAIL failed=$((failed + 1))
  fi
  execs=$(grep -o 'execs: [0-9]*' "$out" | tail -n 1 | sed 's/execs: //')
  # The inputs this run added to go's cache (interesting: new coverage).
  newdir="$cache/$module/$pkg/$fn"
  mapfile -t new < <([ -d "$newdir" ] && find "$newdir" -type f -newer "$stamp")
  note="${#new[@]} new inputs"
  if [ "$save" = 1 ] && [ "${#new[@]}" -gt 0 ]; then
    mkdir -p "$pkg/testdata/fuzz/$fn"
    cp -n "${new[@]}" "$pkg/testdata/fuzz/$fn/"
    note="$note saved to $pkg/testdata/fuzz/$fn"
  fi
  printf '%s  \t%s\t%ds, %s execs, %s\n' "$status" "$target" $((SECONDS - start)) "${execs:-0}" "$note"
  if [ "$status" = FAIL ]; then
    # Indented: scripts/test.sh counts lines that begin with ok or FAIL.
    tail -n 30 "$out" | sed 's/^/    /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
