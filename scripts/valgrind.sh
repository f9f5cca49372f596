#!/usr/bin/env bash
# Every test binary of a normal (debug) build under valgrind memcheck: no invalid reads or
# writes, no leaks ("definitely lost"). Heavy tests are run with smaller inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-16}"
export NEBULA_SOAK_FRAMES="${NEBULA_SOAK_FRAMES:-2000}"
bins=$(cargo test --no-run --tests --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
status=0
for bin in $bins; do
    echo "==> valgrind $(basename "$bin")"
    if ! valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite "$bin" --test-threads=2 -q; then
        echo "valgrind FAILED on $bin"; status=1
    fi
done
exit $status
