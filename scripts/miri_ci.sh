#!/usr/bin/env bash
# CI's Miri pass (.ci/run), shorter than scripts/miri.sh: the soundness regressions, a
# user's program with the tracking allocator installed, and the tracker's model.
#   scripts/miri_ci.sh build   builds what the runs need (two cores, like any build)
#   scripts/miri_ci.sh run     the runs, two at a time (after `build`)
#   scripts/miri_ci.sh         both
# Needs `rustup component add miri rust-src --toolchain nightly`.
#
# What runs:
# - the re-entrancy cases and the thread-teardown tests (user code called back
#   mid-operation, handles outliving their thread's storage) and `soundness` (caller
#   pointers that cover their object only). Threads contend on a pool's lock there, hence
#   the default provenance (scripts/miri.sh says why). The torture test that calls every
#   entry point back from a subscriber takes about 13 minutes under Miri on 2 cores, so CI
#   runs it natively (`cargo test`, and in release), under AddressSanitizer, ThreadSanitizer
#   and valgrind, and scripts/miri.sh runs it under Miri;
# - a user's program with the tracker as its global allocator (examples/miri_tracked.rs),
#   with the flags a user would pass: none (Stacked Borrows), then Tree Borrows;
# - the tracker's model (heap_model) under Stacked Borrows and under Tree Borrows, one test
#   per Miri process: in one process its tests took 2-3x as long (the tracker's side table
#   and Miri's borrow history of it grow from test to test).
#
# Every run is a Miri process of its own, two at a time (scripts/pool.sh): Miri interprets
# on one thread, one core each. Miri's clock is virtual (isolation): a run's results do not
# depend on how fast it goes, so .ci/run can leave the runs at the lowest priority beside
# other steps.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pool.sh
export PROPTEST_CASES="${PROPTEST_CASES:-4}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"

miri_test() { # MIRIFLAGS, then `cargo miri test`'s arguments
    MIRIFLAGS="$1 -Zmiri-env-forward=PROPTEST_CASES" \
        cargo +nightly miri test -q --no-default-features "${@:2}"
}

build() {
    cargo +nightly miri test --no-default-features --no-run \
        --test reentrancy --test thread_teardown --test soundness --test heap_model
}

run() {
    local heap_model runs run t
    heap_model=$(miri_test "" --test heap_model -- --list | sed -n 's/: test$//p')
    runs=$(
        for t in $heap_model; do echo "heap_model/$t/tree heap_model/$t/stacked"; done
        echo reentrancy thread_teardown soundness miri_tracked/stacked miri_tracked/tree
    )
    # The longest first (measured, in CPU time: the first two about a fifth of all the runs
    # each, the next five 5-15 %); then the rest, in the order above.
    runs=$(tr ' ' '\n' <<<"$runs" | pool_longest_first "
        heap_model/a_free_or_realloc_naming_another_size_credits_what_was_charged/tree
        heap_model/tags_follow_a_model_across_four_threads/tree
        heap_model/tags_follow_a_model_across_four_threads/stacked
        heap_model/a_free_or_realloc_naming_another_size_credits_what_was_charged/stacked
        reentrancy heap_model/alignments_up_to_4096_and_zero_sizes_work/tree thread_teardown")
    pool_start 2
    for run in $runs; do
        case $run in
        heap_model/*/stacked)
            t=${run#heap_model/} t=${t%/stacked}
            pool_run "heap_model $t (Stacked Borrows)" \
                miri_test "" --test heap_model -- --exact "$t"
            ;;
        heap_model/*/tree)
            t=${run#heap_model/} t=${t%/tree}
            pool_run "heap_model $t (Tree Borrows)" \
                miri_test "-Zmiri-tree-borrows" --test heap_model -- --exact "$t"
            ;;
        reentrancy)
            pool_run reentrancy miri_test "" --test reentrancy \
                -- --skip a_subscriber_calling_back_into_every_entry_point
            ;;
        thread_teardown | soundness) pool_run "$run" miri_test "" --test "$run" ;;
        # About 3 s each once built (its build shares the test builds' dependencies).
        miri_tracked/stacked)
            pool_run "miri_tracked (Stacked Borrows)" \
                cargo +nightly miri run -q --no-default-features --example miri_tracked
            ;;
        miri_tracked/tree)
            pool_run "miri_tracked (Tree Borrows)" env MIRIFLAGS="-Zmiri-tree-borrows" \
                cargo +nightly miri run -q --no-default-features --example miri_tracked
            ;;
        esac
    done
    pool_wait
}

case "${1:-all}" in
build) build ;;
run) run ;;
all) build && run ;;
*)
    echo "usage: $0 [build|run]" >&2
    exit 2
    ;;
esac
