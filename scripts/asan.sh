#!/usr/bin/env bash
# The whole test suite under AddressSanitizer, with the crate's poisoning turned on
# (`--cfg nebula_asan`): every byte no caller holds is poisoned, so reads after reset,
# rewind, pop or free_block are reported. Needs a nightly toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=address --cfg nebula_asan"
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
cargo +nightly test --target x86_64-unknown-linux-gnu --tests "$@"
