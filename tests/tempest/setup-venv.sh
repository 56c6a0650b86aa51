#!/usr/bin/env bash
# Create (or reuse) the Python venv with tempest and ironic-tempest-plugin that tests/tempest/run.sh
# runs against `bootvol serve`: Ironic's own API test suite (ironic_tempest_plugin.tests.api),
# unmodified.
#
#   tests/tempest/setup-venv.sh [VENV_DIR]     (default: <repo>/target/tempest-venv, or $TEMPEST_VENV)
#
# Every other package is pinned by constraints.txt (beside this script: `pip freeze` of a venv
# that ran the suite); idempotent (see tests/lib/venv.sh). Prints the venv's bin folder on
# stdout. Needs CPython >= 3.10 as $PYTHON (default python3) with the venv module, and PyPI.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${TEMPEST_VENV:-$repo/target/tempest-venv}}
# shellcheck source=../lib/venv.sh
source "$repo/tests/lib/venv.sh"

ensure_venv "$venv" "$here/constraints.txt" 3.10 'import tempest, ironic_tempest_plugin' \
    tempest==47.0.0 ironic-tempest-plugin==3.2.0
[[ -x $venv/bin/tempest && -x $venv/bin/stestr ]] || { venv_log "no tempest/stestr in $venv/bin"; exit 1; }
echo "$venv/bin"
