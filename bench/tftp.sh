# TFTP part of bench/run.sh (sourced): bootvol against tftpd-hpa and atftpd.
chmod 755 "$WORK" "$WORK/tftp"; chmod 644 "$WORK"/tftp/*
RUST_LOG=warn "$BOOTVOL" --config "$WORK/10k.toml" serve 2>"$WORK/serve-tftp.log" & BV=$!; PIDS+=($BV)
in.tftpd -L -s "$WORK/tftp" --address 127.0.0.1:16901 -u nobody -B 65464 & HPA=$!; PIDS+=($HPA)
"$ATFTPD" --daemon --no-fork --port 16902 --bind-address 127.0.0.1 --user nobody.nogroup \
  --logfile /dev/null --maxthread 1000 "$WORK/tftp" & ATF=$!; PIDS+=($ATF)
TFTP_SERVERS=("bootvol:16900" "tftpd-hpa:16901" "atftpd:16902")
if [ -n "${BASE_BIN:-}" ]; then
  RUST_LOG=warn "$BASE_BIN" --config "$WORK/base-10k.toml" serve 2>"$WORK/serve-base-tftp.log" & BBT=$!; PIDS+=($BBT)
  wait_http http://127.0.0.1:18102/boot.ipxe
  TFTP_SERVERS+=("baseline:16903")
fi
wait_http http://127.0.0.1:18100/boot.ipxe; sleep 0.5

# name | client command (PORT and OUTFILE substituted)
TFTP_CASES=(
  "lock-step, blksize 1468|atftp --option 'blksize 1468' -g -r 1m.bin -l OUTFILE 127.0.0.1 PORT"
  "blksize 1468 + windowsize 8|atftp --option 'blksize 1468' --option 'windowsize 8' -g -r 1m.bin -l OUTFILE 127.0.0.1 PORT"
  "lock-step, 512 bytes (no options)|tftp -m binary 127.0.0.1 PORT -c get 1m.bin OUTFILE"
)
declare -A TFTP_MS
for case in "${TFTP_CASES[@]}"; do
  label=${case%%|*}; template=${case#*|}
  cmds=(); names=()
  for server in "${TFTP_SERVERS[@]}"; do
    name=${server%%:*}; port=${server#*:}
    out="$WORK/out-$name.bin"
    cmd=${template//PORT/$port}; cmd=${cmd//OUTFILE/$out}
    cmds+=("$cmd && cmp -s $out $WORK/tftp/1m.bin"); names+=(-n "$name")
  done
  # One hyperfine call per round, all three servers in it; medians over the rounds.
  for r in $(seq 1 "$ROUNDS"); do
    hyperfine --warmup 2 --runs 15 --export-json "$WORK/h.json" "${names[@]}" "${cmds[@]}" >/dev/null
    python3 - "$WORK/h.json" "$r" "$label" >> "$WORK/tftp-rounds.txt" <<'EOF'
import json, sys, statistics
for res in json.load(open(sys.argv[1]))["results"]:
    print(f"{sys.argv[3]}|{res['command']}|{sys.argv[2]}|{statistics.median(res['times']) * 1000:.2f}")
EOF
  done
done
storm() { python3 "$ROOT/bench/tftp_storm.py" 127.0.0.1 "$1" 100k.bin 500 "$WORK/tftp/100k.bin"; }
read -r _ STORM_BV_FAIL STORM_BV_S STORM_BV_MIBS < <(storm 16900)
read -r _ STORM_HPA_FAIL STORM_HPA_S STORM_HPA_MIBS < <(storm 16901)
read -r _ STORM_ATF_FAIL STORM_ATF_S STORM_ATF_MIBS < <(storm 16902)
if [ -n "${BASE_BIN:-}" ]; then read -r _ STORM_BASE_FAIL STORM_BASE_S STORM_BASE_MIBS < <(storm 16903); fi
kill $BV $HPA $ATF ${BBT:-}; wait $BV $HPA $ATF ${BBT:-} 2>/dev/null || true

tftp_baseline_report() {
  echo
  echo "TFTP, 1 MiB file, median fetch (the same hyperfine calls as above), and the 500-client storm:"
  echo
  echo "| client | bootvol | baseline |"
  echo "|---|---|---|"
  python3 - "$WORK/tftp-rounds.txt" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, server, _round, ms = line.rstrip("\n").split("|")
    rows[(label, server)].append(float(ms))
for label in dict.fromkeys(k[0] for k in rows):
    a, b = statistics.median(rows[(label, "bootvol")]), statistics.median(rows[(label, "baseline")])
    print(f"| {label} | {a:.1f} ms | {b:.1f} ms |")
PY
  echo "| 500 clients, 100 KiB: failures, total time | $STORM_BV_FAIL, ${STORM_BV_S} s | $STORM_BASE_FAIL, ${STORM_BASE_S} s |"
}

tftp_report() {
  echo "## TFTP, 1 MiB file"
  echo
  echo "Each client run fetches the file and compares it with \`cmp\`; hyperfine times 15 runs after 2"
  echo "warm-ups, $ROUNDS rounds. Figures are the median wall time of a fetch (lower is better) and the"
  echo "throughput it implies. tftpd-hpa does not implement windowsize and answers lock-step."
  echo
  python3 - "$WORK/tftp-rounds.txt" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, server, _round, ms = line.rstrip("\n").split("|")
    rows[(label, server)].append(float(ms))
labels = list(dict.fromkeys(k[0] for k in rows))
targets = {"lock-step, 512 bytes (no options)": 0.9}
print("| client | bootvol | tftpd-hpa | atftpd | bootvol / faster peer | target |")
print("|---|---|---|---|---|---|")
for label in labels:
    med = {s: statistics.median(rows[(label, s)]) for s in ("bootvol", "tftpd-hpa", "atftpd")}
    cell = lambda s: f"{med[s]:.1f} ms ({1000 / med[s]:.1f} MiB/s)"
    ratio = min(med["tftpd-hpa"], med["atftpd"]) / med["bootvol"]
    goal = targets.get(label, 1.0)
    verdict = "met" if ratio >= goal else "**not met**"
    print(f"| {label} | {cell('bootvol')} | {cell('tftpd-hpa')} | {cell('atftpd')} | {ratio:.2f}× | ≥ {goal}×: {verdict} |")
EOF
  echo
  echo "## 500 TFTP clients at once, 100 KiB file"
  echo
  echo "\`bench/tftp_storm.py\`: 500 clients start together, blksize 1468, lock-step ACKs, each checks"
  echo "the bytes it got; a client fails after 5 unanswered retransmissions."
  echo
  echo "| server | failures | total time | aggregate |"
  echo "|---|---|---|---|"
  echo "| bootvol | $STORM_BV_FAIL | ${STORM_BV_S} s | ${STORM_BV_MIBS} MiB/s |"
  echo "| tftpd-hpa | $STORM_HPA_FAIL | ${STORM_HPA_S} s | ${STORM_HPA_MIBS} MiB/s |"
  echo "| atftpd | $STORM_ATF_FAIL | ${STORM_ATF_S} s | ${STORM_ATF_MIBS} MiB/s |"
  echo
  echo "Target: 0 failures for bootvol: $( [ "$STORM_BV_FAIL" = 0 ] && echo met || echo '**not met**' )."
}
