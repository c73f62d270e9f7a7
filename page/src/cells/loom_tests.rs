//! Loom models of the page's orderings, on an in-memory [`Cells`] (no file):
//! the heartbeat order (a reader that sees cycle N sees N's confirmation,
//! and the motion and safety flags of N's `Switch::beat`), the trip
//! compare-and-swap (the first reason wins), and the impossible values
//! check racing a trip or a re-arm.
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

/// [`booted_at`] 1, re-armed at 2.
fn armed() -> Cells {
    let c = booted_at(1);
    c.rearm(2);
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
            cells.rearm(6);
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
        |cells| cells.rearm(20),
        judged,
        |_, damage, ()| assert_eq!(damage, None),
    );
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
