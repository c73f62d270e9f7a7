//! One test per invariant (`docs/world.md`), named after it: each builds a
//! schedule that breaks it under a mutation (or a hand-made bad state),
//! and shows the same schedule holding it without one.

use nao_rs_world::invariants::{self as inv, Inv};
use nao_rs_world::schedule::{Action, Schedule, WakeVia, MS};
use nao_rs_world::world::{run_schedule, Mutation, Outcome};

fn schedule(run_ms: u64, actions: &[(u64, Action)]) -> Schedule {
    Schedule::by_hand(run_ms, actions)
}

fn wake(delay_ms: u64) -> Action {
    Action::Wake {
        via: WakeVia::Local,
        delay_ns: delay_ms * MS,
        lost: false,
    }
}

fn broken(out: &Outcome) -> Option<Inv> {
    out.violation.as_ref().map(|v| v.inv)
}

/// Breaks `want` under `m`, holds every invariant without it.
fn breaks_only_under(s: &Schedule, m: Mutation, want: Inv) {
    let clean = run_schedule(s.clone(), None, true);
    assert_eq!(broken(&clean), None, "{:#?}", clean.story);
    let bad = run_schedule(s.clone(), Some(m), true);
    assert_eq!(broken(&bad), Some(want), "{:#?}", bad.story);
}

#[test]
fn i1_a_frame_built_while_the_page_read_tripped_is_all_off() {
    assert!(inv::i1_tripped_read_frame_all_off(false, false).is_err());
    assert!(inv::i1_tripped_read_frame_all_off(false, true).is_ok());
    assert!(inv::i1_tripped_read_frame_all_off(true, false).is_ok());
    // An awake robot stopped three ways: every frame after holds it.
    let s = schedule(
        1500,
        &[
            (200, wake(1)),
            (400, Action::NaoctlStop),
            (600, Action::Rearm),
            (700, wake(1)),
            (
                900,
                Action::Damage(nao_rs_world::schedule::DamageKind::Zero),
            ),
            (1100, Action::Rearm),
            (1200, wake(1)),
            (1300, Action::Button { len_ns: 20 * MS }),
        ],
    );
    let out = run_schedule(s, None, false);
    assert_eq!(broken(&out), None);
    assert!(out.stiff_frames > 0, "the robot moved between the stops");
}

#[test]
fn i2_after_a_rearm_no_stiff_frame_until_a_wake_read_after_it() {
    assert!(inv::i2_stiff_frame_needs_a_wake_read_after_the_rearm(false, 10, 5, &[9]).is_err());
    assert!(inv::i2_stiff_frame_needs_a_wake_read_after_the_rearm(false, 10, 12, &[11]).is_err());
    assert!(inv::i2_stiff_frame_needs_a_wake_read_after_the_rearm(false, 10, 5, &[11]).is_ok());
    assert!(inv::i2_stiff_frame_needs_a_wake_read_after_the_rearm(true, 10, 5, &[]).is_ok());
    // A wake read while tripped, sent across the re-arm.
    let s = schedule(
        800,
        &[
            (200, wake(0)),
            (300, Action::NaoctlStop),
            (500, wake(20)),
            (505, Action::Rearm),
        ],
    );
    breaks_only_under(&s, Mutation::GenerationWhileTripped, Inv::I2);
    // A start that finds the page armed: no wake at all.
    breaks_only_under(&schedule(400, &[]), Mutation::StartAwake, Inv::I2);
}

#[test]
fn i3_a_hang_crash_or_disobeyed_trip_gets_the_guards_all_off_in_bound() {
    let owed = [inv::Owed {
        since_ns: 0,
        due_ns: 10,
        why: "the runtime hung",
        runtime: 0,
    }];
    assert!(inv::i3_guard_all_off_in_bound(&owed, 10).is_ok());
    assert!(inv::i3_guard_all_off_in_bound(&owed, 11).is_err());
    // A stop, and the runtime stalls before it confirms: the guard's rule
    // 3 (40 ms), not the beat timeout (60 ms), must take over.
    let s = schedule(
        700,
        &[
            (300, Action::NaoctlStop),
            (301, Action::Stall { len_ns: 300 * MS }),
        ],
    );
    breaks_only_under(&s, Mutation::StaleConfirmation, Inv::I3);
    // A hang and a crash are taken over in bound.
    for a in [Action::Hang, Action::Crash] {
        let out = run_schedule(schedule(600, &[(200, wake(1)), (400, a)]), None, true);
        assert_eq!(broken(&out), None, "{:#?}", out.story);
        assert!(out.guard_frames > 0, "{a:?}: the guard sent all-off");
    }
}

