# The one venv set-up of the Python peers (real Cinder, the Ironic clients, sushy-tools),
# sourced by tests/cinder/setup-venv.sh, tests/api/setup-venv.sh and tests/power/setup.sh.
#
#   ensure_venv VENV CONSTRAINTS MIN_PYTHON IMPORTS PACKAGE==VERSION...
#
# Creates (or reuses) VENV with the packages at their pinned versions, every other package
# pinned by CONSTRAINTS (`pip freeze` of a venv that passed). Idempotent: when the venv already
# holds exactly this set (a stamp records the hash of the packages, CONSTRAINTS and the Python
# version, and the pinned versions are the installed ones) it returns at once. IMPORTS is
# Python that must import after an install. Uses $PYTHON (default python3), resolved through a
# version manager's shim; needs CPython >= MIN_PYTHON (e.g. 3.10) with the venv module, and PyPI.
# Logs on stderr, prefixed with $VENV_LOG_PREFIX (default "setup-venv").

venv_log() { echo "${VENV_LOG_PREFIX:-setup-venv}: $*" >&2; }

ensure_venv() {
    local venv=$1 constraints=$2 min_python=$3 imports=$4
    shift 4
    local python=${PYTHON:-python3}
    python=$("$python" -c 'import sys; print(sys.executable)')
    local pyver
    pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if ! "$python" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$min_python'.split('.'))))"; then
        venv_log "$* needs Python >= $min_python; $python is $pyver"
        return 1
    fi
    local want stamp=$venv/.bootvol-venv-stamp
    want=$( { echo "$* python=$pyver"; cat "$constraints"; } | sha256sum | cut -d' ' -f1)
    local check='import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    assert m.version(name) == version, pin'
    if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]] &&
       "$venv/bin/python" -c "$check" "$@" 2>/dev/null; then
        return 0
    fi
    local start
    start=$(date +%s)
    if [[ ! -x $venv/bin/python ]]; then
        venv_log "creating $venv"
        rm -rf "$venv"
        nice -n 10 "$python" -m venv "$venv"
    fi
    rm -f "$stamp"
    venv_log "installing $* (constraints: $constraints)"
    # nice: the machine is shared; --no-cache-dir would only slow reruns down.
    nice -n 10 "$venv/bin/pip" install --disable-pip-version-check -q -c "$constraints" "$@" >&2
    "$venv/bin/python" -W ignore -c "$imports" >&2
    echo "$want" > "$stamp"
    venv_log "ready in $(( $(date +%s) - start )) s: $venv"
}
