#!/usr/bin/env bash
# Work in progress (not yet a make target, not run by CI): sluice end to
# end in a Debian 12 VM under a real systemd
# (docs/operating.md). Builds (or takes from the cache) a local box, starts libvirt
# inside a network namespace of its own, brings the VM up with Vagrant,
# copies the source tree in (rsync), provisions and builds inside, runs
# scripts/vm-inside.sh in the VM as root, and always destroys the VM and
# cleans up. Any error fails the run (non-zero exit); nothing is skipped.
#
# Usage: scripts/vagrant-e2e.sh          the whole run
#        scripts/vagrant-e2e.sh ssh      a shell in a VM kept by SLUICE_VM_KEEP=1
#        scripts/vagrant-e2e.sh destroy  destroy a kept VM and clean up
#
# Networking: libvirtd (with the management network's bridge and dnsmasq)
# and every vagrant command run inside the network namespace $SLUICE_VM_NETNS
# that this script creates and deletes; it holds only lo and that bridge,
# and the network has no forward mode, so the VM can reach nothing but the
# namespace and nothing outside it can reach the VM. SLUICE_VM_NETNS=0 uses
# a libvirtd already running on the host (its network, its rules) instead.
#
# Environment (see docs/testing.md, "Running the VM e2e"):
#   SLUICE_VM_BOX      a box name to use instead of building one (e.g. debian/bookworm64; needs internet)
#   SLUICE_VM_DRIVER   qemu (TCG, default) | kvm        SLUICE_VM_MEMORY (MiB, 3072)  SLUICE_VM_CPUS (2)
#   SLUICE_VM_KEEP     1: leave the VM running at the end (then: scripts/vagrant-e2e.sh ssh | destroy)
#   SLUICE_VM_GOCACHE  0: no warm build cache from the host (a cold build inside: slow under TCG)
#   SLUICE_VM_NETNS    namespace name (default sluice-vm), or 0 (see above)
#   SLUICE_VM_CACHE    box, build cache and run state (default /var/cache/sluice-vagrant)
#   SLUICE_VM_TIMEOUT  seconds for each phase (default 900)
#   SLUICE_VM_INSIDE_TIMEOUT  seconds for the inside script (default 1800: under TCG
#                      the e2e and sandbox suites alone take 8-15 min)
#   SLUICE_VM_BENCH    1: also run bench/exec.sh in the VM (short; not in CI)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1

CACHE=${SLUICE_VM_CACHE:-/var/cache/sluice-vagrant}
RUN=$CACHE/run
NETNS=${SLUICE_VM_NETNS:-sluice-vm}
KEEP=${SLUICE_VM_KEEP:-0}
PHASE_TIMEOUT=${SLUICE_VM_TIMEOUT:-900}
INSIDE_TIMEOUT=${SLUICE_VM_INSIDE_TIMEOUT:-1800}
DOMAIN_PREFIX=sluice-vm-
DOMAIN=${DOMAIN_PREFIX}default
SERIAL_LOG=/var/log/libvirt/qemu/${DOMAIN}-serial.log
cmd=${1:-run}

log() { printf 'vagrant-e2e: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (libvirt, network namespaces, loop devices)"
case $cmd in run | ssh | destroy) ;; *) die "usage: $0 [run|ssh|destroy]" ;; esac

export VAGRANT_CWD=$SRC
export VAGRANT_VAGRANTFILE=Vagrantfile
export VAGRANT_DOTFILE_PATH=$RUN/dot
export VAGRANT_DEFAULT_PROVIDER=libvirt
export VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_BOX_UPDATE_CHECK_DISABLE=1 VAGRANT_NO_COLOR=1
export SLUICE_VM_DRIVER=${SLUICE_VM_DRIVER:-qemu}
export SLUICE_VM_DOMAIN_PREFIX=$DOMAIN_PREFIX
export SLUICE_VM_SERIAL_LOG=$SERIAL_LOG
export LIBVIRT_DEFAULT_URI=qemu:///system

