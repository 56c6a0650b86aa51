# Authentication (sourced by bench/run.sh): per-MAC boot scripts over HTTP while 8 clients
# send wrong passwords to the REST API (http_basic, a cost-10 bcrypt htpasswd as `htpasswd -B`
# writes), against the same load without them, interleaved rounds. The 8 clients share one
# address, as an attacker on one host does. bootvol on the server core; wrk and the 8 clients on
# the load core.
# shellcheck shell=bash
HASH=$(htpasswd -nbB -C 10 operator 's3cret-pass' | cut -d: -f2-)
printf 'operator:%s\n' "$HASH" > "$WORK/htpasswd"
config "$ROOT" "$WORK/10k.db" 127.0.0.1:18104 127.0.0.1:16904 127.0.0.1:16385 \
  | sed "/^\[api\]/a auth_strategy = \"http_basic\"\nhttp_basic_auth_user_file = \"$WORK/htpasswd\"" > "$WORK/auth.toml"
start_bootvol bootvol-auth "$BOOTVOL" "$WORK/auth.toml"
wait_http http://127.0.0.1:18104/boot.ipxe
latency_round() { # prints "p50_ms p99_ms"
  on_load wrk -t1 -c16 -d"${DURATION}s" --latency -s "$WORK/macs.lua" "http://127.0.0.1:18104/" > "$WORK/wrk-auth.txt"
  awk 'function ms(p) { v=p+0; if (p ~ /us$/) v/=1000; else if (p ~ /ms$/) v=v; else if (p ~ /s$/) v*=1000; return v }
       /^ +50%/ {a=ms($2)} /^ +99%/ {b=ms($2)} END {printf "%.2f %.2f\n", a, b}' "$WORK/wrk-auth.txt"
}
hammer() { # 8 clients, wrong passwords, until killed; counts answers by status in $WORK/hammer-<n>
  for n in $(seq 1 8); do
    ( while :; do on_load curl -s -o /dev/null -w '%{http_code}\n' -u operator:wrong http://127.0.0.1:16385/v1/nodes; done > "$WORK/hammer-$n" ) &
    HAMMERS+=($!)
  done
}
for _ in $(seq 1 "$ROUNDS"); do
  record auth.quiet "$(latency_round)"
  HAMMERS=(); hammer; sleep 1
  record auth.loud "$(latency_round)"
  kill "${HAMMERS[@]}" 2>/dev/null; wait "${HAMMERS[@]}" 2>/dev/null || true
done
cat "$WORK"/hammer-* | grep -c '^401$' > "$WORK/res/auth.401" || true
cat "$WORK"/hammer-* | grep -c '^429$' > "$WORK/res/auth.429" || true
