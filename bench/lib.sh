# Helpers of bench/run.sh (sourced): pinning, servers started and stopped by name, bootvol's
# bench configuration, fixtures, wrk rounds, results recorded one line per round.
# shellcheck shell=bash

# -- pinning: every server under test on SERVER_CPU (start_server), every load generator on
# LOAD_CPU --------------------------------------------------------------------------------------
on_load() { taskset -c "$LOAD_CPU" "$@"; }

# -- results: $WORK/res/<key>, one line per round ---------------------------------------------
record() { local key=$1; shift; mkdir -p "$WORK/res"; echo "$*" >> "$WORK/res/$key"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# -- servers: started in the background, remembered by name, stopped by name ------------------
declare -A SERVER_PID
start_server() { # NAME LOGFILE COMMAND...: pinned to the server core, output to LOGFILE
  local name=$1 log=$2; shift 2
  # An external command, so that $! is the server itself (taskset and env exec it).
  taskset -c "$SERVER_CPU" "$@" >"$log" 2>&1 &
  SERVER_PID[$name]=$!
  PIDS+=($!)
}
stop_server() { # NAME...
  local name pid
  for name in "$@"; do
    pid=${SERVER_PID[$name]:-}
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "SERVER_PID[$name]"
  done
}
stop_all_servers() { stop_server "${!SERVER_PID[@]}"; }
pid_of() { echo "${SERVER_PID[$1]}"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

wait_http() { # URL: a 200 within 10 s
  for _ in $(seq 1 1000); do curl -sf -o /dev/null "$1" && return 0; sleep 0.01; done
  echo "no answer from $1" >&2; return 1
}
wait_tftp() { # PORT [HOST]: the 100 KiB file within 10 s
  for _ in $(seq 1 20); do
    timeout 1 atftp -g -r 100k.bin -l /dev/null "${2:-127.0.0.1}" "$1" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "no TFTP answer on port $1" >&2; return 1
}

# -- bootvol's configuration for the bench ----------------------------------------------------
# config SRC DB HTTP_LISTEN TFTP_LISTEN API_LISTEN [SECRETS]
# SRC is the source tree of the binary (this one or the baseline's): a key its configuration
# source (src/config.rs before the crate split, crates/core/src/config* after) does not know
# is left out, so an older bootvol reads the same file. The clients sit on loopback and the
# nodes carry CHAP: script_secrets = "any" (SECRETS overrides it); the caps per client and
# max_transfers are raised above the largest N of the run.
config() {
  local src=$1 db=$2 http=$3 tftp=$4 api=$5 secrets=${6:-any}
  knows() { grep -rqs "$1" "$src/src/config.rs" "$src/crates/core/src/config.rs" "$src/crates/core/src/config"; }
  cat <<EOF
[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]
[database]
path = "$db"
[api]
listen = "$api"
[http]
listen = "$http"
public_url = "http://127.0.0.1:18100"
files_root = "$WORK/files"
EOF
  if knows max_connections_per_client; then
    printf 'max_connections = %s\nmax_connections_per_client = %s\n' "$CAP" "$CAP"
  fi
  cat <<EOF
[tftp]
listen = "$tftp"
root = "$WORK/tftp"
max_block_size = 1468
max_window_size = 16
max_transfers = $CAP
EOF
  if knows max_transfers_per_client; then printf 'max_transfers_per_client = %s\n' "$CAP"; fi
  if knows script_secrets; then printf '[boot]\nscript_secrets = "%s"\n' "$secrets"; fi
}

# bootvol at its default log level (info: one line per request) to a file, pinned.
start_bootvol() { # NAME BINARY CONFIG
  start_server "$1" "$LOGS/$1.log" env -u RUST_LOG "$2" --config "$3" serve
}

# -- nginx ------------------------------------------------------------------------------------
# nginx: 1 worker on the server core, an access log line per request through a 64k buffer
# flushed every second (bootvol logs each request at its default info level), Debian's
# sendfile/tcp_nopush, keep-alive connections not closed after 1,000 requests (wrk would reconnect).
nginx_conf() { # NAME PORT SERVER_BLOCK_BODY
  mkdir -p "$WORK/$1"
  cat <<EOF
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $WORK/$1/nginx.pid;
error_log $LOGS/$1.error.log;
events { worker_connections 16384; }
http {
  access_log $LOGS/$1.access.log combined buffer=64k flush=1s;
  client_body_temp_path $WORK/$1/t1; proxy_temp_path $WORK/$1/t2; fastcgi_temp_path $WORK/$1/t3;
  uwsgi_temp_path $WORK/$1/t4; scgi_temp_path $WORK/$1/t5;
  sendfile on; tcp_nopush on; keepalive_requests 10000000;
  default_type text/plain;
  server {
    listen 127.0.0.1:$2 backlog=4096;
$3
  }
}
EOF
}
start_nginx() { # NAME (its conf in $WORK/NAME.conf)
  start_server "$1" "$LOGS/$1.out" nginx -p "$WORK/$1" -c "$WORK/$1.conf" -g "daemon off; user root;"
}
# -- wrk --------------------------------------------------------------------------------------
# wrk_round PORT CONNECTIONS SECONDS [HOST]: prints "requests/s p99_ms errors", where errors
# counts socket errors and non-2xx answers (0 expected).
wrk_round() {
  local out="$WORK/wrk.txt"
  on_load wrk -t1 -c"$2" -d"$3s" --timeout 10s --latency -s "$WORK/macs.lua" "http://${4:-127.0.0.1}:$1/" > "$out"
  awk 'function ms(p) { v = p + 0; if (p ~ /us$/) v /= 1000; else if (p ~ /ms$/) v = v; else if (p ~ /s$/) v *= 1000; return v }
       /Requests\/sec/ {r = $2} /^ +99%/ {p = ms($2)}
       /Socket errors/ {gsub(/,/, ""); e += $4 + $6 + $8 + $10}
       /Non-2xx/ {e += $NF}
       END {printf "%s %.2f %d\n", r, p, e}' "$out"
}

# -- TFTP servers, each pinned to the server core ---------------------------------------------
# bootvol 16900, tftpd-hpa 16901, atftpd 16902, the baseline 16903, the null server 16905,
# dnsmasq 69 (its TFTP port cannot be changed; the run's own network namespace has it free).
# Logging: bootvol one line per transfer (info); dnsmasq one per transfer to a file; atftpd its
# default level (5: start-up and errors, no line per transfer; level 6 writes three) to a file;
# tftpd-hpa only ever logs to syslog, and none runs in the namespace.
TFTP_SERVERS=()
start_dnsmasq() { # TFTP only (no DNS, no DHCP), on 127.0.0.1:69
  start_server dnsmasq "$LOGS/dnsmasq.out" dnsmasq --keep-in-foreground --conf-file=/dev/null --port=0 \
    --listen-address=127.0.0.1 --bind-interfaces --enable-tftp --tftp-root="$WORK/tftp" --tftp-max="$CAP" \
    --user=nobody --pid-file= --log-facility="$LOGS/dnsmasq.log"
}
start_tftp_servers() {
  start_bootvol bootvol "$BOOTVOL" "$WORK/10k.toml"
  start_server tftpd-hpa "$LOGS/tftpd-hpa.log" in.tftpd -L -s "$WORK/tftp" --address 127.0.0.1:16901 -u nobody -B 65464
  touch "$LOGS/atftpd.log"; chmod 666 "$LOGS/atftpd.log"   # it writes as nobody
  start_server atftpd "$LOGS/atftpd.out" "$ATFTPD" --daemon --no-fork --port 16902 --bind-address 127.0.0.1 \
    --user nobody.nogroup --logfile "$LOGS/atftpd.log" --maxthread "$CAP" "$WORK/tftp"
  start_dnsmasq
  start_server null-tftp "$LOGS/null-tftp.log" "$TOOLS/null-tftp" 127.0.0.1:16905 "$WORK"/tftp/*
  TFTP_SERVERS=("bootvol:16900" "tftpd-hpa:16901" "atftpd:16902" "dnsmasq:69" "null-tftp:16905")
  if [ -n "$BASE_BIN" ]; then
    start_bootvol baseline "$BASE_BIN" "$WORK/base-10k.toml"
    TFTP_SERVERS+=("baseline:16903")
  fi
  local server
  for server in "${TFTP_SERVERS[@]}"; do wait_tftp "${server#*:}"; done
}
