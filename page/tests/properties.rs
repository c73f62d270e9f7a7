//! Properties: the guard's rules over arbitrary snapshots, and opening
//! arbitrary file contents (never a panic; a damaged page reads tripped).

use deathswitch::rules::{decide, GuardVerdict, Settings};
use deathswitch::{Page, PageError, Reason, Snapshot, LEN, MAGIC};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        any::<bool>(),
        prop::option::of(0u64..1_000_000),
        0u64..10_000 * MS,
        prop::option::of(0u64..1_000_000),
        prop_oneof![0u64..10_000 * MS, Just(u64::MAX)],
    )
        .prop_map(|(armed, cycle, beat, conf, tripped_at)| Snapshot {
            armed,
            magic_ok: true,
            reason: (!armed).then_some(Reason::Udp),
            last_cycle: cycle,
            last_beat_ns: cycle.map(|_| beat),
            all_off_confirmed_cycle: conf,
            tripped_at_ns: tripped_at,
            ..Snapshot::default()
        })
}

proptest! {
    #[test]
    fn guard_rule_1_no_heartbeat_is_always_fine(mut s in snapshot(), now in 0u64..20_000 * MS) {
        s.last_cycle = None;
        s.last_beat_ns = None;
        prop_assert_eq!(decide(&s, now, &Settings::default()), GuardVerdict::Fine);
    }

    #[test]
    fn guard_rule_2_a_stale_beat_always_takes_over(s in snapshot(), late in 1u64..10_000 * MS) {
        if let Some(beat) = s.last_beat_ns {
            let now = beat + 60 * MS + late;
            prop_assert_eq!(
                decide(&s, now, &Settings::default()),
                GuardVerdict::TakeOver(Reason::GuardHeartbeatLost)
            );
        }
    }

    #[test]
    fn guard_fresh_armed_beats_are_always_fine(mut s in snapshot(), age in 0u64..=60 * MS) {
        s.armed = true;
        if let Some(beat) = s.last_beat_ns {
            prop_assert_eq!(decide(&s, beat + age, &Settings::default()), GuardVerdict::Fine);
        }
    }

    #[test]
    fn guard_a_confirmed_trip_with_a_fresh_beat_is_always_fine(
        mut s in snapshot(), age in 0u64..=60 * MS,
    ) {
        s.armed = false;
        if let (Some(c), Some(beat)) = (s.last_cycle, s.last_beat_ns) {
            s.all_off_confirmed_cycle = Some(c);
            s.tripped_at_ns = s.tripped_at_ns.min(beat);
            prop_assert_eq!(decide(&s, beat + age, &Settings::default()), GuardVerdict::Fine);
        }
    }

    #[test]
    fn guard_takes_over_only_with_its_own_reasons(s in snapshot(), now in 0u64..20_000 * MS) {
        match decide(&s, now, &Settings::default()) {
            GuardVerdict::Fine => {}
            GuardVerdict::TakeOver(r) => prop_assert!(matches!(
                r,
                Reason::GuardHeartbeatLost | Reason::GuardNoConfirmation
            )),
        }
    }
}

/// File operations: a fixed 300 cases from a seeded xorshift generator
/// (proptest applies PROPTEST_CASES=100000 even over an explicit config,
/// which would take minutes of file I/O in CI).
#[test]
fn opening_any_file_contents_never_panics_and_damage_reads_tripped() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..300 {
        let len = (next() % 200) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if case % 2 == 0 && len >= 8 {
            bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
        }
        if case % 3 == 0 && len >= LEN {
            bytes[LEN - 8..LEN].copy_from_slice(&MAGIC.to_le_bytes());
        }
        let (_dir, path) = testkit::page_path();
        std::fs::write(&path, &bytes).unwrap();
        match Page::open(&path) {
            Ok(page) => {
                assert!(std::fs::metadata(&path).unwrap().len() >= LEN as u64);
                assert!(page.snapshot().magic_ok, "case {case}");
                // Random bytes are never a whole valid page of version 1.
                assert_eq!(page.reason(), Some(Reason::PageLost), "case {case}");
            }
            // Another version is named by the head magic and the version
            // word, whatever the length (layout 3 was shorter).
            Err(PageError::Version { .. }) => {
                assert!(
                    bytes.len() >= 12 && bytes[..8] == MAGIC.to_le_bytes(),
                    "case {case}"
                )
            }
            Err(e) => panic!("case {case}: unexpected error: {e}"),
        }
    }
}
