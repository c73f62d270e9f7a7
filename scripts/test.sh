#!/usr/bin/env bash
# The project's test command (README): format, lints, unused dependencies,
# every test, the loom models and the property tests at full size. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
# The guard's tests' fault injection (never in a robot build) is linted too.
cargo clippy -p nao-rs --features fault-injection --all-targets -- -D warnings

echo "== cargo machete (no dependency declared and unused)"
# A fresh machine has no cargo-machete: install it from crates.io once.
if ! command -v cargo-machete >/dev/null 2>&1; then
    cargo install --locked cargo-machete
fi
cargo machete

echo "== cargo test (workspace)"
# PROPTEST_CASES: the fuzz-style property tests run at least 100,000 cases.
# nao-rs/fault-injection: the guard's tests run `nao-rs run --fault KIND`;
# the programs the tests start (testkit::bin) are built with the same
# feature, so one build serves both. No robot build enables it
# (scripts/vhead.sh and scripts/field.sh build without).
PROPTEST_CASES="${PROPTEST_CASES:-100000}" \
    cargo test --workspace --release --features nao-rs/fault-injection -- --test-threads=2

echo "== loom models (page orderings)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p deathswitch --release --lib cells::loom_tests -- --test-threads=2
