#!/usr/bin/env bash
# Installs sluice as a systemd service (docs/operating.md), or removes it.
#
#   scripts/install.sh [--prefix DIR] [--bin DIR]   install or upgrade
#   scripts/install.sh --uninstall [--prefix DIR]   remove binaries and units
#
# --prefix  where binaries and the README go (default /usr/local: bin/, share/doc/sluice/)
# --bin     take sluiced, sluice, sluice-init and sluice-helper from DIR (default: bin/,
#           built with 'make build' first when any is missing)
# DESTDIR=  install into that directory instead of / (for packaging and
#           tests): nothing outside it is touched; no group is made and
#           systemd is not told.
#
# Idempotent: run it again to upgrade. /etc/sluice/manifest.json is never
# overwritten; --uninstall keeps /etc/sluice, /var/lib/sluice (the audit
# ledger), /srv/sluice and the group.
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

prefix=/usr/local
bindir=""
uninstall=false
while (($#)); do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --bin) bindir=${2:?--bin needs a directory}; shift 2 ;;
    --bin=*) bindir=${1#--bin=}; shift ;;
    --uninstall) uninstall=true; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install: --prefix must be absolute: $prefix" >&2; exit 2 ;; esac
prefix=${prefix%/}
dest=${DESTDIR:-}
dest=${dest%/}
if [ -z "$dest" ] && [ "$(id -u)" != 0 ]; then
  echo "install: run as root (sluiced runs as root to create containers), or set DESTDIR= to stage the files" >&2
  exit 1
fi
# systemd is running here and we install into the live system.
live_systemd=false
if [ -z "$dest" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  live_systemd=true
fi

say() { printf 'install: %s\n' "$*"; }

# put MODE SRC DST: copy SRC to DESTDIR/DST (a new inode, so a running
# binary is not written to) unless it is already the same.
put() {
  local mode=$1 src=$2 dst=$dest$3
  mkdir -p "$(dirname "$dst")"
  if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
    chmod "$mode" "$dst"
    say "unchanged $3"
    return
  fi
  local verb=installed
  [ -e "$dst" ] && verb=updated
  install -m "$mode" "$src" "$dst.sluice-new"
  mv -f "$dst.sluice-new" "$dst"
  say "$verb $3"
}

# mkdirm MODE DIR: make DESTDIR/DIR with MODE (the mode is set again if it exists).
mkdirm() {
  local mode=$1 d=$dest$2
  if [ -d "$d" ]; then
    chmod "$mode" "$d"
  else
    mkdir -p "$d"
    chmod "$mode" "$d"
    say "created $2 (mode $mode)"
  fi
}

remove() {
  local p=$dest$1
  if [ -e "$p" ] || [ -L "$p" ]; then
    rm -f "$p"
    say "removed $1"
  fi
}

bins=(sluiced sluice sluice-init sluice-helper)
units=(sluiced.socket sluiced.service)

if $uninstall; then
  if $live_systemd; then
    systemctl disable --now sluiced.socket sluiced.service 2>/dev/null || true
    say "stopped and disabled sluiced.socket and sluiced.service"
  fi
  for b in "${bins[@]}"; do remove "$prefix/bin/$b"; done
  for u in "${units[@]}"; do remove "/etc/systemd/system/$u"; done
  remove /etc/tmpfiles.d/sluice.conf
  # The drop-in sluice init --install writes (the unit it changes is gone).
  remove /etc/systemd/system/sluiced.service.d/50-sluice-init.conf
  rmdir "$dest/etc/systemd/system/sluiced.service.d" 2>/dev/null || true
  remove "$prefix/share/doc/sluice/README.md"
  for doc in docs/*.md; do remove "$prefix/share/doc/sluice/$doc"; done
  rmdir "$dest$prefix/share/doc/sluice/docs" "$dest$prefix/share/doc/sluice" 2>/dev/null || true
  if $live_systemd; then
    systemctl daemon-reload
    say "systemctl daemon-reload"
  fi
  say "kept /etc/sluice (the manifest), /var/lib/sluice (the audit ledger), /srv/sluice and group sluice; remove them by hand if you want them gone"
  exit 0
fi

# Binaries: from --bin, or bin/ (built when missing).
if [ -z "$bindir" ]; then
  bindir=bin
  for b in "${bins[@]}"; do
    if [ ! -x "bin/$b" ]; then
      say "bin/$b missing: make build"
      make build
      break
    fi
  done
fi
for b in "${bins[@]}"; do
  [ -x "$bindir/$b" ] || { echo "install: $bindir/$b not found or not executable (make build)" >&2; exit 1; }
done

for b in "${bins[@]}"; do put 0755 "$bindir/$b" "$prefix/bin/$b"; done

# Units, with the binaries' and README's paths under --prefix.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for u in "${units[@]}"; do
  sed -e "s|/usr/local/bin/|$prefix/bin/|g" -e "s|/usr/local/share/doc/|$prefix/share/doc/|g" "scripts/$u" >"$tmp/$u"
  put 0644 "$tmp/$u" "/etc/systemd/system/$u"
done
put 0644 scripts/sluice.tmpfiles /etc/tmpfiles.d/sluice.conf
put 0644 README.md "$prefix/share/doc/sluice/README.md"
for doc in docs/*.md; do put 0644 "$doc" "$prefix/share/doc/sluice/$doc"; done

# The group whose members may connect (the socket is root:sluice 0660).
if [ -z "$dest" ]; then
  if getent group sluice >/dev/null; then
    say "group sluice exists"
  else
    groupadd --system sluice
    say "created group sluice"
  fi
else
  say "skipped group sluice (DESTDIR): create it with groupadd --system sluice"
fi

# State: the audit ledger and the write journal, root only.
mkdirm 0700 /var/lib/sluice

# The example manifest, never overwritten. It names uids and paths, so it
# is not for every local user: /etc/sluice is 0750 root:sluice and the
# manifest 0640 (an existing one keeps its mode, less any bits for others).
mkdirm 0750 /etc/sluice
if [ -e "$dest/etc/sluice/manifest.json" ]; then
  chmod o-rwx "$dest/etc/sluice/manifest.json"
  say "kept /etc/sluice/manifest.json (never overwritten; the example is profiles/examples/service.json)"
else
  put 0640 profiles/examples/service.json /etc/sluice/manifest.json
fi
if [ -z "$dest" ]; then
  chgrp sluice /etc/sluice /etc/sluice/manifest.json
fi
# The example's workspace: its tools' roots and mounts are under
# /srv/sluice/workspace. Made (and seeded with the demo's calc.py and its
# test) only when missing, so the example manifest loads.
if [ ! -e "$dest/srv/sluice/workspace" ]; then
  mkdirm 0755 /srv/sluice
  mkdirm 0755 /srv/sluice/workspace
  mkdirm 0755 /srv/sluice/workspace/src
  mkdirm 0755 /srv/sluice/workspace/tests
  put 0644 profiles/examples/workspace/src/calc.py /srv/sluice/workspace/src/calc.py
  put 0644 profiles/examples/workspace/tests/test_calc.py /srv/sluice/workspace/tests/test_calc.py
else
  say "kept /srv/sluice/workspace"
fi

if $live_systemd; then
  systemctl daemon-reload
  say "systemctl daemon-reload"
  systemd-tmpfiles --create /etc/tmpfiles.d/sluice.conf
  say "systemd-tmpfiles --create /etc/tmpfiles.d/sluice.conf (/run/sluice 0750 root:sluice)"
  if systemctl is-active --quiet sluiced.service; then
    say "sluiced is running the previous binaries: systemctl restart sluiced (calls in flight get the shutdown grace)"
  fi
elif [ -z "$dest" ]; then
  say "systemd is not running here: the units are installed but nothing was started"
fi

cat <<EOF

Next:
  1. Edit /etc/sluice/manifest.json: principals.agent.uids are the uids of
     the agents' processes (65534 is a placeholder); tools' roots and mounts
     are relative to "base" (/srv/sluice). A workspace elsewhere needs
     ReadWritePaths= (and, under /home, ProtectHome=) in a drop-in:
     systemctl edit sluiced.service
  2. Let the agents' users connect: usermod -aG sluice USER (they must
     reach /run/sluice/sluice.sock; the manifest decides what they may do).
  3. systemctl enable --now sluiced.socket
     (sluiced starts on the first connection; also
      systemctl enable --now sluiced.service to start it at boot, warm)
  4. sluice health; journalctl -u sluiced -f
EOF
