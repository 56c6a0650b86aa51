#!/usr/bin/env bash
# Create (or reuse) the Python venv with the real Ironic clients that tests/it/api.rs drives
# against bootvol's REST API: `baremetal` (python-ironicclient), `openstack baremetal`
# (python-openstackclient) and openstacksdk.
#
#   tests/api/setup-venv.sh [VENV_DIR]      (default: <repo>/target/api-venv, or $API_VENV)
#
# Every other package is pinned by constraints.txt (beside this script); idempotent (see
# tests/lib/venv.sh). Prints the venv's bin folder on stdout. Needs CPython >= 3.10 as $PYTHON
# (default python3) with the venv module, and PyPI. About 20 s and 170 MB on first run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${API_VENV:-$repo/target/api-venv}}
# shellcheck source=../lib/venv.sh
source "$repo/tests/lib/venv.sh"

ensure_venv "$venv" "$here/constraints.txt" 3.10 'import ironicclient, openstackclient, openstack' \
    python-ironicclient==6.3.0 python-openstackclient==10.5.0 openstacksdk==4.22.0
[[ -x $venv/bin/baremetal && -x $venv/bin/openstack ]] || { venv_log "no baremetal/openstack in $venv/bin"; exit 1; }
echo "$venv/bin"
