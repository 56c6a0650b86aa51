# N TFTP clients at once, 100 KiB each (sourced by bench/run.sh), N in STORM_N: bootvol against
# the same peers as bench/tftp.sh and the null server; the generator (bench/tools loadgen
# tftp-storm, one core) checks every byte and reports its own CPU use, to show it is not the limit.
# shellcheck shell=bash
start_tftp_servers
for n in $STORM_N; do
  for _ in $(seq 1 "$ROUNDS"); do
    for server in "${TFTP_SERVERS[@]}"; do
      # clients failures seconds MiB/s p50_s p99_s cpu_%
      record "storm$n.${server%%:*}" "$(on_load "$TOOLS/loadgen" tftp-storm "127.0.0.1:${server#*:}" 100k.bin "$n" "$WORK/tftp/100k.bin")"
      # A server that is gone (atftpd 0.8 aborts under a few thousand clients) stays gone: its
      # failures are counted, and the report says so.
      if [ ! -e "$WORK/res/exited.${server%%:*}" ] && ! kill -0 "$(pid_of "${server%%:*}")" 2>/dev/null; then
        record "exited.${server%%:*}" "$n"
      fi
      sleep 1   # transfers of a client that failed may still be retransmitting
    done
  done
done
