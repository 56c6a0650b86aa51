# The neighbour check itself (sourced by bench/run.sh): bootvol with its default
# script_secrets = "neighbour" in a network namespace, on one end of a veth pair; NEIGHBOURS
# clients in another namespace, each on a macvlan link of the other end whose MAC is a node's
# port, each fetching /boot.ipxe (a boot sign: it opens the node's boot window) and then its own
# script (bench/tools loadgen neighbour: a 200 with the node's own
# bytes, CHAP and all, or a failure). Against the same set-up with script_secrets = "any", in
# interleaved rounds: what the check costs.
# shellcheck shell=bash
NB_SRV=bvbench-srv-$$ NB_CLI=bvbench-cli-$$
neighbour_teardown() { ip netns del "$NB_SRV" 2>/dev/null || true; ip netns del "$NB_CLI" 2>/dev/null || true; }
[ "$NEIGHBOURS" -le 1000 ] || { echo "NEIGHBOURS is at most 1000 (the MACs of macs.txt)" >&2; exit 1; }
ip netns add "$NB_SRV"; ip netns add "$NB_CLI"
ip -n "$NB_CLI" link add bvw0 type veth peer name bvw1 netns "$NB_SRV"
ip -n "$NB_SRV" link set lo up
ip -n "$NB_SRV" addr add 10.77.0.1/16 dev bvw1
ip -n "$NB_SRV" link set bvw1 up
# Many links on one subnet in one namespace: each answers ARP only for its own address, and
# announces only that one (else every link would answer for every client).
for kv in conf.all.arp_ignore=1 conf.all.arp_announce=2 conf.all.rp_filter=0 conf.default.rp_filter=0; do
  ip netns exec "$NB_CLI" sysctl -qw "net.ipv4.$kv"
done
ip -n "$NB_CLI" link set lo up
ip -n "$NB_CLI" link set bvw0 up
head -n "$NEIGHBOURS" "$WORK/macs.txt" | awk '{
  ip = sprintf("10.77.%d.%d", 1 + int((NR - 1) / 250), 1 + (NR - 1) % 250)
  mac = $1; gsub("-", ":", mac)
  printf "link add link bvw0 name mv%d address %s type macvlan mode bridge\n", NR, mac > "'"$WORK/nb.batch"'"
  printf "addr add %s/16 dev mv%d\nlink set mv%d up\n", ip, NR, NR > "'"$WORK/nb.batch"'"
  printf "mv%d %s %s\n", NR, ip, $1 > "'"$WORK/nb-clients.txt"'"
}'
ip -n "$NB_CLI" -batch "$WORK/nb.batch"
for mode in neighbour any; do
  config "$ROOT" "$WORK/10k.db" 10.77.0.1:18110 10.77.0.1:16910 127.0.0.1:16387 "$mode" > "$WORK/nb-$mode.toml"
done
for _ in $(seq 1 "$ROUNDS"); do
  for mode in neighbour any; do
    start_server "nb-$mode" "$LOGS/bootvol-nb-$mode.log" \
      ip netns exec "$NB_SRV" env -u RUST_LOG "$BOOTVOL" --config "$WORK/nb-$mode.toml" serve
    for _ in $(seq 1 1000); do ip netns exec "$NB_SRV" curl -sf -o /dev/null http://10.77.0.1:18110/boot.ipxe && break; sleep 0.01; done
    # clients requests failures requests/s p99_ms cpu_%
    record "neighbour.$mode" "$(ip netns exec "$NB_CLI" taskset -c "$LOAD_CPU" "$TOOLS/loadgen" neighbour \
      10.77.0.1:18110 "$WORK/nb-clients.txt" "$WORK/www/boot" "$DURATION" 2>>"$LOGS/loadgen-nb.log")"
    stop_server "nb-$mode"
  done
done
neighbour_teardown
