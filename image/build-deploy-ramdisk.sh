#!/usr/bin/env bash
# Builds bootvol's deploy ramdisk (scenario 4: HBA boot with an image deployment) from Debian
# packages only: `vmlinuz` and `initrd.img` in the output directory (default
# target/deploy-ramdisk/). See image/README.md for what goes in and the kernel command line the
# ramdisk obeys.
#
#   image/build-deploy-ramdisk.sh [--out DIR] [--cache DIR] [--kernel PACKAGE] [--offline]
#
#   --out DIR         where vmlinuz, initrd.img and manifest.txt go (default target/deploy-ramdisk)
#   --cache DIR       where downloaded packages are unpacked (default target/e2e-cache, shared
#                     with .ci/e2e-deps.sh, which unpacks the same kernel and busybox there)
#   --kernel PACKAGE  the kernel package, or a metapackage (default: linux-image-cloud-amd64,
#                     for VMs; real HBAs need linux-image-amd64, whose modules include mpt3sas,
#                     megaraid_sas, lpfc, qla2xxx...)
#   --offline         download nothing: use whatever the cache holds, or fail
#
# Idempotent: packages already unpacked (same version) are not downloaded again, and when the
# inputs (packages, init, this script) have not changed the outputs are left as they are.
# Needs: bash, coreutils, findutils, gzip, dpkg, apt (unless --offline) and ldd (libc-bin).
set -euo pipefail
cd "$(dirname "$0")/.."
here=image

out=target/deploy-ramdisk
cache=target/e2e-cache
kernel_pkg=
offline=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --cache) cache=$2; shift 2 ;;
        --kernel) kernel_pkg=$2; shift 2 ;;
        --offline) offline=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-deploy-ramdisk: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "== build-deploy-ramdisk: $*"; }
die() { echo "build-deploy-ramdisk: $*" >&2; exit 1; }
mkdir -p "$cache" "$out"
cache=$(cd "$cache" && pwd)
out=$(cd "$out" && pwd)

# The packages sfdisk (util-linux) needs, its libraries included: the ramdisk has no libc of its
# own otherwise (busybox is static). Checked below: every library ldd finds must come from here.
SFDISK_PACKAGES=(fdisk libfdisk1 libsmartcols1 libblkid1 libuuid1 libreadline8 libtinfo6 libc6)
# The kernel's module directories the ramdisk carries (plus whatever they depend on): disk
# controllers and HBAs, NICs, and the filesystems of config drives. The ramdisk loads what its
# hardware's modaliases ask for, the way udev would.
MODULE_DIRS=(
    drivers/scsi drivers/ata drivers/block drivers/nvme drivers/virtio drivers/message/fusion
    drivers/net/ethernet drivers/net/virtio_net.ko drivers/net/net_failover.ko
    drivers/net/vmxnet3 drivers/net/hyperv drivers/net/xen-netfront.ko
    fs/fat fs/nls fs/isofs
)

# candidates PACKAGE...: "package version" lines, apt's candidates (one apt-cache call).
candidates() {
    apt-cache policy "$@" 2>/dev/null |
        awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) } $1 == "Candidate:" { print p, $2 }'
}

# fetch DIR PACKAGE...: unpacks apt's candidate of each PACKAGE into DIR (not installed), unless
# DIR already holds exactly those (with --offline: unless DIR holds anything).
fetch() {
    local dir=$1 pkg version stamp="" tmp found
    shift
    if [ "$offline" = 1 ]; then
        [ -f "$dir/.package" ] ||
            die "--offline, but $dir holds nothing: run without --offline (needs apt) or .ci/e2e-deps.sh"
        return
    fi
    found=$(candidates "$@")
    for pkg in "$@"; do
        version=$(awk -v p="$pkg" '$1 == p { print $2 }' <<< "$found")
        { [ -n "$version" ] && [ "$version" != "(none)" ]; } ||
            die "apt has no candidate for $pkg (run apt-get update?)"
        stamp+="$pkg $version"$'\n'
    done
    if [ -f "$dir/.package" ] && [ "$(cat "$dir/.package")"$'\n' = "$stamp" ]; then
        say "$* already in $dir"
        return
    fi
    say "apt-get download $*"
    tmp=$(mktemp -d "$cache/download.XXXXXX")
    # shellcheck disable=SC2046
    (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root $(printf '%s\n' "$stamp" | awk 'NF { print $1 "=" $2 }'))
    rm -rf "$dir"
    mkdir -p "$dir"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dir"; done
    rm -rf "$tmp"
    printf '%s' "${stamp%$'\n'}" > "$dir/.package"
    say "unpacked into $dir"
}

# The kernel: the cloud kernel goes where .ci/e2e-deps.sh puts it (target/e2e-cache/kernel), any
# other kernel package into a directory of its own.
if [ -z "$kernel_pkg" ] && [ "$offline" = 1 ] && [ -f "$cache/kernel/.package" ]; then
    kernel_pkg=$(awk '{ print $1; exit }' "$cache/kernel/.package")
elif [ -z "$kernel_pkg" ]; then
    kernel_pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
    if [ -z "$kernel_pkg" ]; then
        die "cannot resolve linux-image-cloud-amd64 to a kernel package (apt-get update?)"
    fi
fi
# A metapackage (linux-image-amd64) stands for the kernel it depends on.
if [[ $kernel_pkg != linux-image-[0-9]* ]] && [ "$offline" = 0 ]; then
    resolved=$(apt-cache depends "$kernel_pkg" 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
    [ -n "$resolved" ] || die "$kernel_pkg is neither a kernel package nor a metapackage of one"
    kernel_pkg=$resolved
fi
case $kernel_pkg in
    *-cloud-amd64) kernel_dir=$cache/kernel ;;
    *) kernel_dir=$cache/kernel-$kernel_pkg ;;
