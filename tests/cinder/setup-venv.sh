#!/usr/bin/env bash
# Create (or reuse) the Python venv that runs bootvol's test Cinder.
#
#   tests/cinder/setup-venv.sh [VENV_DIR]      (default: <repo>/target/cinder-venv,
#                                               or $CINDER_VENV)
#
# Installs cinder and fixtures from PyPI at the versions verified here, every
# other package pinned by constraints.txt (beside this script). Idempotent:
# when the venv already holds exactly that set (a stamp records the hash of
# constraints.txt and the Python version), it only checks the installed versions
# and exits (about 0.5 s). Prints the venv's python path on stdout.
#
# Needs: CPython >= 3.11 as $PYTHON (default python3) with the venv module,
# and PyPI. About 60 s and 330 MB on first run.
set -euo pipefail

CINDER_VERSION=29.0.0
FIXTURES_VERSION=4.3.2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${CINDER_VENV:-$repo/target/cinder-venv}}
python=${PYTHON:-python3}
# Resolve a version-manager shim (pyenv: ~0.2 s a call) to the interpreter.
python=$("$python" -c 'import sys; print(sys.executable)')
constraints=$here/constraints.txt

log() { echo "setup-venv: $*" >&2; }

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    log "cinder $CINDER_VERSION needs Python >= 3.11, $python is $pyver"
    exit 1
fi

want=$( { echo "cinder==$CINDER_VERSION fixtures==$FIXTURES_VERSION python=$pyver";
          cat "$constraints"; } | sha256sum | cut -d' ' -f1)
stamp=$venv/.bootvol-cinder-stamp

if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]] &&
   "$venv/bin/python" -c 'import importlib.metadata as m
assert m.version("cinder") == "'$CINDER_VERSION'"
assert m.version("fixtures") == "'$FIXTURES_VERSION'"' 2>/dev/null; then
    echo "$venv/bin/python"
    exit 0
fi

start=$(date +%s)
if [[ ! -x $venv/bin/python ]]; then
    log "creating $venv"
    rm -rf "$venv"
    nice -n 10 "$python" -m venv "$venv"
fi
rm -f "$stamp"
log "installing cinder==$CINDER_VERSION fixtures==$FIXTURES_VERSION (constraints: $constraints)"
# nice: the machine is shared; --no-cache-dir would only slow reruns down.
nice -n 10 "$venv/bin/pip" install --disable-pip-version-check -q \
    -c "$constraints" "cinder==$CINDER_VERSION" "fixtures==$FIXTURES_VERSION" >&2
"$venv/bin/python" -W ignore -c 'import cinder, fixtures' >&2
# api-paste.ini ships as data_files under the venv prefix; cinder_aio.py uses it.
if [[ ! -f $venv/etc/cinder/api-paste.ini ]]; then
    log "$venv/etc/cinder/api-paste.ini missing after install"
    exit 1
fi
echo "$want" > "$stamp"
log "ready in $(( $(date +%s) - start )) s: $venv"
echo "$venv/bin/python"