INNET=()
[ "$NETNS" = 0 ] || INNET=(ip netns exec "$NETNS")
# vagrant in the namespace; vagrant_t also bounded by the phase timeout.
# Its output: without the progress bars Vagrant redraws with \r even into
# a pipe, each line prefixed with the seconds since the phase began.
noprogress() {
  local l
  stdbuf -o0 tr '\r' '\n' | sed -u -e 's/\x1b\[K//g' -e '/Progress: /d' -e '/^$/d' |
    while IFS= read -r l; do printf '[%4d] %s\n' $((SECONDS - PHASE_S0)) "$l"; done
}
vagrant_() { "${INNET[@]}" vagrant "$@" 2>&1 | noprogress; }
vagrant_t() { timeout --kill-after=30 "${VT_TIMEOUT:-$PHASE_TIMEOUT}" "${INNET[@]}" vagrant "$@" 2>&1 | noprogress; }
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
netns_exists() { [ "$NETNS" != 0 ] && [ -e "/run/netns/$NETNS" ]; }

# ---- timings: each phase's seconds, printed at exit whatever happened. A
# failing command ends the script (set -e); finish records the phase it
# was in.
declare -a T_NAME=() T_SECS=() T_NOTE=()
CURRENT= CURRENT_NOTE= PHASE_T0=0 PHASE_S0=0
record() { T_NAME+=("$CURRENT") T_SECS+=($(($(date +%s) - PHASE_T0))) T_NOTE+=("$CURRENT_NOTE${1:+ $1}"); }
phase() { # phase NAME NOTE CMD...
  local rc
  CURRENT=$1 CURRENT_NOTE=$2 PHASE_T0=$(date +%s) PHASE_S0=$SECONDS
  shift 2
  log "== $CURRENT"
  "$@"
  rc=$? # reached only with set +e (in finish), or on success
  record "$( ((rc == 0)) || echo "(FAILED, exit $rc)")"
  ((rc != 0)) || CURRENT=
  return $rc
}
summary() {
  local i total=0
  echo "== vagrant-e2e timing (driver $SLUICE_VM_DRIVER, ${BOX_NOTE:-no box yet})"
  for i in "${!T_NAME[@]}"; do
    printf '  %-14s %5d s  %s\n' "${T_NAME[$i]}" "${T_SECS[$i]}" "${T_NOTE[$i]}"
    total=$((total + T_SECS[i]))
  done
  printf '  %-14s %5d s\n' total "$total"
}

