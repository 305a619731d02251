#!/usr/bin/env bash
# read_file over the socket vs the transport, durability and spawn floors,
# one run, ratios printed. Needs bin/ (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go build -o bin/readbench ./bench/readbench
exec bin/readbench --bin bin "$@"
