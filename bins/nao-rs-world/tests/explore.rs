//! The explorer as part of the test command: a fixed budget of seeded
//! schedules breaks no invariant, and the same seed gives the same event
//! log (`docs/world.md`). The mutations: `tests/mutations.rs`.

use std::time::Duration;

use nao_rs_world::explore::{explore_parallel, Budget, Report};
use nao_rs_world::schedule::GUARD_STALL_MAX_NS;
use nao_rs_world::world::run_seed;

/// The test command's budget: 100,000 schedules on two threads.
const SCHEDULES: u64 = 100_000;

fn budget(schedules: u64) -> Budget {
    Budget {
        guard_stall_max_ns: GUARD_STALL_MAX_NS,
        schedules,
        simulated_ns: u64::MAX,
        wall: Duration::from_secs(u64::MAX / 4),
    }
}

fn summary(r: &Report) -> String {
    format!(
        "{} schedules, {:.0} simulated s, {} stiff frames, {} guard frames in {:.1} s ({:.0} schedules/s, {:.0} simulated s per s)",
        r.schedules,
        r.simulated_ns as f64 / 1e9,
        r.stiff_frames,
        r.guard_frames,
        r.wall.as_secs_f64(),
        r.schedules as f64 / r.wall.as_secs_f64(),
        r.simulated_ns as f64 / 1e9 / r.wall.as_secs_f64()
    )
}

#[test]
fn explorer_budget_breaks_no_invariant() {
    let r = explore_parallel(0, budget(SCHEDULES), None, 2);
    eprintln!("{}", summary(&r));
    if let Some(f) = &r.failure {
        panic!("{f}");
    }
    assert!(r.schedules >= SCHEDULES);
    assert!(r.stiff_frames > 0, "the robot never moved");
    assert!(r.guard_frames > 0, "the guard never took over");
}

#[test]
fn the_same_seed_gives_the_same_event_log() {
    for seed in [0, 1, 7, 390, 1025, 30_326, u64::MAX] {
        let a = run_seed(seed, None, false);
        let b = run_seed(seed, None, false);
        assert_eq!(a.log_hash, b.log_hash, "seed {seed}");
        assert_eq!(a.events, b.events, "seed {seed}");
    }
    assert_ne!(
        run_seed(1, None, false).log_hash,
        run_seed(2, None, false).log_hash
    );
}
