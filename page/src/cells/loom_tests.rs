//! Loom models of the page's orderings, on an in-memory [`Cells`] (no file):
//! the heartbeat order (a reader that sees cycle N sees N's confirmation,
//! and the motion and safety flags of N's `Switch::beat`), the trip
//! compare-and-swap (the first reason wins), the impossible values
//! check racing a trip or a re-arm, and the wake generation (an armed read
//! after a trip never carries the generation from before it; a reader that
//! sees a new runtime sees its nonce).
//!
//! Built only under `cfg(loom)`, where the atomics facade (`crate::sync`)
//! is loom's. Run: `RUSTFLAGS="--cfg loom" cargo test -p deathswitch
//! --release --lib cells::loom_tests`.

use super::Cells;
use crate::{Beat, Damage, Motion, Reason};
use loom::sync::Arc;
use loom::thread;

/// A page made whole by a boot trip at `t` (nonce 1).
fn booted_at(t: u64) -> Cells {
    let c = Cells::zeroed();
    c.initialize(Reason::Boot, t, t, 1);
    c
}

/// The first re-arm's nonce, and the registered runtime's.
const ARM_1: u64 = 0xa1;
const DRIVER_1: u64 = 0xd1;

/// [`booted_at`] 1, re-armed at 2 (nonce [`ARM_1`]).
fn armed() -> Cells {
    let c = booted_at(1);
    c.rearm(2, ARM_1);
    c
}

/// [`armed`], with runtime 7 registered (nonce [`DRIVER_1`]): limp and
/// waiting for a wake in the generation of both.
fn armed_driven() -> Cells {
    let c = armed();
    c.register_driver(7, 70, DRIVER_1);
    c
}

/// Every interleaving of `other` on a second thread with `this` on the
/// model's own, both on the cells `start` makes; `check` judges the cells
/// after both, what `this` saw and what `other` returned.
fn race<A: Send + 'static, B: 'static>(
    start: fn() -> Cells,
    other: fn(&Cells) -> A,
    this: fn(&Cells) -> B,
    check: fn(&Cells, B, A),
) {
    loom::model(move || {
        let cells = Arc::new(start());
        let t = {
            let cells = cells.clone();
            thread::spawn(move || other(&cells))
        };
        let seen = this(&cells);
        let done = t.join().unwrap();
        check(&cells, seen, done);
    });
}

#[test]
fn loom_heartbeat_reader_that_sees_cycle_n_sees_its_confirmation() {
    race(
        armed,
        |cells| {
            cells.write_heartbeat(0, 100, true);
            cells.write_heartbeat(1, 200, false);
            cells.write_heartbeat(2, 300, true);
        },
        Cells::snapshot,
        |_, s, ()| {
            if let Some(c) = s.last_cycle {
                // Cycles 0 and 2 were all-off: their confirmation is visible.
                if c == 0 || c == 2 {
                    assert!(s.all_off_confirmed_cycle.is_some_and(|a| a >= c), "{s:?}");
                }
                // The time of cycle c or later is visible.
                let t = s.last_beat_ns.unwrap();
                assert!(t >= (c + 1) * 100, "{s:?}");
            }
        },
    );
}

/// The beat of `cycle` with `motion` (flags: the cycle + 1).
fn beat(cycle: u64, motion: Motion) -> Beat {
    Beat {
        cycle,
        t_ns: 100 * (cycle + 1),
        all_off: false,
        motion,
        safety_flags: cycle as u32 + 1,
    }
}

/// `Switch::beat` stores motion and flags before the heartbeat: a reader
/// that sees cycle N's beat sees N's motion and flags (or a later beat's).
#[test]
fn loom_a_reader_that_sees_cycle_n_sees_its_motion() {
    race(
        armed,
        |cells| {
            cells.beat(&beat(0, Motion::LimpWaitingForWake));
            cells.beat(&beat(1, Motion::Awake));
        },
        Cells::snapshot,
        |_, s, ()| match s.last_cycle {
            None => {}
            Some(0) => {
                assert!(
                    matches!(s.motion, Motion::LimpWaitingForWake | Motion::Awake),
                    "{s:?}"
                );
                assert!(s.safety_flags >= 1, "{s:?}");
            }
            Some(_) => assert_eq!((s.motion, s.safety_flags), (Motion::Awake, 2), "{s:?}"),
        },
    );
}

#[test]
fn loom_trip_first_reason_wins() {
    race(
        armed,
        |cells| cells.trip(Reason::Udp, 10, 10),
        |cells| cells.trip(Reason::ChestButton, 20, 20),
        |cells, won_b, won_a| {
            assert!(won_a ^ won_b, "exactly one trip wins");
            let s = cells.snapshot();
            let expected = if won_a {
                Reason::Udp
            } else {
                Reason::ChestButton
            };
            assert_eq!(s.reason, Some(expected));
            assert_eq!(s.tripped_at_ns, if won_a { 10 } else { 20 });
        },
    );
}

