#!/usr/bin/env bash
# The `tracy` feature against Tracy's real tools: captures the memory_ledger example with
# Tracy 0.14.0's `tracy-capture` on 127.0.0.1 and checks the trace with `tracy-inspect`
# (both load and write traces with Tracy's own code) against the ledger lines the example
# prints:
#
# - a memory pool per tag that takes blocks itself (a leaf tag), with as many allocations
#   as the ledger's blocks taken, as many frees as blocks returned, and the rest active;
#   no pool for a parent tag (its figures are its children's) nor any other pool but
#   Tracy's empty default one;
# - two plots per tag, parents included (`<tag> held`, `<tag> used`), each with one point
#   per frame and the last frame's figures as its last point, and no other user plot;
# - a frame mark per frame (Tracy's server adds 2 frames of its own to the count);
# - no event after the client stopped: the example's count of events sent to Tracy is the
#   same at the stop and at its end, though the ledger saw a block go back after the stop
#   (its assets arena), which the trace shows still active.
#
# Environment:
#   NEBULA_TRACY_TOOLS       the directory holding tracy-capture and tracy-inspect, absolute
#                            or relative to the repository's root (default:
#                            ../shared/tools/tracy, where CI puts them beside the clone)
#   NEBULA_TRACY_CHECK_PORT  the port for the capture (default 8187, not Tracy's 8086, so
#                            it cannot meet another Tracy client on the machine)
#   CI                       when "true", missing tools fail the check; otherwise it is
#                            skipped with a message
# The trace, the tools' output and the example's are kept in target/tracy_check/.
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${NEBULA_TRACY_TOOLS:-../shared/tools/tracy}"
port="${NEBULA_TRACY_CHECK_PORT:-8187}"
capture="$tools/tracy-capture"
inspect="$tools/tracy-inspect"

missing=""
for tool in "$capture" "$inspect"; do
    [[ -x "$tool" ]] || missing="$missing $tool"
done
if [[ -n "$missing" ]]; then
    why="not found or not executable:$missing (set NEBULA_TRACY_TOOLS to the directory that holds Tracy 0.14.0's tracy-capture and tracy-inspect)"
    if [[ "${CI:-}" == "true" ]]; then
        echo "tracy_check: FAILED: $why" >&2
        exit 1
    fi
    echo "tracy_check: SKIPPED (not in CI): $why"
    exit 0
fi

out="${CARGO_TARGET_DIR:-target}/tracy_check"
mkdir -p "$out"
rm -f "$out/run.tracy" "$out/capture.log" "$out/example.out" "$out/inspect.txt"

# Built before the capture starts, so the capture's clock does not run during a build.
cargo build --example memory_ledger --features tracy

