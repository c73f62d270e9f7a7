//! The guard's rules (seed "The guard's rules"), one row per case.

use super::{decide, GuardVerdict, Settings};
use crate::{Page, Reason, Snapshot, Switch, TRIP_TIME_PENDING};

const MS: u64 = 1_000_000;
const NOW: u64 = 10_000 * MS;

fn armed_beating(cycle: u64, beat_ns: u64) -> Snapshot {
    Snapshot {
        armed: true,
        magic_ok: true,
        version: 1,
        driver_pid: Some(100),
        last_cycle: Some(cycle),
        last_beat_ns: Some(beat_ns),
        tripped_at_ns: TRIP_TIME_PENDING,
        ..Snapshot::default()
    }
}

fn tripped(mut s: Snapshot, at_ns: u64, confirmed: Option<u64>) -> Snapshot {
    s.armed = false;
    s.reason = Some(Reason::Naoctl);
    s.reason_code = Reason::Naoctl.code();
    s.tripped_at_ns = at_ns;
    s.all_off_confirmed_cycle = confirmed;
    s
}

struct Row {
    case: &'static str,
    snapshot: Snapshot,
    verdict: GuardVerdict,
}

fn rows() -> Vec<Row> {
    use GuardVerdict::*;
    let lost = TakeOver(Reason::GuardHeartbeatLost);
    let unconfirmed = TakeOver(Reason::GuardNoConfirmation);
    let mut no_beat_tripped = tripped(armed_beating(0, 0), 0, None);
    no_beat_tripped.last_cycle = None;
    no_beat_tripped.last_beat_ns = None;
    let mut no_beat_armed = armed_beating(0, 0);
    no_beat_armed.last_cycle = None;
    no_beat_armed.last_beat_ns = None;
    let zeroed = Snapshot {
        reason: Some(Reason::PageLost),
        ..Snapshot::default()
    };
    vec![
        Row {
            case: "rule 1: no heartbeat since the page was cleared, armed",
            snapshot: no_beat_armed,
            verdict: Fine,
        },
        Row {
            case: "rule 1: no heartbeat since the page was cleared, tripped long ago",
            snapshot: no_beat_tripped,
            verdict: Fine,
        },
        Row {
            case: "rule 1: a page without magic and no heartbeat",
            snapshot: zeroed,
            verdict: Fine,
        },
        Row {
            case: "rule 2: last beat older than the beat timeout (armed)",
            snapshot: armed_beating(50, NOW - 61 * MS),
            verdict: lost,
        },
        Row {
            case: "rule 2: last beat exactly at the beat timeout is still fine",
            snapshot: armed_beating(50, NOW - 60 * MS),
            verdict: Fine,
        },
        Row {
            case: "rule 2: beats stop while tripped and confirmed: heartbeat lost first",
            snapshot: tripped(armed_beating(50, NOW - 70 * MS), NOW - 100 * MS, Some(50)),
            verdict: lost,
        },
        Row {
            case: "rule 3: tripped, confirmation misses the latest cycle, past the window",
            snapshot: tripped(armed_beating(50, NOW - MS), NOW - 41 * MS, Some(49)),
            verdict: unconfirmed,
        },
        Row {
            case: "rule 3: tripped, never confirmed, past the window",
            snapshot: tripped(armed_beating(50, NOW - MS), NOW - 41 * MS, None),
            verdict: unconfirmed,
        },
        Row {
            case: "rule 3: tripped, unconfirmed, still inside the window",
            snapshot: tripped(armed_beating(50, NOW - MS), NOW - 39 * MS, Some(49)),
            verdict: Fine,
        },
        Row {
            case: "rule 3: a confirmation from before the trip doesn't count",
            // Cycle 50 was all-off (confirmed) and beat 5 ms before the trip;
            // no beat since: the confirmation is older than the trip.
            snapshot: tripped(armed_beating(50, NOW - 45 * MS), NOW - 41 * MS, Some(50)),
            verdict: unconfirmed,
        },
        Row {
            case: "rule 3: last beat older than the trip, inside the window",
            snapshot: tripped(armed_beating(50, NOW - 45 * MS), NOW - 30 * MS, Some(50)),
            verdict: Fine,
        },
        Row {
            case: "rule 3: a trip whose time is still pending has not outlived the window",
            snapshot: tripped(armed_beating(50, NOW - MS), TRIP_TIME_PENDING, None),
            verdict: Fine,
        },
        Row {
            case: "rule 4: tripped and confirmed after the trip",
            snapshot: tripped(armed_beating(52, NOW - MS), NOW - 500 * MS, Some(52)),
            verdict: Fine,
        },
        Row {
            case: "rule 4: a confirmation newer than the cycle read covers it",
            snapshot: tripped(armed_beating(52, NOW - MS), NOW - 500 * MS, Some(53)),
            verdict: Fine,
        },
        Row {
            case: "rule 4: armed and beating",
            snapshot: armed_beating(50, NOW - 12 * MS),
            verdict: Fine,
        },
        Row {
            case: "rule 4: a beat stamped after now counts as fresh",
            snapshot: armed_beating(50, NOW + MS),
            verdict: Fine,
        },
    ]
}

