# Authentication part of bench/run.sh (sourced): per-MAC boot scripts over HTTP while 8 clients
# send wrong passwords to the REST API (http_basic, a cost-10 bcrypt htpasswd as `htpasswd -B`
# writes), against the same load without them, interleaved rounds. The 8 clients share one
# address, as an attacker on one host does.
HASH=$(htpasswd -nbB -C 10 operator 's3cret-pass' | cut -d: -f2-)
printf 'operator:%s\n' "$HASH" > "$WORK/htpasswd"
{ config "$WORK/10k.db" 18104 16904; printf '[api]\nlisten = "127.0.0.1:16385"\nauth_strategy = "http_basic"\nhttp_basic_auth_user_file = "%s"\n' "$WORK/htpasswd"; } > "$WORK/auth.toml"
RUST_LOG=info "$BOOTVOL" --config "$WORK/auth.toml" serve 2>"$WORK/serve-auth.log" & BA=$!; PIDS+=($BA)
wait_http http://127.0.0.1:18104/boot.ipxe
latency_round() { # prints "p50_ms p99_ms"
  wrk -t1 -c16 -d"${DURATION}s" --latency -s "$WORK/macs.lua" "http://127.0.0.1:18104/" > "$WORK/wrk-auth.txt"
  awk 'function ms(p) { v=p+0; if (p ~ /us$/) v/=1000; else if (p ~ /ms$/) v=v; else if (p ~ /s$/) v*=1000; return v }
       /^ +50%/ {a=ms($2)} /^ +99%/ {b=ms($2)} END {printf "%.2f %.2f\n", a, b}' "$WORK/wrk-auth.txt"
}
hammer() { # 8 clients, wrong passwords, until killed; counts answers by status in $WORK/hammer-<n>
  for n in $(seq 1 8); do
    ( while :; do curl -s -o /dev/null -w '%{http_code}\n' -u operator:wrong http://127.0.0.1:16385/v1/nodes; done > "$WORK/hammer-$n" ) &
    HAMMERS+=($!)
  done
}
QUIET_P50=(); QUIET_P99=(); LOUD_P50=(); LOUD_P99=()
for _ in $(seq 1 "$ROUNDS"); do
  read -r a b < <(latency_round); QUIET_P50+=("$a"); QUIET_P99+=("$b")
  HAMMERS=(); hammer; sleep 1
  read -r a b < <(latency_round); LOUD_P50+=("$a"); LOUD_P99+=("$b")
  kill "${HAMMERS[@]}" 2>/dev/null; wait "${HAMMERS[@]}" 2>/dev/null || true
done
AUTH_401=$(cat "$WORK"/hammer-* | grep -c '^401$' || true)
AUTH_429=$(cat "$WORK"/hammer-* | grep -c '^429$' || true)
kill $BA; wait $BA 2>/dev/null || true

auth_report() {
  local q50 q99 l50 l99
  q50=$(printf '%s\n' "${QUIET_P50[@]}" | median); q99=$(printf '%s\n' "${QUIET_P99[@]}" | median)
  l50=$(printf '%s\n' "${LOUD_P50[@]}" | median); l99=$(printf '%s\n' "${LOUD_P99[@]}" | median)
  echo "## Boot scripts while 8 clients send wrong API passwords"
  echo
  echo "\`wrk -t1 -c16 -d${DURATION}s --latency\` on per-MAC scripts (10,000 nodes), \`[api] auth_strategy = \"http_basic\"\`"
  echo "with a cost-10 bcrypt htpasswd; meanwhile 8 \`curl -u operator:wrong\` loops from the same address hit"
  echo "\`/v1/nodes\`. bcrypt runs on the blocking pool, and past 10 failures a minute an address gets 429"
  echo "without bcrypt: in these rounds the loops got $AUTH_401 answers 401 and $AUTH_429 answers 429."
  echo
  echo "| load | p50 | p99 |"
  echo "|---|---|---|"
  echo "| boot scripts alone | ${q50} ms | ${q99} ms |"
  echo "| with 8 wrong-password clients | ${l50} ms | ${l99} ms |"
  echo
  echo "Rounds (p99): alone ${QUIET_P99[*]}; with the clients ${LOUD_P99[*]}."
}
