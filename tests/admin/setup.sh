#!/usr/bin/env bash
# Installs what the admin page's headless-browser test (tests/it/admin.rs, which runs
# tests/admin/browser.js) needs, on Debian 12, as root:
#
#   - Debian's chromium (/usr/bin/chromium), from apt, when it is missing;
#   - playwright-core, from npm, in <repo>/target/admin-e2e/node_modules (the test's NODE_PATH),
#     at exactly the version pinned by package.json and package-lock.json (beside this script),
#     with `npm ci`.
#
#   tests/admin/setup.sh
#
# Idempotent: when chromium is installed and target/admin-e2e holds exactly this package.json
# and package-lock.json with playwright-core installed from them (a stamp records their hash and
# the Node.js version), it only prints the versions. First run: about 30 s of apt (chromium and
# its libraries, ~100 MB) and a few seconds of npm. Needs: apt, the npm registry, and Node.js
# >= 20 with npm on PATH (playwright-core's minimum; Debian 12's own nodejs is 18, too old).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=$repo/target/admin-e2e

log() { echo "admin setup: $*" >&2; }

if [[ ! -x /usr/bin/chromium ]]; then
    log "installing chromium from apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends chromium >&2
fi

for tool in node npm; do
    if ! command -v "$tool" >/dev/null; then
        log "$tool is not on PATH: install Node.js >= 20 (with npm)"
        exit 1
    fi
done
nodever=$(node --version)
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    log "playwright-core needs Node.js >= 20; node is $nodever"
    exit 1
fi

want=$( { echo "node=$nodever"; cat "$here/package.json" "$here/package-lock.json"; } |
        sha256sum | cut -d' ' -f1)
stamp=$dest/.bootvol-admin-stamp
installed_is_pinned() {
    node -e 'const [dest, here] = process.argv.slice(1);
const pinned = require(`${here}/package.json`).dependencies["playwright-core"];
process.exit(require(`${dest}/node_modules/playwright-core/package.json`).version === pinned ? 0 : 1)' \
        "$dest" "$here" 2>/dev/null
}
if [[ -f $stamp && $(cat "$stamp") == "$want" ]] && installed_is_pinned; then
    log "ready: $dest"
else
    start=$(date +%s)
    mkdir -p "$dest"
    rm -f "$stamp"
    cp "$here/package.json" "$here/package-lock.json" "$dest/"
    log "npm ci in $dest"
    (cd "$dest" && npm ci --no-audit --no-fund >&2)
    echo "$want" > "$stamp"
    log "ready in $(( $(date +%s) - start )) s: $dest"
fi

# Debian's launcher script may warn on stderr while it picks its flags; the version is on stdout.
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null)"
echo "playwright-core: $(cd "$dest" && node -p 'require("playwright-core/package.json").version')"
