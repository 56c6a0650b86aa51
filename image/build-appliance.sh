#!/usr/bin/env bash
# Builds the bootvol appliance disk image from Debian packages only (see image/README.md):
# a GPT disk whose FAT ESP boots (systemd-boot under UEFI, syslinux under BIOS) a kernel and an
# initramfs that is the whole root tree (systemd as PID 1, no root partition), plus an ext4 data
# partition (PARTLABEL=bootvol-data) for /etc/bootvol and /var/lib/bootvol.
#
#   image/build-appliance.sh [--out DIR] [--bootvol BINARY] [--kernel PACKAGE] [--level N]
#                            [--mirror URL] [--security-mirror URL] [--refresh] [--assemble-only]
#                            [--root-only] [--measure]
#
#   --out DIR            outputs (default target/appliance): bootvol-appliance.img (raw disk),
#                        bootvol-appliance.img.zst, manifest.txt (package=version), vmlinuz,
#                        initrd.img, SHA256SUMS, figures.txt, build-tools.txt (the build
#                        machine's tools that wrote bytes into the disk)
#   --bootvol BINARY     the bootvol binary (default target/release/bootvol; it is stripped)
#   --kernel PACKAGE     kernel metapackage (default linux-image-cloud-amd64: VMs and the figures
#                        below; real hardware: linux-image-amd64)
#   --level N            zstd level of the initramfs (default 19; the reproducibility check uses 3)
#   --mirror URL         Debian mirror (default http://deb.debian.org/debian)
#   --security-mirror URL  (default http://deb.debian.org/debian-security)
#   --refresh            rebuild the root tree even if the cache holds one for these inputs
#   --assemble-only      do not run mmdebstrap: fail unless the cached root tree exists
#   --root-only          stage 1 only (needs no bootvol binary: CI runs it beside cargo build)
#   --measure            then boot the image under QEMU (TCG, SeaBIOS and OVMF, -smp 2 -m 1024,
#                        user-mode network) and add power-on -> "serving" to the figures
#
# Stage 1 (about 1-2 min, cached under target/appliance-cache/ keyed by its inputs: the options,
# the package list, apt's candidate versions of those packages on this machine, the mirrors and
# SOURCE_DATE_EPOCH) runs mmdebstrap. Stage 2 (assembly, 10-70 s by --level) adds bootvol and
# the appliance's files to a copy of that tree, prunes it, and writes the initramfs, the ESP, the
# data partition and the disk, all without loop devices or mounts. Run as root on Debian 12; it
# installs what it needs with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/appliance
cache=target/appliance-cache
bootvol_bin=target/release/bootvol
kernel_pkg=linux-image-cloud-amd64
level=19
mirror=http://deb.debian.org/debian
security_mirror=http://deb.debian.org/debian-security
refresh=0
assemble_only=0
root_only=0
measure=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --bootvol) bootvol_bin=$2; shift 2 ;;
        --kernel) kernel_pkg=$2; shift 2 ;;
        --level) level=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --security-mirror) security_mirror=$2; shift 2 ;;
        --refresh) refresh=1; shift ;;
        --assemble-only) assemble_only=1; shift ;;
        --root-only) root_only=1; shift ;;
        --measure) measure=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-appliance: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "== build-appliance [$(( $(date +%s) - t_start ))s]: $*"; }
die() { echo "build-appliance: $*" >&2; exit 1; }
t_start=$(date +%s)
[ "$(id -u)" -eq 0 ] || die "run me as root (mmdebstrap --mode=root, file ownership in the tree)"

# Everything in the image is dated here: file times, the FAT and ext4 time stamps, mtools.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
export LC_ALL=C TZ=UTC
umask 022

