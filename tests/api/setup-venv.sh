#!/usr/bin/env bash
# Create (or reuse) the Python venv with the real Ironic clients that tests/it/api.rs drives
# against bootvol's REST API: `baremetal` (python-ironicclient), `openstack baremetal`
# (python-openstackclient) and openstacksdk.
#
#   tests/api/setup-venv.sh [VENV_DIR]      (default: <repo>/target/api-venv, or $API_VENV)
#
# Every other package is pinned by constraints.txt (beside this script; `pip freeze` of a venv
# that passed). Idempotent: when the venv already holds exactly this set (a stamp records the
# versions, the hash of constraints.txt and the Python version) it exits at once. Prints the
# venv's bin folder on stdout.
#
# Needs: CPython >= 3.10 as $PYTHON (default python3) with the venv module, and PyPI. About
# 20 s and 170 MB on first run.
set -euo pipefail

IRONICCLIENT_VERSION=6.3.0
OPENSTACKCLIENT_VERSION=10.5.0
OPENSTACKSDK_VERSION=4.22.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${API_VENV:-$repo/target/api-venv}}
python=${PYTHON:-python3}
python=$("$python" -c 'import sys; print(sys.executable)')

log() { echo "setup-venv: $*" >&2; }

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
constraints=$here/constraints.txt
want="python-ironicclient==$IRONICCLIENT_VERSION python-openstackclient==$OPENSTACKCLIENT_VERSION openstacksdk==$OPENSTACKSDK_VERSION python=$pyver constraints=$(sha256sum < "$constraints" | cut -d' ' -f1)"
stamp=$venv/.bootvol-api-stamp

if [[ -x $venv/bin/baremetal && -x $venv/bin/openstack && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "$venv/bin"
    exit 0
fi

start=$(date +%s)
if [[ ! -x $venv/bin/python ]]; then
    log "creating $venv"
    rm -rf "$venv"
    nice -n 10 "$python" -m venv "$venv"
fi
rm -f "$stamp"
log "installing $want"
nice -n 10 "$venv/bin/pip" install --disable-pip-version-check -q -c "$constraints" \
    "python-ironicclient==$IRONICCLIENT_VERSION" \
    "python-openstackclient==$OPENSTACKCLIENT_VERSION" \
    "openstacksdk==$OPENSTACKSDK_VERSION" >&2
"$venv/bin/python" -W ignore -c 'import ironicclient, openstackclient, openstack' >&2
echo "$want" > "$stamp"
log "ready in $(( $(date +%s) - start )) s: $venv"
echo "$venv/bin"
