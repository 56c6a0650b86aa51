#!/usr/bin/env bash
# bootvol at the size of a large site (issue 28): the same inventory at 1,000, 10,000 and
# 100,000 nodes (deployed iSCSI nodes with CHAP, one port each; release build; SQLite), every
# operation of the issue's table timed at each size and its growth factor printed. Written to
# bench/scale-results.md (bench/report.py copies it into BENCHMARKS.md) and spliced into
# BENCHMARKS.md now; a plot of cost against node count to docs/bench-scale.png.
#
#   bench/scale.sh                              # root (a network namespace of its own); ~10 minutes
#   SIZES="1000 10000" OUT=/tmp/s.md BENCHMARKS=/tmp/B.md PLOT=/tmp/s.png bench/scale.sh  # smoke
#
# Not pinned: bootvol may use both cores (the issue's start-up figure asks for them); the one
# client (curl, one request at a time) waits on each answer. Every timed request is the median of
# REPEAT runs; start-up, apply and export are timed once per size.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export OUT=${OUT:-$ROOT/bench/scale-results.md}
export BENCHMARKS=${BENCHMARKS:-$ROOT/BENCHMARKS.md}
export PLOT=${PLOT:-$ROOT/docs/bench-scale.png}
export SIZES=${SIZES:-"1000 10000 100000"}
export REPEAT=${REPEAT:-5}

if [ -z "${BENCH_INNER:-}" ]; then
  need() { command -v "$1" >/dev/null 2>&1; }
  if ! need gnuplot || ! need curl || ! need unshare || ! need /usr/bin/time; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gnuplot-nox curl \
      util-linux time >/dev/null
  fi
  cargo build --release --locked >/dev/null 2>&1 || cargo build --release --locked
  export BENCH_COMMIT BENCH_DIRTY
  BENCH_COMMIT=$(git rev-parse --short HEAD); BENCH_DIRTY=$(git status --porcelain -- src crates Cargo.lock | head -1)
  BENCH_INNER=1 exec unshare --net -- "$ROOT/bench/scale.sh" "$@"
fi

ip link set lo up
BOOTVOL=$ROOT/target/release/bootvol
WORK=$(mktemp -d /tmp/bootvol-scale.XXXXXX)
RES=$WORK/res
SERVE_PID=
cleanup() {
  [ -z "$SERVE_PID" ] || kill "$SERVE_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
mkdir -p "$WORK/files" "$WORK/tftp" "$RES"
API=http://127.0.0.1:16385
V=(-H "X-OpenStack-Ironic-API-Version: latest")  # as the baremetal CLI asks
BOOT=http://127.0.0.1:18100
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.4f\n", b - a}'; }
rss_mib() { awk '/VmRSS/ {printf "%.1f\n", $2 / 1024}' "/proc/$1/status"; }
record() { echo "$1 $2 $3" >> "$RES/all"; echo "  $2: $3" >&2; } # N KEY VALUE
# median seconds of REPEAT GETs of URL, and the bytes of the last answer; a non-2xx fails the run
timed_get() { # URL [CURL ARGS...]
  local url=$1; shift
  local i t size times=()
  for i in $(seq 1 "$REPEAT"); do
    read -r t size < <(curl -sf -o "$WORK/answer" -w '%{time_total} %{size_download}\n' "$@" "$url") \
      || { echo "GET $url failed" >&2; exit 1; }
    times+=("$t")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v s="$size" '{a[NR]=$1} END {printf "%.4f %d\n", a[int((NR+1)/2)], s}'
}

config() { # DB
  cat <<EOF
[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]
[database]
path = "$1"
[api]
listen = "127.0.0.1:16385"
auth_strategy = "noauth"
[http]
listen = "127.0.0.1:18100"
public_url = "$BOOT"
files_root = "$WORK/files"
[tftp]
listen = "127.0.0.1:16900"
root = "$WORK/tftp"
[boot]
script_secrets = "any"
EOF
}

inventory() { # N FILE: the nodes of bench/run.sh's fixture, N of them
  python3 - "$1" "$2" <<'EOF'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
nodes = []
for i in range(n):
    mac = "52:54:01:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255)
    nodes.append({"name": "node-%06d" % i, "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n%d" % i}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-%d" % i,
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:vol-%d" % i, "target_portal": "192.0.2.5:3260",
                "target_lun": 1, "auth_method": "CHAP", "auth_username": "user%d" % i,
                "auth_password": "secret-%08d" % i}}]})
json.dump({"nodes": nodes}, open(path, "w"))
EOF
}
mac_of() { printf '52:54:01:%02x:%02x:%02x' $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }

