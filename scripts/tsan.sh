#!/usr/bin/env bash
# The concurrent tests under ThreadSanitizer. Needs a nightly toolchain with rust-src
# (`rustup component add rust-src --toolchain nightly`): std is rebuilt instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/tsan}"
# Property tests at most 32 cases here (their own counts in `cargo test`): what the
# sanitizer checks is each access, which a few cases reach as well as many.
export PROPTEST_CASES="${PROPTEST_CASES:-32}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"
# Built first (arguments go to that build), then the test binaries run two at a time
# (scripts/pool.sh), each with the harness's usual two test threads, the longest first:
# `cargo test` runs one binary at a time, and reentrancy's torture test alone (its threads
# take turns: one core) is more than half of all the runs.
source scripts/pool.sh
bins=$(cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --no-run \
    --message-format=json-render-diagnostics \
    --test pool_threads --test global_pools --test frame_thread --test scratch \
    --test shared_arena --test double_buffered --test thread_arenas --test thread_teardown \
    --test reentrancy --test reentrant_tracing --test ledger --test heap_tracking \
    --test heap_model "$@" | pool_test_binaries |
    pool_longest_first "reentrancy ledger scratch shared_arena pool_threads frame_thread")
pool_start 2
while read -r name bin; do
    if [[ -n "$bin" ]]; then pool_run "$name" "$bin"; fi
done <<<"$bins"
pool_wait
