#!/usr/bin/env bash
# Execute latency and throughput: direct, bwrap, runc, sluice pooled and
# cold, one run, ratios printed. Installs bubblewrap and runc with apt when
# missing. Needs root and bin/ (make build).
#
# --bin-old DIR also runs a second sluiced (an older build, e.g. the one
# that bind-mounted mounts: cd ../old && make build, DIR=../old/bin) beside
# bin/sluiced and compares the FUSE view with those binds row by row,
# interleaved; --views runs only that comparison (--view-n samples a row).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
need=()
for p in bubblewrap runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "bench: installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
go build -trimpath -o bin/execbench ./bench/execbench
exec bin/execbench --bin bin "$@"
