#!/usr/bin/env bash
# Tests of the appliance's scripts against a hostile bootvol user, as root in a temporary
# directory (tests/it/appliance_scripts.rs runs it; needs root, unshare, ip, setpriv, openssl,
# signify-openbsd):
#
# - link-config refuses to run as root, and as the unprivileged user (nobody here, bootvol on
#   the appliance) it writes nothing through a link planted in its directory: not at the old
#   fixed temporary name, not at the configuration itself; it fills the link lines (https with
#   tls_cert) and makes the certificate whose fingerprint it prints.
# - bootvol-update --check accepts a bundle image/sign-update.sh signed with a key of the
#   image, and refuses an unsigned one, a tampered one, one signed by another key, a link to a
#   good one, and everything when the image holds no key; installed (in a mount namespace
#   with the image's key directory and /proc/cmdline as the appliance has them), a signed
#   bundle lands in the other slot with a 3-try entry, an unsigned one writes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
link_config=$PWD/image/appliance/usr/lib/bootvol/link-config
update=$PWD/image/appliance/usr/sbin/bootvol-update
sign=$PWD/image/sign-update.sh
[ "$(id -u)" -eq 0 ] || { echo "test-appliance-scripts: run as root" >&2; exit 2; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
chmod 755 "$t"
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
uid=$(id -u nobody) gid=$(getent group nogroup | cut -d: -f3)

# --- link-config -----------------------------------------------------------------------------
etc=$t/etc
victim=$t/victim               # a root file the unprivileged user cannot write
echo VICTIM > "$victim"
chmod 644 "$victim"
reset_etc() {
    rm -rf "$etc"
    mkdir "$etc"
    chown root:"$gid" "$etc"
    chmod 0770 "$etc"
    cat > "$etc/bootvol.toml" <<'TOML'
[http]
listen = "0.0.0.0:8080"
public_url = "http://127.0.0.1:8080" # appliance: link
[dhcp]
interfaces = ["lo"] # appliance: link
[api]
listen = "0.0.0.0:6385"
tls_cert = "/etc/bootvol/tls/cert.pem"
tls_key = "/etc/bootvol/tls/key.pem"
public_endpoint = "https://127.0.0.1:6385" # appliance: link
TOML
    chmod 0644 "$etc/bootvol.toml"
    # What a compromised bootvol could plant: the old script's fixed temporary name.
    ln -s "$victim" "$etc/bootvol.toml.link-config"
}
# in_netns root|user: link-config in a network namespace whose one link has 10.99.0.5.
in_netns() {
    local as=()
    [ "$1" = user ] && as=(setpriv --reuid="$uid" --regid="$gid" --clear-groups)
    unshare -n sh -c 'ip link add bva type veth peer name bvb &&
        ip addr add 10.99.0.5/24 dev bva && ip link set bva up && ip link set bvb up &&
        exec "$@"' sh env BOOTVOL_ETC="$etc" "${as[@]}" "$link_config"
}

reset_etc
if out=$(in_netns root 2>&1); then fail "link-config ran as root: $out"; fi
case $out in *"refusing to run as root"*) ;; *) fail "link-config as root: $out" ;; esac
[ "$(cat "$victim")" = VICTIM ] || fail "link-config as root wrote through the planted link"
ok "link-config refuses root, and wrote nothing through the planted link"

reset_etc
out=$(in_netns user 2>&1) || fail "link-config as the user failed: $out"
[ "$(cat "$victim")" = VICTIM ] || fail "link-config wrote through the planted link"
grep -q '^public_endpoint = "https://10.99.0.5:6385" # appliance: link$' "$etc/bootvol.toml" ||
    fail "public_endpoint not filled: $(cat "$etc/bootvol.toml")"
grep -q '^interfaces = \["bva"\] # appliance: link$' "$etc/bootvol.toml" || fail "interfaces not filled"
[ "$(stat -c %u "$etc/tls/key.pem")" = "$uid" ] || fail "the key is not the user's"
[ "$(stat -c %a "$etc/tls/key.pem")" = 600 ] || [ "$(stat -c %a "$etc/tls/key.pem")" = 640 ] ||
    fail "the key is readable by others: $(stat -c %a "$etc/tls/key.pem")"
