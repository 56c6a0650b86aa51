#!/usr/bin/env bash
# bootvol benchmarks: every row of the goal table (issue 14) in one run, side by side with its
# peers and with a "null" server that shows the limit, interleaved rounds, medians; written to
# BENCHMARKS.md. bench/README.md says what each row measures.
#
#   bench/run.sh                    # root (apt-get of the peers, network namespaces); ~25 minutes
#   BASELINE=c5c18e4 bench/run.sh   # also an earlier bootvol, built from that commit, in every
#                                   # interleaved round (a change must not make the figures worse)
#   ROUNDS=1 DURATION=2 STORM_N="50 200" BOOT_NODES=100 NEIGHBOURS=20 SERIES="16 64" \
#     OUT=/tmp/b.md PLOT=/tmp/b.png bench/run.sh   # a smoke run: the harness works, figures mean nothing
#   ROWS="http tftp" bench/run.sh   # some sections only (http tftp storm boot memory neighbour auth)
#
# Every server under test runs on core SERVER_CPU (taskset), every load generator on LOAD_CPU.
# The whole run happens in a network namespace of its own (loopback only, plus the veth and
# macvlan links of the neighbour row), so no port of the host is taken and none is in the way.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export OUT=${OUT:-$ROOT/BENCHMARKS.md}
export PLOT=${PLOT:-$ROOT/docs/bench-http-connections.png}
export ROUNDS=${ROUNDS:-3}            # interleaved rounds of every measure; medians reported
export DURATION=${DURATION:-8}        # seconds of each wrk run and of the neighbour run
export SERIES=${SERIES:-"16 64 256 1000"}  # connections of the requests/s and p99 series
export STORM_N=${STORM_N:-"500 5000"} # TFTP clients at once
export BOOT_NODES=${BOOT_NODES:-1000} # nodes of the simulated boot storm
export NEIGHBOURS=${NEIGHBOURS:-250}  # macvlan clients of the neighbour-check row
export TFTP_RUNS=${TFTP_RUNS:-15}     # hyperfine runs per TFTP server, mode and round
export ROWS=${ROWS:-"http tftp storm boot memory neighbour auth"}
export SERVER_CPU=${SERVER_CPU:-1} LOAD_CPU=${LOAD_CPU:-0}

