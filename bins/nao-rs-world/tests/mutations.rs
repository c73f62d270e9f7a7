//! Each deliberate mutation (`docs/world.md`, the table) is found by the
//! explorer within its budget, breaking the invariant the table names.
//! Built with the `mutations` feature only.

use std::time::Duration;

use nao_rs_world::explore::{explore_parallel, Budget, Report};
use nao_rs_world::invariants::Inv;
use nao_rs_world::schedule::GUARD_STALL_MAX_NS;
use nao_rs_world::world::Mutation;

/// A mutation must be found within this many schedules.
const MUTATION_SCHEDULES: u64 = 20_000;

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
        "{} schedules, {:.0} simulated s in {:.2} s",
        r.schedules,
        r.simulated_ns as f64 / 1e9,
        r.wall.as_secs_f64(),
    )
}

fn finds(m: Mutation, want: Inv) {
    let r = explore_parallel(0, budget(MUTATION_SCHEDULES), Some(m), 2);
    eprintln!("{m:?}: {}", summary(&r));
    let f = r
        .failure
        .unwrap_or_else(|| panic!("{m:?}: not found in {} schedules", r.schedules));
    eprintln!("{f}");
    assert_eq!(f.inv, want, "{f}");
    assert!(f.shrunk.actions.len() <= 8, "{f}");
}

#[test]
fn the_explorer_finds_a_start_that_counts_an_armed_page_as_awake() {
    finds(Mutation::StartAwake, Inv::I2);
}

#[test]
fn the_explorer_finds_a_wake_generation_read_while_tripped_counting_after_the_rearm() {
    finds(Mutation::GenerationWhileTripped, Inv::I2);
}

#[test]
fn the_explorer_finds_a_trip_confirmation_from_before_the_trip() {
    finds(Mutation::StaleConfirmation, Inv::I3);
}

#[test]
fn the_explorer_finds_the_guard_signalling_an_unverified_pid() {
    finds(Mutation::UnverifiedKill, Inv::I5);
}

#[test]
fn the_explorer_finds_the_udp_queue_read_only_after_the_board_start_up() {
    finds(Mutation::UdpAfterStartUp, Inv::I4);
}

/// The heartbeat's store order cannot matter in a world of one thread:
/// every beat is whole before anyone reads it (`docs/world.md`, the gap).
/// When the world models a beat torn by a kill, this test fails and the
/// table's row changes.
#[test]
fn the_heartbeat_written_in_the_wrong_order_is_a_gap_of_the_world_model() {
    let r = explore_parallel(0, budget(4_000), Some(Mutation::BeatOrder), 2);
    assert!(r.failure.is_none(), "found now: update docs/world.md");
}
