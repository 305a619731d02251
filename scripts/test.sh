#!/usr/bin/env bash
# The whole test suite. Root is required: the suite mounts tmpfs, makes
# device nodes and (for execute tools) creates containers. It fails,
# rather than skips, when not run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
TAGS="-tags seccomp"
FUZZTIME=${FUZZTIME:-5s}

if [ "$(id -u)" != 0 ]; then
  echo "test: run as root (CI runs as root): the suite mounts tmpfs and makes device nodes" >&2
  exit 1
fi

echo "== no binary over 1 MiB is tracked"
# A built binary once landed at the root by accident (docs/security.md,
# "The third review"). Checked on what git tracks, so a local bin/ is fine.
big=""
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  [ "$(stat -c %s "$f")" -gt 1048576 ] || continue
  # git's own test for binary: a NUL byte in the first 8000 bytes.
  if [ "$(head -c 8000 "$f" | tr -d '\000' | wc -c)" -lt 8000 ]; then big="$big $f"; fi
done < <(git ls-files -z 2>/dev/null)
if [ -n "$big" ]; then
  echo "test: tracked binaries over 1 MiB:$big (git rm --cached them; build outputs go to bin/)" >&2
  exit 1
fi

echo "== gofmt, go vet"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
go vet $TAGS ./...
# api/ and client/ are imported by orchestrators on any OS, and the CLI
# (sluice, sluice mcp) runs wherever its user is: the tree must build off
# Linux too. Linux-only code is *_linux.go (or //go:build linux) with an
# *_other.go twin that returns ErrUnsupported.
echo "== darwin and windows (go vet, go build ./api ./client ./cmd/sluice)"
for goos in darwin windows; do
  if ! GOOS=$goos CGO_ENABLED=0 go vet ./... || ! GOOS=$goos CGO_ENABLED=0 go build ./api ./client ./cmd/sluice; then
    echo "test: GOOS=$goos does not build: give Linux-only code a _linux.go name (or //go:build linux) and an _other.go twin that returns ErrUnsupported" >&2
    exit 1
  fi
done

log=$(mktemp)
units=$(mktemp -d)
trap 'rm -rf "$log" "$units"' EXIT

echo "== systemd units (systemd-analyze verify)"
if ! command -v systemd-analyze >/dev/null; then
  echo "test: systemd-analyze not found: it checks scripts/sluiced.service and sluiced.socket." >&2
  echo "test: install it with scripts/deps.sh (or: apt-get install systemd); systemd need not be running." >&2
  exit 1
fi
if [ ! -x bin/sluiced ]; then
  echo "test: bin/sluiced missing (make build): verify checks that ExecStart= is executable" >&2
  exit 1
fi
# verify requires ExecStart='s binary to exist: point the copy at bin/,
# the one change. It exits 0 on warnings (unknown keys, bad values), so
# any output fails the check.
sed "s|/usr/local/bin/|$PWD/bin/|g" scripts/sluiced.service >"$units/sluiced.service"
cp scripts/sluiced.socket "$units/"
if ! out=$(systemd-analyze verify --man=no "$units/sluiced.service" "$units/sluiced.socket" 2>&1) || [ -n "$out" ]; then
  echo "test: systemd-analyze verify:" >&2
  echo "$out" >&2
  echo "test: 0 passed, 1 failed"
  exit 1
fi
echo "ok  	systemd units" | tee -a "$log"
systemd-analyze security --offline=yes "$units/sluiced.service" 2>/dev/null | tail -n 1 || true

echo "== the pinned MCP TypeScript SDK (e2e/mcp, npm ci)"
if [ ! -d e2e/mcp/node_modules/@modelcontextprotocol/sdk ]; then
  (cd e2e/mcp && npm ci --prefer-offline --no-audit --no-fund)
fi

echo "== unit and e2e tests"
SLUICE_BIN_DIR="$PWD/bin" go test $TAGS -count=1 ./... 2>&1 | tee -a "$log"

echo "== race detector (pure and daemon packages)"
SLUICE_BIN_DIR="$PWD/bin" go test $TAGS -race -count=1 ./authz/ ./audit/ ./internal/securefs/ ./daemon/... ./client/ ./egress/... 2>&1 | tee -a "$log"

echo "== fuzz targets, $FUZZTIME each (scripts/fuzz.sh: the list make fuzz runs too)"
FUZZTIME=$FUZZTIME scripts/fuzz.sh 2>&1 | tee -a "$log"
# Package runs (unit, race, fuzz) that passed and failed.
echo "test: $(grep -c '^ok' "$log") passed, $(grep -c '^FAIL' "$log") failed"
