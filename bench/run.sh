#!/usr/bin/env bash
# bootvol benchmarks, side by side with peers in the same run, written to BENCHMARKS.md.
#
#   bench/run.sh            # needs root for apt-get the first time; about 5 minutes
#   BASELINE=c5c18e4 bench/run.sh   # also an earlier bootvol, built from that commit, in every
#                                   # interleaved round (a change must not make the figures worse)
#
# Measures: per-MAC script requests/s and p99 at 64 connections against nginx serving the same
# scripts as static files; TFTP 1 MiB transfers against tftpd-hpa and atftpd; 500 simultaneous
# TFTP clients; resident memory idle and with 10,000 nodes; start-to-serving time with 10,000 nodes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/BENCHMARKS.md}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
WORK=$(mktemp -d /tmp/bootvol-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx || ! need in.tftpd || ! need atftp || ! need tftp || ! need hyperfine || ! need htpasswd; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx wrk tftpd-hpa atftp tftp-hpa hyperfine bc apache2-utils >/dev/null
fi
# atftpd conflicts with tftpd-hpa as a package: unpack it beside the project instead.
ATFTPD=$ROOT/target/bench-tools/usr/sbin/atftpd
if [ ! -x "$ATFTPD" ]; then
  mkdir -p "$ROOT/target/bench-tools" && (cd "$ROOT/target/bench-tools" && apt-get download atftpd >/dev/null && dpkg -x atftpd_*.deb .)
fi

cargo build --release --locked >/dev/null 2>&1 || cargo build --release --locked
BOOTVOL=$ROOT/target/release/bootvol
# An earlier bootvol for comparison, built in its own worktree and target folder.
BASE_BIN=""
if [ -n "${BASELINE:-}" ]; then
  BASE_REV=$(git rev-parse --short "$BASELINE")
  # Outside the project folder: cargo would take it for a member of this workspace.
  BASE_SRC=${TMPDIR:-/tmp}/bootvol-bench-baseline/$BASE_REV
  [ -d "$BASE_SRC" ] || git worktree add -q --detach "$BASE_SRC" "$BASE_REV"
  (cd "$BASE_SRC" && CARGO_TARGET_DIR=$ROOT/target/bench-baseline/target cargo build --release --locked >/dev/null 2>&1) \
    || (cd "$BASE_SRC" && CARGO_TARGET_DIR=$ROOT/target/bench-baseline/target cargo build --release --locked)
  BASE_BIN=$ROOT/target/bench-baseline/target/release/bootvol
fi

# -- fixtures ---------------------------------------------------------------------------------
python3 - "$WORK" <<'EOF'
import json, sys, os
work = sys.argv[1]
def inventory(n):
    nodes = []
    for i in range(n):
        mac = "52:54:01:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255)
        nodes.append({"name": "node-%05d" % i, "storage_interface": "external",
            "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": mac}],
            "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n%d" % i}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-%d" % i,
                "properties": {"target_iqn": "iqn.2024-01.org.example.san:vol-%d" % i, "target_portal": "192.0.2.5:3260",
                    "target_lun": 1, "auth_method": "CHAP", "auth_username": "user%d" % i,
                    "auth_password": "secret-%08d" % i}}]})
    return {"nodes": nodes}
json.dump(inventory(10000), open(os.path.join(work, "inv10k.json"), "w"))
with open(os.path.join(work, "macs.txt"), "w") as f:
    for i in range(1000):
        f.write("52-54-01-%02x-%02x-%02x\n" % (i >> 16 & 255, i >> 8 & 255, i & 255))
EOF
mkdir -p "$WORK/tftp" "$WORK/files"
head -c 1048576 /dev/urandom > "$WORK/tftp/1m.bin"
head -c 102400 /dev/urandom > "$WORK/tftp/100k.bin"

