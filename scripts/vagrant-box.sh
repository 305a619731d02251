#!/usr/bin/env bash
# Builds a Debian 12 (bookworm) Vagrant box for the libvirt provider, offline
# but for the Debian mirror that apt already uses: debootstrap (minbase) onto
# an ext4 partition of a raw disk image, the cloud kernel, GRUB for BIOS, a
# `vagrant` user with Vagrant's insecure public key and passwordless sudo,
# the build dependencies baked in (gcc, libseccomp-dev, make, python3, git)
# and the host's Go toolchain copied to /usr/local/go, so the VM needs no
# network to build sluice. Packed as qcow2 + metadata.json + a Vagrantfile
# stub into a .box (tar).
#
# Usage: scripts/vagrant-box.sh        prints the path of the .box
# The box is cached in $SLUICE_VM_CACHE (default /var/cache/sluice-vagrant),
# keyed by a hash of this script, the Go toolchain and the mirror: a rerun
# with the same key only prints the path. Needs root, debootstrap, qemu-img,
# sfdisk, losetup, mkfs.ext4. Progress goes to stderr.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

CACHE=${SLUICE_VM_CACHE:-/var/cache/sluice-vagrant}
GOROOT_HOST=${SLUICE_VM_GOROOT:-/usr/local/go}
DISK_GB=8
SUITE=bookworm

