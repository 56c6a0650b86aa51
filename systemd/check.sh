#!/usr/bin/env bash
# Checks the systemd files of systemd/ without systemd as PID 1 (CI runs in a container):
#
#  1. `systemd-analyze verify --root=STAGED bootvol.service`: the unit parses, every unit it
#     names exists, and every command it runs (ExecStartPre/ExecStart/ExecReload) is an
#     executable at the path it names. STAGED is a throwaway tree holding the bootvol binary as
#     /usr/bin/bootvol, this host's systemd units, and our unit in /etc/systemd/system.
#  2. sysusers.d and tmpfiles.d applied to that tree (`--root=`): they parse, the user exists,
#     the directories get their owner and modes, the issue.d link is made.
#  3. Every key of sysctl.d names a kernel setting that exists here.
#  4. `systemd-analyze security --offline=true`: the exposure score is at most MAX_EXPOSURE.
#     The same with the AoE probe's drop-in (aoe-probe.conf) beside it.
#  5. `bootvol reload --help`: the ExecReload= command exists in the binary.
#
# Usage: systemd/check.sh [BOOTVOL_BINARY]   (default: target/debug/bootvol)
# Needs the `systemd` package (systemd-analyze, systemd-sysusers, systemd-tmpfiles), not root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
binary="${1:-$here/../target/debug/bootvol}"
MAX_EXPOSURE="${MAX_EXPOSURE:-1.6}"

for tool in systemd-analyze systemd-sysusers systemd-tmpfiles; do
    command -v "$tool" >/dev/null || { echo "check.sh: $tool is missing (apt-get install systemd)" >&2; exit 2; }
done
[ -x "$binary" ] || { echo "check.sh: no bootvol binary at $binary" >&2; exit 2; }

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/etc/issue.d"
cp "$binary" "$root/usr/bin/bootvol"
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system
cp -a "$units" "$root/usr/lib/systemd/system"
cp "$here/bootvol.service" "$root/etc/systemd/system/bootvol.service"

echo "== systemd-analyze verify --root=<staged tree> bootvol.service"
# verify prints problems but exits 0 for some of them (unknown keys): any output fails too.
out="$(systemd-analyze verify --root="$root" bootvol.service 2>&1)" || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "ok"

echo "== systemd-analyze verify with the AoE probe's drop-in (aoe-probe.conf)"
mkdir -p "$root/etc/systemd/system/bootvol.service.d"
cp "$here/aoe-probe.conf" "$root/etc/systemd/system/bootvol.service.d/aoe-probe.conf"
out="$(systemd-analyze verify --root="$root" bootvol.service 2>&1)" || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
rm -r "$root/etc/systemd/system/bootvol.service.d"
echo "ok"

echo "== sysusers.d and tmpfiles.d, applied to the staged tree"
: >"$root/etc/passwd"; : >"$root/etc/group"
systemd-sysusers --root="$root" "$here/sysusers.d/bootvol.conf"
grep -q '^bootvol:' "$root/etc/passwd" || { echo "no bootvol user made" >&2; exit 1; }
systemd-tmpfiles --root="$root" --create "$here/tmpfiles.d/bootvol.conf"
uid="$(awk -F: '$1 == "bootvol" { print $3 }' "$root/etc/passwd")"
for dir in etc/bootvol var/lib/bootvol var/lib/bootvol/files; do
    [ "$(stat -c %u "$root/$dir")" = "$uid" ] || { echo "/$dir is not bootvol's" >&2; exit 1; }
done
[ "$(stat -c %a "$root/etc/bootvol")" = 750 ] || { echo "/etc/bootvol is not 0750" >&2; exit 1; }
[ "$(readlink "$root/etc/issue.d/bootvol.issue")" = /run/bootvol/first-password.issue ] \
    || { echo "no /etc/issue.d/bootvol.issue link" >&2; exit 1; }
echo "ok"

echo "== sysctl.d keys exist"
for conf in "$here"/sysctl.d/*.conf; do
    grep -Ev '^\s*(#|$)' "$conf" | while IFS='=' read -r key value; do
        key="$(echo "$key" | tr -d ' ')"
        [ -e "/proc/sys/${key//.//}" ] || { echo "$conf: no kernel setting $key" >&2; exit 1; }
        [ -n "$(echo "$value" | tr -d ' ')" ] || { echo "$conf: $key has no value" >&2; exit 1; }
    done
done
echo "ok"

echo "== systemd-analyze security --offline=true (at most $MAX_EXPOSURE)"
report="$(systemd-analyze security --offline=true --no-pager "$here/bootvol.service" 2>&1)"
line="$(echo "$report" | grep 'Overall exposure level')" || { echo "$report" >&2; exit 1; }
score="$(echo "$line" | sed -E 's/.*: ([0-9]+\.[0-9]+).*/\1/')"
echo "$line"
awk -v s="$score" -v max="$MAX_EXPOSURE" 'BEGIN { exit !(s + 0 <= max + 0) }' \
    || { echo "$report" >&2; echo "exposure $score is above $MAX_EXPOSURE" >&2; exit 1; }

echo "== ExecReload: bootvol reload"
"$binary" reload --help >/dev/null
echo "ok"
