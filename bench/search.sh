#!/usr/bin/env bash
# search (internal/walk) on a generated 10,000-file source tree vs grep -r
# (and find, for names) on the same tree: one run each after a warm-up,
# ratios printed. The tree is kept in DIR (default /tmp/sluice-searchbench)
# and made again only when its shape changes.
#
#   bench/search.sh [--dir DIR] [--files N] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go build -o bin/searchbench ./bench/searchbench
args=("$@")
if [[ " $* " != *" --dir "* ]]; then
  mkdir -p /tmp/sluice-searchbench
  args=(--dir /tmp/sluice-searchbench "${args[@]}")
fi
exec bin/searchbench "${args[@]}"
