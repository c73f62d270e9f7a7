#!/usr/bin/env bash
# The project's test command (README): format, lints, unused dependencies,
# every test (the world's explorer and its mutations included), the
# process-level tests once more under the Linux 4.4 floor, and the loom
# models. Run from anywhere. One build serves every test; nothing is run
# twice: a test that fails is a failure (docs/safety-rules.md, "Tests and
# time"). Each phase's wall time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test build's features, one set for every cargo call below, so that
# nothing is built twice: nao-rs/fault-injection (the guard's tests run
# `nao-rs run --fault KIND`) and nao-rs-world/mutations (the world's
# deliberate holes, docs/world.md; each is off until a world selects it
# for its own thread). No robot build enables either
# (scripts/robot-build.sh builds four named programs without them).
FEATURES=nao-rs/fault-injection,nao-rs-world/mutations
# The programs the tests start are built with the same (testkit::FEATURES):
# any other set is a second build of the tree in the middle of the tests.
if ! grep -q "pub const FEATURES: &str = \"$FEATURES\";" bins/testkit/src/lib.rs; then
    echo "FAILED: FEATURES here ($FEATURES) and testkit::FEATURES (bins/testkit/src/lib.rs) differ; make them the same"
    exit 1
fi

started=$SECONDS
phase_names=()
phase_secs=()
phase_from=$SECONDS
phase() {
    if [ -n "${current_phase:-}" ]; then
        phase_names+=("$current_phase")
        phase_secs+=($((SECONDS - phase_from)))
    fi
    current_phase=$1
    phase_from=$SECONDS
    echo "== $1"
}
report() {
    phase_names+=("$current_phase")
    phase_secs+=($((SECONDS - phase_from)))
    echo "== wall time per phase"
    for i in "${!phase_names[@]}"; do
        printf '   %5d s  %s\n' "${phase_secs[$i]}" "${phase_names[$i]}"
    done
    printf '   %5d s  the test command (%dm%02ds)\n' $((SECONDS - started)) \
        $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60))
}
# A failure ends the command: the work beside the tests (below) ends with it.
trap 'status=$?; if [ -n "${beside:-}" ]; then pkill -P "$beside" 2>/dev/null; kill "$beside" 2>/dev/null; fi
if [ -n "${current_phase:-}" ]; then report; fi; [ $status = 0 ] || echo "FAILED in: $current_phase"' EXIT

phase "cargo fmt --check"
cargo fmt --all -- --check

phase "cargo clippy --all-targets -- -D warnings (default features, then the test build's)"
cargo clippy --workspace --all-targets -- -D warnings
# The code under the test build's features (fault injection, the world's
# mutations) is linted too; cargo clippy lints the path dependencies of the
# two packages named (the kit, the page, the wire, the guard, the runtime).
cargo clippy -p nao-rs -p nao-rs-world --all-targets --features "$FEATURES" -- -D warnings

phase "cargo machete (no dependency declared and unused)"
# A fresh machine has no cargo-machete: install it from crates.io once
# (.ci/run installs it before it starts this command).
if ! command -v cargo-machete >/dev/null 2>&1; then
    cargo install --locked cargo-machete
fi
cargo machete

phase "cargo test (workspace, release)"
# PROPTEST_CASES: the fuzz-style property tests run at least 100,000 cases.
# The process-level tests judge what only real processes show (signals,
# pidfds, sockets, modes, mmap, systemd) with bounds a stalling host
# keeps; the rules judged through time are world cases
# (bins/nao-rs-world/tests/cases.rs) or pure steps with simulated cycles.
# The world's mutations (tests/mutations.rs) run here too. No second run.
export PROPTEST_CASES="${PROPTEST_CASES:-100000}"
build_log=target/test-build.log
mkdir -p target
cargo test --workspace --release --features "$FEATURES" --no-run 2>&1 | tee "$build_log"

# Beside the process-level tests, which mostly wait on processes and
# leave the CPUs idle: the explorer's 100,000 schedules of the whole robot
# in virtual time (2 threads, about a minute alone), then the loom models
# of the page's orderings (their own build: --cfg loom, target/loom; every
# interleaving with at most 5 preemptions: loom's own advice is 2 or 3,
# both deliberate wrong orders in the models are caught at 2, and one
# model unbounded ran for more than 3 minutes). At nice 19: the tests'
# own processes come first, this takes the CPU time they leave. The
# explorer's test binary is run directly (cargo holds target/ while it
# runs tests); its output is printed when it is judged, after the floor
# below.
explore_bin=$(sed -n 's/^ *Executable tests\/explore.rs (\(.*\))$/\1/p' "$build_log" | head -n 1)
[ -x "$explore_bin" ] || { echo "FAILED: no explore test binary in $build_log"; exit 1; }
beside_log=target/test-beside.log
nice -n 19 bash -c '
    set -e
    echo "== the explorer: 100,000 schedules (bins/nao-rs-world/tests/explore.rs)"
    (cd bins/nao-rs-world && exec "$1" --exact explorer_budget_breaks_no_invariant --nocapture)
    echo "== loom models (page orderings)"
    LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-5}" RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        cargo test -p deathswitch --release --lib cells::loom_tests -- --test-threads=2
' beside "$PWD/$explore_bin" >"$beside_log" 2>&1 &
beside=$!

# Three test threads on two cores: the process-level tests mostly wait on
# their processes (a bring-up session, a take-over), and their bounds are
# a stalling host's.
cargo test --workspace --release --features "$FEATURES" --no-fail-fast \
    -- --test-threads=3 --skip explorer_budget_breaks_no_invariant

phase "the Linux 4.4 floor (docs/robot-system.md)"
# The process-level tests that make the calls newer than Linux 4.4 the
# programs and std make (threads: clone3, rseq; files: statx; the guard's
# and the start-up facts' pidfd_open) run once more as on the robot's
# kernel: cargo's runner is testkit's kernel-floor, so each test binary and
# every program it starts has every such call fail with ENOSYS. The
# guard's takeover, restarts and page_damage tests assert the immediate
# take-over at an exit: without pidfds the exit watch gives it (issue 28
# point 3; tests/exit_watch.rs runs both ways itself). The same build as
# above (--workspace, the same features): nothing is compiled again.
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/target/release/kernel-floor" \
    cargo test --release --workspace --features "$FEATURES" \
    --test run_sim --test restarts --test demo_cli --test cli --test runtime_compound \
    --test full_fs --test real_runtime --test stop_port --test release_race \
    --test fd_limit --test page_integrity --test takeover --test page_damage \
    -- --test-threads=3

phase "beside the tests: the explorer and the loom models (their output)"
beside_status=0
wait "$beside" || beside_status=$?
beside=
cat "$beside_log"
if [ "$beside_status" != 0 ]; then
    echo "FAILED: the explorer or the loom models (exit $beside_status; $beside_log)"
    exit 1
fi
