//! The gate's rules, one table row per case: the read, the events, then
//! what changed, whether the wake latch is awake, and whether the frame is
//! limp (a stiff command comes out with every stiffness 0 exactly then).
//!
//! A read is armed or tripped with a trip count and the nonce of the re-arm
//! it was armed by (the "epoch": by default the count, as one trip and one
//! re-arm make each epoch), runtime 1 registered with nonce 1. A wake in
//! the rows names the epoch its sender read; [`gen`] makes it the page's
//! wake generation of that epoch.

use super::*;
use Change::*;

fn stiff() -> Command {
    Command {
        stiffness: [0.6; JOINTS],
        position: [0.2; JOINTS],
        chest_led: [0, 0, 255],
        ..Command::default()
    }
}

/// The runtime's nonce in every read.
const DRIVER: u64 = 1;

/// A read armed (or not) by the re-arm of epoch `count`.
fn read(armed: bool, count: u64) -> Snapshot {
    read_in(armed, count, count)
}

/// A read armed (or not) with trip count `count` by the re-arm of `epoch`.
fn read_in(armed: bool, count: u64, epoch: u64) -> Snapshot {
    Snapshot {
        armed,
        magic_ok: true,
        reason: (!armed).then_some(Reason::Naoctl),
        trip_count: count,
        driver_pid: Some(1),
        arm_nonce: epoch,
        driver_nonce: DRIVER,
        ..Snapshot::default()
    }
}

/// The wake generation of the armed epoch `epoch` (what `nao-rs wake`
/// reads then).
fn gen(epoch: u64) -> u64 {
    read_in(true, 0, epoch).wake_generation().unwrap()
}

/// One row: the read and the events, then what comes out.
#[derive(Clone, Copy)]
struct Row {
    tripped: bool,
    count: u64,
    /// The re-arm the read is armed by.
    epoch: u64,
    answer_trip: bool,
    wake: Option<u64>,
    change: Change,
    /// The wake latch is awake after this row.
    awake: bool,
    /// The frame is limp.
    limp: bool,
}

const fn row(
    tripped: bool,
    count: u64,
    answer_trip: bool,
    wake: Option<u64>,
    change: Change,
    awake: bool,
    limp: bool,
) -> Row {
    Row {
        tripped,
        count,
        epoch: count,
        answer_trip,
        wake,
        change,
        awake,
        limp,
    }
}

/// Armed in generation `count`, nothing else; `limp` the frame.
const fn armed(count: u64, wake: Option<u64>, change: Change, awake: bool, limp: bool) -> Row {
    row(false, count, false, wake, change, awake, limp)
}

/// Armed with trip count `count` by the re-arm of `epoch`.
const fn armed_in(
    count: u64,
    epoch: u64,
    wake: Option<u64>,
    change: Change,
    awake: bool,
    limp: bool,
) -> Row {
    Row {
        epoch,
        ..row(false, count, false, wake, change, awake, limp)
    }
}

/// Tripped with trip count `count`.
const fn tripped(count: u64, wake: Option<u64>, change: Change) -> Row {
    row(true, count, false, wake, change, false, true)
}

/// How a case's gate starts (wake latch on).
#[derive(Clone, Copy)]
enum Start {
    /// On the read (armed, trip count), limp.
    Read(bool, u64),
    /// Armed in generation 1 and woken in it.
    Woken,
}

/// One case of the wake latch: its name, its start, its rows in order.
type Case = (&'static str, Start, &'static [Row]);

/// The woken start's first row.
const WOKEN_IN_1: Row = armed(1, Some(1), Change::Woken, true, false);

/// Runs `case`'s rows through a gate started as it says.
fn run(&(name, start, rows): &Case) {
    let (start, first) = match start {
        Start::Read(armed, count) => (read(armed, count), None),
        Start::Woken => (read(true, 1), Some(WOKEN_IN_1)),
    };
    let mut g = Gate::new(&start, WakeLatch::On);
    assert_ne!(g.state(), LatchState::Awake, "{name}: every start is limp");
    for (i, r) in first.iter().chain(rows).enumerate() {
        if r.answer_trip {
            g.answer_tripped();
        }
        let s = read_in(!r.tripped, r.count, r.epoch);
        let v = g.decide(&input(&s, r.wake.map(gen)));
        assert_eq!(v.change, r.change, "{name} row {i}");
        assert_eq!(
            g.state() == LatchState::Awake,
            r.awake,
            "{name} row {i}: latch"
        );
        assert_eq!(v.limp, r.limp, "{name} row {i}: frame");
        let mut c = stiff();
        v.apply(&mut c);
        let want = if r.limp { 0.0 } else { 0.6 };
        assert_eq!(c.stiffness, [want; JOINTS], "{name} row {i}");
        assert_eq!(c.position, [0.2; JOINTS], "{name} row {i}: positions pass");
        assert_eq!(c.chest_led, [0, 0, 255], "{name} row {i}: LEDs pass");
    }
}

