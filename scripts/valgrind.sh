#!/usr/bin/env bash
# Every test binary of a normal (debug) build under valgrind memcheck: no invalid reads or
# writes, no leaks ("definitely lost"). Heavy tests are run with smaller inputs. Doctests
# are not run (`--tests`); the `compile_fail` ones run no code.
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
# Test binaries to leave out, by name, space-separated (none at present).
skip=" "

start=$SECONDS
bins=$(cargo test --no-run --tests --message-format=json \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])')
echo "built in $((SECONDS - start)) s"
status=0
while read -r name bin; do
    [[ -n "$bin" ]] || continue
    if [[ "$skip" == *" $name "* ]]; then
        echo "==> skipping $name (see the comment at the top of $0)"
        continue
    fi
    echo "==> valgrind $name"
    t=$SECONDS
    if ! valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite "$bin" --test-threads=2 -q; then
        echo "valgrind FAILED on $bin"
        status=1
    fi
    echo "    $name: $((SECONDS - t)) s"
done <<<"$bins"
echo "valgrind.sh: $((SECONDS - start)) s in all, exit $status"
exit $status
