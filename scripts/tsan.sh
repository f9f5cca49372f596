#!/usr/bin/env bash
# The concurrent tests under ThreadSanitizer. Needs a nightly toolchain with rust-src
# (`rustup component add rust-src --toolchain nightly`): std is rebuilt instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/tsan}"
# Property tests at most 32 cases here (their own counts in `cargo test`): what the
# sanitizer checks is each access, which a few cases reach as well as many.
export PROPTEST_CASES="${PROPTEST_CASES:-32}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"
cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu \
    --test pool_threads --test global_pools --test frame_thread --test scratch \
    --test shared_arena --test double_buffered --test thread_arenas --test thread_teardown \
    --test reentrancy --test reentrant_tracing --test ledger --test heap_tracking --test heap_model "$@"