# ---- libvirt: our own libvirtd inside our own network namespace. What
# this script started is listed in $RUN/started, so a kept VM's daemons
# are stopped by the run or the `destroy` that comes after it.
STARTED_FILE=$RUN/started
started() { echo "$1" >>"$STARTED_FILE"; }
start_libvirt() {
  if [ "$NETNS" != 0 ]; then
    netns_exists || ip netns add "$NETNS"
    ip -n "$NETNS" link set lo up
  fi
  if ! pid_alive /run/virtlogd.pid; then virtlogd -d; started virtlogd; fi
  if ! pid_alive /run/virtlockd.pid; then virtlockd -d; started virtlockd; fi
  if pid_alive /run/libvirtd.pid; then
    local in
    in=$(ip netns identify "$(cat /run/libvirtd.pid)" || true)
    if [ "$NETNS" != 0 ] && [ "$in" != "$NETNS" ]; then
      die "a libvirtd (pid $(cat /run/libvirtd.pid)) already runs outside the namespace $NETNS: its networks would be the host's. Stop it, or set SLUICE_VM_NETNS=0 to use it"
    fi
  else
    [ "$NETNS" != 0 ] || die "SLUICE_VM_NETNS=0 but no libvirtd is running"
    # libvirtd runs in the mount namespace `ip netns exec` makes. There
    # /dev/kvm, when the host has one, is a node of its own, 0660 root:kvm as
    # udev would make it: libvirt checks that qemu's user can open it, and
    # with the host's 0600 root node it finds KVM "not available now" after
    # its probe found it, throws its capability cache away and probes qemu
    # again on every domain definition (about 50 s each here). The host's
    # /dev/kvm is not touched.
    ip netns exec "$NETNS" sh -c '
      set -e
      if [ -c /dev/kvm ] && getent group kvm >/dev/null; then
        d=$(mktemp -d /tmp/sluice-vm-dev.XXXXXX)
        mount -t tmpfs -o size=64k,mode=0755 sluice-vm-dev "$d"
        mknod -m 0660 "$d/kvm" c $((0x$(stat -c %t /dev/kvm))) $((0x$(stat -c %T /dev/kvm)))
        chgrp kvm "$d/kvm"
        mount --bind "$d/kvm" /dev/kvm
        umount -l "$d"
        rmdir "$d"
      fi
      exec libvirtd -d'
    started libvirtd
  fi
  local i
  for i in $(seq 100); do virsh -q version >/dev/null 2>&1 && break; sleep 0.1; done
  virsh -q version >/dev/null || die "libvirtd does not answer"
  # libvirt's own "default" network is never wanted here.
  virsh -q net-autostart default --disable >/dev/null 2>&1 || true
  mkdir -p /var/lib/libvirt/images
  virsh -q pool-info default >/dev/null 2>&1 || virsh -q pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
  [ "$(virsh -q pool-info default | awk '$1 == "State:" { print $2 }')" = running ] || virsh -q pool-start default >/dev/null
}

stop_libvirt() {
  local s p i
  for s in libvirtd virtlockd virtlogd; do
    grep -qx "$s" "$STARTED_FILE" 2>/dev/null || continue
    if pid_alive /run/$s.pid; then
      p=$(cat /run/$s.pid)
      kill -TERM "$p"
      for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$p" 2>/dev/null; then log "$s (pid $p) ignored SIGTERM; killing it"; kill -KILL "$p"; fi
    fi
  done
  rm -f "$STARTED_FILE"
  if netns_exists; then
    # Whatever our libvirtd left in our namespace (dnsmasq, a qemu whose
    # destroy failed) was started by this script.
    for p in $(ip netns pids "$NETNS"); do kill -KILL "$p" 2>/dev/null || true; done
    for i in $(seq 50); do [ -z "$(ip netns pids "$NETNS")" ] && break; sleep 0.1; done
    ip netns del "$NETNS"
  fi
}

# A domain, a vagrant state dir or a management network left by an earlier
# run (killed, or kept): removed, so every run starts from a fresh VM.
remove_stale_vm() {
  if virsh -q dominfo "$DOMAIN" >/dev/null 2>&1; then
    log "removing the earlier VM $DOMAIN"
    virsh -q destroy "$DOMAIN" >/dev/null 2>&1 || true
    virsh -q undefine "$DOMAIN" --remove-all-storage >/dev/null 2>&1 || virsh -q undefine "$DOMAIN" >/dev/null
  fi
  if virsh -q net-info sluice-vm >/dev/null 2>&1; then
    virsh -q net-destroy sluice-vm >/dev/null 2>&1 || true
    virsh -q net-undefine sluice-vm >/dev/null 2>&1 || true
  fi
  rm -rf "$VAGRANT_DOTFILE_PATH"
}

destroy_vm() {
  if ! vagrant_t destroy -f; then
    log "vagrant destroy failed; removing the domain with virsh"
    remove_stale_vm
    return 1
  fi
  if virsh -q dominfo "$DOMAIN" >/dev/null 2>&1; then
    log "the domain $DOMAIN is still defined after vagrant destroy"
    remove_stale_vm
    return 1
  fi
}