log() { printf 'vagrant-box: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, loop devices, mount)"
for c in debootstrap qemu-img sfdisk losetup mkfs.ext4 tar sha256sum; do
  command -v "$c" >/dev/null || die "$c not found (apt-get install debootstrap qemu-utils fdisk e2fsprogs)"
done
[ -x "$GOROOT_HOST/bin/go" ] || die "no Go toolchain at $GOROOT_HOST (set SLUICE_VM_GOROOT)"

# The Debian mirror apt uses: the first bookworm (not -security, not
# -updates) entry of deb822 .sources files, else of sources.list.
mirror() {
  local f uri
  if [ -n "${SLUICE_VM_MIRROR:-}" ]; then echo "$SLUICE_VM_MIRROR"; return; fi
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk -v s="$SUITE" '
      /^[[:space:]]*$/ { if (u != "" && ok) { print u; exit } u = ""; ok = 0; next }
      tolower($1) == "uris:" { u = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      END { if (u != "" && ok) print u }' "$f" | head -n 1)
    if [ -n "$uri" ]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk -v s="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++; if ($(i+1) == s) { print $i; exit } }' "$f")
    if [ -n "$uri" ]; then echo "$uri"; return; fi
  done
  die "no $SUITE mirror found in /etc/apt (set SLUICE_VM_MIRROR)"
}
MIRROR=$(mirror)

# Vagrant's insecure public key ships inside the vagrant package.
pubkey=
for k in /usr/share/vagrant/keys/vagrant.pub /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
  /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub /usr/lib/ruby/vendor_ruby/vagrant/keys/vagrant.pub; do
  if [ -f "$k" ]; then pubkey=$k; break; fi
done
[ -n "$pubkey" ] || die "Vagrant's insecure public key (keys/vagrant.pub) not found: is vagrant installed?"

goversion=$("$GOROOT_HOST/bin/go" env GOVERSION)
key=$( { cat "$SELF"; echo "$goversion"; echo "$MIRROR"; cat "$pubkey"; } | sha256sum | cut -c1-12)
NAME=sluice-debian12-$key
BOX=$CACHE/$NAME.box
mkdir -p "$CACHE"
if [ -s "$BOX" ]; then
  log "cached: $BOX"
  echo "$BOX"
  exit 0
fi

# Mount the image only in a mount namespace of our own: a process that
# copies the host's mounts into a new namespace meanwhile (a container, a
# test's unshare) would otherwise keep the filesystem mounted after our
# umount, and the image would be packed with its journal not yet written
# back (GRUB, which ignores the journal, then finds no grub.cfg).
if [ "${SLUICE_VM_BOX_PRIVATE_NS:-}" != 1 ]; then
  exec unshare --mount --propagation private env SLUICE_VM_BOX_PRIVATE_NS=1 "$SELF" "$@"
fi
exec 9>"$CACHE/box.lock"
flock 9
if [ -s "$BOX" ]; then echo "$BOX"; exit 0; fi # built while we waited

log "building $NAME from $MIRROR with $goversion (a few minutes)"
work=$(mktemp -d "$CACHE/build.XXXXXX")
mnt=$work/mnt
disk=$work/disk.raw
loop=
cleanup() {
  local rc=$?
  set +e
  for m in dev/pts dev proc sys; do mountpoint -q "$mnt/$m" && umount -l "$mnt/$m"; done
  mountpoint -q "$mnt" && umount "$mnt"
  [ -n "$loop" ] && losetup -d "$loop"
  rm -rf "$work"
  ((rc == 0)) || log "FAIL (exit $rc)"
  exit $rc
}
trap cleanup EXIT

# A raw disk with one bootable partition from 1 MiB; GRUB's core image goes
# in the gap before it. This kernel does not scan loop devices' partition
# tables (losetup -P gives no p1), so the partition gets a loop device of
# its own at its offset.
truncate -s "${DISK_GB}G" "$disk"
echo 'label: dos
start=2048, type=83, bootable' | sfdisk -q "$disk"
read -r pstart psize < <(sfdisk -d "$disk" | sed -n 's/.*start= *\([0-9]*\), size= *\([0-9]*\).*/\1 \2/p')
loop=$(losetup -f --show -o $((pstart * 512)) --sizelimit $((psize * 512)) "$disk")
mkfs.ext4 -q -L root -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
mkdir -p "$mnt"
mount "$loop" "$mnt"

pkgs=(systemd systemd-sysv udev dbus linux-image-cloud-amd64 grub-pc-bin openssh-server sudo iproute2 rsync
  ca-certificates procps less
  gcc libc6-dev pkg-config libseccomp-dev make python3 git
  bubblewrap runc) # the baselines of bench/exec.sh (SLUICE_VM_BENCH=1): the VM has no apt
mkdir -p "$CACHE/debs"
log "debootstrap --variant=minbase $SUITE (${#pkgs[@]} extra packages)"
debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include="$(IFS=,; echo "${pkgs[*]}")" \
  "$SUITE" "$mnt" "$MIRROR" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

mount -t proc proc "$mnt/proc"
mount -t sysfs sysfs "$mnt/sys"
mount --bind /dev "$mnt/dev"
mount --bind /dev/pts "$mnt/dev/pts"
in_root() { chroot "$mnt" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

log "configuring the guest"
echo sluice-vm >"$mnt/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsluice-vm\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$mnt/etc/hosts"
printf 'LABEL=root / ext4 errors=remount-ro 0 1\n' >"$mnt/etc/fstab"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$MIRROR" "$SUITE" >"$mnt/etc/apt/sources.list.d/debian.sources"
rm -f "$mnt/etc/apt/sources.list"
: >"$mnt/etc/resolv.conf"

# DHCP on the one NIC (net.ifnames=0 keeps it eth0).
cat >"$mnt/etc/systemd/network/10-eth.network" <<'EOF'
[Match]
Name=eth* en*

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
in_root systemctl enable -q systemd-networkd.service
# Nothing on a throwaway test VM needs these, and under emulation each costs.
for u in systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  e2scrub_reap.service fstrim.timer man-db.timer systemd-timesyncd.service; do
  in_root systemctl mask -q "$u" 2>/dev/null || true
done

# The vagrant user: Vagrant's insecure key (vagrant-e2e.sh keeps it:
# the VM is reachable only inside the script's own network namespace).
in_root useradd -m -s /bin/bash -U vagrant
install -d -m 0700 -o 1000 -g 1000 "$mnt/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$pubkey" "$mnt/home/vagrant/.ssh/authorized_keys"
[ "$(in_root id -u vagrant)" = 1000 ] || die "vagrant is not uid 1000"
printf 'vagrant ALL=(ALL) NOPASSWD: ALL\nDefaults:vagrant !requiretty\n' >"$mnt/etc/sudoers.d/vagrant"
chmod 0440 "$mnt/etc/sudoers.d/vagrant"
printf 'UseDNS no\nPasswordAuthentication no\n' >"$mnt/etc/ssh/sshd_config.d/vagrant.conf"

# Go: the host's toolchain (Debian's golang is too old), without its tests.
log "copying $goversion from $GOROOT_HOST"
mkdir -p "$mnt/usr/local"
cp -a "$GOROOT_HOST" "$mnt/usr/local/go"
rm -rf "$mnt/usr/local/go/test" "$mnt/usr/local/go/pkg/obj" "$mnt/usr/local/go/.git"
echo 'export PATH=/usr/local/go/bin:$PATH' >"$mnt/etc/profile.d/go.sh"

# GRUB for BIOS: a core image from the guest's own modules (written into
# the disk below) and a grub.cfg that boots the one kernel on the console.
kver=$(basename "$(ls -1 "$mnt"/boot/vmlinuz-* | sort -V | tail -n 1)" | sed 's/^vmlinuz-//')
[ -f "$mnt/boot/initrd.img-$kver" ] || die "no initrd for $kver"
mkdir -p "$mnt/boot/grub"
cat >"$mnt/boot/grub/grub.cfg" <<EOF
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
set default=0
menuentry 'Debian 12 ($kver)' {
  insmod part_msdos
  insmod ext2
  set root=(hd0,msdos1)
  linux /boot/vmlinuz-$kver root=/dev/vda1 ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0
  initrd /boot/initrd.img-$kver
}
EOF
# The embedded config puts GRUB on the serial console before anything can
# fail, so the VM's serial log shows GRUB's own errors too.
printf 'serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\n' >"$mnt/boot/grub/early.cfg"
in_root grub-mkimage -O i386-pc -o /boot/grub/core.img -p '(hd0,msdos1)/boot/grub' -c /boot/grub/early.cfg \
  biosdisk part_msdos ext2 normal linux configfile serial terminal echo test
cp "$mnt/usr/lib/grub/i386-pc/boot.img" "$work/boot.img"
cp "$mnt/boot/grub/core.img" "$work/core.img"
cp -a "$mnt/usr/lib/grub/i386-pc" "$mnt/boot/grub/"

in_root apt-get clean
rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/debconf/*-old "$mnt"/var/log/*.log "$mnt/etc/machine-id"
: >"$mnt/etc/machine-id" # systemd makes a fresh one at first boot

# Nothing the packages started may still run in the guest's root.
for p in /proc/[0-9]*; do
  if [ "$(readlink "$p/root" 2>/dev/null)" = "$mnt" ]; then
    log "a process of the guest still runs: ${p#/proc/} $(tr '\0' ' ' <"$p/cmdline")"
    kill -KILL "${p#/proc/}" 2>/dev/null || true
  fi
done
for m in dev/pts dev proc sys; do umount "$mnt/$m"; done
fstrim "$mnt" 2>/dev/null || true # deleted blocks become holes: a smaller image
umount "$mnt"
# A clean unmount has written the journal back; anything else would boot
# into GRUB's prompt.
if dumpe2fs -h "$loop" 2>/dev/null | grep -q '^Filesystem features:.*needs_recovery'; then
  die "the guest filesystem is still in use after umount (its journal is not written back)"
fi
e2fsck -fn "$loop" >/dev/null 2>&1 || die "the guest filesystem does not check clean (e2fsck -fn $loop)"
losetup -d "$loop"
loop=

# GRUB for BIOS without grub-bios-setup (it wants to probe a real disk):
# boot.img's code into the MBR (the first 440 bytes; the partition table
# stays) and core.img into sectors 1.., in the gap before the partition.
# That is all grub-bios-setup would write for this layout: boot.img loads
# core.img's first sector from LBA 1 by default, and that sector (diskboot)
# loads the rest from LBA 2 on, with the length grub-mkimage wrote into it.
cores=$(stat -c %s "$work/core.img")
(((cores + 511) / 512 < pstart - 1)) || die "core.img ($cores bytes) does not fit before the partition"
dd if="$work/boot.img" of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$disk" bs=512 seek=1 conv=notrunc status=none

log "packing"
mkdir -p "$work/box"
qemu-img convert -c -O qcow2 -o compression_type=zstd "$disk" "$work/box/box.img" 2>/dev/null ||
  qemu-img convert -c -O qcow2 "$disk" "$work/box/box.img"
rm -f "$disk"
printf '{"provider":"libvirt","format":"qcow2","virtual_size":%d}\n' "$DISK_GB" >"$work/box/metadata.json"
cat >"$work/box/Vagrantfile" <<'EOF'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
EOF
tar -C "$work/box" -cf "$work/$NAME.box" metadata.json Vagrantfile box.img
mv "$work/$NAME.box" "$BOX"
# Older boxes of this builder are stale now.
find "$CACHE" -maxdepth 1 -name 'sluice-debian12-*.box' ! -name "$NAME.box" -delete
log "built $BOX ($(du -h "$BOX" | cut -f1))"
echo "$BOX"