config() { # $1 = database file, $2 = HTTP port (18100), $3 = TFTP port (16900), $4 = API port
  # (given for the baseline only: it gets its own API port, and no key newer than it)
  local http=${2:-18100} tftp=${3:-16900}
  # Two instances run at once (bootvol and the baseline): the second gets its own API port.
  if [ -n "${4:-}" ]; then printf '[api]\nlisten = "127.0.0.1:%s"\n' "$4"; fi
  cat <<EOF
[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]
[database]
path = "$1"
[http]
listen = "127.0.0.1:$http"
public_url = "http://127.0.0.1:$http"
files_root = "$WORK/files"
[tftp]
listen = "127.0.0.1:$tftp"
root = "$WORK/tftp"
max_block_size = 1468
max_window_size = 16
# The 500 simultaneous clients all come from 127.0.0.1: caps above them.
max_transfers = 600
EOF
  # Keys the baseline (given an API port) may predate.
  [ -n "${4:-}" ] && return 0
  cat <<EOF
max_transfers_per_client = 600
[boot]
script_secrets = "any" # clients on loopback: no neighbour table
EOF
}
config "$WORK/empty.db" > "$WORK/empty.toml"
config "$WORK/10k.db" > "$WORK/10k.toml"
"$BOOTVOL" --config "$WORK/10k.toml" apply "$WORK/inv10k.json" >/dev/null
if [ -n "$BASE_BIN" ]; then
  # Its own copy of the database (an older schema must not meet a newer one) and ports.
  config "$WORK/base-empty.db" 18102 16903 16386 > "$WORK/base-empty.toml"
  config "$WORK/base-10k.db" 18102 16903 16386 > "$WORK/base-10k.toml"
  "$BASE_BIN" --config "$WORK/base-10k.toml" apply "$WORK/inv10k.json" >/dev/null
fi

