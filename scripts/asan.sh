#!/usr/bin/env bash
# The whole test suite under AddressSanitizer, with the crate's poisoning turned on
# (`--cfg nebula_asan`): every byte no caller holds is poisoned, so reads after reset,
# rewind, pop or free_block are reported. Needs a nightly toolchain. With frame pointers
# forced: the sampled call stacks' tests (heap_sampling, bevy_call_sites) then run in a build
# whose frames differ from the default one's.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=address --cfg nebula_asan -Cforce-frame-pointers=yes"
export RUSTDOCFLAGS="$RUSTFLAGS"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/asan}"
# Property tests at most 32 cases here (their own counts in `cargo test`): what the
# sanitizer checks is each access, which a few cases reach as well as many.
export PROPTEST_CASES="${PROPTEST_CASES:-32}"
# ASan's leak checker flags the process-lifetime global pools' bookkeeping; leaks are
# valgrind's job (scripts/valgrind.sh).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
# The long runs at full length (an ordinary debug `cargo test` shortens them).
export NEBULA_FULL_SIZE=1
# Doctests are skipped: rustdoc does not pass the sanitizer to every doctest build (and the
# `compile_fail` ones, the compile-time guarantees, run no code).
#
# Built first (arguments go to that build: `--test NAME` for some binaries only), then the
# test binaries run two at a time (scripts/pool.sh), each with the harness's usual two
# test threads, the longest first: `cargo test` runs one binary at a time, and most keep
# one core busy at most (one test, or a last long one, still running).
source scripts/pool.sh
bins=$(cargo +nightly test --target x86_64-unknown-linux-gnu --tests --no-run \
    --message-format=json-render-diagnostics "$@" | pool_test_binaries |
    pool_longest_first "bevy_parallel pool_efficiency soak segmented_pool reentrancy bevy_attribution")
pool_start 2
while read -r name bin; do
    if [[ -n "$bin" ]]; then pool_run "$name" "$bin"; fi
done <<<"$bins"
pool_wait