fingerprint=$(openssl x509 -noout -fingerprint -sha256 -in "$etc/tls/cert.pem" | cut -d= -f2)
case $out in *"API certificate SHA-256 fingerprint $fingerprint"*) ;; *) fail "no fingerprint: $out" ;; esac
ok "link-config as the user: link lines filled (https), certificate made, fingerprint shown"

# The configuration itself a link to a root file: replaced by a file, the target untouched.
reset_etc
rm "$etc/bootvol.toml"
ln -s "$victim" "$etc/bootvol.toml"
in_netns user > /dev/null 2>&1 || true
[ "$(cat "$victim")" = VICTIM ] || fail "link-config wrote through bootvol.toml -> victim"
ok "a link at bootvol.toml is not written through"

# --- bootvol-update --check ------------------------------------------------------------------
keys=$t/keys
mkdir -p "$keys" "$t/nokeys" "$t/out"
signify-openbsd -G -n -p "$keys/test.pub" -s "$t/test.sec"
signify-openbsd -G -n -p "$t/other.pub" -s "$t/other.sec"
head -c 300000 /dev/urandom > "$t/out/vmlinuz"
head -c 900000 /dev/urandom > "$t/out/initrd.img"
echo "console=ttyS0 panic=10" > "$t/out/cmdline"
"$sign" "$t/test.sec" "$t/out" > /dev/null
bundle=$t/out/bootvol-update.tar.sig
check() { BOOTVOL_UPDATE_KEYS=$1 TMPDIR=$t "$update" --check "$2" 2>&1; }

out=$(check "$keys" "$bundle") || fail "a good bundle was refused: $out"
case $out in *"signature good (test.pub)"*) ;; *) fail "good bundle: $out" ;; esac
ok "a bundle signed with the image's key is accepted"

if out=$(check "$keys" "$t/out/bootvol-update.tar"); then fail "an unsigned tar was accepted"; fi
case $out in *"not signed by a key of this image"*) ;; *) fail "unsigned: $out" ;; esac
ok "an unsigned bundle is refused"

cp "$bundle" "$t/tampered.sig"
size=$(stat -c %s "$t/tampered.sig")
printf '\x55' | dd of="$t/tampered.sig" bs=1 seek=$((size - 1000)) conv=notrunc status=none
cmp -s "$bundle" "$t/tampered.sig" && printf '\xaa' | dd of="$t/tampered.sig" bs=1 seek=$((size - 1000)) conv=notrunc status=none
if out=$(check "$keys" "$t/tampered.sig"); then fail "a tampered bundle was accepted"; fi
case $out in *"not signed by a key of this image"*) ;; *) fail "tampered: $out" ;; esac
ok "a tampered bundle is refused"

mkdir "$t/out2"
cp "$t/out/vmlinuz" "$t/out/initrd.img" "$t/out/cmdline" "$t/out2/"
"$sign" "$t/other.sec" "$t/out2" > /dev/null
if out=$(check "$keys" "$t/out2/bootvol-update.tar.sig"); then fail "another key's bundle was accepted"; fi
ok "a bundle signed by another key is refused"

ln -s "$bundle" "$t/link.sig"
if out=$(check "$keys" "$t/link.sig"); then fail "a link was followed"; fi
case $out in *"not a regular file"*) ;; *) fail "link: $out" ;; esac
ok "a link to a good bundle is refused"

if out=$(check "$t/nokeys" "$bundle"); then fail "accepted without a key"; fi
case $out in *"holds no update signing key"*) ;; *) fail "no keys: $out" ;; esac
ok "an image without a key refuses every update"