wait_http() { for _ in $(seq 1 500); do curl -sf -o /dev/null "$1" && return 0; sleep 0.01; done; echo "no answer from $1" >&2; return 1; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# -- memory and start-up ----------------------------------------------------------------------
idle_rss() { # $1 = binary, $2 = config, $3 = port
  local P
  RUST_LOG=warn "$1" --config "$2" serve 2>"$WORK/serve-empty.log" & P=$!
  wait_http "http://127.0.0.1:$3/boot.ipxe"; sleep 1
  rss_kib $P; kill $P; wait $P 2>/dev/null || true
}
start_round() { # $1 = binary, $2 = config, $3 = port; prints "ms rss_kib"
  local t0 t1 P rss
  t0=$(date +%s%N)
  RUST_LOG=warn "$1" --config "$2" serve 2>"$WORK/serve-10k.log" & P=$!
  wait_http "http://127.0.0.1:$3/boot/52-54-01-00-27-0f.ipxe"
  t1=$(date +%s%N)
  rss=$(rss_kib $P); kill $P; wait $P 2>/dev/null || true
  echo "$(( (t1 - t0) / 1000000 )) $rss"
}
RSS_IDLE=$(idle_rss "$BOOTVOL" "$WORK/empty.toml" 18100)
if [ -n "$BASE_BIN" ]; then BASE_RSS_IDLE=$(idle_rss "$BASE_BIN" "$WORK/base-empty.toml" 18102); fi
STARTS=(); BASE_STARTS=()
for _ in $(seq 1 "$ROUNDS"); do   # interleaved with the baseline, when there is one
  read -r ms RSS_10K < <(start_round "$BOOTVOL" "$WORK/10k.toml" 18100); STARTS+=("$ms")
  if [ -n "$BASE_BIN" ]; then
    read -r ms BASE_RSS_10K < <(start_round "$BASE_BIN" "$WORK/base-10k.toml" 18102); BASE_STARTS+=("$ms")
  fi
done
START_MS=$(printf '%s\n' "${STARTS[@]}" | median)

# -- HTTP: per-MAC scripts, bootvol vs nginx --------------------------------------------------
RUST_LOG=info "$BOOTVOL" --config "$WORK/10k.toml" serve 2>"$WORK/serve-http.log" & BV=$!; PIDS+=($BV)
wait_http http://127.0.0.1:18100/boot.ipxe
if [ -n "$BASE_BIN" ]; then
  RUST_LOG=info "$BASE_BIN" --config "$WORK/base-10k.toml" serve 2>"$WORK/serve-base-http.log" & BB=$!; PIDS+=($BB)
  wait_http http://127.0.0.1:18102/boot.ipxe
fi
mkdir -p "$WORK/ngx/root/boot" "$WORK/ngx/logs"
while read -r m; do curl -s "http://127.0.0.1:18100/boot/$m.ipxe" > "$WORK/ngx/root/boot/$m.ipxe"; done < "$WORK/macs.txt"
cat > "$WORK/ngx/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/ngx/nginx.pid;
error_log $WORK/ngx/logs/error.log;
events { worker_connections 1024; }
http {
  access_log $WORK/ngx/logs/access.log;
  client_body_temp_path $WORK/ngx/t1; proxy_temp_path $WORK/ngx/t2; fastcgi_temp_path $WORK/ngx/t3;
  uwsgi_temp_path $WORK/ngx/t4; scgi_temp_path $WORK/ngx/t5;
  default_type text/plain;
  server { listen 127.0.0.1:18101; root $WORK/ngx/root; }
}
EOF
nginx -p "$WORK/ngx" -c "$WORK/ngx/nginx.conf" -g "daemon off; user root;" & NG=$!; PIDS+=($NG)
wait_http "http://127.0.0.1:18101/boot/$(head -1 "$WORK/macs.txt").ipxe"
cat > "$WORK/macs.lua" <<EOF
local macs = {}
for line in io.lines("$WORK/macs.txt") do macs[#macs + 1] = line end
local i = 0
request = function()
  i = i % #macs + 1
  return wrk.format("GET", "/boot/" .. macs[i] .. ".ipxe")
end
EOF
http_round() { # $1 = port; prints "rps p99_ms"
  wrk -t1 -c64 -d"${DURATION}s" --latency -s "$WORK/macs.lua" "http://127.0.0.1:$1/" > "$WORK/wrk.txt"
  if grep -q "Non-2xx" "$WORK/wrk.txt"; then echo "non-2xx answers from port $1" >&2; cat "$WORK/wrk.txt" >&2; exit 1; fi
  awk '/Requests\/sec/ {r=$2} /^ +99%/ {p=$2} END {
    v=p+0; if (p ~ /us$/) v/=1000; else if (p ~ /ms$/) v=v; else if (p ~ /s$/) v*=1000; printf "%s %.2f\n", r, v}' "$WORK/wrk.txt"
}
BV_RPS=(); BV_P99=(); NG_RPS=(); NG_P99=(); BASE_RPS=(); BASE_P99=()
for _ in $(seq 1 "$ROUNDS"); do   # interleaved rounds, medians reported
  read -r r p < <(http_round 18100); BV_RPS+=("$r"); BV_P99+=("$p")
  read -r r p < <(http_round 18101); NG_RPS+=("$r"); NG_P99+=("$p")
  if [ -n "$BASE_BIN" ]; then read -r r p < <(http_round 18102); BASE_RPS+=("$r"); BASE_P99+=("$p"); fi
done
BV_RPS_M=$(printf '%s\n' "${BV_RPS[@]}" | median); BV_P99_M=$(printf '%s\n' "${BV_P99[@]}" | median)
NG_RPS_M=$(printf '%s\n' "${NG_RPS[@]}" | median); NG_P99_M=$(printf '%s\n' "${NG_P99[@]}" | median)
HTTP_RATIO=$(echo "scale=2; $BV_RPS_M / $NG_RPS_M" | bc)
kill $BV $NG ${BB:-}; wait $BV $NG ${BB:-} 2>/dev/null || true

# -- TFTP -------------------------------------------------------------------------------------
source "$ROOT/bench/tftp.sh"

# -- boot scripts while the API is hammered with wrong passwords ------------------------------
source "$ROOT/bench/auth.sh"

# -- report -----------------------------------------------------------------------------------
verdict() { if [ "$(echo "$1" | bc)" = 1 ]; then echo "met"; else echo "**not met**"; fi; }
{
  echo "# Benchmarks"
  echo
  echo "Written by \`bench/run.sh\` on $(date -u +%Y-%m-%d). Medians of $ROUNDS interleaved rounds; every"
  echo "peer runs in the same run, on the same machine, over loopback."
  echo
  echo "Machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB RAM,"
  echo "Linux $(uname -r). bootvol $(git rev-parse --short HEAD 2>/dev/null || echo '?') release build; $(nginx -v 2>&1 | sed 's/^nginx version: //'),"
  echo "tftpd-hpa $(dpkg-query -W -f='${Version}' tftpd-hpa 2>/dev/null), atftpd $(basename "$(ls "$ROOT"/target/bench-tools/atftpd_*.deb | head -1)" .deb | sed 's/^atftpd_//; s/_amd64$//'), wrk $(dpkg-query -W -f='${Version}' wrk 2>/dev/null)."
  echo "The load generator shares the 2 cores with the server under test, so absolute figures are"
  echo "low and noisy; the ratios are what the targets are about."
  echo
  echo "## Per-MAC boot scripts over HTTP (64 connections, 1,000 different MACs, 10,000 nodes loaded)"
  echo
  echo "\`wrk -t1 -c64 -d${DURATION}s --latency\` with a Lua script cycling through 1,000 per-MAC URLs; nginx 1 worker"
  echo "serves the same scripts as static files. Both write an access log line per request."
  echo
  echo "| server | requests/s | p99 latency |"
  echo "|---|---|---|"
  echo "| bootvol | $BV_RPS_M | ${BV_P99_M} ms |"
  echo "| nginx | $NG_RPS_M | ${NG_P99_M} ms |"
  echo
  echo "bootvol / nginx = **${HTTP_RATIO}×** (target ≥ 0.8×: $(verdict "$HTTP_RATIO >= 0.8")). Rounds: bootvol ${BV_RPS[*]}; nginx ${NG_RPS[*]}."
  echo
  tftp_report
  echo
  auth_report
  echo
  echo "## Memory and start-up"
  echo
  echo "| measure | figure | target |"
  echo "|---|---|---|"
  echo "| resident memory, idle (no nodes) | $((RSS_IDLE / 1024)) MiB | ≤ 50 MiB: $(verdict "$RSS_IDLE <= 51200") |"
  echo "| resident memory, 10,000 nodes loaded | $((RSS_10K / 1024)) MiB | ≤ 150 MiB: $(verdict "$RSS_10K <= 153600") |"
  echo "| start to first per-MAC answer, 10,000 nodes | ${START_MS} ms (rounds: ${STARTS[*]}) | ≤ 1 s: $(verdict "$START_MS <= 1000") |"
  echo
  echo "Start-up is measured from process start to the first 200 answer for a MAC of the last"
  echo "node; every script is rendered before the listener answers."
  if [ -n "$BASE_BIN" ]; then
    BASE_RPS_M=$(printf '%s\n' "${BASE_RPS[@]}" | median); BASE_P99_M=$(printf '%s\n' "${BASE_P99[@]}" | median)
    echo
    echo "## Against bootvol $BASE_REV (the baseline), in the same interleaved rounds"
    echo
    echo "| measure | bootvol $(git rev-parse --short HEAD 2>/dev/null) | bootvol $BASE_REV |"
    echo "|---|---|---|"
    echo "| per-MAC scripts, requests/s | $BV_RPS_M (rounds: ${BV_RPS[*]}) | $BASE_RPS_M (rounds: ${BASE_RPS[*]}) |"
    echo "| per-MAC scripts, p99 | ${BV_P99_M} ms | ${BASE_P99_M} ms |"
    echo "| resident memory, idle / 10,000 nodes | $((RSS_IDLE / 1024)) / $((RSS_10K / 1024)) MiB | $((BASE_RSS_IDLE / 1024)) / $((BASE_RSS_10K / 1024)) MiB |"
    echo "| start to first per-MAC answer, 10,000 nodes | ${START_MS} ms (rounds: ${STARTS[*]}) | $(printf '%s\n' "${BASE_STARTS[@]}" | median) ms (rounds: ${BASE_STARTS[*]}) |"
    tftp_baseline_report
  fi
} > "$OUT"
echo "wrote $OUT"
