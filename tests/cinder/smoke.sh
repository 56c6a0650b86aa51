#!/usr/bin/env bash
# Smoke test of bootvol's real-Cinder harness, with curl (python3 only parses
# the JSON). Exits non-zero on the first deviation.
#
#   tests/cinder/smoke.sh
#       sets up the venv (setup-venv.sh), starts its own Cinder (cinder_aio.py)
#       on a free port with a fresh state dir, checks, stops it with SIGTERM
#       and requires exit status 0. KEEP_STATE=1 keeps the state dir.
#   CINDER_URL=http://127.0.0.1:8776 CINDER_STATE_DIR=/tmp/cinder-state tests/cinder/smoke.sh
#       checks a Cinder already started by cinder_aio.py with that state dir
#       (backend.json is changed during the run and restored at the end).
#
# Checks: the version document at /; noauth (no project id in URLs); volume
# create -> available; the attachments API (3.44: create with connector ->
# connection_info, os-complete -> in-use, DELETE -> available); the
# OSSA-2023-003 Nova check (stubbed: DELETE works for an instance_uuid, and
# gives 409 when backend.json says Nova still uses it); the legacy os-*
# actions; volume metadata; backend.json changes reaching the next
# connection_info (new portal/IQN/LUN, rotated CHAP, multipath, no CHAP);
# microversion limits (404 below 3.27, 406 above the max); volume delete.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs_since() { local d=$(( $(now_ms) - $1 )); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }
t_start=$(now_ms)
passed=0
TOKEN=${CINDER_TOKEN:-bootvol:bootvol}
MV=3.44                                   # attachments API with os-complete
# The JSON helpers run python3 ~100 times: resolve a version-manager shim
# (pyenv's costs ~0.2 s a call) to the real interpreter once.
PY=$(python3 -c 'import sys; print(sys.executable)')
tmp=$(mktemp -d /tmp/cinder-smoke.XXXXXX)
body=$tmp/body
hdrs=$tmp/headers
aio_pid=
own_state=

say() { echo "cinder-smoke: $*"; }

fail() {
    say "FAIL: $*" >&2
    if [[ -s $body ]]; then
        say "last response ($code): $(head -c 2000 "$body")" >&2
    fi
    [[ -n $own_state ]] && say "state dir kept: $own_state (cinder.log)" >&2
    say "$passed passed, 1 failed" >&2
    exit 1
}

ok() { passed=$((passed + 1)); say "ok: $*"; }

# req METHOD PATH [BODY] [MICROVERSION] -> $code, $body, $hdrs
req() {
    local method=$1 path=$2 data=${3:-} mv=${4:-}
    local args=(-sS -o "$body" -D "$hdrs" -w '%{http_code}' -X "$method"
                -H "X-Auth-Token: $TOKEN" -H 'Accept: application/json')
    [[ -n $mv ]] && args+=(-H "OpenStack-API-Version: volume $mv")
    [[ -n $data ]] && args+=(-H 'Content-Type: application/json' --data "$data")
    code=$(curl "${args[@]}" "$CINDER_URL$path") || fail "curl $method $path"
}

expect_code() { [[ $code == "$1" ]] || fail "$2: HTTP $code, expected $1"; }