/// The gate's input of the read `s` and the wake `wake`, outside bring-up.
fn input(s: &Snapshot, wake: Option<u64>) -> GateInput<'_> {
    GateInput {
        switch: s,
        wake,
        bringup: None,
    }
}

/// The wake latch's cases (`docs/safety-rules.md` names them).
const CASES: &[Case] = &[
    (
        // Armed at start (a restart, a hand-over): limp, waiting.
        "every_start_is_limp_until_a_wake_in_the_generation_armed_now (armed)",
        Start::Read(true, 4),
        &[
            armed(4, None, Unchanged, false, true),
            armed(4, None, Unchanged, false, true),
            // A wake read before the last trip: stale.
            armed(4, Some(3), WakeStale, false, true),
            armed(4, Some(4), Woken, true, false),
            armed(4, None, Unchanged, true, false),
        ],
    ),
    (
        // Tripped at start (a fresh boot): a re-arm, then a wake.
        "every_start_is_limp_until_a_wake_in_the_generation_armed_now (tripped)",
        Start::Read(false, 1),
        &[
            tripped(1, None, Unchanged),
            tripped(1, Some(1), WakeWhileTripped),
            armed(1, None, Rearmed, false, true),
            armed(1, Some(1), Woken, true, false),
        ],
    ),
    (
        "trip_rearm_wake",
        Start::Woken,
        &[
            armed(1, None, Unchanged, true, false),
            // A trip read on the page.
            tripped(2, None, Tripped),
            // A wake while tripped is used up.
            tripped(2, Some(1), WakeWhileTripped),
            // Re-armed: still limp.
            armed(2, None, Rearmed, false, true),
            armed(2, None, Unchanged, false, true),
            // A wake from before the trip (generation 1): used up.
            armed(2, Some(1), WakeStale, false, true),
            // A wake in generation 2.
            armed(2, Some(2), Woken, true, false),
            armed(2, None, Unchanged, true, false),
            // A wake while awake changes nothing.
            armed(2, Some(2), Unchanged, true, false),
        ],
    ),
    (
        "trip_re_armed_before_the_cycle_read_the_page_still_latches",
        Start::Woken,
        &[
            // Tripped and re-armed between two reads: the count moved, the
            // frame is tripped.
            armed(2, None, Tripped, false, true),
            armed(2, None, Unchanged, false, true),
            armed(2, Some(2), Woken, true, false),
        ],
    ),
    (
        // `naoctl stop; naoctl rearm; nao-rs wake` between two reads: the
        // wake carries generation 2, which exists only after the re-arm. The
        // frame of the moved count is still tripped; the next one drives.
        "rearm_and_wake_within_one_period_wake (between two reads)",
        Start::Woken,
        &[
            armed(2, Some(2), Woken, true, true),
            armed(2, None, Unchanged, true, false),
        ],
    ),
    (
        // ... and tripped, then re-armed and woken before the next read.
        "rearm_and_wake_within_one_period_wake (after a read tripped)",
        Start::Woken,
        &[
            tripped(2, None, Tripped),
            armed(2, Some(2), Woken, true, false),
        ],
    ),
    (
        // The sender read generation 1 while armed; a trip and a re-arm came
        // before the runtime read the wake (a stalled runtime).
        "a_wake_sent_before_a_trip_and_read_after_the_re_arm_is_used_up",
        Start::Woken,
        &[
            armed(2, Some(1), WakeStale, false, true),
            armed(2, None, Unchanged, false, true),
            armed(2, Some(2), Woken, true, false),
        ],
    ),
    (
        "a_repaired_page_resetting_the_count_to_1_counts_as_a_trip",
        Start::Woken,
        &[
            tripped(2, None, Tripped),
            armed(2, None, Rearmed, false, true),
            armed(2, Some(2), Woken, true, false),
            // The page was replaced (count back to 1) and read armed: a trip
            // all the same.
            armed(1, None, Tripped, false, true),
            // The old page's generation 2 is not this page's.
            armed(1, Some(2), WakeStale, false, true),
            armed(1, Some(1), Woken, true, false),
        ],
    ),
    (
        "an_answer_trip_latches_even_if_the_page_is_re_armed_at_once",
        Start::Woken,
        &[
            // The answer tripped, the page's trip did not count (someone
            // tripped it first) and was re-armed (epoch 5) before the read:
            // the count reads 1 still. A wake in the same read is used up.
            Row {
                epoch: 5,
                ..row(false, 1, true, Some(5), Tripped, false, true)
            },
            armed_in(1, 5, None, Rearmed, false, true),
            // The epoch before the trip counts no wake.
            armed_in(1, 5, Some(1), WakeStale, false, true),
            armed_in(1, 5, Some(5), Woken, true, false),
        ],
    ),
    (
        // The trip's reason was stored, its count increment not yet, and the
        // page was re-armed (epoch 5): the count reads 1 again, but the
        // generation is the re-arm's, so a wake sent in epoch 1 before the
        // trip is used up.
        "a_trip_seen_before_its_count_moved_leaves_no_wake_of_the_old_epoch",
        Start::Woken,
        &[
            tripped(1, None, Tripped),
            armed_in(1, 5, None, Rearmed, false, true),
            armed_in(1, 5, Some(1), WakeStale, false, true),
            // The increment lands: still epoch 5 (its frame is tripped).
            armed_in(2, 5, None, Unchanged, false, true),
            armed_in(2, 5, Some(5), Woken, true, false),
        ],
    ),
    (
        // Tripped and re-armed between two reads, the count unchanged (a
        // replaced page counting again from where this one was): the epoch
        // changed, so a wake of the old one is used up.
        "a_re_arm_makes_a_new_generation_whatever_the_count_says",
        Start::Woken,
        &[
            // Awake: a re-arm of the armed page (no trip) changes nothing.
            armed_in(1, 6, Some(1), Unchanged, true, false),
            tripped(2, None, Tripped),
            armed_in(2, 7, Some(2), WakeStale, false, true),
            armed_in(2, 7, Some(7), Woken, true, false),
        ],
    ),
    (
        "a_new_trip_while_awaiting_the_wake_needs_a_new_re_arm",
        Start::Woken,
        &[
            tripped(2, None, Tripped),
            armed(2, None, Rearmed, false, true),
            tripped(3, None, Tripped),
            tripped(3, Some(2), WakeWhileTripped),
            armed(3, None, Rearmed, false, true),
            armed(3, Some(2), WakeStale, false, true),
            armed(3, Some(3), Woken, true, false),
        ],
    ),
];

