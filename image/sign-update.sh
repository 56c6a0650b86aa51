#!/usr/bin/env bash
# Signs an appliance build as an update that bootvol-update (and the admin page's upload)
# accepts:
#
#   image/sign-update.sh SECRET_KEY [OUT]      (OUT: default target/appliance)
#
# makes OUT/bootvol-update.tar (vmlinuz, initrd.img and the kernel command line `cmdline`, in a
# reproducible tar) and OUT/bootvol-update.tar.sig: a signify-openbsd (Ed25519) signature with
# that tar embedded, the one file to upload. SECRET_KEY is the secret half of a key whose public
# half was in image/update-keys/ when the running image was built. A key pair:
#
#   signify-openbsd -G -p image/update-keys/NAME.pub -s ~/NAME.sec    (-n: no passphrase)
#
# The secret key never goes into the repository or the image. Needs signify-openbsd (Debian).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
key=$1
out=${2:-target/appliance}
for f in vmlinuz initrd.img cmdline; do
    [ -f "$out/$f" ] || { echo "sign-update: $out/$f is missing (image/build-appliance.sh)" >&2; exit 1; }
done
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
tar -C "$out" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -cf "$out/bootvol-update.tar" vmlinuz initrd.img cmdline
rm -f "$out/bootvol-update.tar.sig"
signify-openbsd -S -e -s "$key" -m "$out/bootvol-update.tar" -x "$out/bootvol-update.tar.sig"
echo "sign-update: $out/bootvol-update.tar.sig ($(stat -c %s "$out/bootvol-update.tar.sig") bytes)"
