#!/usr/bin/env bash
# Ironic's own API test suite (ironic-tempest-plugin's ironic_tempest_plugin.tests.api, with
# tempest; unmodified) against `bootvol serve`, as an integrator would run it:
#
#   tests/tempest/run.sh [REGEX]     (default: ironic_tempest_plugin.tests.api)
#
# Starts `bootvol serve` ($BOOTVOL_BIN, default target/debug/bootvol under $CARGO_TARGET_DIR or
# the repo) with `[api] auth_strategy = "noauth"` on SQLite in a temp folder, the stand-in
# identity service (identity.py: tokens and a catalog pointing `baremetal` at bootvol), writes
# tempest.conf (tempest.conf.in) into a temp tempest workspace and runs `tempest run` there with
# the venv of setup-venv.sh ($TEMPEST_VENV, default target/tempest-venv). Prints the counts as
# a last line `tempest: passed=N failed=N skipped=N` and the failed tests, one
# `tempest: failed TEST` line each; the exit status is 0 when the run completed (whatever the
# counts: the caller judges them), non-zero when the rig itself failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${TEMPEST_VENV:-$repo/target/tempest-venv}
bin=${BOOTVOL_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/bootvol}
regex=${1:-ironic_tempest_plugin.tests.api}
[[ -x $venv/bin/tempest ]] || { echo "run.sh: no tempest in $venv (run tests/tempest/setup-venv.sh)" >&2; exit 2; }
[[ -x $bin ]] || { echo "run.sh: no bootvol binary at $bin (cargo build, or set BOOTVOL_BIN)" >&2; exit 2; }

work=$(mktemp -d /tmp/bvtempest.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ -n ${KEEP_TEMPEST_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/bootvol.toml" <<TOML
[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
default_storage_interface = "noop"
[database]
path = "$work/bootvol.db"
[http]
listen = "127.0.0.1:0"
public_url = "http://192.0.2.10:8080"
files_root = "$work/files"
[tftp]
listen = "127.0.0.1:0"
root = "/usr/lib/ipxe"
[cinder]
url = "http://127.0.0.1:9/v3"
[api]
listen = "127.0.0.1:0"
auth_strategy = "noauth"
TOML
mkdir -p "$work/files"
"$bin" --config "$work/bootvol.toml" serve 2> "$work/bootvol.log" > /dev/null &
pids+=($!)
api=
for _ in $(seq 200); do
    api=$(grep -o ' serving .*' "$work/bootvol.log" | grep -o 'api=[^ ]*' | head -1 | cut -d= -f2) || true
    [[ -n $api ]] && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
done
[[ -n $api ]] || { echo "run.sh: bootvol serve did not start:" >&2; cat "$work/bootvol.log" >&2; exit 2; }

"$venv/bin/python" "$here/identity.py" "http://$api" "$work/identity.port" 2> "$work/identity.log" &
pids+=($!)
for _ in $(seq 100); do [[ -f $work/identity.port ]] && break; sleep 0.1; done
[[ -f $work/identity.port ]] || { echo "run.sh: identity.py did not start:" >&2; cat "$work/identity.log" >&2; exit 2; }
identity="http://127.0.0.1:$(cat "$work/identity.port")"

cd "$work"
"$venv/bin/tempest" init --workspace-path "$work/workspaces.yaml" --name bootvol tempest > "$work/init.log" 2>&1 || { cat "$work/init.log" >&2; exit 2; }
cp "$here/accounts.yaml.in" "$work/accounts.yaml"
sed -e "s|@IDENTITY@|$identity|" -e "s|@ACCOUNTS@|$work/accounts.yaml|" -e "s|@LOG_DIR@|$work|" \
    "$here/tempest.conf.in" > "$work/tempest/etc/tempest.conf"
cd "$work/tempest"
status=0
"$venv/bin/tempest" run --regex "$regex" --concurrency "${TEMPEST_CONCURRENCY:-2}" \
    > "$work/tempest.out" 2>&1 || status=$?
"$venv/bin/stestr" last --subunit > "$work/last.subunit" 2>/dev/null || true
[[ -s $work/last.subunit ]] || { echo "run.sh: tempest did not run (status $status):" >&2; tail -40 "$work/tempest.out" >&2; exit 2; }
"$venv/bin/python" - "$work/last.subunit" <<'PY'
import sys, collections, subunit, testtools
counts = collections.Counter()
failed = []
class Result(testtools.StreamResult):
    def status(self, test_id=None, test_status=None, **kw):
        if test_status in ("success", "fail", "skip"):
            counts[test_status] += 1
            if test_status == "fail":
                failed.append(test_id)
stream = subunit.ByteStreamToStreamResult(open(sys.argv[1], "rb"), non_subunit_name="stdout")
result = Result()
result.startTestRun()
stream.run(result)
result.stopTestRun()
for test in sorted(failed):
    print("tempest: failed", test)
print("tempest: passed=%d failed=%d skipped=%d" % (counts["success"], counts["fail"], counts["skip"]))
PY
