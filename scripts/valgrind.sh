#!/usr/bin/env bash
# Every test binary of a normal (debug) build under valgrind memcheck: no invalid reads or
# writes, no leaks ("definitely lost"). Heavy tests are run with smaller inputs. Doctests
# are not run (`--tests`); the `compile_fail` ones run no code.
#
# Two binaries run at a time, each one's output printed whole once all are done
# (scripts/pool.sh). Leaks the tests make on purpose are suppressed by name in
# scripts/valgrind.supp.
#
# Binaries that spawn a child of themselves (quarantine: the deliberate stale read must die
# of SIGSEGV) run under valgrind; the child runs natively (no --trace-children).
#
# NEBULA_UNDER_VALGRIND=1 makes tests/bevy_parallel.rs run fewer frames (a twentieth of
# its full length, which NEBULA_FULL_SIZE=1 asks for), and tests/pool_rss.rs and
# tests/soak.rs skip their RSS assertions only (valgrind's shadow memory and replacement
# heap are in /proc/self/statm); all their other assertions still run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-16}"
# The soak test needs more frames than its 2,000-frame warm-up; 6,000 covers the spike at
# frame 5,000 and the trim after it (~35 s under valgrind).
export NEBULA_SOAK_FRAMES="${NEBULA_SOAK_FRAMES:-6000}"
export NEBULA_UNDER_VALGRIND=1
export NEBULA_FULL_SIZE=1
# Test binaries to leave out, by name, space-separated. `fork`: its forked children run
# under valgrind too, whose leak check at their exit counts what the parent's other threads
# held (threads a child does not have) as lost; the test runs natively and under the
# sanitizers' builds of the suite.
skip=" fork "

start=$SECONDS
source scripts/pool.sh
bins=$(cargo test --no-run --tests --message-format=json-render-diagnostics | pool_test_binaries |
    pool_longest_first "segmented_pool scratch shared_arena idle_memory bevy_parallel
        pool_threads alloc_checks bevy_ledger pool_efficiency soak ledger heap_tracking
        pool_model arena_reset_policy bevy_soundness")
echo "built in $((SECONDS - start)) s"
# Two binaries at a time (scripts/pool.sh), the longest first: valgrind runs a process's
# threads one at a time, on one core.
memcheck() {
    valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite --num-callers=40 --suppressions=scripts/valgrind.supp \
        "$1" --test-threads=2 -q
}
pool_start 2
while read -r name bin; do
    [[ -n "$bin" ]] || continue
    if [[ "$skip" == *" $name "* ]]; then
        echo "==> skipping $name (see the comment at the top of $0)"
        continue
    fi
    pool_run "valgrind $name" memcheck "$bin"
done <<<"$bins"
status=0
pool_wait || status=1
echo "valgrind.sh: $((SECONDS - start)) s in all, exit $status"
exit $status