# The fixed identities that make two builds of the same inputs bit-identical.
DISK_GUID=b0075e1f-0000-4000-8000-000000000001
ESP_GUID=b0075e1f-0000-4000-8000-000000000002
DATA_GUID=b0075e1f-0000-4000-8000-000000000003
DATA_FS_UUID=b0075e1f-0000-4000-8000-000000000004
DATA_HASH_SEED=b0075e1f-0000-4000-8000-000000000005
ESP_VOLUME_ID=B0071001
# Sizes (MiB). The ESP holds two slots (kernel ~14 MiB + initrd <= 40 MiB each at -19, 46 MiB
# at -3 as CI builds it) and the loaders (shim and GRUB 5 MiB): 120 MiB was full at -3.
ESP_MIB=160
DATA_MIB=64

# --- build-host tools -----------------------------------------------------------------------
need_pkgs=()
need() { command -v "$1" > /dev/null 2>&1 || need_pkgs+=("$2"); }
need mmdebstrap mmdebstrap
need mcopy mtools
need mkfs.vfat dosfstools
need sfdisk fdisk
need mkfs.ext4 e2fsprogs
need cpio cpio
need zstd zstd
need depmod kmod
need strip binutils
[ -f /usr/lib/syslinux/mbr/gptmbr.bin ] || need_pkgs+=(syslinux-common)
command -v syslinux > /dev/null 2>&1 || need_pkgs+=(syslinux)
[ -f /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || need_pkgs+=(systemd-boot-efi)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    say "installing on this machine: ${need_pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi
[ "$root_only" = 1 ] || [ -x "$bootvol_bin" ] || die "$bootvol_bin is missing: cargo build --release --locked first (or --bootvol)"

mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)

# --- stage 1: the root tree from Debian (cached) --------------------------------------------
# What the appliance runs; everything else comes as a dependency. dbus: systemd-logind needs it
# to turn the power button into a clean shutdown. openssl: the API's self-signed certificate
# (link-config, first boot). signify-openbsd: bootvol-update's signature check (Ed25519, against
# image/update-keys/). sbsigntool: sbsign, which signs iPXE for Secure Boot nodes when
# [secure_boot] is set. The first admin password is bootvol's own. usr-is-merged keeps usrmerge
# (and perl) out where it can; what the essential set still drags in is purged below.
PACKAGES=(
    usr-is-merged systemd systemd-sysv udev kmod e2fsprogs iproute2 procps
    "$kernel_pkg" ipxe systemd-boot openssl signify-openbsd sbsigntool dbus
)
# Purged after the bootstrap: perl (about 50 MB), usrmerge, which the essential set still pulls
# in, and what only they need; nothing at run time uses them. (The essential set has no apt
# inside the tree: dpkg, with the whole list.)
PURGE=(
    usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl
    perl perl-modules-5.36 libperl5.36 libgdbm-compat4
)
# The kernel package depends on an initramfs generator; the appliance's initramfs is its whole
# tree, made by this script, so the generator goes too (dpkg then records the kernel's
# dependency as unmet, which nothing in a RAM appliance ever checks).
PURGE_FORCED=(initramfs-tools initramfs-tools-core klibc-utils libklibc)
SOURCES=(
    "deb $mirror bookworm main"
    "deb $mirror bookworm-updates main"
    "deb $security_mirror bookworm-security main"
)
DPKG_OPTS=(
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --dpkgopt='path-exclude=/usr/share/bug/*'
)
# The cache key: whatever changes stage 1's output. apt's candidates change when the mirror
# moves on (after `apt-get update` on this machine), and then the tree is built again.
candidates=$(apt-cache policy "${PACKAGES[@]}" 2>/dev/null |
    awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) } $1 == "Candidate:" { print p, $2 }')
stage1_key=$(printf '%s\n' "stage1 v1" "$SOURCE_DATE_EPOCH" "${PACKAGES[@]}" "${PURGE[@]}" "${PURGE_FORCED[@]}" \
    "${SOURCES[@]}" "${DPKG_OPTS[@]}" "$candidates" | sha256sum | cut -c1-16)