mkdir -p "$RUN"
if [ "$cmd" != run ]; then
  export SLUICE_VM_BOX=${SLUICE_VM_BOX:-$(cat "$RUN/box" 2>/dev/null || echo sluice-debian12)}
  export SLUICE_VM_LOCAL_BOX=${SLUICE_VM_LOCAL_BOX:-$(cat "$RUN/local" 2>/dev/null || echo 1)}
  if [ "$cmd" = ssh ]; then
    [ "$NETNS" = 0 ] || netns_exists || die "no namespace $NETNS: no VM kept"
    exec "${INNET[@]}" vagrant ssh
  fi
  rc=0
  destroy_vm || rc=1
  stop_libvirt || rc=1
  log "destroyed (exit $rc)"
  exit $rc
fi

# ---- one run at a time: the namespace, the domain and the state are shared
exec 8>"$CACHE/e2e.lock"
flock -n 8 || die "another vagrant-e2e holds $CACHE/e2e.lock"

VM_UP=0
finish() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -z "$CURRENT" ] || record "(FAILED, exit $rc)"
  local failed=$CURRENT
  if ((VM_UP)) && [ "$KEEP" = 1 ]; then
    log "SLUICE_VM_KEEP=1: the VM $DOMAIN is left running (libvirtd in the namespace $NETNS)"
    log "  a shell:  $SRC/scripts/vagrant-e2e.sh ssh"
    log "  clean up: $SRC/scripts/vagrant-e2e.sh destroy"
  else
    if ((VM_UP)); then phase destroy "vagrant destroy -f" destroy_vm || { ((rc)) || rc=1; failed=${failed:-destroy}; }; fi
    stop_libvirt || { ((rc)) || rc=1; failed=${failed:-cleanup}; }
  fi
  [ ! -d "$RUN/modcache" ] || chmod -R u+w "$RUN/modcache"
  rm -rf "$RUN/modcache" "$RUN/hostbin"
  summary
  if ((rc == 0)); then
    log "ok"
  else
    if [ "$failed" = up ] && [ -s "$SERIAL_LOG" ]; then
      log "the VM's serial console (last 40 lines of $SERIAL_LOG):"
      tail -n 40 "$SERIAL_LOG" >&2
    fi
    log "FAILED (exit $rc) in: ${failed:-setup}"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- host packages, only what is missing