#[test]
fn loom_a_reader_never_pairs_a_new_trip_with_a_stale_time() {
    race(
        || booted_at(5),
        |cells| {
            cells.rearm(6, ARM_1);
            cells.trip(Reason::Api, 50, 50);
        },
        Cells::snapshot,
        // A reason is never paired with a time older than its own trip: boot
        // may be seen with its time 5, or (a stale reason, loaded before the
        // re-arm) with a newer time; api only with 50 or still pending.
        |_, s, ()| match s.reason {
            Some(Reason::Boot) => assert!(matches!(s.tripped_at_ns, 5 | 50 | u64::MAX)),
            Some(Reason::Api) => assert!(s.tripped_at_ns == 50 || s.tripped_at_ns == u64::MAX),
            None => {}
            other => panic!("{other:?}"),
        },
    );
}

/// What a holder's check of the page finds at time 1,000.
fn judged(cells: &Cells) -> Option<Damage> {
    cells.judge(|| 1_000)
}

/// The "armed with a trip time" rule (impossible values) never
/// calls a trip that lands while a holder judges the page damage: `judge`
/// confirms with a second load of `reason`.
#[test]
fn loom_a_trip_racing_the_impossible_values_check_is_never_damage() {
    race(
        armed,
        |cells| cells.trip(Reason::Udp, 10, 10),
        judged,
        |_, damage, _| assert_eq!(damage, None),
    );
}

/// Nor a re-arm (a person's) that lands while a holder judges the page.
#[test]
fn loom_a_rearm_racing_the_impossible_values_check_is_never_damage() {
    race(
        || {
            let c = armed();
            c.trip(Reason::Udp, 10, 10);
            c
        },
        |cells| cells.rearm(20, 0xa2),
        judged,
        |_, damage, ()| assert_eq!(damage, None),
    );
}

/// A wake formed before a trip (the generation of the armed epoch before
/// it) never matches an armed read that saw the trip: a trip and a re-arm
/// race two reads of the cycle; once a read saw the trip (tripped, or the
/// count moved), that read and every later one carry the re-arm's
/// generation or none. The re-arm stores its nonce before it clears the
/// reason (Release); `snapshot` loads the reason (Acquire), then the nonce.
#[test]
fn loom_an_armed_read_after_a_trip_never_carries_the_old_generation() {
    race(
        armed_driven,
        |cells| {
            cells.trip(Reason::Udp, 10, 10);
            cells.rearm(20, 0xa2);
        },
        |cells| (cells.snapshot(), cells.snapshot()),
        |_, (first, second), ()| {
            let old = Some(super::wake_generation_of(ARM_1, DRIVER_1));
            let new = Some(super::wake_generation_of(0xa2, DRIVER_1));
            let saw_trip = |s: &crate::Snapshot| !s.armed || s.trip_count == 2;
            if saw_trip(&first) {
                assert_ne!(first.wake_generation(), old, "{first:?}");
                assert_ne!(second.wake_generation(), old, "{second:?}");
            }
            if saw_trip(&second) {
                assert_ne!(second.wake_generation(), old, "{second:?}");
            }
            for s in [first, second] {
                let g = s.wake_generation();
                assert!(g.is_none() || g == old || g == new, "{s:?}");
            }
        },
    );
}

/// A reader that sees a new runtime's pid sees its nonce: its generation
/// is the new runtime's, never a mix of the predecessor's nonce with it.
#[test]
fn loom_a_reader_that_sees_a_new_runtime_sees_its_nonce() {
    race(
        armed_driven,
        |cells| cells.register_driver(8, 80, 0xd2),
        Cells::snapshot,
        |_, s, ()| {
            if s.driver_pid == Some(8) {
                assert_eq!((s.driver_start, s.driver_nonce), (80, 0xd2), "{s:?}");
            }
        },
    );
}

/// The model can fail: a re-arm that cleared the reason before storing its
/// nonce would let an armed read carry the old epoch's nonce.
#[test]
#[should_panic]
fn loom_a_re_arm_publishing_before_its_nonce_is_caught() {
    use loom::sync::atomic::{AtomicU64, Ordering};
    loom::model(|| {
        // (reason, nonce): tripped (1) in epoch 1's nonce.
        let cells = Arc::new((AtomicU64::new(1), AtomicU64::new(1)));
        let w = {
            let cells = cells.clone();
            thread::spawn(move || {
                cells.0.store(0, Ordering::Release); // armed first: wrong
                cells.1.store(2, Ordering::Release); // then the new nonce
            })
        };
        let reason = cells.0.load(Ordering::Acquire);
        let nonce = cells.1.load(Ordering::Acquire);
        if reason == 0 {
            assert_eq!(nonce, 2, "armed with the old epoch's nonce");
        }
        w.join().unwrap();
    });
}

/// The model can fail: the old order (cycle before confirmation, the one
/// that made the guard kill a healthy runtime) is caught.
#[test]
#[should_panic]
fn loom_the_old_order_cycle_before_confirmation_is_caught() {
    use loom::sync::atomic::{AtomicU64, Ordering};
    loom::model(|| {
        let cells = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let w = {
            let cells = cells.clone();
            thread::spawn(move || {
                cells.0.store(1, Ordering::Release); // cycle 0 (+1) first: wrong
                cells.1.store(1, Ordering::Release); // then its confirmation
            })
        };
        let cycle = cells.0.load(Ordering::Acquire);
        let conf = cells.1.load(Ordering::Acquire);
        if cycle != 0 {
            assert!(conf >= cycle, "unconfirmed all-off for a confirmed cycle");
        }
        w.join().unwrap();
    });
}
