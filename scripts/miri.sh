#!/usr/bin/env bash
# The core's tests under Miri (`rustup component add miri rust-src --toolchain nightly`).
# Under Miri the pool region comes from `std::alloc` instead of mmap; tests that need the
# OS (RSS, fault traps, child processes) or millions of operations are marked
# `#[cfg_attr(miri, ignore)]`, and proptest runs few cases.
set -euo pipefail
cd "$(dirname "$0")/.."
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}"
export PROPTEST_CASES="${PROPTEST_CASES:-4}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
cargo +nightly miri test --no-default-features --lib --tests "$@"