host_packages() {
  local pkgs=(vagrant vagrant-libvirt libvirt-daemon-system qemu-system-x86 qemu-utils debootstrap dnsmasq-base
    fdisk e2fsprogs rsync openssh-client iproute2) need=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  ((${#need[@]})) || return 0
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}
phase "host packages" "apt, only what is missing" host_packages

# ---- what the VM needs to build without a network: the modules (a file://
# GOPROXY with exactly the modules the build needs, from the host's cache)
# and, unless SLUICE_VM_GOCACHE=0, a warm build cache: under TCG a cold
# build of the daemon takes many minutes; with the cache, `make build`
# inside compiles only what differs and links. Cache entries are keyed by
# content (toolchain, flags, sources, C compiler), so one that does not fit
# is a miss, never a wrong object.
host_prep() {
  # The host's build dependencies (libseccomp-dev, gcc…) and its own module
  # cache, as `make` gets them: a fresh machine may have neither yet.
  scripts/deps.sh
  local hostmods
  hostmods=$(go env GOMODCACHE)
  [ ! -d "$RUN/modcache" ] || chmod -R u+w "$RUN/modcache"
  rm -rf "$RUN/modcache"
  GOMODCACHE=$RUN/modcache GOPROXY="file://$hostmods/cache/download" GOSUMDB=off GOFLAGS=-mod=readonly \
    go mod download
  export SLUICE_VM_GOPROXY=$RUN/modcache/cache/download
  if [ "${SLUICE_VM_GOCACHE:-1}" != 0 ]; then
    local gc=$CACHE/gocache
    # It grows with every change of the tree: start over past 2 GiB.
    if [ -d "$gc" ] && (($(du -sm "$gc" | cut -f1) > 2048)); then rm -rf "$gc"; fi
    GOCACHE=$gc GOFLAGS=-buildvcs=false go build -tags seccomp -trimpath -o "$RUN/hostbin/" ./cmd/sluiced ./cmd/sluice
    # and the test binaries vm-inside.sh runs (-trimpath: the tree is at
    # another path in the VM, /vagrant)
    GOCACHE=$gc GOFLAGS=-buildvcs=false go test -c -tags seccomp -trimpath -o "$RUN/hostbin/" ./e2e ./sandbox
    if [ "${SLUICE_VM_BENCH:-0}" = 1 ]; then
      GOCACHE=$gc GOFLAGS=-buildvcs=false go build -trimpath -o "$RUN/hostbin/" ./bench/execbench
    fi
    export SLUICE_VM_GOCACHE=$gc
  else
    unset SLUICE_VM_GOCACHE
    CURRENT_NOTE="module proxy dir; no build cache (SLUICE_VM_GOCACHE=0)"
  fi
}
phase "host prep" "module proxy dir, warm build cache" host_prep

phase libvirt "virtlogd, virtlockd; libvirtd in netns $NETNS; pool" start_libvirt

# ---- the box
if [ -z "${SLUICE_VM_BOX:-}" ]; then
  export SLUICE_VM_LOCAL_BOX=1
  build_box() {
    timeout "$PHASE_TIMEOUT" scripts/vagrant-box.sh >"$RUN/box.path" 2> >(tee "$RUN/box.log" >&2)
    wait # for tee
    if grep -q '^vagrant-box: cached' "$RUN/box.log"; then CURRENT_NOTE+=" (cached)"; fi
  }
  phase "box build" "scripts/vagrant-box.sh" build_box
  box=$(cat "$RUN/box.path")
  export SLUICE_VM_BOX=$(basename "$box" .box)
  add_box() {
    local b
    # Earlier boxes of the builder, in Vagrant and as libvirt volumes.
    for b in $("${INNET[@]}" vagrant box list 2>/dev/null | awk '$1 ~ /^sluice-debian12-/ { print $1 }' | sort -u); do
      [ "$b" = "$SLUICE_VM_BOX" ] || "${INNET[@]}" vagrant box remove --force --all "$b" >/dev/null
    done
    for b in $(virsh -q vol-list default 2>/dev/null | awk '$1 ~ /^sluice-debian12-/ { print $1 }'); do
      [[ $b == "$SLUICE_VM_BOX"_* ]] || virsh -q vol-delete "$b" --pool default >/dev/null
    done
    if "${INNET[@]}" vagrant box list 2>/dev/null | awk '{ print $1 }' | grep -qx "$SLUICE_VM_BOX"; then
      CURRENT_NOTE+=" (already added)"
    else
      vagrant_t box add --force --name "$SLUICE_VM_BOX" "$box"
    fi
  }
  phase "box add" "vagrant box add" add_box
  BOX_NOTE="local box $SLUICE_VM_BOX"
else
  export SLUICE_VM_LOCAL_BOX=${SLUICE_VM_LOCAL_BOX:-0}
  BOX_NOTE="box $SLUICE_VM_BOX"
fi
echo "$SLUICE_VM_BOX" >"$RUN/box"
echo "$SLUICE_VM_LOCAL_BOX" >"$RUN/local"

# ---- the VM
remove_stale_vm
rm -f "$SERIAL_LOG"
VM_UP=1
phase up "boot to ssh, rsync of the tree" vagrant_t up --provider=libvirt --no-provision
phase provision "deps check, go mod download from file://" vagrant_t provision
VT_TIMEOUT=$INSIDE_TIMEOUT phase "inside script" "scripts/vm-inside.sh as root in the VM" \
  vagrant_t ssh -c "sudo SLUICE_VM_BENCH=${SLUICE_VM_BENCH:-0} bash -c '. /etc/sluice-vm.env && cd /vagrant && exec scripts/vm-inside.sh'"