rootfs_tar=$cache/rootfs-$stage1_key.tar
if [ "$refresh" = 1 ] || [ ! -s "$rootfs_tar" ]; then
    [ "$assemble_only" = 0 ] || die "--assemble-only, but there is no cached root tree $rootfs_tar"
    say "stage 1: mmdebstrap (key $stage1_key)"
    rm -f "$cache"/rootfs-*.tar.partial
    mmdebstrap --variant=essential --mode=root --format=tar \
        --include="$(IFS=,; echo "${PACKAGES[*]}")" \
        "${DPKG_OPTS[@]}" \
        --customize-hook='echo bootvol > "$1/etc/hostname"' \
        --customize-hook='rm -f "$1/etc/resolv.conf"' \
        --customize-hook="chroot \"\$1\" dpkg --purge ${PURGE[*]}" \
        --customize-hook="chroot \"\$1\" dpkg --purge --force-depends ${PURGE_FORCED[*]}" \
        --customize-hook='rm -f "$1/var/cache/ldconfig/aux-cache"' \
        bookworm "$rootfs_tar.partial" "${SOURCES[@]}"
    mv "$rootfs_tar.partial" "$rootfs_tar"
    # Older trees of other inputs are not needed any more.
    find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$stage1_key.tar" -delete
else
    say "stage 1: cached root tree $rootfs_tar"
fi

# The Secure Boot chain's first two links, from Debian's archive as they are: shim, signed by
# Microsoft (its UEFI CA 2011 and 2023), and GRUB, signed by Debian (which shim trusts). Only
# their EFI binaries go on the ESP, not the packages (GRUB's tools would drag in much more).
EFI_PACKAGES=(shim-signed grub-efi-amd64-signed)
efi_candidates=$(apt-cache policy "${EFI_PACKAGES[@]}" 2>/dev/null |
    awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) } $1 == "Candidate:" { print p, $2 }')