/// Every case of the wake latch, one row per read: start, trip, re-arm,
/// wake, stale wake, a re-arm's new generation, replaced page, answer trip.
#[test]
fn trip_rearm_wake_table() {
    for case in CASES {
        run(case);
    }
}

/// The trip latch's cases: (wake latch off, the protocol model) the count
/// read for the last frame, an answer trip, the read, whether the frame is
/// tripped; the frame after follows the switch.
#[test]
fn no_trip_goes_unseen_table() {
    let rows: &[(u64, bool, bool, u64, bool)] = &[
        (1, false, false, 1, false),
        (1, false, true, 1, true),
        // a trip and a re-arm between two frames
        (1, false, false, 2, true),
        (1, false, false, 7, true),
        // a replaced page: the count went down
        (3, false, false, 1, true),
        // an answer trip, re-armed before the next frame
        (1, true, false, 1, true),
        (1, true, false, 2, true),
        (1, true, true, 2, true),
    ];
    for &(seen, answer, tripped_now, count, want) in rows {
        let mut g = Gate::new(&read(true, seen), WakeLatch::Off);
        if answer {
            g.answer_tripped();
        }
        let s = read(!tripped_now, count);
        let v = g.decide(&input(&s, None));
        let case = format!("seen {seen} answer {answer} tripped {tripped_now} count {count}");
        assert_eq!(v.tripped, want, "{case}");
        assert_eq!(v.limp, want, "{case}");
        // The frame carried it: the next frame follows the switch.
        let next = g.decide(&input(&read(true, count), None));
        assert!(!next.limp, "after {case}");
    }
}

#[test]
fn the_trip_latch_is_cleared_by_a_frame_not_by_a_read() {
    let mut g = Gate::new(&read(true, 1), WakeLatch::Off);
    g.answer_tripped();
    // The runtime tripped the page and a person re-armed it before the
    // frame: the frame is tripped, the one after is not.
    let s = read(true, 2);
    assert!(g.decide(&input(&s, None)).limp);
    assert!(!g.decide(&input(&s, None)).limp);
}

