# A simulated boot storm (sourced by bench/run.sh): BOOT_NODES nodes at once, each as a BIOS PXE
# ROM then iPXE would: undionly.kpxe over TFTP (blksize 1468, tsize, lock-step), then /boot.ipxe
# and its own /boot/<mac>.ipxe over one HTTP/1.1 connection, every byte compared (bench/tools
# loadgen boot-storm). bootvol alone against the set-up docs/dhcp.md leads to without bootvol:
# dnsmasq's TFTP for the binary and nginx (1 worker, the files) for the scripts, both pinned to
# the one server core bootvol gets.
# shellcheck shell=bash
nginx_conf nginx-files 18101 "    root $WORK/www;" > "$WORK/nginx-files.conf"
start_bootvol bootvol "$BOOTVOL" "$WORK/10k.toml"
start_nginx nginx-files
start_dnsmasq
BOOT_SETUPS=("bootvol:16900:18100:www" "peers:69:18101:www")
if [ -n "$BASE_BIN" ]; then
  start_bootvol baseline "$BASE_BIN" "$WORK/base-10k.toml"
  BOOT_SETUPS+=("baseline:16903:18102:www-base")
fi
for setup in "${BOOT_SETUPS[@]}"; do
  IFS=: read -r _ tport hport _ <<< "$setup"
  wait_http "http://127.0.0.1:$hport/boot.ipxe"; wait_tftp "$tport"
done
for _ in $(seq 1 "$ROUNDS"); do
  for setup in "${BOOT_SETUPS[@]}"; do
    IFS=: read -r name tport hport www <<< "$setup"
    # nodes failures seconds p50_s p99_s cpu_%
    record "boot.$name" "$(on_load "$TOOLS/loadgen" boot-storm "127.0.0.1:$tport" "127.0.0.1:$hport" "$BOOT_NODES" \
      "$WORK/tftp/undionly.kpxe" "$WORK/$www/boot.ipxe" "$WORK/macs.txt" "$WORK/$www/boot")"
    sleep 1
  done
done
