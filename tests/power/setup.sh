#!/usr/bin/env bash
# Installs what bootvol's power-driver tests (tests/it/power.rs) need, on Debian 12, as root:
#
#   - ipmitool and openipmi (ipmi_sim, the IPMI peer) and openssl (test certificates), from apt;
#   - sushy-tools (the Redfish peer) in a Python venv, default <repo>/target/power-venv (or
#     $POWER_VENV, or the first argument), at the versions pinned by constraints.txt.
#
#   tests/power/setup.sh [VENV_DIR]
#
# Idempotent: when the tools are on PATH and the venv holds exactly the pinned set
# (tests/lib/venv.sh), it checks and exits in well under a second. First run: about 10 s of apt and 10 s of pip. Needs: apt and PyPI, CPython >= 3.10 (Debian 12: 3.11) as
# $PYTHON (default python3) with the venv module (installed from apt when missing).
set -euo pipefail

SUSHY_TOOLS_VERSION=2.2.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${1:-${POWER_VENV:-$repo/target/power-venv}}
constraints=$here/constraints.txt

log() { echo "power setup: $*" >&2; }

missing=()
for tool in ipmitool ipmi_sim openssl; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null || ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    missing+=(python3-venv)
fi
if ((${#missing[@]})); then
    log "installing from apt (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends ipmitool openipmi openssl python3 python3-venv >&2
fi
# shellcheck source=../lib/venv.sh
source "$repo/tests/lib/venv.sh"
VENV_LOG_PREFIX="power setup"
ensure_venv "$venv" "$constraints" 3.10 'import sushy_tools.emulator.main, bcrypt' \
    "sushy-tools==$SUSHY_TOOLS_VERSION"
log "ready: $(command -v ipmitool) $(command -v ipmi_sim) $venv"
