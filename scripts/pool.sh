# Sourced by CI's scripts: run commands a few at a time, each one's output to a log of its
# own, and print the logs whole, in the order the commands were given, once all are done
# (so two runs' lines never interleave). Every command runs to the end even when another
# failed; `pool_wait` fails if any did, naming them after the logs.
#
#   pool_start 2               # at most two at a time
#   pool_run NAME CMD ARGS...  # starts CMD once fewer than two run
#   pool_wait                  # waits for all, prints; exit status 1 if any failed
#
# Meant for test runs that keep about one core busy each (valgrind, which runs a process's
# threads one at a time; Miri, an interpreter on one thread; a test binary spending most
# of its time in one long serial test): give the longest first, so that the short ones
# fill the other core meanwhile.

pool_start() {
    pool_width=$1
    pool_dir=$(mktemp -d)
    pool_names=()
    pool_pids=()
    pool_t0=$SECONDS
}

# How many of the pool's commands still run.
pool_running() {
    local n=0 pid
    for pid in "${pool_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null && n=$((n + 1))
    done
    echo "$n"
}

pool_run() {
    local name=$1 i=${#pool_names[@]}
    shift
    while (($(pool_running) >= pool_width)); do
        wait -n 2>/dev/null || true
    done
    pool_names+=("$name")
    {
        echo "==> $name"
        t=$SECONDS rc=0
        "$@" || rc=$?
        if ((rc == 0)); then
            touch "$pool_dir/$i.ok"
        else
            echo "!!! $name FAILED (exit $rc)"
        fi
        # This subshell's `times` (not in a pipe: that would be another subshell's): what
        # the command used, user + system.
        times >"$pool_dir/$i.cpu"
        awk 'NR == 2 { n = split($0, f, /[ms ]+/)
            for (i = 1; i + 1 <= n; i += 2) c += f[i] * 60 + f[i + 1]; print c }' \
            "$pool_dir/$i.cpu" >"$pool_dir/$i.cpu.s" && mv "$pool_dir/$i.cpu.s" "$pool_dir/$i.cpu"
        printf '    %s: %d s (%.0f s of CPU)\n' "$name" $((SECONDS - t)) "$(cat "$pool_dir/$i.cpu")"
    } </dev/null >"$pool_dir/$i.log" 2>&1 &
    pool_pids+=($!)
}

pool_wait() {
    local i failed=()
    wait "${pool_pids[@]}" 2>/dev/null || true
    for i in "${!pool_names[@]}"; do
        cat "$pool_dir/$i.log"
        [[ -e "$pool_dir/$i.ok" ]] || failed+=("${pool_names[$i]}")
    done
    echo "    ${#pool_names[@]} runs, $pool_width at a time: $((SECONDS - pool_t0)) s," \
        "$(cat "$pool_dir"/*.cpu 2>/dev/null | awk '{ c += $1 } END { printf "%.0f", c }') s of CPU"
    rm -rf "$pool_dir"
    if ((${#failed[@]})); then
        echo "!!! FAILED: ${failed[*]} (their logs are above)"
        return 1
    fi
}

# The test executables a `cargo test --no-run --message-format=json` build made, one
# "NAME PATH" line each (NAME: the target's, `nebula_memory` for the library's unit tests),
# read from that build's output on stdin.
pool_test_binaries() {
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])'
}

# The "NAME ..." lines on stdin, those whose NAME is in $1 (names, longest run first) first
# and in that order, then the rest as they came.
pool_longest_first() {
    awk -v first="$1" 'BEGIN { n = split(first, f, " "); for (i = 1; i <= n; i++) rank[f[i]] = i }
        { printf "%d\t%d\t%s\n", ($1 in rank) ? rank[$1] : n + 1, NR, $0 }' |
        sort -n -k1,1 -k2,2 | cut -f3-
}
