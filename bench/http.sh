# Per-MAC boot scripts over HTTP (sourced by bench/run.sh): bootvol against nginx serving the same
# scripts as files, nginx answering the same bytes from memory (`return 200`), and the minimal
# responder (bench/tools null-http) as the limit of one core; 64 and 1,000 connections, interleaved
# rounds; then a requests/s and p99 series against connections, plotted.
# shellcheck shell=bash

nginx_conf nginx-files 18101 "    root $WORK/www;" > "$WORK/nginx-files.conf"
# The same bytes from memory: one exact location per script, `return 200 "<script>"` (a `$` in a
# script would be a variable to nginx: it goes through a geo constant).
python3 - "$WORK/www/boot" > "$WORK/return-locations.conf" <<'EOF'
import os, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    body = open(os.path.join(d, name), encoding="utf-8").read()
    body = body.replace("\\", "\\\\").replace('"', '\\"').replace("$", "${dollar}")
    print(f'    location = /boot/{name} {{ return 200 "{body}"; }}')
EOF
# shellcheck disable=SC2016 # $dollar is nginx's, not the shell's
nginx_conf nginx-return 18105 "    include $WORK/return-locations.conf;" \
  | sed 's|^http {|http {\n  geo $dollar { default "$"; }|' > "$WORK/nginx-return.conf"

HTTP_SERVERS=("bootvol:18100" "nginx-files:18101" "nginx-return:18105" "null-http:18106")
start_bootvol bootvol "$BOOTVOL" "$WORK/10k.toml"
start_nginx nginx-files
start_nginx nginx-return
start_server null-http "$LOGS/null-http.log" "$TOOLS/null-http" 127.0.0.1:18106 "$WORK/www/boot/$(head -1 "$WORK/macs.txt").ipxe"
if [ -n "$BASE_BIN" ]; then
  start_bootvol baseline "$BASE_BIN" "$WORK/base-10k.toml"
  HTTP_SERVERS+=("baseline:18102")
fi
for server in "${HTTP_SERVERS[@]}"; do
  wait_http "http://127.0.0.1:${server#*:}/boot/$(tail -1 "$WORK/macs.txt").ipxe"
  # Each peer answers the same bytes as bootvol (the null responder: the first script's, to any
  # path; an earlier bootvol may render its scripts otherwise).
  if [ "${server%%:*}" != null-http ] && [ "${server%%:*}" != baseline ]; then
    curl -sf "http://127.0.0.1:${server#*:}/boot/$(tail -1 "$WORK/macs.txt").ipxe" \
      | cmp -s - "$WORK/www/boot/$(tail -1 "$WORK/macs.txt").ipxe" || { echo "${server%%:*} answers other bytes" >&2; exit 1; }
  fi
done

for conns in 64 1000; do
  for _ in $(seq 1 "$ROUNDS"); do   # interleaved rounds: every server once per round
    for server in "${HTTP_SERVERS[@]}"; do
      record "http$conns.${server%%:*}" "$(wrk_round "${server#*:}" "$conns" "$DURATION")"
    done
  done
done
# The series (one run per server and point; 64 and 1,000 are measured again, as one series).
for conns in $SERIES; do
  for server in "${HTTP_SERVERS[@]}"; do
    [ "${server%%:*}" = baseline ] && continue
    record "series.${server%%:*}" "$conns $(wrk_round "${server#*:}" "$conns" "$DURATION")"
  done
done
wc -l < "$LOGS/bootvol.log" > "$WORK/res/http.bootvol_log_lines"
sleep 1.1   # nginx flushes its access log buffer within a second
wc -l < "$LOGS/nginx-files.access.log" > "$WORK/res/http.nginx_log_lines"

if [ -n "$PLOT" ] && command -v gnuplot >/dev/null; then
  for s in bootvol nginx-files nginx-return null-http; do cut -d' ' -f1-3 "$WORK/res/series.$s" > "$WORK/series-$s.dat"; done
  gnuplot <<EOF
set terminal pngcairo size 900,700 font "sans,10"
set output "$PLOT"
set multiplot layout 2,1 title "Per-MAC scripts, 10,000 nodes, one server core (wrk on the other), $(date -u +%Y-%m-%d)"
set logscale x 2
set xtics (${SERIES// /, })
set xlabel "connections"
set key outside right
set grid
set ylabel "requests/s"
set yrange [0:*]
plot "$WORK/series-bootvol.dat" using 1:2 with linespoints lw 2 title "bootvol", \
     "$WORK/series-nginx-files.dat" using 1:2 with linespoints title "nginx, files", \
     "$WORK/series-nginx-return.dat" using 1:2 with linespoints title "nginx, return 200", \
     "$WORK/series-null-http.dat" using 1:2 with linespoints dt 2 title "minimal responder"
set ylabel "p99 latency (ms, client side)"
set logscale y
set yrange [*:*]
plot "$WORK/series-bootvol.dat" using 1:3 with linespoints lw 2 title "bootvol", \
     "$WORK/series-nginx-files.dat" using 1:3 with linespoints title "nginx, files", \
     "$WORK/series-nginx-return.dat" using 1:3 with linespoints title "nginx, return 200", \
     "$WORK/series-null-http.dat" using 1:3 with linespoints dt 2 title "minimal responder"
unset multiplot
EOF
fi
