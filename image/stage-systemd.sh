#!/usr/bin/env bash
# Installs systemd/ into a root tree as it is: units, and sysusers.d/tmpfiles.d/sysctl.d files
# (a systemd/sysusers.d/X.conf directory or debhelper's systemd/X.sysusers naming). Anything
# else stops the build, so that a new kind of file is placed on purpose. Used by both the
# appliance image (image/build-appliance.sh) and the Debian package (image/build-deb.sh).
#
#   image/stage-systemd.sh TREE
set -euo pipefail
cd "$(dirname "$0")/.."
tree=${1:?usage: image/stage-systemd.sh TREE}
for f in systemd/*; do
    name=$(basename "$f")
    case $name in
        *.service|*.socket|*.timer|*.target|*.path|*.mount)
            install -D -m 644 "$f" "$tree/usr/lib/systemd/system/$name" ;;
        sysusers.d|tmpfiles.d|sysctl.d)
            mkdir -p "$tree/usr/lib/$name"
            for g in "$f"/*.conf; do install -m 644 "$g" "$tree/usr/lib/$name/"; done ;;
        *.sysusers|*.tmpfiles|*.sysctl)
            mkdir -p "$tree/usr/lib/${name##*.}.d"
            install -m 644 "$f" "$tree/usr/lib/${name##*.}.d/${name%.*}.conf" ;;
        *.service.d|*.socket.d)
            mkdir -p "$tree/usr/lib/systemd/system/$name"
            for g in "$f"/*.conf; do install -m 644 "$g" "$tree/usr/lib/systemd/system/$name/"; done ;;
        check.sh) ;; # CI's check of the units (systemd-analyze), not installed
        aoe-probe.conf) # opt-in drop-in (AoE probe): shipped, not active; docs/operating.md
            install -D -m 644 "$f" "$tree/usr/share/bootvol/systemd/$name" ;;
        *) echo "stage-systemd: systemd/$name: unknown kind of file; teach image/stage-systemd.sh where it goes" >&2
           exit 1 ;;
    esac
done
