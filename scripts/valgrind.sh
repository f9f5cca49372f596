#!/usr/bin/env bash
# Every test binary of a normal (debug) build under valgrind memcheck: no invalid reads or
# writes, no leaks ("definitely lost"). Heavy tests are run with smaller inputs. Doctests
# are not run (`--tests`); the `compile_fail` ones run no code.
#
# Two binaries run at a time, each one's output printed whole once all are done. Leaks the
# tests make on purpose are suppressed by name in scripts/valgrind.supp.
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
bins=$(cargo test --no-run --tests --message-format=json \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])')
echo "built in $((SECONDS - start)) s"
# Two binaries at a time: valgrind runs a process's threads one at a time, on one core.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
run_one() {
    local name=$1 bin=$2 t=$SECONDS
    {
        echo "==> valgrind $name"
        if valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
            --show-leak-kinds=definite --num-callers=40 --suppressions=scripts/valgrind.supp \
            "$bin" --test-threads=2 -q; then
            touch "$logs/$name.ok"
        else
            echo "valgrind FAILED on $bin"
        fi
        echo "    $name: $((SECONDS - t)) s"
    } >"$logs/$name.log" 2>&1
}
names=()
while read -r name bin; do
    [[ -n "$bin" ]] || continue
    if [[ "$skip" == *" $name "* ]]; then
        echo "==> skipping $name (see the comment at the top of $0)"
        continue
    fi
    while (($(jobs -rp | wc -l) >= 2)); do
        wait -n || true
    done
    names+=("$name")
    run_one "$name" "$bin" &
done <<<"$bins"
wait
status=0
for name in "${names[@]}"; do
    cat "$logs/$name.log"
    [[ -e "$logs/$name.ok" ]] || status=1
done
echo "valgrind.sh: $((SECONDS - start)) s in all, exit $status"
exit $status
