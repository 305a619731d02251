#!/usr/bin/env bash
# Installs what building and testing sluice needs, only what is missing:
# Debian packages through apt (gcc and pkg-config for cgo, libseccomp-dev
# for seccomp, python3 for the demo workspace's tests, systemd for
# systemd-analyze, which checks the units; node and npm for the MCP e2e test
# with the official TypeScript client, unless SLUICE_DEPS_NODE=0), and Go
# modules.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$PATH"
pkgs=(gcc libc6-dev pkg-config libseccomp-dev python3 systemd ${EXTRA_APT_PACKAGES:-})
# node and npm may come from elsewhere (nodesource, nvm): only a missing
# command is installed from apt.
if [ "${SLUICE_DEPS_NODE:-1}" != 0 ]; then
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
fi
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  echo "deps: Go 1.26 or newer is required (https://go.dev/dl/); not found on PATH" >&2
  exit 1
fi
ver=$(go env GOVERSION | sed 's/^go//')
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
if (( major < 1 || (major == 1 && minor < 26) )); then
  echo "deps: Go 1.26 or newer is required; found go$ver" >&2
  exit 1
fi
go mod download