esac
fetch "$kernel_dir" "$kernel_pkg"
fetch "$cache/busybox" busybox-static
fetch "$cache/sfdisk" "${SFDISK_PACKAGES[@]}"

vmlinuz=$(find "$kernel_dir/boot" -maxdepth 1 -name 'vmlinuz-*' | head -n 1)
[ -n "$vmlinuz" ] || die "no vmlinuz-* in $kernel_dir/boot"
kver=${vmlinuz##*/vmlinuz-}
modules=$kernel_dir/lib/modules/$kver
[ -d "$modules/kernel" ] || die "no modules for $kver in $modules"
busybox=$cache/busybox/bin/busybox
[ -x "$busybox" ] || die "no busybox in $cache/busybox"
sfdisk=$cache/sfdisk/sbin/sfdisk
[ -x "$sfdisk" ] || die "no sfdisk in $cache/sfdisk"

# Nothing to do when the inputs are the ones the current outputs were built from.
inputs=$({
    cat "$kernel_dir/.package" "$cache/busybox/.package" "$cache/sfdisk/.package"
    sha256sum "$here/build-deploy-ramdisk.sh" "$here/init" | awk '{ print $1 }'
})
inputs_sum=$(printf '%s\n' "$inputs" | sha256sum | awk '{ print $1 }')
if [ -f "$out/initrd.img" ] && [ -f "$out/vmlinuz" ] &&
    [ "$(cat "$out/.inputs" 2>/dev/null)" = "$inputs_sum" ]; then
    say "up to date: $out/vmlinuz, $out/initrd.img"
    exit 0
fi

stage=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root"/{bin,dev,etc,lib,lib64,mnt,proc,run,sbin,sys,tmp,usr/bin,usr/sbin}
install -m 0755 "$here/init" "$root/init"
install -m 0755 "$busybox" "$root/bin/busybox"

# sfdisk and the libraries it loads, from the unpacked packages only.
install -m 0755 "$sfdisk" "$root/usr/sbin/sfdisk"
libdirs=$cache/sfdisk/lib/x86_64-linux-gnu:$cache/sfdisk/usr/lib/x86_64-linux-gnu
LD_LIBRARY_PATH=$libdirs ldd "$sfdisk" | awk '/=>/ { print $1, $3 } !/=>/ && $1 ~ /^\// { print $1, $1 }' |
    while read -r name path; do
        case $path in
            "$cache/sfdisk"/*) ;;
            # The loader's /lib64 name is an absolute symbolic link: take the file itself.
            /lib64/ld-linux-x86-64.so.2) path=$cache/sfdisk/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 ;;
            *) die "sfdisk needs $name, which none of ${SFDISK_PACKAGES[*]} provides ($path)" ;;
        esac
        mkdir -p "$root/lib/x86_64-linux-gnu"
        if [ "$name" = /lib64/ld-linux-x86-64.so.2 ]; then
            cp -L "$path" "$root/lib64/ld-linux-x86-64.so.2"
        else
            cp -L "$path" "$root/lib/x86_64-linux-gnu/$name"
        fi
    done
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || die "no dynamic loader for sfdisk"

# Kernel modules: the directories above, then whatever they depend on (busybox depmod's dry run
# lists every module's dependencies, transitively, without writing into the cache).
mod_root=$root/lib/modules/$kver
mkdir -p "$mod_root"
"$busybox" depmod -n -b "$kernel_dir" "$kver" | awk -F': ' '/^kernel\/.*\.ko:/' > "$stage/deps"
wanted=$stage/wanted
: > "$wanted"
for dir in "${MODULE_DIRS[@]}"; do
    awk -F': ' -v d="kernel/$dir" '{ sub(/:$/, "", $1) } index($1, d) == 1 { print $1; n = split($2, deps, " ");
        for (i = 1; i <= n; i++) print deps[i] }' "$stage/deps" >> "$wanted"
done
LC_ALL=C sort -u "$wanted" | while read -r rel; do
    [ -f "$modules/$rel" ] || die "module $rel is not in $kernel_pkg"
    mkdir -p "$(dirname "$mod_root/$rel")"
    cp "$modules/$rel" "$mod_root/$rel"
done
cp "$modules"/modules.order "$modules"/modules.builtin "$mod_root/" 2>/dev/null || true
"$busybox" depmod -b "$root" "$kver"
module_count=$(find "$mod_root" -name '*.ko' | wc -l)

{
    echo "bootvol deploy ramdisk"
    echo "kernel $kver"
    echo "packages:"
    awk '{ print "  " $0 }' "$kernel_dir/.package" "$cache/busybox/.package" "$cache/sfdisk/.package"
    echo "init sha256 $(sha256sum "$here/init" | awk '{ print $1 }')"
    echo "modules: $module_count"
} > "$root/etc/bootvol-deploy-release"

# The archive: newc, files owned by root, sorted, every time stamp at 0 (reproducible content).
find "$root" -mindepth 1 -exec touch -h -d @0 {} +
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
    gzip -n > "$stage/initrd.img"
cp "$vmlinuz" "$stage/vmlinuz"
cp "$root/etc/bootvol-deploy-release" "$stage/manifest.txt"
find "$mod_root" -name '*.ko' | sed "s|^$mod_root/||" | LC_ALL=C sort >> "$stage/manifest.txt"
mv -f "$stage/vmlinuz" "$out/vmlinuz"
mv -f "$stage/initrd.img" "$out/initrd.img"
mv -f "$stage/manifest.txt" "$out/manifest.txt"
echo "$inputs_sum" > "$out/.inputs"
say "$out/vmlinuz ($kver), $out/initrd.img ($(du -h "$out/initrd.img" | cut -f1), $module_count modules)"
