# TFTP, one 1 MiB transfer at a time (sourced by bench/run.sh): lock-step blksize 1468, windowsize
# 8, and 512-byte blocks (no options), against tftpd-hpa, atftpd, dnsmasq and the null server
# (bench/tools null-tftp: the limit the client and the kernel allow). hyperfine runs the client,
# pinned to the load core, all servers in each call; one call per mode and round.
# shellcheck shell=bash
start_tftp_servers
# key | client command (PORT and OUTFILE substituted)
TFTP_CASES=(
  "lock1468|atftp --option 'blksize 1468' -g -r 1m.bin -l OUTFILE 127.0.0.1 PORT"
  "win8|atftp --option 'blksize 1468' --option 'windowsize 8' -g -r 1m.bin -l OUTFILE 127.0.0.1 PORT"
  "b512|tftp -m binary 127.0.0.1 PORT -c get 1m.bin OUTFILE"
)
for _ in $(seq 1 "$ROUNDS"); do
  for case in "${TFTP_CASES[@]}"; do
    key=${case%%|*}; template=${case#*|}
    cmds=(); names=()
    for server in "${TFTP_SERVERS[@]}"; do
      name=${server%%:*}; port=${server#*:}
      out="$WORK/out-$name.bin"
      cmd=${template//PORT/$port}; cmd=${cmd//OUTFILE/$out}
      cmds+=("$cmd && cmp -s $out $WORK/tftp/1m.bin"); names+=(-n "$name")
    done
    # Its warnings (outliers...) go to a log; a failed fetch (a wrong byte) ends the run.
    on_load hyperfine --warmup 2 --runs "$TFTP_RUNS" --export-json "$WORK/h.json" "${names[@]}" "${cmds[@]}" \
      >/dev/null 2>>"$LOGS/hyperfine.log" || { tail -20 "$LOGS/hyperfine.log" >&2; exit 1; }
    python3 - "$WORK/h.json" "$WORK/res" "$key" <<'PY'
import json, sys, statistics
for res in json.load(open(sys.argv[1]))["results"]:
    with open(f"{sys.argv[2]}/tftp.{sys.argv[3]}.{res['command']}", "a") as f:
        f.write(f"{statistics.median(res['times']) * 1000:.2f}\n")
PY
  done
done
