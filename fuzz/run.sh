#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 30) each, when a nightly toolchain is there
# (cargo-fuzz is installed from the crate registry if missing); says so and exits 0 when it is
# not: `cargo test` still replays the committed corpora (tests/it/fuzz_corpora.rs) on stable.
# New inputs go to target/fuzz-corpus/<target>, not into the committed corpora; a crash fails
# the run, its input is left in fuzz/artifacts/<target>/.
#
#   fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: no nightly toolchain here: fuzzing skipped (the corpora are replayed by cargo test)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from the crate registry"
    cargo install cargo-fuzz --locked >/dev/null
fi
for target in $(cargo +nightly fuzz list); do
    mkdir -p "target/fuzz-corpus/$target"
    echo "fuzz: $target for ${seconds} s"
    log="target/fuzz-corpus/$target.log"
    if ! cargo +nightly fuzz run "$target" "target/fuzz-corpus/$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "fuzz: $target failed (log: $log)" >&2
        exit 1
    fi
    grep -E "^#[0-9]+ +DONE|^Done " "$log" || tail -2 "$log"
done