# jv EXPR: print a value of the last JSON body (d); strings raw, else JSON.
jv() {
    "$PY" - "$body" "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2], {"d": d})
print(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
EOF
}

# check DESC 'x = ...; y = ...; EXPR' [ARGS...]: over the last body (d) and the
# args (a), the assignments run, then EXPR (may span lines) must be true.
check() {
    local desc=$1 expr=$2
    shift 2
    "$PY" - "$body" "$expr" "$@" <<'EOF' || fail "$desc"
import json, sys
env = {"d": json.load(open(sys.argv[1])), "a": sys.argv[3:]}
*stmts, expr = sys.argv[2].split(";")
try:
    for stmt in stmts:
        exec(stmt.strip(), env)
    sys.exit(0 if eval("(" + expr.strip() + ")", env) else 1)
except (KeyError, IndexError, TypeError) as e:
    print("check raised %r" % e, file=sys.stderr)
    sys.exit(1)
EOF
    ok "$desc"
}

volume_status() {
    req GET "/v3/volumes/$1"
    expect_code 200 "GET volume $1"
    jv 'd["volume"]["status"]'
}

# wait_status VOLUME STATUS [TIMEOUT_S]
wait_status() {
    local vol=$1 want=$2 timeout=${3:-30} st i
    for ((i = 0; i < timeout * 5; i++)); do
        st=$(volume_status "$vol")
        [[ $st == "$want" ]] && return 0
        [[ $st == error* ]] && fail "volume $vol went $st waiting for $want"
        sleep 0.2
    done
    fail "volume $vol still $st after ${timeout}s, expected $want"
}

expect_status() {
    local st
    st=$(volume_status "$1")
    [[ $st == "$2" ]] || fail "$3: volume status $st, expected $2"
    ok "$3: volume $2"
}

write_backend() {  # atomic: the driver re-reads the file on every call
    printf '%s\n' "$1" > "$STATE/backend.json.tmp"
    mv "$STATE/backend.json.tmp" "$STATE/backend.json"
}

calls_since() {  # driver calls logged after line N of driver-calls.jsonl
    tail -n +"$(($1 + 1))" "$STATE/driver-calls.jsonl" 2>/dev/null || true
}
calls_count() { wc -l < "$STATE/driver-calls.jsonl" 2>/dev/null || echo 0; }

cleanup() {
    local rc=$?
    if [[ -n ${backend_saved:-} && -f $tmp/backend.json.orig ]]; then
        cp "$tmp/backend.json.orig" "$STATE/backend.json.tmp" &&
            mv "$STATE/backend.json.tmp" "$STATE/backend.json"
    fi
    if [[ -n $aio_pid ]] && kill -0 "$aio_pid" 2>/dev/null; then
        kill -TERM "$aio_pid" 2>/dev/null || true
        wait "$aio_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT

# ------------------------------------------------------------------ start
if [[ -z ${CINDER_URL:-} ]]; then
    py=$("$here/setup-venv.sh")
    port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    own_state=$(mktemp -d /tmp/cinder-state.XXXXXX)
    STATE=$own_state
    t0=$(now_ms)
    ( exec nice -n 5 "$py" "$here/cinder_aio.py" --state-dir "$STATE" --port "$port" \
        > "$STATE/stdout" 2> "$STATE/stderr" ) &
    aio_pid=$!
    for ((i = 0; i < 900; i++)); do
        grep -q '^READY ' "$STATE/stdout" && break
        kill -0 "$aio_pid" 2>/dev/null || fail "cinder_aio.py exited: $(cat "$STATE/stderr")"
        sleep 0.1
    done
    grep -q '^READY ' "$STATE/stdout" || fail "no READY line after 90 s"
    CINDER_URL=$(awk '/^READY /{print $2; exit}' "$STATE/stdout")
    say "started $(head -1 "$STATE/stdout") in $(secs_since "$t0") s"
else
    STATE=${CINDER_STATE_DIR:?set CINDER_STATE_DIR to the state dir given to cinder_aio.py}
fi
CINDER_URL=${CINDER_URL%/}
[[ -f $STATE/backend.json ]] || fail "$STATE/backend.json missing: not a cinder_aio.py state dir"
if [[ -z $own_state ]]; then   # someone else's Cinder: put backend.json back at exit
    cp "$STATE/backend.json" "$tmp/backend.json.orig"
    backend_saved=1
fi
write_backend '{}'   # the driver's built-in defaults
t_checks=$(now_ms)

CONN='{"initiator": "iqn.2024-01.org.example.node:node-1", "ip": "192.0.2.10", "host": "node-1", "multipath": false, "platform": "x86_64", "os_type": "linux2"}'
CONN_MP='{"initiator": "iqn.2024-01.org.example.node:node-1", "ip": "192.0.2.10", "host": "node-1", "multipath": true}'
INITIATOR=iqn.2024-01.org.example.node:node-1

# ------------------------------------------------------- version document
req GET /
expect_code 300 "GET / (version document)"
check "version doc: one v3.0 entry, CURRENT, min 3.0, max >= 3.54" \
    'len(d["versions"]) == 1 and d["versions"][0]["id"] == "v3.0"
     and d["versions"][0]["status"] == "CURRENT"
     and d["versions"][0]["min_version"] == "3.0"
     and tuple(map(int, d["versions"][0]["version"].split("."))) >= (3, 54)'
MAX_MV=$(jv 'd["versions"][0]["version"]')
say "API microversions 3.0 .. $MAX_MV"

# ------------------------------------------------------------------ noauth
req GET /v3/volumes
expect_code 200 "GET /v3/volumes (noauth, no project id)"
check "volume list answers" '"volumes" in d'

# ------------------------------------------------------------ create volume
req POST /v3/volumes '{"volume": {"size": 1, "name": "bootvol-smoke"}}'
expect_code 202 "POST /v3/volumes"
VOL=$(jv 'd["volume"]["id"]')
check "created volume is creating" 'd["volume"]["status"] == "creating"'
wait_status "$VOL" available 30
ok "volume $VOL available"

# ---------------------------------------------------- microversion limits
req POST /v3/attachments "{\"attachment\": {\"volume_uuid\": \"$VOL\"}}"
expect_code 404 "POST /v3/attachments without a microversion (3.0)"
ok "attachments API needs a microversion header: 404 at 3.0"
req GET /v3/volumes '' 3.72
expect_code 406 "GET /v3/volumes at 3.72"
ok "3.72 is above the max: 406"
req GET /v3/volumes '' latest
expect_code 200 "GET /v3/volumes at latest"
grep -qi "^openstack-api-version: volume $MAX_MV" "$hdrs" || fail "latest not echoed as $MAX_MV"
ok "'latest' is echoed as volume $MAX_MV"

# ------------------------------------------------------- attachments API
n=$(calls_count)
req POST /v3/attachments "{\"attachment\": {\"volume_uuid\": \"$VOL\", \"connector\": $CONN}}" $MV
expect_code 200 "POST /v3/attachments (connector) at $MV"
grep -qi "^openstack-api-version: volume $MV" "$hdrs" || fail "microversion $MV not echoed"
ATT=$(jv 'd["attachment"]["id"]')
check "attachment create: iSCSI connection_info with CHAP (flat)" \
    'ci = d["attachment"]["connection_info"]; 
     ci["driver_volume_type"] == "iscsi" and ci["attachment_id"] == d["attachment"]["id"]
     and ci["target_iqn"] == "iqn.2010-10.org.openstack:volume-" + d["attachment"]["volume_id"]
     and ci["target_portal"] == "127.0.0.1:3260" and ci["target_lun"] == 0
     and ci["auth_method"] == "CHAP" and ci["auth_username"] == "bootvol-chap-user"
     and ci["auth_password"] == "bootvol-chap-secret-1" and "data" not in ci' 
check "attachment create: no instance, volume id" \
    'd["attachment"]["instance"] is None and d["attachment"]["volume_id"] == a[0]' "$VOL"
calls_since "$n" | grep -q "\"call\": \"initialize_connection\".*$INITIATOR" ||
    fail "driver initialize_connection not called with our connector"
ok "driver initialize_connection got our connector"
expect_status "$VOL" attaching "after attachment create"
req GET "/v3/attachments/$ATT" '' $MV
expect_code 200 "GET attachment"
check "attachment is attaching before os-complete" 'd["attachment"]["status"] == "attaching"'

req POST "/v3/attachments/$ATT/action" '{"os-complete": null}' $MV
expect_code 204 "os-complete"
expect_status "$VOL" in-use "after os-complete"
check "volume lists the attachment" \
    '[x["attachment_id"] for x in d["volume"]["attachments"]] == [a[0]]' "$ATT"
req GET "/v3/attachments/$ATT" '' $MV
check "attachment attached after os-complete" \
    'd["attachment"]["status"] == "attached" and d["attachment"]["attached_at"] != ""'

n=$(calls_count)
req DELETE "/v3/attachments/$ATT" '' $MV
expect_code 200 "DELETE attachment"
check "DELETE answers the remaining attachments: none" 'd == {"attachments": []}'
calls_since "$n" | grep -q '"call": "terminate_connection"' ||
    fail "driver terminate_connection not called on attachment delete"
ok "driver terminate_connection called"
expect_status "$VOL" available "after attachment delete"
check "volume has no attachments" 'd["volume"]["attachments"] == []'
req GET "/v3/attachments?volume_id=$VOL" '' $MV
check "attachment list for the volume is empty" 'd["attachments"] == []'

# --------------------------------------- OSSA-2023-003 check (Nova stub)
SERVER=0b0c5e9e-1a2b-4c3d-8e9f-00000000beef
req POST /v3/attachments "{\"attachment\": {\"volume_uuid\": \"$VOL\", \"instance_uuid\": \"$SERVER\", \"connector\": $CONN}}" $MV
expect_code 200 "POST attachment with instance_uuid"
ATT=$(jv 'd["attachment"]["id"]')
req POST "/v3/attachments/$ATT/action" '{"os-complete": null}' $MV
expect_code 204 "os-complete (instance_uuid)"
write_backend "{\"nova_servers_using_volumes\": [\"$SERVER\"]}"
req DELETE "/v3/attachments/$ATT" '' $MV
expect_code 409 "DELETE attachment while the (stub) Nova server uses it"
check "409 is ConflictNovaUsingAttachment" \
    '"ConflictNovaUsingAttachment" in d["conflictingRequest"]["message"]'
write_backend '{}'
req DELETE "/v3/attachments/$ATT" '' $MV
expect_code 200 "DELETE attachment with instance_uuid, no Nova"
ok "attachment with instance_uuid deleted without Nova"
expect_status "$VOL" available "after instance attachment delete"

# ----------------------------------------------------------- legacy flow
req POST "/v3/volumes/$VOL/action" '{"os-reserve": {}}'
expect_code 202 "os-reserve"
expect_status "$VOL" attaching "after os-reserve"
req POST "/v3/volumes/$VOL/action" "{\"os-initialize_connection\": {\"connector\": $CONN}}"
expect_code 200 "os-initialize_connection"
check "os-initialize_connection: nested iSCSI connection_info with CHAP" \
    'ci = d["connection_info"]; x = ci["data"];
     ci["driver_volume_type"] == "iscsi" and ci["enforce_multipath"] is False
     and x["target_iqn"] == "iqn.2010-10.org.openstack:volume-" + a[0]
     and x["target_portal"] == "127.0.0.1:3260" and x["target_lun"] == 0
     and x["auth_method"] == "CHAP" and x["auth_username"] == "bootvol-chap-user"
     and x["auth_password"] == "bootvol-chap-secret-1" and x["volume_id"] == a[0]
     and x["access_mode"] == "rw" and "attachment_id" not in ci' "$VOL"
expect_status "$VOL" attaching "after os-initialize_connection"
req POST "/v3/volumes/$VOL/action" '{"os-attach": {"host_name": "node-1", "mountpoint": "/dev/sda", "mode": "rw"}}'
expect_code 202 "os-attach"
expect_status "$VOL" in-use "after os-attach"
LATT=$(jv 'd["volume"]["attachments"][0]["attachment_id"]')
check "os-attach attachment: host_name node-1, no server, /dev/sda" \
    'x = d["volume"]["attachments"]; len(x) == 1 and x[0]["host_name"] == "node-1"
     and x[0]["server_id"] is None and x[0]["device"] == "/dev/sda"'
req POST "/v3/volumes/$VOL/action" '{"os-begin_detaching": {}}'
expect_code 202 "os-begin_detaching"
expect_status "$VOL" detaching "after os-begin_detaching"
n=$(calls_count)
req POST "/v3/volumes/$VOL/action" "{\"os-terminate_connection\": {\"connector\": $CONN}}"
expect_code 202 "os-terminate_connection"
calls_since "$n" | grep -q "\"call\": \"terminate_connection\".*$INITIATOR" ||
    fail "driver terminate_connection not called with our connector"
ok "driver terminate_connection got our connector"
expect_status "$VOL" detaching "after os-terminate_connection"
req POST "/v3/volumes/$VOL/action" "{\"os-detach\": {\"attachment_id\": \"$LATT\"}}"
expect_code 202 "os-detach"
expect_status "$VOL" available "after os-detach"
check "no attachments after os-detach" 'd["volume"]["attachments"] == []'

# -------------------------------------------------------------- metadata
req POST "/v3/volumes/$VOL/metadata" '{"metadata": {"bootvol_node": "node-1"}}'
expect_code 200 "POST metadata"
check "POST metadata answers the map" 'd["metadata"]["bootvol_node"] == "node-1"'
req POST "/v3/volumes/$VOL/metadata" '{"metadata": {"bootvol_boot_index": "0"}}'
expect_code 200 "POST metadata (second key)"
req GET "/v3/volumes/$VOL/metadata"
expect_code 200 "GET metadata"
check "metadata POST merges" \
    'd["metadata"] == {"bootvol_node": "node-1", "bootvol_boot_index": "0"}'
req GET "/v3/volumes/$VOL/metadata/bootvol_node"
expect_code 200 "GET metadata key"
check "GET one key answers meta" 'd == {"meta": {"bootvol_node": "node-1"}}'

# ------------------------------------- backend.json drives connection_info
init_conn() {
    req POST "/v3/volumes/$VOL/action" "{\"os-initialize_connection\": {\"connector\": ${1:-$CONN}}}"
    expect_code 200 "os-initialize_connection"
}
write_backend '{"target_portal": "192.0.2.20:3260", "target_iqn": "iqn.2024-01.org.example.san:{volume_id}",
  "target_lun": 7, "auth_username": "chap-user-2", "auth_password": "chap-secret-rotated"}'
init_conn
check "new portal/IQN/LUN and rotated CHAP reach the next connection_info" \
    'x = d["connection_info"]["data"]; x["target_portal"] == "192.0.2.20:3260"
     and x["target_iqn"] == "iqn.2024-01.org.example.san:" + a[0] and x["target_lun"] == 7
     and x["auth_username"] == "chap-user-2" and x["auth_password"] == "chap-secret-rotated"
     and "target_portals" not in x' "$VOL"

req POST /v3/attachments "{\"attachment\": {\"volume_uuid\": \"$VOL\", \"connector\": $CONN}}" $MV
expect_code 200 "POST attachment after the change"
ATT=$(jv 'd["attachment"]["id"]')
check "attachments API sees the change too" \
    'x = d["attachment"]["connection_info"]; x["target_portal"] == "192.0.2.20:3260"
     and x["target_lun"] == 7 and x["auth_password"] == "chap-secret-rotated"'
req DELETE "/v3/attachments/$ATT" '' $MV
expect_code 200 "DELETE attachment"
wait_status "$VOL" available 10

write_backend '{"target_portals": ["192.0.2.21:3260", "192.0.2.22:3260"],
  "target_iqns": ["iqn.2024-01.org.example.san:a", "iqn.2024-01.org.example.san:b"],
  "target_luns": [3, 4], "auth_password": "chap-secret-3"}'
