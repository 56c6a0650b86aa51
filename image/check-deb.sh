#!/usr/bin/env bash
# Installs the Debian package into a clean Debian 12 root and checks what the install gives,
# then removes and purges it. The root is the appliance's stage-1 tree (mmdebstrap of Debian 12
# with systemd and ipxe, cached by `image/build-appliance.sh --root-only`): no network needed.
#
#   image/check-deb.sh [DEB] [ROOTFS_TAR]
#     DEB         default target/deb/bootvol_<version>_amd64.deb
#     ROOTFS_TAR  default the newest target/appliance-cache/rootfs-*.tar
#
# Checks: `dpkg --root` installs it (its maintainer scripts run chrooted in the root, /proc
# mounted, where no systemd runs: nothing is started); the user bootvol exists; /etc/bootvol and /var/lib/bootvol
# are bootvol's with their modes; the unit is enabled; `bootvol check-config` passes on the
# shipped configuration, run as the user bootvol as the unit runs it; `systemd-analyze security`
# of the installed unit is at most 1.6 (1.5, and 0.1 for AF_PACKET: issue 40); removal disables the unit and keeps the conffile, purge
# drops the conffile and keeps the database folder. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "check-deb: $*" >&2; exit 1; }
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
deb=${1:-target/deb/bootvol_${version}_amd64.deb}
rootfs=${2:-$(ls -t target/appliance-cache/rootfs-*.tar 2> /dev/null | head -n 1)}
[ -f "$deb" ] || die "no package at $deb (image/build-deb.sh)"
[ -f "$rootfs" ] || die "no root tree (image/build-appliance.sh --root-only)"
root=$(mktemp -d)
trap 'umount "$root/proc" 2> /dev/null || true; rm -rf "$root"' EXIT
tar -C "$root" --numeric-owner -xpf "$rootfs"
# As on a running Debian system (systemd-tmpfiles needs /proc).
mount -t proc proc "$root/proc"
in_root() { chroot "$root" "$@"; }
step() { echo "== $*"; }

step "dpkg --root: install $(basename "$deb")"
dpkg --root="$root" -i "$deb"
[ "$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' bootvol)" = "install ok installed" ] \
    || die "not installed"
step "the user and the directories"
grep -q ':/var/lib/bootvol:' <<< "$(in_root getent passwd bootvol)" || die "no user bootvol"
for d in /etc/bootvol:750 /var/lib/bootvol:750 /var/lib/bootvol/files:755; do
    got=$(in_root stat -c '%U:%G:%a' "${d%:*}")
    [ "$got" = "bootvol:bootvol:${d#*:}" ] || die "${d%:*} is $got"
done
step "the unit is enabled"
[ "$(systemctl --root="$root" is-enabled bootvol.service)" = enabled ] || die "bootvol.service not enabled"
step "bootvol check-config on the shipped configuration, as the user bootvol"
# The whole report is read before it is searched: `grep -q` would close the pipe at the first
# match, and bootvol's next line would then fail with EPIPE (and pipefail with it).
report=$(in_root setpriv --reuid=bootvol --regid=bootvol --init-groups \
    /usr/bin/bootvol --config /etc/bootvol/bootvol.toml check-config 2>&1) \
    || { echo "$report" >&2; die "check-config failed"; }
echo "$report"
grep -q ': OK' <<< "$report" || die "check-config did not say OK"
step "systemd-analyze security of the installed unit (at most 1.6)"
line=$(systemd-analyze security --offline=true --root="$root" --no-pager bootvol.service 2>&1 \
    | grep 'Overall exposure level') || die "no exposure level"
echo "$line"
score=$(echo "$line" | sed -E 's/.*: ([0-9]+\.[0-9]+).*/\1/')
awk -v s="$score" 'BEGIN { exit !(s + 0 <= 1.6) }' || die "exposure $score is above 1.6"
step "remove: the unit disabled, the conffile kept"
dpkg --root="$root" -r bootvol
[ ! -e "$root/usr/bin/bootvol" ] || die "the binary is still there"
[ "$(systemctl --root="$root" is-enabled bootvol.service 2>/dev/null || true)" != enabled ] \
    || die "still enabled"
[ -f "$root/etc/bootvol/bootvol.toml" ] || die "remove dropped the conffile"
step "purge: the conffile gone, the database folder kept"
dpkg --root="$root" -P bootvol
[ ! -e "$root/etc/bootvol/bootvol.toml" ] || die "purge kept the conffile"
[ -d "$root/var/lib/bootvol" ] || die "purge removed /var/lib/bootvol"
echo "check-deb: ok"