efi_key=$(printf '%s\n' "efi v1" "$efi_candidates" | sha256sum | cut -c1-16)
efi_dir=$cache/efi-$efi_key
if [ "$refresh" = 1 ] || [ ! -f "$efi_dir/versions" ]; then
    [ "$assemble_only" = 0 ] || die "--assemble-only, but there is no cached $efi_dir"
    say "stage 1: ${EFI_PACKAGES[*]} (key $efi_key)"
    rm -rf "$efi_dir" "$efi_dir.partial"
    mkdir -p "$efi_dir.partial/debs"
    (cd "$efi_dir.partial/debs" && apt-get download -q -o APT::Sandbox::User=root "${EFI_PACKAGES[@]}")
    for deb in "$efi_dir.partial"/debs/*.deb; do
        dpkg-deb -x "$deb" "$efi_dir.partial/root"
        dpkg-deb -f "$deb" Package Version | paste -sd= | sed 's/^Package: //; s/=Version: /=/'
    done | sort > "$efi_dir.partial/versions"
    rm -rf "$efi_dir.partial/debs"
    mv "$efi_dir.partial" "$efi_dir"
    find "$cache" -maxdepth 1 -name 'efi-*' ! -name "efi-$efi_key" -exec rm -rf {} +
fi
for f in usr/lib/shim/shimx64.efi.signed usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed; do
    [ -f "$efi_dir/root/$f" ] || die "no $f in $efi_dir (try --refresh)"
done

[ "$root_only" = 0 ] || { say "stage 1 done: $rootfs_tar"; exit 0; }

# --- stage 2: assembly (no loop devices, no mounts) -----------------------------------------
work=$(mktemp -d "$cache/assemble.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir "$tree"
say "stage 2: unpacking the root tree"
tar -C "$tree" --numeric-owner -xpf "$rootfs_tar"

# The manifest: every Debian package in the image, name=version (the image's only inputs besides
# bootvol, systemd/ and image/appliance/).
# shim and GRUB are on the ESP, not in the tree: listed too.
{
    dpkg-query --admindir="$tree/var/lib/dpkg" -W -f='${Package}=${Version}\n'
    cat "$efi_dir/versions"
} | sort > "$work/manifest.txt"

# The kernel goes to the ESP; its modules are pruned to what a boot server needs: NICs, disk
# controllers, md, ext4 and FAT (the ESP), efivarfs, networking; plus whatever those depend on.
kver=$(cd "$tree/usr/lib/modules" && ls | head -n 1)
[ -n "$kver" ] && [ -f "$tree/boot/vmlinuz-$kver" ] || die "no kernel in the root tree"
cp "$tree/boot/vmlinuz-$kver" "$work/vmlinuz"
moddir=$tree/usr/lib/modules/$kver
KEEP_MODULES=(
    kernel/drivers/net kernel/drivers/block kernel/drivers/scsi kernel/drivers/ata
    kernel/drivers/nvme kernel/drivers/virtio kernel/drivers/md kernel/drivers/message
    kernel/drivers/hv kernel/drivers/xen kernel/drivers/char/hw_random kernel/drivers/usb/storage
    kernel/drivers/usb/host
    kernel/drivers/acpi/button.ko kernel/drivers/input/evdev.ko
    kernel/fs/ext4 kernel/fs/jbd2 kernel/fs/mbcache.ko kernel/fs/fat kernel/fs/nls
    kernel/fs/efivarfs kernel/fs/autofs kernel/net/core kernel/net/ipv4 kernel/net/ipv6 kernel/net/packet
    kernel/net/bridge kernel/net/802 kernel/net/llc kernel/net/8021q kernel/lib kernel/crypto
    kernel/arch/x86/crypto
)
(
    cd "$moddir"
    for dir in "${KEEP_MODULES[@]}"; do
        [ -e "$dir" ] && find "$dir" -name '*.ko*'
    done | sort -u > "$work/keep.list"
    # Close over modules.dep ("path: dep dep ...").
    while :; do
        awk -v list="$work/keep.list" 'BEGIN { while ((getline l < list) > 0) keep[l] = 1 }
            { m = $1; sub(/:$/, "", m); if (m in keep) for (i = 2; i <= NF; i++) print $i }' \
            modules.dep | cat "$work/keep.list" - | sort -u > "$work/keep.new"
        cmp -s "$work/keep.new" "$work/keep.list" && break
        mv "$work/keep.new" "$work/keep.list"
    done
    find kernel -name '*.ko*' | sort | comm -23 - "$work/keep.list" | xargs -r rm -f
    find kernel -depth -type d -empty -delete
)
depmod -b "$tree" "$kver"

# Only the iPXE binaries bootvol serves ([tftp] root = /usr/lib/ipxe); ipxe.efi is a symlink
# into /boot, which goes: a copy instead.
(
    cd "$tree/usr/lib/ipxe"
    if [ -L ipxe.efi ]; then
        target=$(readlink ipxe.efi)
        case $target in /*) target=$tree$target ;; esac
        cp --remove-destination "$target" ipxe.efi
    fi
    find . -mindepth 1 -maxdepth 1 ! -name undionly.kpxe ! -name snponly.efi ! -name ipxe.efi \
        -exec rm -rf {} +
    [ -f undionly.kpxe ] && [ -f snponly.efi ] && [ -f ipxe.efi ] || die "iPXE binaries missing"
)
say "stage 2: trimming the tree"
rm -rf "${tree:?}"/boot/* \
    "$tree"/usr/share/man "$tree"/usr/share/info "$tree"/usr/share/locale "$tree"/usr/share/lintian \
    "$tree"/usr/share/doc-base "$tree"/usr/share/bug "$tree"/usr/share/i18n \
    "$tree"/usr/share/bash-completion "$tree"/vmlinuz* "$tree"/initrd.img* \
    "$tree"/etc/udev/hwdb.bin "$tree"/usr/lib/udev/hwdb.bin "$tree"/usr/lib/udev/hwdb.d \
    "$tree"/usr/lib/x86_64-linux-gnu/gconv \
    "$tree"/usr/bin/perl* "$tree"/usr/lib/x86_64-linux-gnu/perl-base "$tree"/usr/share/perl5 \
    "$tree"/var/cache/apt/* "$tree"/var/lib/apt/lists/* "$tree"/var/cache/debconf/*-old \
    "$tree"/var/lib/dpkg/*-old "$tree"/var/cache/ldconfig/aux-cache "$tree"/var/log/* \
    "$tree"/usr/lib/systemd/boot/efi/*.efi.stub "$tree"/usr/lib/systemd/boot/efi/linux*.stub
say "stage 2: bootvol's Debian package (image/build-deb.sh), installed with dpkg"
# The package an operator installs on a box of their own: the stripped binary, systemd/ (units,
# sysusers.d, tmpfiles.d, sysctl.d) and the conffile. Its maintainer scripts run in the tree
# (systemd-sysusers, systemd-tmpfiles, systemctl enable); they need /proc, mounted in a mount
# namespace of their own, gone with it. Its docs stay out, as every package's do.
image/build-deb.sh --bootvol "$bootvol_bin" --out "$work/deb" > /dev/null
unshare -m sh -c 'mount -t proc proc "$1/proc" && exec dpkg --root="$1" --path-exclude="/usr/share/doc/*" \
    --path-include="/usr/share/doc/*/copyright" -i "$2"' sh "$tree" "$work"/deb/bootvol_*_amd64.deb > /dev/null