for n in $SIZES; do
  echo "== $n nodes ($(date +%T))" >&2
  db=$WORK/$n.db conf=$WORK/$n.toml inv=$WORK/inv-$n.json
  config "$db" > "$conf"
  inventory "$n" "$inv"
  # -- apply: time, peak memory, and the size of its report -----------------------------------
  /usr/bin/time -f '%e %M' -o "$WORK/time" env -u RUST_LOG "$BOOTVOL" --config "$conf" apply "$inv" > "$WORK/apply.out"
  read -r secs kib < "$WORK/time"
  record "$n" apply_s "$secs"
  record "$n" apply_peak_mib "$(awk -v k="$kib" 'BEGIN {printf "%.1f", k / 1024}')"
  record "$n" apply_lines "$(wc -l < "$WORK/apply.out")"
  record "$n" apply_bytes "$(wc -c < "$WORK/apply.out")"
  # -- serve: start to the last node's script, memory after start ---------------------------
  last=$((n - 1)) mid=$((n / 2))
  last_mac=$(mac_of "$last") mid_mac=$(mac_of "$mid")
  start=$(now)
  env -u RUST_LOG "$BOOTVOL" --config "$conf" serve > "$WORK/serve-$n.log" 2>&1 &
  SERVE_PID=$!
  until curl -sf -o /dev/null "$BOOT/boot/${last_mac//:/-}.ipxe"; do
    kill -0 "$SERVE_PID" || { cat "$WORK/serve-$n.log" >&2; exit 1; }
    sleep 0.005
  done
  record "$n" start_s "$(since "$start")"
  until curl -sf -o /dev/null "$API/v1/nodes?limit=1"; do sleep 0.005; done
  record "$n" rss_start_mib "$(rss_mib "$SERVE_PID")"
  # -- the API ---------------------------------------------------------------------------------
  read -r t b < <(timed_get "$API/v1/nodes" "${V[@]}"); record "$n" api_nodes_s "$t"; record "$n" api_nodes_bytes "$b"
  read -r t _ < <(timed_get "$API/v1/nodes?limit=1000" "${V[@]}"); record "$n" api_limit1000_s "$t"
  mid_uuid=$(curl -sf "${V[@]}" "$API/v1/nodes/node-$(printf %06d "$mid")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["uuid"])')
  read -r t _ < <(timed_get "$API/v1/nodes?limit=1000&marker=$mid_uuid" "${V[@]}"); record "$n" api_deep_page_s "$t"
  read -r t _ < <(timed_get "$API/v1/nodes/detail?limit=100&sort_key=name" "${V[@]}"); record "$n" api_detail_name_s "$t"
  read -r t _ < <(timed_get "$API/v1/ports?address=$mid_mac" "${V[@]}"); record "$n" api_port_address_s "$t"
  grep -q "$mid_mac" "$WORK/answer" || { echo "port $mid_mac not in its answer" >&2; exit 1; }
  # -- the admin page (noauth: a session cookie, no log-in) ----------------------------------
  jar=$WORK/jar-$n
  curl -sf -c "$jar" -b "$jar" -L -o /dev/null "$API/admin/"
  read -r t _ < <(timed_get "$API/admin/" -b "$jar"); record "$n" admin_first_s "$t"
  read -r t _ < <(timed_get "$API/admin/?page=$((n / 100))" -b "$jar"); record "$n" admin_deep_s "$t"
  read -r t _ < <(timed_get "$API/admin/?q=${mid_mac//:/-}" -b "$jar"); record "$n" admin_mac_s "$t"
  grep -q "node-$(printf %06d "$mid")" "$WORK/answer" || { echo "MAC search missed its node" >&2; exit 1; }
  read -r t _ < <(timed_get "$API/admin/?problem=1" -b "$jar"); record "$n" admin_problems_s "$t"
  record "$n" rss_lists_mib "$(rss_mib "$SERVE_PID")"
  # -- one change, then the served script: from a PATCH of the node's name (Ironic lets a
  # deployed node's name change; its volume information only while powered off) to the script
  # that carries the new name --------------------------------------------------------------
  change_times=()
  for round in 1 2 3; do
    name=renamed-$round-$mid
    start=$(now)
    curl -sf -o /dev/null "${V[@]}" -X PATCH -H 'Content-Type: application/json' \
      -d "[{\"op\": \"replace\", \"path\": \"/name\", \"value\": \"$name\"}]" \
      "$API/v1/nodes/$mid_uuid" || { echo "PATCH refused" >&2; exit 1; }
    patched=$(since "$start")
    until curl -sf "$BOOT/boot/${mid_mac//:/-}.ipxe" | grep -q "^# bootvol: $name ($mid_uuid)"; do
      [ "$(awk -v s="$(since "$start")" 'BEGIN {print (s > 30)}')" = 0 ] || { echo "rename to $name not served in 30 s" >&2; exit 1; }
      sleep 0.002
    done
    change_times+=("$(since "$start")")
    record "$n" patch_s "$patched"
  done
  record "$n" change_served_s "$(printf '%s\n' "${change_times[@]}" | sort -n | sed -n 2p)"
  kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=
  # -- export: time and peak memory --------------------------------------------------------
  /usr/bin/time -f '%e %M' -o "$WORK/time" env -u RUST_LOG "$BOOTVOL" --config "$conf" export > "$WORK/export.json"
  read -r secs kib < "$WORK/time"
  record "$n" export_s "$secs"
  record "$n" export_peak_mib "$(awk -v k="$kib" 'BEGIN {printf "%.1f", k / 1024}')"
  rm -f "$inv" "$WORK/export.json"
done

cat > "$WORK/meta.env" <<EOF
DATE=$(date -u +%Y-%m-%d)
CORES=$(nproc)
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
KERNEL=$(uname -r)
COMMIT=$BENCH_COMMIT${BENCH_DIRTY:+ (with uncommitted changes)}
SQLITE=$(grep -A1 'name = "libsqlite3-sys"' "$ROOT/Cargo.lock" | sed -n 's/version = "\(.*\)"/\1/p')
EOF
python3 "$ROOT/bench/scale_report.py" "$WORK" > "$OUT"
echo "wrote $OUT" >&2