#[test]
fn a_page_read_tripped_without_a_reason_says_page_lost() {
    let mut g = Gate::new(&read(true, 1), WakeLatch::On);
    let s = Snapshot {
        armed: false,
        magic_ok: false,
        reason: None,
        trip_count: 1,
        ..Snapshot::default()
    };
    let v = g.decide(&input(&s, Some(gen(1))));
    assert!(v.limp && v.tripped);
    assert_eq!(v.reason, Some(Reason::PageLost));
    assert_eq!(v.motion, Motion::LimpTripped);
}

#[test]
fn the_motion_state_follows_the_gate() {
    let mut g = Gate::new(&read(true, 1), WakeLatch::On);
    let armed1 = read(true, 1);
    let motion = |g: &mut Gate, s: &Snapshot, wake| g.decide(&input(s, wake)).motion;
    assert_eq!(motion(&mut g, &armed1, None), Motion::LimpWaitingForWake);
    assert_eq!(motion(&mut g, &armed1, Some(gen(1))), Motion::Awake);
    assert_eq!(motion(&mut g, &read(false, 2), None), Motion::LimpTripped);
}

#[test]
fn the_protocol_model_drives_from_the_frame_after_a_re_arm() {
    let mut g = Gate::new(&read(true, 1), WakeLatch::Off);
    let a = read(true, 1);
    let t = read(false, 2);
    let b = read(true, 2);
    assert!(!g.decide(&input(&a, None)).limp, "no wake needed at start");
    assert!(g.decide(&input(&t, None)).limp);
    let v = g.decide(&input(&b, None));
    assert_eq!(v.change, Change::Rearmed);
    assert!(!v.limp, "re-armed: the next frame drives");
}

#[test]
fn the_limp_verdict_zeroes_a_non_finite_stiffness_too() {
    let mut c = Command {
        stiffness: [f32::NAN; JOINTS],
        ..Command::default()
    };
    Verdict::LIMP.apply(&mut c);
    assert_eq!(c.stiffness, [0.0; JOINTS]);
}

/// No wake formed before the re-arm counts after it: not the trip count
/// (the old rule's generation) nor any guess from it, not the generation of
/// a view forged from the page read while tripped (armed, every other field
/// as read), not the generation of the epoch before; only the one the page
/// reads after the re-arm. Nor a wake in the generation of another runtime
/// on the same re-arm (a predecessor's recorded wake).
#[test]
fn a_wake_formed_before_the_re_arm_never_counts_after_it() {
    let tripped = read_in(false, 3, 2);
    let forged = Snapshot {
        armed: true,
        reason: None,
        ..tripped
    };
    let forged_g = forged.wake_generation().unwrap();
    let after = read_in(true, 3, 9);
    let predecessor = Snapshot {
        driver_nonce: DRIVER + 1,
        ..after
    }
    .wake_generation()
    .unwrap();
    let stale = [0, 1, 2, 3, 4, 5, u64::MAX, gen(2), forged_g, predecessor];
    for w in stale {
        let mut g = Gate::new(&read_in(true, 2, 2), WakeLatch::On);
        assert_eq!(
            g.decide(&input(&read_in(true, 2, 2), None)).change,
            Unchanged
        );
        let v = g.decide(&input(&tripped, Some(w)));
        assert_eq!(v.change, Tripped, "wake {w}");
        // The wake sent while tripped, read after the re-arm (a stalled
        // runtime): used up.
        let v = g.decide(&input(&after, Some(w)));
        assert_eq!((v.change, v.limp), (WakeStale, true), "wake {w}");
        let v = g.decide(&input(&after, None));
        assert!(v.limp, "wake {w}: still limp");
        // Only the generation read after the re-arm wakes.
        let v = g.decide(&input(&after, after.wake_generation()));
        assert_eq!((v.change, v.limp), (Woken, false), "wake {w}");
    }
    // No runtime registered, or no re-arm nonce: no generation, no wake.
    let mut g = Gate::new(&after, WakeLatch::On);
    for s in [
        Snapshot {
            driver_pid: None,
            ..after
        },
        Snapshot {
            arm_nonce: 0,
            ..after
        },
    ] {
        assert_eq!(s.wake_generation(), None);
        let v = g.decide(&input(&s, Some(gen(9))));
        assert_eq!((v.change, v.limp), (WakeStale, true));
    }
}