#[test]
fn i4_every_stop_delivered_to_the_port_trips_within_its_bound() {
    assert!(inv::i4_delivered_stop_trips_in_bound(Some(0), 5 * MS).is_ok());
    assert!(inv::i4_delivered_stop_trips_in_bound(Some(0), 6 * MS).is_err());
    // The runtime crashes; the guard stalls across its restart; a stop
    // waits in the port while the restarted runtime opens the busy board.
    let s = schedule(
        1300,
        &[
            (50, Action::Crash),
            (800, Action::GuardStall { len_ns: 900 * MS }),
            (
                840,
                Action::UdpStop {
                    delay_ns: 0,
                    lost: false,
                },
            ),
        ],
    );
    breaks_only_under(&s, Mutation::UdpAfterStartUp, Inv::I4);
}

#[test]
fn i5_the_guard_signals_only_a_process_it_verified() {
    assert!(inv::i5_signal_only_verified(Some((5, 1)), Some((5, 1))).is_ok());
    assert!(inv::i5_signal_only_verified(Some((5, 2)), Some((5, 1))).is_err());
    assert!(inv::i5_signal_only_verified(Some((6, 1)), None).is_err());
    // A local process writes its pid into a tripped page: the guard takes
    // over and must signal the runtime it holds, not the page's pid.
    let s = schedule(900, &[(300, Action::NaoctlStop), (700, Action::ForgePid)]);
    breaks_only_under(&s, Mutation::UnverifiedKill, Inv::I5);
    // A reused pid is never signalled either.
    let s = schedule(
        1700,
        &[
            (300, Action::Crash),
            (320, Action::PidReuse),
            (1500, Action::Hang),
        ],
    );
    let out = run_schedule(s, None, true);
    assert_eq!(broken(&out), None, "{:#?}", out.story);
}

#[test]
fn i6_at_most_one_writer_of_the_chest_board() {
    assert!(inv::i6_one_writer(0).is_ok());
    assert!(inv::i6_one_writer(1).is_ok());
    assert!(inv::i6_one_writer(2).is_err());
    // Take-over, hand-over and release: one writer throughout.
    let s = schedule(
        2600,
        &[(200, wake(1)), (400, Action::Hang), (2000, Action::Rearm)],
    );
    let out = run_schedule(s, None, true);
    assert_eq!(broken(&out), None, "{:#?}", out.story);
    assert!(out.guard_frames > 0);
}

#[test]
fn i7_bringup_only_the_chosen_joint_never_above_the_cap() {
    let mut stiff = [0u16; nao_wire::JOINTS];
    assert!(inv::i7_bringup_one_joint_under_cap(&stiff, 3, 200).is_ok());
    stiff[3] = 200;
    assert!(inv::i7_bringup_one_joint_under_cap(&stiff, 3, 200).is_ok());
    stiff[3] = 201;
    assert!(inv::i7_bringup_one_joint_under_cap(&stiff, 3, 200).is_err());
    stiff[3] = 0;
    stiff[4] = 1;
    assert!(inv::i7_bringup_one_joint_under_cap(&stiff, 3, 200).is_err());
    // Bring-up with presses, jogs, a stop and a re-arm.
    let mut s = schedule(
        3500,
        &[
            (200, wake(1)),
            (1400, Action::BumperHold { len_ns: 1200 * MS }),
            (1800, Action::Jog { plus: true }),
            (1900, Action::Jog { plus: true }),
            (2700, Action::NaoctlStop),
            (2800, Action::Rearm),
            (2900, wake(1)),
        ],
    );
    s.bringup = Some(3);
    let out = run_schedule(s, None, true);
    assert_eq!(broken(&out), None, "{:#?}", out.story);
    assert!(out.stiff_frames > 0, "the joint moved: {:#?}", out.story);
}
