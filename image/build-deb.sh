#!/usr/bin/env bash
# Builds the Debian package of bootvol from a staged tree with dpkg-deb (no debhelper, no
# cargo-deb: the tree is the same one the appliance image gets, staged by the same script).
#
#   image/build-deb.sh [--bootvol BINARY] [--out DIR]
#
#   --bootvol BINARY  the binary (default target/release/bootvol; it is stripped)
#   --out DIR         where bootvol_<version>_amd64.deb goes (default target/deb)
#
# The package holds /usr/bin/bootvol; the unit, sysusers.d, tmpfiles.d and sysctl.d files of
# systemd/ (image/stage-systemd.sh); examples/bootvol.toml as the conffile
# /etc/bootvol/bootvol.toml; README.md and docs/*.md under /usr/share/doc/bootvol (the unit's
# Documentation= names them). Its maintainer scripts make the user and the directories
# (systemd-sysusers, systemd-tmpfiles), apply the sysctl settings, enable the unit and, when
# systemd runs, start it (its ExecStartPre= runs `bootvol check-config` first). Reproducible:
# every timestamp is SOURCE_DATE_EPOCH (the last commit's time by default).
set -euo pipefail
cd "$(dirname "$0")/.."

bootvol_bin=target/release/bootvol
out=target/deb
while [ $# -gt 0 ]; do
    case $1 in
        --bootvol) bootvol_bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-deb: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
die() { echo "build-deb: $*" >&2; exit 1; }
[ -x "$bootvol_bin" ] || die "no bootvol binary at $bootvol_bin (cargo build --release --locked)"
command -v dpkg-deb > /dev/null || die "dpkg-deb is missing"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || die "no [workspace.package] version in Cargo.toml"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2> /dev/null || echo 1700000000)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/bootvol
mkdir -p "$tree/DEBIAN" "$tree/usr/bin" "$tree/etc/bootvol" "$tree/usr/share/doc/bootvol/docs"
strip -o "$tree/usr/bin/bootvol" "$bootvol_bin"
chmod 755 "$tree/usr/bin/bootvol"
image/stage-systemd.sh "$tree"
install -m 644 examples/bootvol.toml "$tree/etc/bootvol/bootvol.toml"
install -m 644 README.md "$tree/usr/share/doc/bootvol/README.md"
install -m 644 docs/*.md "$tree/usr/share/doc/bootvol/docs/"
cat > "$tree/usr/share/doc/bootvol/copyright" <<'TEXT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: bootvol

Files: *
Copyright: the bootvol authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
TEXT

cat > "$tree/DEBIAN/conffiles" <<'TEXT'
/etc/bootvol/bootvol.toml
TEXT
installed_kib=$(du -sk --exclude=DEBIAN "$tree" | cut -f1)
cat > "$tree/DEBIAN/control" <<TEXT
Package: bootvol
Version: $version
Architecture: amd64
Maintainer: bootvol developers <bootvol@localhost>
Installed-Size: $installed_kib
Depends: libc6 (>= 2.36), libgcc-s1, ipxe, systemd (>= 252)
Recommends: sbsigntool
Section: net
Priority: optional
Homepage: https://github.com/bootvol/bootvol
Description: boot-from-volume server for bare-metal machines (iPXE, Ironic API)
 bootvol serves each node, by the MAC it boots from, an iPXE script that boots its
 remote volume: iSCSI (with CHAP), FCoE, AoE, HTTP SAN, an NFS root, or the LUN behind
 a hardware HBA. It keeps the volumes' connection data in SQLite (or PostgreSQL for
 several boxes), syncs it from OpenStack Cinder, and answers OpenStack Ironic's REST API.
TEXT

cat > "$tree/DEBIAN/postinst" <<'TEXT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    systemd-sysusers bootvol.conf
    systemd-tmpfiles --create bootvol.conf
    if [ -d /run/systemd/system ]; then
        systemd-sysctl /usr/lib/sysctl.d/50-bootvol.conf || true
        systemctl daemon-reload
    fi
    systemctl enable bootvol.service > /dev/null 2>&1 || systemctl enable bootvol.service
    if [ -d /run/systemd/system ]; then
        # A restart on upgrade; a start on the first install (check-config runs first).
        systemctl restart bootvol.service || {
            echo "bootvol: the service did not start: see journalctl -u bootvol and edit /etc/bootvol/bootvol.toml" >&2
        }
    fi
fi
TEXT
cat > "$tree/DEBIAN/prerm" <<'TEXT'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop bootvol.service || true
fi
TEXT
cat > "$tree/DEBIAN/postrm" <<'TEXT'
#!/bin/sh
set -e
# The database under /var/lib/bootvol and the htpasswd file are the operator's data: kept, even
# on purge (dpkg removes the conffile on purge).
if [ "$1" = remove ] || [ "$1" = purge ]; then
    systemctl disable bootvol.service > /dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
TEXT
chmod 755 "$tree/DEBIAN/postinst" "$tree/DEBIAN/prerm" "$tree/DEBIAN/postrm"
find "$tree" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$out"
deb=$out/bootvol_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$tree" "$deb" > /dev/null
echo "$deb"
