# Start-up and resident memory with 10,000 nodes (sourced by bench/run.sh): from process start to
# the first 200 answer for the last node's MAC (every script is rendered before the listener
# answers), the resident set then, and again after DURATION seconds of 1,000 wrk connections.
# shellcheck shell=bash
memory_round() { # NAME BINARY CONFIG PORT
  local t0 t1 pid
  t0=$(date +%s%N)
  start_bootvol "$1" "$2" "$3"
  wait_http "http://127.0.0.1:$4/boot/52-54-01-00-27-0f.ipxe"
  t1=$(date +%s%N)
  pid=$(pid_of "$1")
  local started; started=$(rss_kib "$pid")
  wrk_round "$4" 1000 "$DURATION" >/dev/null
  # start_ms rss_started_kib rss_after_load_kib
  record "memory.$1" "$(( (t1 - t0) / 1000000 )) $started $(rss_kib "$pid")"
  stop_server "$1"
}
for _ in $(seq 1 "$ROUNDS"); do
  memory_round bootvol "$BOOTVOL" "$WORK/10k.toml" 18100
  if [ -n "$BASE_BIN" ]; then memory_round baseline "$BASE_BIN" "$WORK/base-10k.toml" 18102; fi
done
