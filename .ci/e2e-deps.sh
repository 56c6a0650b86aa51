#!/usr/bin/env bash
# Installs, on a fresh Debian 12 (bookworm) machine, as root, everything the end-to-end boot tests
# (`cargo test --test e2e`, tests/e2e/) need, and fetches the kernel and busybox their NFS-root
# test boots into target/e2e-cache/. Safe to run again: it only installs what is missing and
# re-extracts nothing that is already there.
#
# What the tests use:
#   qemu-system-x86 ipxe-qemu        QEMU 7.2 with iPXE NIC ROMs (BIOS and EFI)
#   ovmf                             UEFI firmware (with Secure Boot: the snakeoil store and key)
#   sbsigntool openssl curl          Secure Boot (tests/e2e/secure_boot.rs): bootvol signs iPXE with
#                                    sbsign; the test decrypts the key, signs the volume's loader,
#                                    and reads the node page inside the namespace
#   ipxe                             snponly.efi, served by bootvol's TFTP to EDK2's PXE client
#   tgt                              tgtd/tgtadm: the iSCSI targets
#   vblade                           the AoE target
#   dnsmasq-base                     DHCP (only) inside the tests' network namespaces
#   iproute2                         ip netns, tuntap
#   mtools dosfstools                the EFI system partition of the UEFI volumes
#   nfs-ganesha nfs-ganesha-vfs      the NFS server of the NFS-root test (userspace, no nfsd)
#   rpcbind                          the portmapper (rpcbind, rpcinfo) beside ganesha's NFSv3 and
#                                    MOUNT in tests/it/probe.rs (ganesha pulls it in; named here)
#   qemu-utils                       not used by the tests; pinned so that QEMU's install does not
#                                    remove it (see below)
# Downloaded, not installed (apt-get download + dpkg -x into target/e2e-cache/):
#   linux-image-<abi>-cloud-amd64    the kernel (and its virtio/NFS modules) of the NFS-root test
#   busybox-static                   the userland of that test's initrd
#   fdisk libfdisk1 libsmartcols1    sfdisk and the libraries it loads (libc6 included), for the
#   libblkid1 libuuid1 libreadline8  deploy ramdisk of scenario 4, which image/build-deploy-ramdisk.sh
#   libtinfo6 libc6                  builds at the end into target/deploy-ramdisk/ (tests/e2e/deploy.rs)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "e2e-deps: run me as root (apt-get, and the tests need root too)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
    qemu-system-x86 ipxe-qemu ipxe ovmf tgt vblade dnsmasq-base iproute2
    mtools dosfstools nfs-ganesha nfs-ganesha-vfs rpcbind sbsigntool openssl curl
)

echo "== e2e-deps: apt-get update"
apt-get update -q

# Pitfall: some images ship qemu-utils from bookworm-backports (10.x). It declares
# `Breaks: qemu-system-common (<< 8.0)`, so installing bookworm's QEMU 7.2 removes qemu-img.
# Installing qemu-utils at exactly the version QEMU itself will be installed at, in the same
# transaction (downgrading if need be), keeps qemu-img and QEMU consistent. The version is read
# from apt, never hard-coded.
qemu_version=$(apt-cache policy qemu-system-x86 | awk '$1 == "Candidate:" { print $2 }')
if [ -z "$qemu_version" ] || [ "$qemu_version" = "(none)" ]; then
    echo "e2e-deps: apt has no candidate for qemu-system-x86; is this Debian 12 with main enabled?" >&2
    exit 1
fi
if apt-cache madison qemu-utils | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | grep -qxF "$qemu_version"; then
    PACKAGES+=("qemu-utils=$qemu_version")
else
    echo "e2e-deps: no qemu-utils at $qemu_version in apt; qemu-img may be removed (the tests do not need it)" >&2
fi

# On a machine with systemd, installing tgt, nfs-ganesha and rpcbind would start them as system
# services listening on every address. The tests start their own daemons, on private addresses
# and ports, so keep service starts off during the install unless a policy already exists.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# e2e-deps.sh: no service starts during the install\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

echo "== e2e-deps: apt-get install ${PACKAGES[*]}"
apt-get install -y -q --no-install-recommends --allow-downgrades "${PACKAGES[@]}"

# The kernel of the NFS-root test: whatever ABI bookworm's cloud kernel metapackage points at
# today, so no point release is hard-coded. The cloud flavour is the small one (25 MB) and has
# virtio-net and NFS as modules.
cache=target/e2e-cache
mkdir -p "$cache"
kernel_pkg=$(apt-cache depends linux-image-cloud-amd64 |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
if [ -z "$kernel_pkg" ]; then
    echo "e2e-deps: cannot resolve linux-image-cloud-amd64 to a kernel package" >&2
    exit 1
fi

# extract PACKAGE DIR: unpacks apt's candidate version of PACKAGE into DIR without installing
# it; does nothing when DIR already holds that version.
extract() {
    local pkg=$1 dir=$2 version stamp tmp
    version=$(apt-cache policy "$pkg" | awk '$1 == "Candidate:" { print $2 }')
    if [ -z "$version" ] || [ "$version" = "(none)" ]; then
        echo "e2e-deps: apt has no candidate for $pkg" >&2
        exit 1
    fi
    stamp="$pkg $version"
    if [ -f "$dir/.package" ] && [ "$(cat "$dir/.package")" = "$stamp" ]; then
        echo "== e2e-deps: $stamp already in $dir"
        return
    fi
    echo "== e2e-deps: apt-get download $pkg=$version"
    tmp=$(mktemp -d "$cache/download.XXXXXX")
    (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$version")
    rm -rf "$dir"
    mkdir -p "$dir"
    dpkg -x "$tmp"/*.deb "$dir"
    rm -rf "$tmp"
    echo "$stamp" > "$dir/.package"
    echo "== e2e-deps: $stamp extracted into $dir"
}

extract "$kernel_pkg" "$cache/kernel"
extract busybox-static "$cache/busybox"

# The deploy ramdisk (scenario 4): the same kernel and busybox, plus sfdisk's packages.
echo "== e2e-deps: the deploy ramdisk"
image/build-deploy-ramdisk.sh --cache "$cache" --kernel "$kernel_pkg"

echo "== e2e-deps: done (kernel: $kernel_pkg; cache: $cache)"
