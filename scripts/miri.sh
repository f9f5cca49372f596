#!/usr/bin/env bash
# The core's tests under Miri (`rustup component add miri rust-src --toolchain nightly`).
# Under Miri the pool region comes from `std::alloc` instead of mmap; test binaries that
# need the OS or are measurements (pool_rss, soak, pool_efficiency, quarantine,
# asan_reports) are compiled out with `#![cfg(not(miri))]`, tests doing millions of
# operations run smaller inputs under `cfg!(miri)`, and proptest runs few cases
# (PROPTEST_CASES, default 4). Doctests are not run (only `--lib` and `--test` targets
# below): the compile-time guarantees are `compile_fail` doctests, which run no code.
# Long: the re-entrancy torture test (tests/reentrancy.rs, a subscriber that calls every
# entry point back) takes about 13 minutes under Miri on its own on a 2-core machine; the
# whole script takes well over that. CI runs a shorter Miri pass (.ci/run).
#
# Arguments go to every `cargo miri test` below, e.g. `scripts/miri.sh -- --test-threads=2`.
# MIRIFLAGS, if set, is added to each run's flags.
#
# Three runs, because two things outside the crate's own code need other Miri settings:
# - Most binaries (and the unit tests): `-Zmiri-strict-provenance` with Stacked Borrows.
# - Threads contending on one pool's lock (pool_threads, scratch, frame_thread,
#   shared_arena, double_buffered, thread_arenas, thread_teardown, reentrancy,
#   reentrant_tracing, ledger, ledger_totals, heap_model, global_pools): the
#   default (permissive) provenance. A contended `parking_lot` mutex parks its thread, and
#   parking_lot_core 0.9.12's `WordLock` turns an integer back into a pointer
#   (word_lock.rs:320, parking_lot#477), which strict provenance rejects. Miri still
#   warns at the first such cast; the crate itself makes none (`with_addr` throughout).
# - Once more under Tree Borrows, the binaries that check pointers the crate derives
#   (pool_model, global_pools, heap_model): Stacked Borrows (the runs above) and Tree
#   Borrows judge a pointer's permissions differently, and the crate must satisfy both.
#   (heap_tracking, the tracking allocator as the process's global one with megabytes per
#   test, runs natively, in release and under TSan; heap_model checks its logic here.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-4}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
# Miri isolates the program from the host environment; forward the one variable it reads.
common="-Zmiri-env-forward=PROPTEST_CASES ${MIRIFLAGS:-}"

threaded="pool_threads scratch frame_thread shared_arena double_buffered thread_arenas thread_teardown reentrancy reentrant_tracing ledger ledger_totals heap_model global_pools"
tree_borrows="pool_model global_pools heap_model"

targets() {
    for t in "$@"; do printf -- '--test %s ' "$t"; done
}

rest=()
for f in tests/*.rs; do
    t=$(basename "$f" .rs)
    case " $threaded " in
    *" $t "*) ;;
    *) rest+=("$t") ;;
    esac
done

run() {
    local flags=$1
    shift
    echo "==> MIRIFLAGS='$flags' cargo +nightly miri test --no-default-features $*" >&2
    MIRIFLAGS="$flags" cargo +nightly miri test --no-default-features "$@"
}

# shellcheck disable=SC2046 # word splitting of the --test lists is intended
{
    run "-Zmiri-strict-provenance $common" --lib $(targets "${rest[@]}") "$@"
    run "$common" $(targets $threaded) "$@"
    run "-Zmiri-tree-borrows $common" $(targets $tree_borrows) "$@"
}
