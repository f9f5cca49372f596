#!/usr/bin/env bash
# What `TrackingAllocator` + `MemoryPlugin` cost on an allocation-heavy Bevy loop: builds
# the examples `heavy_loop_tracked` and `heavy_loop_plain` (one workload, about 20,000 heap
# allocations a frame, see examples/heavy_loop/workload.rs) in release, runs them in turn
# (plain, tracked, plain, ...: the machine's drift falls on both alike), and prints for
# each the median CPU time (every thread's) and wall time per frame, then the ratio of the
# medians and the overhead per allocation: (tracked - plain) per frame / the tracked run's
# allocations per frame (the plain one counts none; both print the same work checksum).
# Run it on a quiet machine: the figures are only as steady as the machine.
#
# Environment:
#   ROUNDS   runs of each program (default 10)
#   FRAMES   timed frames a run (default 1000, after 30 of warm-up)
#   SAMPLE   if set (a mean, as NEBULA_MEMORY_SAMPLE takes it: 512K), what the sampled call
#            stacks cost instead: "plain" is then the tracked program without sampling,
#            "tracked" the same program with NEBULA_MEMORY_SAMPLE=$SAMPLE
#   TRACY    if 1, what Bevy's `trace_tracy_memory` costs instead: "tracked" is then
#            examples/heavy_loop_tracy (Tracy's ProfiledAllocator, depth 100), against plain
# Each run's output is kept in target/heavy_loop_cost/ (or under CARGO_TARGET_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-10}"
frames="${FRAMES:-1000}"
target="${CARGO_TARGET_DIR:-target}"
out="$target/heavy_loop_cost"

if [[ "${TRACY:-}" == 1 ]]; then
    cargo build --release --features tracy --example heavy_loop_tracy --example heavy_loop_plain
else
    cargo build --release --example heavy_loop_tracked --example heavy_loop_plain
fi
mkdir -p "$out"
rm -f "$out"/*.txt

# The value of `key=` in a run's output.
field() { sed -n "s/^$2=//p" "$1"; }

# What each label runs: the program, and the sampling mean it gets ("" for none).
binary() { echo "$target/release/examples/heavy_loop_$1"; }
if [[ "${TRACY:-}" == 1 ]]; then
    plain_run=(env -u NEBULA_MEMORY_SAMPLE "$(binary plain)")
    tracked_run=(env -u NEBULA_MEMORY_SAMPLE "$(binary tracy)")
elif [[ -n "${SAMPLE:-}" ]]; then
    plain_run=(env -u NEBULA_MEMORY_SAMPLE "$(binary tracked)")
    tracked_run=(env NEBULA_MEMORY_SAMPLE="$SAMPLE" "$(binary tracked)")
else
    plain_run=(env -u NEBULA_MEMORY_SAMPLE "$(binary plain)")
    tracked_run=(env -u NEBULA_MEMORY_SAMPLE "$(binary tracked)")
fi

for round in $(seq 1 "$rounds"); do
    for program in plain tracked; do
        if [[ "$program" == plain ]]; then run=("${plain_run[@]}"); else run=("${tracked_run[@]}"); fi
        "${run[@]}" --frames "$frames" \
            >"$out/$program-$round.txt"
        printf '%-8s round %2d: cpu %s s, wall %s s\n' "$program" "$round" \
            "$(field "$out/$program-$round.txt" cpu_s)" "$(field "$out/$program-$round.txt" wall_s)"
    done
done

checksums=$(cat "$out"/*.txt | sed -n 's/^checksum=//p' | sort -u | wc -l)
if [[ "$checksums" != 1 ]]; then
    echo "the runs did different work (checksums differ): see $out" >&2
    exit 1
fi

# The median over the rounds of `key` / frames, in ms.
median_ms() {
    for f in "$out/$1"-*.txt; do
        echo "$(field "$f" "$2") $(field "$f" frames)" | awk '{ printf "%.9f\n", $1 / $2 * 1000 }'
    done | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
allocs=$(for f in "$out"/tracked-*.txt; do
    echo "$(field "$f" allocations) $(field "$f" frames)" | awk '{ printf "%.3f\n", $1 / $2 }'
done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] + 0 }')
# Tracy's program counts none: the tracked program's count of the same workload, if given.
[[ "${TRACY:-}" == 1 ]] && allocs="${ALLOCS:-0}"

# The least and most of the rounds' ratios (each round's tracked run over its plain one).
ratio_range() {
    for round in $(seq 1 "$rounds"); do
        echo "$(field "$out/tracked-$round.txt" "$1") $(field "$out/plain-$round.txt" "$1")"
    done | awk '{ print $1 / $2 }' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2fx", lo, hi }'
}

echo
[[ -n "${SAMPLE:-}" ]] && echo "(plain: tracked without sampling; tracked: NEBULA_MEMORY_SAMPLE=$SAMPLE)"
echo "heavy_loop: $rounds rounds of $frames frames each, medians per frame; $allocs heap allocations a frame"
for clock in cpu wall; do
    plain=$(median_ms plain "${clock}_s")
    tracked=$(median_ms tracked "${clock}_s")
    awk -v c="$clock" -v p="$plain" -v t="$tracked" -v a="$allocs" -v r="$(ratio_range "${clock}_s")" 'BEGIN {
        printf "%-4s plain %.3f ms, tracked %.3f ms: %.3fx (rounds %s)", c, p, t, t / p, r
        if (a > 0) printf ", %.1f ns per allocation", (t - p) * 1e6 / a
        printf "\n"
    }'
done
