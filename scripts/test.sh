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
# The world's deliberate mutations (never in a robot build) are linted too.
cargo clippy -p nao-rs-world --features mutations --all-targets -- -D warnings

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
# The process-level tests keep the robot's own limits (a 60 ms beat timeout,
# 12 ms frames) and a shared VM stalls now and then for 60 ms and more: an
# integration test (a `--test` target) that fails is run once more, alone,
# and the script says so; a unit test's failure, a build error or more than
# MAX_RERUN failed tests fail at once, and a defect fails both runs
# (docs/safety-rules.md, "Tests on a stalling host").
MAX_RERUN=3
mkdir -p target
log=target/test-workspace.log
if PROPTEST_CASES="${PROPTEST_CASES:-100000}" \
    cargo test --workspace --release --features nao-rs/fault-injection --no-fail-fast \
    -- --test-threads=2 2>&1 | tee "$log"; then
    :
else
    # Cargo names each failed target ("to rerun pass `-p PKG --test NAME`");
    # libtest lists a target's failed tests under its second "failures:".
    failed_targets=$(sed -n 's/^error: test failed, to rerun pass `\(.*\)`$/\1/p' "$log")
    failed_tests=$(awk '
        /^     Running / { n = "" }
        /^     Running tests\// { n = $2; sub(/^tests\//, "", n); sub(/\.rs$/, "", n) }
        /^failures:$/ { listing = 1; next }
        listing && n != "" && /^    [^ ]+$/ { print n, $1; next }
        { listing = 0 }' "$log" | sort -u)
    count=$(grep -c . <<<"$failed_tests" || true)
    if [ -z "$failed_targets" ]; then
        echo "FAILED: the build or cargo itself failed (see above)"
        exit 1
    fi
    while read -r target; do
        name=${target##*--test }
        if [ "$name" = "$target" ] || ! grep -q "^$name " <<<"$failed_tests"; then
            echo "FAILED: \`$target\` failed, and it is no integration test or named no failed test (a unit test, a crash): no second run"
            exit 1
        fi
    done <<<"$failed_targets"
    if [ "$count" -gt "$MAX_RERUN" ]; then
        echo "FAILED: $count tests failed (more than $MAX_RERUN): no second run"
        exit 1
    fi
    echo "== $count integration test(s) failed; each runs once more, alone:"
    sed 's/^/   /' <<<"$failed_tests"
    while read -r target name <&3; do
        if ! cargo test --workspace --release --features nao-rs/fault-injection \
            --test "$target" -- --exact "$name" --test-threads=1; then
            echo "FAILED: $target::$name failed twice"
            exit 1
        fi
        echo "RERUN PASSED: $target::$name (it failed in the first run: $log)"
    done 3<<<"$failed_tests"
fi

echo "== the world's mutations (docs/world.md)"
# The workspace run above explores 100,000 schedules of the whole robot in
# virtual time (bins/nao-rs-world/tests/explore.rs). Here each deliberate
# mutation (a hole fixed before, re-opened by the `mutations` feature of
# the crates it lives in) must be found by the explorer, and each invariant
# broken by one: a build of the world alone, so the feature stays out of
# every other build. Deterministic (seeded): no second run.
cargo test --release -p nao-rs-world --features mutations --test invariants --test mutations -- --test-threads=2

echo "== the Linux 4.4 floor (docs/robot-system.md)"
# The process-level tests that make the calls newer than Linux 4.4 the
# programs and std make (threads: clone3, rseq; files: statx; the guard's
# and the start-up facts' pidfd_open) run once more as on the robot's
# kernel: cargo's runner is testkit's kernel-floor, so each test binary and
# every program it starts has every such call fail with ENOSYS. The
# guard's takeover, restarts and page_damage tests assert the immediate
# take-over at an exit: without pidfds the exit watch gives it (issue 28
# point 3; tests/exit_watch.rs runs both ways itself). About a minute; a
# failed run is run once more (a stalling host), a regression fails both.
cargo build --release --quiet --features nao-rs/fault-injection --bin kernel-floor
floor_tests() {
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/target/release/kernel-floor" \
        cargo test --release --features nao-rs/fault-injection "$@" -- --test-threads=2
}
floor_runtime=(-p nao-rs -p naoctl --test run_sim --test restarts --test demo_cli
    --test cli --test runtime_compound --test full_fs)
floor_guard=(-p nao-rs-guard -p nao-rs --test real_runtime --test stop_port
    --test release_race --test fd_limit --test page_integrity
    --test takeover --test restarts --test page_damage)
for set in floor_runtime floor_guard; do
    declare -n args=$set
    if ! floor_tests "${args[@]}"; then
        echo "== $set failed under the 4.4 floor; once more"
        floor_tests "${args[@]}" || { echo "FAILED: $set under the 4.4 floor, twice"; exit 1; }
        echo "RERUN PASSED: $set under the 4.4 floor"
    fi
done

echo "== loom models (page orderings)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p deathswitch --release --lib cells::loom_tests -- --test-threads=2