init_conn "$CONN_MP"
check "multipath: target_portals/iqns/luns, singular keys = first path" \
    'x = d["connection_info"]["data"];
     x["target_portals"] == ["192.0.2.21:3260", "192.0.2.22:3260"]
     and x["target_iqns"] == ["iqn.2024-01.org.example.san:a", "iqn.2024-01.org.example.san:b"]
     and x["target_luns"] == [3, 4] and x["target_portal"] == "192.0.2.21:3260"
     and x["target_iqn"] == "iqn.2024-01.org.example.san:a" and x["target_lun"] == 3
     and x["auth_password"] == "chap-secret-3" and x["enforce_multipath"] is False'

write_backend '{"target_portals": ["192.0.2.21:3260"], "multipath": "auto"}'
init_conn
check "one portal, connector without multipath: no plural keys" \
    'x = d["connection_info"]["data"]; "target_portals" not in x and x["target_portal"] == "192.0.2.21:3260"'
init_conn "$CONN_MP"
check "one portal, connector asks multipath: plural keys" \
    'd["connection_info"]["data"]["target_portals"] == ["192.0.2.21:3260"]'

write_backend '{}'
init_conn "$CONN_MP"
check "defaults, connector asks multipath: plural keys of one path" \
    'x = d["connection_info"]["data"]; x["target_portals"] == ["127.0.0.1:3260"]
     and x["target_luns"] == [0] and x["target_iqns"] == [x["target_iqn"]]'

