#!/usr/bin/env bash
# Reproducibility check of the appliance's assembly: assembles the image twice from the cached
# root tree (image/build-appliance.sh must have run once, so that target/appliance-cache/ holds
# it) with the same inputs, into two directories, and compares the SHA-256 of every output.
# zstd -3 for the initramfs keeps it quick (about 20 s a round on 2 cores); the level changes the
# bytes, not whether they repeat.
#
#   image/check-appliance-repro.sh [--bootvol BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/appliance-repro
rm -rf "$out"
for round in 1 2; do
    echo "== check-appliance-repro: assembly $round"
    image/build-appliance.sh --assemble-only --level 3 --out "$out/$round" "$@" > "$out.log.$round" 2>&1 ||
        { cat "$out.log.$round"; exit 1; }
done
files=(bootvol-appliance.img bootvol-appliance.img.zst vmlinuz initrd.img manifest.txt)
status=0
for f in "${files[@]}"; do
    a=$(sha256sum < "$out/1/$f" | cut -c1-64)
    b=$(sha256sum < "$out/2/$f" | cut -c1-64)
    if [ "$a" = "$b" ]; then
        echo "same      $a  $f"
    else
        echo "DIFFERENT $a / $b  $f"
        status=1
    fi
done
[ "$status" = 0 ] && echo "== check-appliance-repro: both assemblies are bit-identical" ||
    echo "== check-appliance-repro: the assemblies differ" >&2
rm -f "$out.log.1" "$out.log.2"
exit "$status"
