#!/usr/bin/env bash
# Create (or reuse) the Python venv that runs bootvol's test Cinder.
#
#   tests/cinder/setup-venv.sh [VENV_DIR]      (default: <repo>/target/cinder-venv,
#                                               or $CINDER_VENV)
#
# Installs cinder and fixtures from PyPI at the versions verified here, every other package
# pinned by constraints.txt (beside this script); idempotent (see tests/lib/venv.sh). Prints
# the venv's python path on stdout. Needs CPython >= 3.11 as $PYTHON (default python3) with
# the venv module, and PyPI. About 60 s and 330 MB on first run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${CINDER_VENV:-$repo/target/cinder-venv}}
# shellcheck source=../lib/venv.sh
source "$repo/tests/lib/venv.sh"

ensure_venv "$venv" "$here/constraints.txt" 3.11 'import cinder, fixtures' \
    cinder==29.0.0 fixtures==4.3.2
# api-paste.ini ships as data_files under the venv prefix; cinder_aio.py uses it.
if [[ ! -f $venv/etc/cinder/api-paste.ini ]]; then
    venv_log "$venv/etc/cinder/api-paste.ini missing after install"
    exit 1
fi
echo "$venv/bin/python"