#[test]
fn guard_rules_table_one_row_per_case_of_the_seed() {
    let settings = Settings::default();
    assert_eq!(settings.beat_timeout_ns, 60 * MS);
    assert_eq!(settings.confirmation_window_ns, 40 * MS);
    let mut failures = Vec::new();
    for row in rows() {
        let got = decide(&row.snapshot, NOW, &settings);
        if got != row.verdict {
            failures.push(format!(
                "{}: expected {:?}, got {:?}",
                row.case, row.verdict, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn no_heartbeat_since_the_page_was_cleared_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let page = Page::open(&dir.path().join("deathswitch")).unwrap();
    page.register(1);
    page.write_heartbeat(3, 0, false);
    page.clear_heartbeat();
    let s = page.snapshot();
    assert_eq!(
        decide(&s, u64::MAX / 2, &Settings::default()),
        GuardVerdict::Fine
    );
}

#[test]
fn a_confirmation_from_before_the_trip_does_not_count() {
    // The same rule on a real page: all-off confirmed, then a trip, then no beat.
    let dir = tempfile::tempdir().unwrap();
    let page = Page::open(&dir.path().join("deathswitch")).unwrap();
    page.rearm();
    let t0 = crate::monotonic_ns();
    page.write_heartbeat(10, t0, true);
    while crate::monotonic_ns() == t0 {
        std::hint::spin_loop();
    }
    page.trip(Reason::Udp);
    let s = page.snapshot();
    assert!(s.tripped_at_ns > t0);
    let settings = Settings {
        beat_timeout_ns: u64::MAX,
        confirmation_window_ns: 40 * MS,
    };
    let late = s.tripped_at_ns + 41 * MS;
    assert_eq!(
        decide(&s, late, &settings),
        GuardVerdict::TakeOver(Reason::GuardNoConfirmation)
    );
    // A confirmed beat after the trip satisfies it.
    page.write_heartbeat(11, s.tripped_at_ns + MS, true);
    assert_eq!(
        decide(&page.snapshot(), late, &settings),
        GuardVerdict::Fine
    );
}

/// Guard rules 5 and 6, the first-beat bounds: one row per case, time
/// passed in.
#[test]
fn first_beat_bounds_table_start_up_6_s_hand_over_1_s() {
    use super::{first_beat_overdue, FirstBeat, HAND_OVER_BOUND_NS, START_UP_BOUND_NS};
    const S: u64 = 1_000 * MS;
    assert_eq!(START_UP_BOUND_NS, 6 * S);
    assert_eq!(HAND_OVER_BOUND_NS, S);
    let since = 100 * S;
    let rows: &[(&str, FirstBeat, u64, bool)] = &[
        (
            "start-up: just registered",
            FirstBeat::StartUp,
            since,
            false,
        ),
        (
            "start-up: 5 s, the busy retry still runs",
            FirstBeat::StartUp,
            since + 5 * S,
            false,
        ),
        (
            "start-up: exactly at the bound",
            FirstBeat::StartUp,
            since + 6 * S,
            false,
        ),
        (
            "start-up: past the bound",
            FirstBeat::StartUp,
            since + 6 * S + 1,
            true,
        ),
        (
            "hand-over: 50 ms, the runtime's retry",
            FirstBeat::HandOver,
            since + 50 * MS,
            false,
        ),
        (
            "hand-over: exactly at the bound",
            FirstBeat::HandOver,
            since + S,
            false,
        ),
        (
            "hand-over: past the bound",
            FirstBeat::HandOver,
            since + S + 1,
            true,
        ),
        (
            "since in the future: not overdue",
            FirstBeat::StartUp,
            since - S,
            false,
        ),
        (
            "since in the future: not overdue (hand-over)",
            FirstBeat::HandOver,
            0,
            false,
        ),
    ];
    for &(case, kind, now, want) in rows {
        assert_eq!(first_beat_overdue(kind, since, now), want, "{case}");
    }
}
