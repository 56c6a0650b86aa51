#!/usr/bin/env bash
# Installs every tool bootvol's tests can use, on Debian 12 (bookworm), as root: with them no
# test is skipped. The one list: `.ci/run` runs this script, and a test skipped for want of a
# tool names it (tests/lib/skip.rs). Safe to run again: each part installs only what is missing.
#
#   sudo tests/install-tools.sh
#
# What it brings (about 10 minutes on a fresh machine; apt, PyPI and the npm registry):
#   curl atftp tftp-hpa          the TFTP clients of tests/it/tftp.rs
#   openssl signify-openbsd      the TLS tests, the appliance's update scripts
#   sbsigntool ipxe              Secure Boot: bootvol signs Debian's iPXE (tests/it/secure_boot.rs)
#   python3 iproute2             the raw-socket attacker of tests/it/neighbour.rs, network namespaces
#   .ci/e2e-deps.sh              the VM boots: QEMU, iPXE, OVMF, tgt, vblade, dnsmasq, nfs-ganesha
#   tests/cinder/setup-venv.sh   a real Cinder (target/cinder-venv)
#   tests/api/setup-venv.sh      the real Ironic clients (target/api-venv)
#   tests/tempest/setup-venv.sh  Ironic's own API suite (target/tempest-venv)
#   tests/power/setup.sh         the BMC peers: ipmi_sim, ipmitool, sushy-tools
#   prometheus                   a real Prometheus scraping /metrics
#   postgresql-15 util-linux     PostgreSQL (the tests start private clusters; the packaged one is stopped)
#   systemd                      systemd-analyze and friends for systemd/check.sh
#   tests/admin/setup.sh         Debian's chromium and playwright-core (needs Node.js >= 20 with npm)
# Not here: the appliance image, which tests/e2e/appliance.rs boots (`cargo build --release
# --locked && image/build-appliance.sh`, as .ci/run does).
#
# Every network step is retried once after a failure, and says so. Each part prints the seconds
# since the start; with BOOTVOL_STEP_LOG set, those lines are appended to that file too.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

[ "$(id -u)" = 0 ] || { echo "install-tools: run as root (apt-get, the venvs under target/)" >&2; exit 1; }

start=$(date +%s)
step() {
    local line
    line="== [$(( $(date +%s) - start )) s] install-tools: $*"
    echo "$line"
    if [ -n "${BOOTVOL_STEP_LOG:-}" ]; then echo "$line" >> "$BOOTVOL_STEP_LOG"; fi
}
# A command that reaches the network, run again once when it fails (a mirror's hiccup must not
# fail the run; a real fault fails the second try too). Only whole commands or scripts: a shell
# function would run without errexit here.
retry() {
    if "$@"; then return 0; fi
    echo "== install-tools: failed, retrying once in 10 s: $*" >&2
    sleep 10
    "$@"
}
apt_install() { retry apt-get install -y -q --no-install-recommends "$@"; }

step "apt: TFTP clients, openssl, signify-openbsd, sbsigntool, ipxe, python3, iproute2"
retry apt-get update -q
apt_install curl atftp tftp-hpa openssl signify-openbsd sbsigntool ipxe python3 iproute2

step "the VM boot tests (QEMU, iPXE, OVMF, tgt, vblade, dnsmasq, nfs-ganesha)"
retry .ci/e2e-deps.sh

step "a real Cinder from PyPI, in target/cinder-venv"
retry tests/cinder/setup-venv.sh

step "the real Ironic clients (baremetal, openstack, openstacksdk), in target/api-venv"
retry tests/api/setup-venv.sh

step "Ironic's own API test suite (tempest 47.0.0 + ironic-tempest-plugin 3.2.0), in target/tempest-venv"
retry tests/tempest/setup-venv.sh

step "BMC peers: ipmi_sim + ipmitool (apt), sushy-tools (venv)"
retry tests/power/setup.sh

step "a real Prometheus (Debian's prometheus; the test runs its own on a free port)"
apt_install prometheus

step "PostgreSQL 15 (Debian's postgresql-15): tests/it/cluster.rs and the PostgreSQL pass of tests/it"
apt_install postgresql-15 util-linux
# The packaged cluster is not used (the tests start private ones): keep it down.
pg_ctlcluster 15 main stop 2>/dev/null || true

step "systemd-analyze, systemd-sysusers, systemd-tmpfiles for systemd/check.sh (no systemd as PID 1 needed)"
apt_install systemd

step "a real browser for the admin page: Debian chromium + playwright-core (npm, in target/admin-e2e)"
retry tests/admin/setup.sh

step "done: every test tool is installed"