[ "$(dpkg-query --admindir="$tree/var/lib/dpkg" -W -f='${Status}' bootvol)" = "install ok installed" ] ||
    die "bootvol's package did not install"
rm -rf "$work/deb" "$tree"/var/lib/dpkg/*-old "$tree"/var/log/dpkg.log
say "stage 2: the appliance's files"
cp -R --no-preserve=ownership image/appliance/. "$tree/"
cp image/README.md "$tree/usr/share/bootvol/README.appliance"
# The public keys updates must be signed with (bootvol-update); none: every update is refused.
mkdir -p "$tree/usr/share/bootvol/update-keys"
for key in image/update-keys/*.pub; do
    [ -f "$key" ] && install -m 644 "$key" "$tree/usr/share/bootvol/update-keys/"
done
mkdir -p "$tree/etc/bootvol" "$tree/var/lib/bootvol" "$tree/srv/bootvol-data" "$tree/efi"
# The tree's own systemctl (offline, in a chroot): the build machine needs no systemd.
chroot "$tree" systemctl --quiet enable systemd-networkd.service systemd-networkd-wait-online.service bootvol.service \
    bootvol-bless-grub.service
chroot "$tree" systemctl --quiet mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    e2scrub_reap.service fstrim.timer dpkg-db-backup.timer
mkdir -p "$tree/usr/lib/systemd/system/boot-complete.target.requires"
ln -sf ../bootvol.service "$tree/usr/lib/systemd/system/boot-complete.target.requires/bootvol.service"
# PID 1 from the initramfs (a few modules first, then systemd); a machine id made at boot.
ln -sf usr/lib/bootvol/init "$tree/init"
: > "$tree/etc/machine-id"
echo bootvol > "$tree/etc/hostname"
cp "$work/manifest.txt" "$tree/usr/share/bootvol/manifest.txt"
find "$tree" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

say "stage 2: initramfs (zstd -$level)"
(cd "$tree" && find . -mindepth 1 | LC_ALL=C sort |
    cpio -o -H newc --reproducible -R 0:0 --quiet) | zstd -q -"$level" -T2 > "$work/initrd.img"
tree_kib=$(du -sk --apparent-size "$tree" | cut -f1)
touch -d "@$SOURCE_DATE_EPOCH" "$work/vmlinuz" "$work/initrd.img"

say "stage 2: ESP (FAT32: shim, GRUB, systemd-boot, syslinux; slot a)"
CMDLINE="console=tty0 console=ttyS0,115200 panic=10"
# The command line of an update (image/sign-update.sh puts it in the signed bundle).
echo "$CMDLINE" > "$work/cmdline"
touch -d "@$SOURCE_DATE_EPOCH" "$work/cmdline"
esp=$work/esp.img
mkfs.vfat --invariant -C -F 32 -n BOOTVOL -i "$ESP_VOLUME_ID" "$esp" $((ESP_MIB * 1024)) > /dev/null
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/debian ::/EFI/systemd ::/loader ::/loader/entries ::/a ::/b ::/syslinux
# UEFI: the firmware runs shim, shim runs GRUB from its own folder (\EFI\BOOT\grubx64.efi),
# GRUB reads \EFI\debian\grub.cfg (its built-in prefix). With Secure Boot off, GRUB hands over
# to systemd-boot and its boot counting; with it on, GRUB boots the slot itself (grub.cfg).
# No fbx64.efi: without a BOOTX64.CSV, shim's fallback would reset the machine over and over.
mcopy -m -i "$esp" "$efi_dir/root/usr/lib/shim/shimx64.efi.signed" ::/EFI/BOOT/BOOTX64.EFI
mcopy -m -i "$esp" "$efi_dir/root/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed" ::/EFI/BOOT/grubx64.efi
mcopy -m -i "$esp" "$tree/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::/EFI/systemd/systemd-bootx64.efi
mcopy -m -i "$esp" "$work/vmlinuz" "$work/initrd.img" ::/a/
# editor no: the console cannot edit an entry's kernel command line.
cat > "$work/loader.conf" <<LOADER
timeout 0
editor no
LOADER
cat > "$work/bootvol-1.conf" <<ENTRY
title bootvol (slot a)
version 1
sort-key bootvol
linux /a/vmlinuz
initrd /a/initrd.img
options $CMDLINE bootvol.slot=a
ENTRY
cat > "$work/syslinux.cfg" <<SYSLINUX
# BIOS boots slot a; bootvol-update switches this file's DEFAULT only when told to (--bios).
# No boot prompt, no escape to one, no options typed at it: the console cannot edit the
# kernel command line (init=/bin/sh would be a root shell).
SERIAL 0 115200
PROMPT 0
NOESCAPE 1
ALLOWOPTIONS 0
TIMEOUT 0
DEFAULT a
LABEL a
  LINUX /a/vmlinuz
  INITRD /a/initrd.img
  APPEND $CMDLINE bootvol.slot=a
LABEL b
  LINUX /b/vmlinuz
  INITRD /b/initrd.img
  APPEND $CMDLINE bootvol.slot=b
SYSLINUX
cat > "$work/grub.cfg" <<'GRUB'
# bootvol's GRUB: Debian's signed build, run by Microsoft-signed shim (image/build-appliance.sh).
set timeout=0
set default=0
# Nobody can edit an entry or reach GRUB's command line (init=/bin/sh would be a root shell): the
# one superuser has no password, and only the entry below may be booted.
set superusers="bootvol-locked"
if [ "$lockdown" != "y" ]; then
    # Secure Boot off: systemd-boot, its entries and their boot counting (bootvol-update).
    chainloader /EFI/systemd/systemd-bootx64.efi
    boot
fi
# Secure Boot on (GRUB locked down; systemd-boot is not signed in Debian 12): GRUB boots the
# slot, its kernel checked against Debian's key through shim. bootvol_next is booted while it
# has tries left, counted down here before the boot; then bootvol_good. /usr/lib/bootvol/grubenv
# marks the slot good once bootvol has started (bootvol-bless-grub.service).
set bootvol_good=a
set bootvol_next=a
set bootvol_tries=0
load_env -f /EFI/debian/grubenv bootvol_good bootvol_next bootvol_tries
set slot=$bootvol_good
if [ "$bootvol_tries" = 3 ]; then
    set bootvol_tries=2
    set slot=$bootvol_next
elif [ "$bootvol_tries" = 2 ]; then
    set bootvol_tries=1
    set slot=$bootvol_next
elif [ "$bootvol_tries" = 1 ]; then
    set bootvol_tries=0
    set slot=$bootvol_next
fi
save_env -f /EFI/debian/grubenv bootvol_tries
menuentry "bootvol (slot $slot)" --unrestricted {
GRUB
cat >> "$work/grub.cfg" <<GRUB
    linux /\$slot/vmlinuz $CMDLINE bootvol.slot=\$slot bootvol.loader=grub
    initrd /\$slot/initrd.img
}
GRUB
# GRUB's environment block: slot a, good, no tries pending (1024 bytes, '#' after the lines).
{
    printf '# GRUB Environment Block\nbootvol_good=a\nbootvol_next=a\nbootvol_tries=0\n'
} > "$work/grubenv"
head -c $((1024 - $(stat -c %s "$work/grubenv"))) /dev/zero | tr '\0' '#' >> "$work/grubenv"
touch -d "@$SOURCE_DATE_EPOCH" "$work/loader.conf" "$work/bootvol-1.conf" "$work/syslinux.cfg" \
    "$work/grub.cfg" "$work/grubenv"
mcopy -m -i "$esp" "$work/loader.conf" ::/loader/loader.conf
mcopy -m -i "$esp" "$work/bootvol-1.conf" ::/loader/entries/bootvol-1.conf
mcopy -m -i "$esp" "$work/syslinux.cfg" ::/syslinux/syslinux.cfg
mcopy -m -i "$esp" "$work/grub.cfg" ::/EFI/debian/grub.cfg
mcopy -m -i "$esp" "$work/grubenv" ::/EFI/debian/grubenv
syslinux --install --directory /syslinux "$esp"

say "stage 2: data partition (empty ext4, seeded on first boot)"
data=$work/data.img
truncate -s "${DATA_MIB}M" "$data"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -L bootvol-data -U "$DATA_FS_UUID" \
    -E root_owner=0:0,hash_seed="$DATA_HASH_SEED" "$data" "${DATA_MIB}M"

say "stage 2: GPT disk"
disk=$work/bootvol-appliance.img
esp_sectors=$((ESP_MIB * 2048))
data_sectors=$((DATA_MIB * 2048))
truncate -s $(( (2048 + esp_sectors + data_sectors + 2048) * 512 )) "$disk"
sfdisk --quiet --no-reread --no-tell-kernel "$disk" <<GPT
label: gpt
label-id: $DISK_GUID
unit: sectors
first-lba: 2048
start=2048, size=$esp_sectors, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=$ESP_GUID, name="bootvol-esp", attrs="LegacyBIOSBootable"
start=$((2048 + esp_sectors)), size=$data_sectors, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=$DATA_GUID, name="bootvol-data"
GPT
dd if="$esp" of="$disk" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$data" of="$disk" bs=1M seek=$((1 + ESP_MIB)) conv=notrunc,sparse status=none
dd if=/usr/lib/syslinux/mbr/gptmbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none
touch -d "@$SOURCE_DATE_EPOCH" "$disk"

say "stage 2: compressing the disk"
zstd -q -f -10 -T2 "$disk" -o "$work/bootvol-appliance.img.zst"
for f in bootvol-appliance.img bootvol-appliance.img.zst vmlinuz initrd.img cmdline manifest.txt; do
    mv -f "$work/$f" "$out/$f"
done
# The build machine's tools that wrote bytes into the disk (syslinux's boot code, the FAT, the
# ext4, the partition table, the compression), for a rebuild elsewhere.
dpkg-query -W -f='${Package}=${Version}\n' syslinux syslinux-common mtools dosfstools e2fsprogs \
    fdisk cpio zstd mmdebstrap kmod > "$out/build-tools.txt"
(cd "$out" && sha256sum bootvol-appliance.img bootvol-appliance.img.zst vmlinuz initrd.img cmdline manifest.txt > SHA256SUMS)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
initrd_bytes=$(stat -c %s "$out/initrd.img")
zst_bytes=$(stat -c %s "$out/bootvol-appliance.img.zst")
{
    echo "kernel:               $kver ($(mib "$(stat -c %s "$out/vmlinuz")"))"
    echo "root tree (unpacked): $((tree_kib / 1024)) MiB, $(wc -l < "$out/manifest.txt") packages"
    echo "initrd.img:           $(mib "$initrd_bytes") (zstd -$level; target <= 40 MB)"
    echo "disk (raw):           $(( $(stat -c %s "$out/bootvol-appliance.img") / 1048576 )) MiB"
    echo "disk (zstd -10):      $(mib "$zst_bytes") (target <= 55 MB)"
    echo "disk sha256:          $(sha256sum < "$out/bootvol-appliance.img" | cut -c1-64)"
    echo "SOURCE_DATE_EPOCH:    $SOURCE_DATE_EPOCH"
    echo "build time:           $(( $(date +%s) - t_start )) s"
} > "$out/figures.txt"

# measure_boot bios|uefi: seconds from QEMU's start to bootvol's "serving" line on the serial
# console (the appliance's first boot, no DHCP answer needed: QEMU's user network gives one).
measure_boot() {
    local fw=$1 dir=$work/measure-$1 start pid elapsed=timeout
    local args=(-machine "q35,graphics=off" -accel tcg -smp 2 -m 1024 -nodefaults -display none
        -serial "file:$dir/serial.log" -drive "if=none,id=d,format=raw,file=$dir/disk.img"
        -device "virtio-blk-pci,drive=d,bootindex=0" -netdev "user,id=n0"
        -device "virtio-net-pci,netdev=n0,romfile=")
    mkdir -p "$dir"
    cp --sparse=always "$out/bootvol-appliance.img" "$dir/disk.img"
    if [ "$fw" = uefi ]; then
        cp /usr/share/OVMF/OVMF_VARS_4M.fd "$dir/vars.fd"
        args+=(-drive "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"
            -drive "if=pflash,format=raw,unit=1,file=$dir/vars.fd")
    elif [ "$fw" = secureboot ]; then
        # Secure Boot enforced, Microsoft's keys: shim -> GRUB -> kernel.
        cp /usr/share/OVMF/OVMF_VARS_4M.ms.fd "$dir/vars.fd"
        args[1]="q35,graphics=off,smm=on"
        args+=(-global driver=cfi.pflash01,property=secure,value=on
            -drive "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
            -drive "if=pflash,format=raw,unit=1,file=$dir/vars.fd")
    fi
    start=$(date +%s%N)
    qemu-system-x86_64 "${args[@]}" > "$dir/qemu.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null && [ $(( ($(date +%s%N) - start) / 1000000000 )) -lt 180 ]; do
        if grep -qa "serving http=" "$dir/serial.log" 2> /dev/null; then
            elapsed=$(awk -v ns=$(( $(date +%s%N) - start )) 'BEGIN { printf "%.1f s", ns / 1e9 }')
            break
        fi
        sleep 0.2
    done
    kill "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    echo "$elapsed"
}
if [ "$measure" = 1 ]; then
    say "measuring power-on -> bootvol serving under QEMU TCG"
    command -v qemu-system-x86_64 > /dev/null || die "--measure needs qemu-system-x86 (and ovmf)"
    bios=$(measure_boot bios)
    uefi=$(measure_boot uefi)
    secure=$(measure_boot secureboot)
    echo "power-on -> serving:  SeaBIOS $bios, OVMF $uefi, OVMF with Secure Boot $secure (QEMU TCG -smp 2 -m 1024; target <= 25 s)" \
        >> "$out/figures.txt"
fi
say "done: $out/bootvol-appliance.img"
cat "$out/figures.txt"
