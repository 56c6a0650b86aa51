#!/usr/bin/env bash
# Runs a command with the CPUs busy: HOGS processes (default 2, one per core here) spin beside
# it at normal priority for as long as it runs, so that a test which races the server it starts
# (asserting before a listener is up, a fixed sleep a slow machine outruns) fails here first,
# not in a CI run of a sound change. The hogs are stopped however the command ends; its exit
# status is this script's.
#
#   tests/under-load.sh cargo test --locked --test it
#   HOGS=4 tests/under-load.sh cargo test --locked
#   ROUNDS=3 tests/under-load.sh cargo test --locked --test it   # three runs in a row, all must pass
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
hogs=${HOGS:-2}
rounds=${ROUNDS:-1}
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2> /dev/null || true; }
trap stop EXIT
for _ in $(seq "$hogs"); do
    # A shell loop that never sleeps: a full core each.
    sh -c 'while :; do :; done' &
    pids+=("$!")
done
echo "under-load: $hogs CPU hogs on $(nproc) cores beside: $*" >&2
for round in $(seq "$rounds"); do
    start=$(date +%s)
    if ! "$@"; then
        echo "under-load: round $round of $rounds failed after $(( $(date +%s) - start )) s" >&2
        exit 1
    fi
    echo "under-load: round $round of $rounds passed in $(( $(date +%s) - start )) s" >&2
done