capture_pid=""
cleanup() {
    if [[ -n "$capture_pid" ]] && kill -0 "$capture_pid" 2>/dev/null; then
        kill "$capture_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

echo "tracy_check: tracy-capture on 127.0.0.1:$port, then the example with TRACY_PORT=$port"
timeout 180 "$capture" -o "$out/run.tracy" -a 127.0.0.1 -p "$port" -s 120 \
    >"$out/capture.log" 2>&1 &
capture_pid=$!

example_status=0
TRACY_PORT="$port" NEBULA_TRACY_WAIT=60 TRACY_NO_INVARIANT_CHECK=1 \
    timeout 180 cargo run -q --example memory_ledger --features tracy \
    >"$out/example.out" 2>&1 || example_status=$?
capture_status=0
wait "$capture_pid" || capture_status=$?
capture_pid=""

grep -i '^tracy' "$out/example.out" || true
tr '\r' '\n' <"$out/capture.log" | grep -v '^\s*$' | tail -n 4 || true
if [[ "$example_status" != 0 || "$capture_status" != 0 || ! -s "$out/run.tracy" ]]; then
    echo "tracy_check: FAILED: example exit $example_status, tracy-capture exit $capture_status (outputs in $out/)" >&2
    exit 1
fi

"$inspect" "$out/run.tracy" >"$out/inspect.txt"

awk '
    FNR == 1 { file++ }
    # The example: ledger lines and the Tracy end.
    file == 1 && /^ledger frames=/ { split($2, a, "="); frames = a[2] }
    file == 1 && /^ledger tag=/ {
        for (i = 2; i <= NF; i++) { split($i, a, "="); v[a[1]] = a[2] }
        t = v["tag"]; tags[++ntags] = t
        taken[t] = v["taken"]; returned[t] = v["returned"]; held[t] = v["held"]; used[t] = v["used"]
    }
    file == 1 && /^tracy end=/ { split($2, a, "="); end_how = a[2]; split($3, a, "="); sent_at_stop = a[2] }
    file == 1 && /^tracy after-stop / {
        split($3, a, "="); sent_at_exit = a[2]; split($4, a, "="); returned_after = a[2]
    }
    # tracy-inspect: frame marks, pools, plots.
    file == 2 && /^Default frame set \(frame marks\):/ { marks = $(NF - 1) }
    file == 2 && /^  pool / {
        match($0, /pool \x27[^\x27]*\x27/); p = substr($0, RSTART + 6, RLENGTH - 7)
        match($0, /allocs=[0-9]+/); pa[p] = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /frees\(list\)=[0-9]+/); pf[p] = substr($0, RSTART + 12, RLENGTH - 12)
        match($0, /active\(not freed\)=[0-9]+/); pact[p] = substr($0, RSTART + 18, RLENGTH - 18)
        pools[p] = 1
    }
    file == 2 && /^  plot .* type=User / {
        match($0, /plot \x27[^\x27]*\x27/); p = substr($0, RSTART + 6, RLENGTH - 7)
        match($0, / points=[0-9]+/); pts[p] = substr($0, RSTART + 8, RLENGTH - 8)
        match($0, / last=-?[0-9]+/); last[p] = substr($0, RSTART + 6, RLENGTH - 6)
        user_plots++
    }
    function check(ok, what) {
        printf "%s %s\n", ok ? "ok      " : "MISMATCH", what
        if (!ok) bad++
    }
    END {
        check(frames > 0 && ntags > 0, "the example printed " frames " frames and " ntags " tags")
        check(end_how == "handed-over", "the client handed the run over: end=" end_how)
        check(marks == frames + 2, "frame marks: " marks " in the trace = " frames " frames + 2 of the server")
        for (i = 1; i <= ntags; i++) {
            t = tags[i]; leaf = 1
            for (j = 1; j <= ntags; j++) if (index(tags[j], t "/") == 1) leaf = 0
            if (leaf && taken[t] > 0) {
                check((t in pools) && pa[t] == taken[t] && pf[t] == returned[t] && pact[t] == taken[t] - returned[t],
                    sprintf("pool %-16s allocs/frees/active %s/%s/%s, ledger taken/returned %s/%s", t, pa[t], pf[t], pact[t], taken[t], returned[t]))
            } else {
                check(!(t in pools), sprintf("pool %-16s none (%s; ledger taken %s)", t, leaf ? "took no block" : "a parent", taken[t]))
            }
            delete pools[t]
            for (k = 1; k <= 2; k++) {
                name = t (k == 1 ? " held" : " used"); want = (k == 1 ? held[t] : used[t])
                check((name in pts) && pts[name] == frames && last[name] == want,
                    sprintf("plot %-22s points %s, last %s; ledger: %s frames, last %s", "\x27" name "\x27", pts[name], last[name], frames, want))
            }
        }
        others = ""
        for (p in pools) if (p != "<default pool>" || pa[p] != 0) others = others " \x27" p "\x27"
        check(others == "", "no other pool than Tracy\x27s empty default one" (others == "" ? "" : ":" others))
        check(user_plots == 2 * ntags, "user plots: " user_plots " = 2 x " ntags " tags")
        check(sent_at_stop > 0 && sent_at_exit == sent_at_stop,
            "events sent to Tracy: " sent_at_stop " at the stop, " sent_at_exit " at the end")
        check(returned_after > 0, "blocks the ledger saw go back after the stop: " returned_after " (not in the trace)")
        if (bad) { printf "tracy_check: FAILED: %d mismatches\n", bad; exit 1 }
        print "tracy_check: the trace matches the ledger"
    }
' "$out/example.out" "$out/inspect.txt"
