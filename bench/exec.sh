#!/usr/bin/env bash
# Execute latency and throughput: direct, bwrap, runc, sluice pooled and
# cold, interleaved in one run, ratios printed. Installs bubblewrap and runc
# with apt when missing. Needs root and bin/ (make build).
#
# The write rows follow the execute rows in the default run (--writes runs
# only them): go test ./... of a small package in a 10,000-file project
# through a tool with writes (commit "discard") and cache, against bwrap
# --bind of the project and of a cache directory, the build cache warm on
# both sides (--cache-n samples a side, 10 by default); and a command
# making 200 files of 4 KiB, its changeset committed (auto) and discarded,
# against the same files written with write+fsync+rename by one process
# (--changeset-n samples, 20 by default). Go is /usr/local/go's.
#
# Samples run in rounds, one of each method, in an order shuffled each
# round (--order rotate: one cyclic order, as before 2026-12-06).
#
# --views runs instead the view rows: tools on a 10,000-file git tree
# (find, git status, cat, starts, the demo's tests, and find and git
# status with the tree changed on the host before each call) through
# sluice's FUSE view against bwrap --ro-bind of the same tree, interleaved
# sample by sample (--view-n samples a row). --all runs the execute,
# write and view rows. In the view rows, --bin-old DIR adds an older
# sluiced as one more column (e.g. cd ../old && make build,
# DIR=../old/bin), and --rivals adds codex sandbox and srt, installed from npm under --rivals-dir (default
# ~/.cache/sluice-bench/rivals) on first use; srt also needs ripgrep and
# socat on PATH, and without them it is left out. Every run ends with the
# goals table of the Performance issue's rows that it measured, each with
# its goal and PASS or MISS: pooled /bin/true against bwrap and against
# its floor (one append+fdatasync, then a direct fork/exec, measured in
# the same run), a pooled cat of 4 KiB against bwrap, cold against runc
# run, 8 clients back to back, go test with writes and cache against
# bwrap --bind, and a 200-file changeset committed against its floor;
# beside them, the ledger syncs a pooled call waits for (and the
# --bin-old build's).
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
# libcontainer alone, the yardstick beside the cold rows (bench/libct).
go build -tags seccomp -trimpath -o bin/libct ./bench/libct
exec bin/execbench --bin bin "$@"