write_backend '{"auth_method": null}'
init_conn
check "auth_method null: no CHAP keys" \
    'x = d["connection_info"]["data"]; not any(k.startswith("auth_") for k in x)'

write_backend "{\"volumes\": {\"$VOL\": {\"target_lun\": 9}}, \"target_lun\": 1}"
init_conn
check "per-volume override wins" 'd["connection_info"]["data"]["target_lun"] == 9'

req POST "/v3/volumes/$VOL/action" '{"os-initialize_connection": {"connector": {"host": "node-1"}}}'
expect_code 400 "os-initialize_connection without an initiator"
ok "connector without initiator: 400"

write_backend '{"fail": {"initialize_connection": "smoke"}}'
req POST "/v3/volumes/$VOL/action" "{\"os-initialize_connection\": {\"connector\": $CONN}}"
expect_code 500 "os-initialize_connection with an injected backend failure"
check "injected failure: 500 computeFault" '"computeFault" in d'
write_backend '{}'

# ------------------------------------------------------------ delete volume
req DELETE "/v3/volumes/$VOL"
expect_code 202 "DELETE volume"
for ((i = 0; i < 100; i++)); do
    req GET "/v3/volumes/$VOL"
    [[ $code == 404 ]] && break
    sleep 0.2
done
[[ $code == 404 ]] || fail "volume still there after DELETE"
ok "volume deleted"

say "checks took $(secs_since "$t_checks") s"

# ------------------------------------------------------------------- stop
if [[ -n $aio_pid ]]; then
    t0=$(now_ms)
    kill -TERM "$aio_pid"
    rc=0
    wait "$aio_pid" || rc=$?
    aio_pid=
    [[ $rc == 0 ]] || fail "cinder_aio.py exited $rc after SIGTERM"
    ok "SIGTERM: cinder_aio.py exited 0 in $(secs_since "$t0") s"
    if [[ ${KEEP_STATE:-0} == 1 ]]; then
        say "state dir kept: $own_state"
    else
        rm -rf "$own_state"
    fi
    own_state=
fi
say "SMOKE OK in $(secs_since "$t_start") s"
say "$passed passed, 0 failed"
