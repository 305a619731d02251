#!/usr/bin/env bash
# make soak: a real sluiced held under load over its socket, one row a
# scenario, exit 1 on any loss (docs/testing.md "make soak"). Needs bin/
# (make build) and root. Knobs: SOAK_CALLS, SOAK_ONLY, … (bin/soak -h).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
go build -o bin/soak ./bench/soak
exec bin/soak --bin bin "$@"
