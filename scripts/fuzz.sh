#!/usr/bin/env bash
# Coverage-guided fuzzing of pool + arena operation sequences against a model
# (fuzz/fuzz_targets/ops.rs). Needs nightly and `cargo install cargo-fuzz`.
# Usage: scripts/fuzz.sh [seconds]   (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
cargo +nightly fuzz run ops -- -max_total_time="$secs" -rss_limit_mb=4096