# --- bootvol-update: the installation into the other slot ------------------------------------
# In a mount namespace: the image's key directory (a tmpfs over /usr/share holding the test
# key) and /proc/cmdline (slot a) as the appliance has them; the ESP a directory.
esp=$t/esp
mkdir -p "$esp/loader/entries" "$esp/a" "$esp/syslinux"
printf 'timeout 0\neditor no\ndefault bootvol-1.conf\n' > "$esp/loader/loader.conf"
printf 'title bootvol (slot a)\nversion 1\nlinux /a/vmlinuz\ninitrd /a/initrd.img\noptions x bootvol.slot=a\n' \
    > "$esp/loader/entries/bootvol-1.conf"
printf 'DEFAULT a\nLABEL a\nLABEL b\n' > "$esp/syslinux/syslinux.cfg"
# GRUB's environment block, as the image has it (Secure Boot's boot counting).
mkdir -p "$esp/EFI/debian"
{ printf '# GRUB Environment Block\nbootvol_good=a\nbootvol_next=a\nbootvol_tries=0\n'
  head -c 953 /dev/zero | tr '\0' '#'; } > "$esp/EFI/debian/grubenv"
[ "$(stat -c %s "$esp/EFI/debian/grubenv")" = 1024 ] || fail "the test's grubenv is not 1024 bytes"
echo "console=ttyS0 bootvol.slot=a" > "$t/proc-cmdline"
install_as_appliance() {
    unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs none /usr/share &&
        mkdir -p /usr/share/bootvol/update-keys && cp "$1" /usr/share/bootvol/update-keys/ &&
        mount --bind "$2" /proc/cmdline && shift 2 && exec "$@"' sh "$keys/test.pub" "$t/proc-cmdline" \
        env BOOTVOL_UPDATE_ESP="$esp" TMPDIR="$t" "$update" --bios "$1" 2>&1
}
if out=$(install_as_appliance "$t/out/bootvol-update.tar"); then fail "an unsigned bundle was installed"; fi
[ ! -e "$esp/b" ] && [ "$(ls "$esp/loader/entries")" = bootvol-1.conf ] || fail "a refused bundle wrote to the ESP"
out=$(install_as_appliance "$bundle") || fail "installing a good bundle failed: $out"
cmp -s "$esp/b/vmlinuz" "$t/out/vmlinuz" && cmp -s "$esp/b/initrd.img" "$t/out/initrd.img" ||
    fail "slot b does not hold the bundle's kernel and initramfs"
entry=$esp/loader/entries/bootvol-2+3.conf
[ -f "$entry" ] || fail "no bootvol-2+3.conf: $(ls "$esp/loader/entries")"
grep -qx 'linux /b/vmlinuz' "$entry" && grep -qx 'options console=ttyS0 panic=10 bootvol.slot=b' "$entry" ||
    fail "entry: $(cat "$entry")"
! grep -q '^default ' "$esp/loader/loader.conf" || fail "loader.conf kept a default"
grep -qx 'DEFAULT b' "$esp/syslinux/syslinux.cfg" || fail "syslinux.cfg: $(cat "$esp/syslinux/syslinux.cfg")"
block=$esp/EFI/debian/grubenv
[ "$(stat -c %s "$block")" = 1024 ] || fail "grubenv is $(stat -c %s "$block") bytes"
for pair in bootvol_good=a bootvol_next=b bootvol_tries=3; do
    grep -qx "$pair" "$block" || fail "grubenv lacks $pair: $(tr -d '#' < "$block")"
done
ok "a signed bundle is installed into slot b (entry bootvol-2+3.conf, --bios: DEFAULT b; GRUB: next b, 3 tries); an unsigned one writes nothing"

grubenv=$(dirname "$update")/../lib/bootvol/grubenv
for bad in bootvol_tries=9 bootvol_next=c 'bootvol_good=a
x=1' other=1; do
    if BOOTVOL_GRUBENV=$block "$grubenv" "$bad" 2> /dev/null; then fail "grubenv took $bad"; fi
done
grep -qx bootvol_next=b "$block" && [ "$(stat -c %s "$block")" = 1024 ] || fail "a refused value changed grubenv"
ok "grubenv takes only a slot or a count of tries, and keeps the block 1024 bytes"

[ -z "$(ls "$t" | grep '^bootvol-update\.')" ] || fail "bootvol-update left its work directory"
echo "test-appliance-scripts: all passed"