if [ -z "${BENCH_INNER:-}" ]; then
  # -- outside the namespace: tools, builds ---------------------------------------------------
  need() { command -v "$1" >/dev/null 2>&1; }
  if ! need wrk || ! need nginx || ! need in.tftpd || ! need atftp || ! need tftp || ! need hyperfine \
    || ! need htpasswd || ! need dnsmasq || ! need gnuplot || [ ! -f /usr/lib/ipxe/undionly.kpxe ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx wrk tftpd-hpa atftp \
      tftp-hpa hyperfine bc apache2-utils dnsmasq-base gnuplot-nox ipxe iproute2 util-linux >/dev/null
  fi
  # atftpd conflicts with tftpd-hpa as a package: unpack it beside the project instead.
  if [ ! -x "$ROOT/target/bench-tools/usr/sbin/atftpd" ]; then
    mkdir -p "$ROOT/target/bench-tools" && (cd "$ROOT/target/bench-tools" && apt-get download atftpd >/dev/null && dpkg -x atftpd_*.deb .)
  fi
  cargo build --release --locked >/dev/null 2>&1 || cargo build --release --locked
  # The null servers and the load generator: a crate of its own (bench/tools), not a member
  # of the workspace.
  CARGO_TARGET_DIR=$ROOT/target/bench-tools-build cargo build --release --locked \
    --manifest-path bench/tools/Cargo.toml >/dev/null 2>&1 \
    || CARGO_TARGET_DIR=$ROOT/target/bench-tools-build cargo build --release --locked --manifest-path bench/tools/Cargo.toml
  if [ -n "${BASELINE:-}" ]; then
    # An earlier bootvol for comparison, built in its own worktree (outside the project folder:
    # cargo would take it for a member of this workspace) and target folder.
    BASE_REV=$(git rev-parse --short "$BASELINE")
    BASE_SRC=${TMPDIR:-/tmp}/bootvol-bench-baseline/$BASE_REV
    [ -d "$BASE_SRC" ] || git worktree add -q --detach "$BASE_SRC" "$BASE_REV"
    (cd "$BASE_SRC" && CARGO_TARGET_DIR=$ROOT/target/bench-baseline/target cargo build --release --locked >/dev/null 2>&1) \
      || (cd "$BASE_SRC" && CARGO_TARGET_DIR=$ROOT/target/bench-baseline/target cargo build --release --locked)
    export BASE_REV BASE_SRC BASE_BIN=$ROOT/target/bench-baseline/target/release/bootvol
  fi
  export BENCH_COMMIT BENCH_DIRTY
  BENCH_COMMIT=$(git rev-parse --short HEAD); BENCH_DIRTY=$(git status --porcelain -- src crates Cargo.lock | head -1)
  BENCH_INNER=1 exec unshare --net -- "$ROOT/bench/run.sh" "$@"
fi

# -- inside the namespace ---------------------------------------------------------------------
ip link set lo up
# A non-loopback address: without one, getaddrinfo(AI_ADDRCONFIG) resolves no IPv4 address and
# tftpd-hpa cannot parse --address 127.0.0.1.
ip addr add 192.0.2.254/32 dev lo
# 65536 open files for every process, or as many as the hard limit allows (the report says which).
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
export NOFILE; NOFILE=$(ulimit -n)
BOOTVOL=$ROOT/target/release/bootvol
TOOLS=$ROOT/target/bench-tools-build/release
ATFTPD=$ROOT/target/bench-tools/usr/sbin/atftpd
BASE_BIN=${BASE_BIN:-}
WORK=$(mktemp -d /tmp/bootvol-bench.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/res"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F neighbour_teardown >/dev/null; then neighbour_teardown; fi
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# Caps above the largest number of clients of the run (the knobs are lists: split on purpose).
# shellcheck disable=SC2086
CAP=$(printf '%s\n' $STORM_N "$BOOT_NODES" $SERIES 1000 "$NEIGHBOURS" | sort -n | tail -1)
CAP=$((CAP + 100))
export CAP

# -- fixtures: 10,000 deployed nodes with CHAP (each script a ~900-byte iSCSI sanboot that
# carries its secret), 1,000 of their MACs, the TFTP files --------------------
python3 - "$WORK" <<'EOF'
import json, sys, os
work = sys.argv[1]
def inventory(n):
    nodes = []
    for i in range(n):
        mac = "52:54:01:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255)
        nodes.append({"name": "node-%05d" % i, "storage_interface": "external", "provision_state": "active",
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
cp /usr/lib/ipxe/undionly.kpxe "$WORK/tftp/undionly.kpxe"
chmod 755 "$WORK" "$WORK/tftp"; chmod 644 "$WORK"/tftp/*
cat > "$WORK/macs.lua" <<EOF
local macs = {}
for line in io.lines("$WORK/macs.txt") do macs[#macs + 1] = line end
local i = 0
request = function()
  i = i % #macs + 1
  return wrk.format("GET", "/boot/" .. macs[i] .. ".ipxe")
end
EOF
# bootvol on 18100 (HTTP) / 16900 (TFTP) / 16385 (API); the baseline on 18102 / 16903 / 16386.
config "$ROOT" "$WORK/10k.db" 127.0.0.1:18100 127.0.0.1:16900 127.0.0.1:16385 > "$WORK/10k.toml"
env -u RUST_LOG "$BOOTVOL" --config "$WORK/10k.toml" apply "$WORK/inv10k.json" >/dev/null
if [ -n "$BASE_BIN" ]; then
  # Its own copy of the database (an older schema must not meet a newer one) and ports.
  config "$BASE_SRC" "$WORK/base-10k.db" 127.0.0.1:18102 127.0.0.1:16903 127.0.0.1:16386 > "$WORK/base-10k.toml"
  env -u RUST_LOG "$BASE_BIN" --config "$WORK/base-10k.toml" apply "$WORK/inv10k.json" >/dev/null
fi
# The answers the peers serve and the generators compare with: bootvol's own, fetched once (and
# the baseline's, which may render its scripts otherwise, for the generators to check it by).
fetch_answers() { # BINARY CONFIG PORT DIR
  start_bootvol fixture "$1" "$2"
  wait_http "http://127.0.0.1:$3/boot.ipxe"
  mkdir -p "$4/boot"
  curl -sf "http://127.0.0.1:$3/boot.ipxe" > "$4/boot.ipxe"
  while read -r m; do curl -sf "http://127.0.0.1:$3/boot/$m.ipxe" > "$4/boot/$m.ipxe"; done < "$WORK/macs.txt"
  stop_server fixture
}
fetch_answers "$BOOTVOL" "$WORK/10k.toml" 18100 "$WORK/www"
if [ -n "$BASE_BIN" ]; then fetch_answers "$BASE_BIN" "$WORK/base-10k.toml" 18102 "$WORK/www-base"; fi

for row in $ROWS; do
  echo "== $row ($(date +%T))" >&2
  # shellcheck source=/dev/null
  source "$ROOT/bench/$row.sh"
  stop_all_servers
done

# -- report -----------------------------------------------------------------------------------
cat > "$WORK/meta.env" <<EOF
DATE=$(date -u +%Y-%m-%d)
CORES=$(nproc)
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
RAM_GIB=$(free -g | awk '/Mem:/ {print $2}')
KERNEL=$(uname -r)
COMMIT=$BENCH_COMMIT${BENCH_DIRTY:+ (with uncommitted changes)}
NGINX=$(nginx -v 2>&1 | sed 's/^nginx version: //')
TFTPD_HPA=$(dpkg-query -W -f='${Version}' tftpd-hpa 2>/dev/null)
ATFTPD=$(basename "$(find "$ROOT"/target/bench-tools/ -maxdepth 1 -name 'atftpd_*.deb' | head -1)" .deb | sed 's/^atftpd_//; s/_amd64$//')
DNSMASQ=$(dnsmasq --version | head -1 | awk '{print $3}')
WRK=$(dpkg-query -W -f='${Version}' wrk 2>/dev/null)
IPXE=$(dpkg-query -W -f='${Version}' ipxe 2>/dev/null)
BASE_REV=${BASE_REV:-}
EOF
python3 "$ROOT/bench/report.py" "$WORK" > "$OUT"
echo "wrote $OUT" >&2
