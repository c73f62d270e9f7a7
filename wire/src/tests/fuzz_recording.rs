//! Bad input on the recording reader and writer: arbitrary bytes and line
//! soups never panic and every error names a line of the input; every valid
//! recording the writer writes reads back the same. Case count:
//! PROPTEST_CASES (CI: 100,000).

use crate::link::Setup;
use crate::protocol::bringup::{BringUpLimits, Jog, Limit, Tighter};
use crate::recording::{parse, parse_bytes, to_text, Item, Line, Recorded};
use crate::{Command, Joint, LinkError, JOINTS};
use proptest::prelude::*;

fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

/// A token that looks like part of a recording line.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "accepted",
            "switch",
            "armed",
            "tripped",
            "cycle",
            "command",
            "silence",
            "trip",
            "rearm",
            "bringup",
            "jog",
            "+",
            "LShoulderPitch",
            "window=0.2",
            "max-stiffness=0.4",
            "over-current-cycles=3",
            "jog-step=",
            "open",
            "set_configuration",
            "claim_interface",
            "close",
            "control_out",
            "control_in",
            "bulk_out",
            "bulk_in",
            "-",
            "!timeout",
            "!pipe",
            "!nodev",
            "!x",
            "nan",
            "inf",
            "-inf",
            "ffff:0006",
            "81",
            "02",
            "40",
            "c0",
            "0000",
            "512",
            "#",
            "10,11",
            "1e39",
            "A5",
            "",
        ])
        .prop_map(String::from),
        (any::<u32>(), 0usize..9).prop_map(|(v, n)| format!("{v:08x}")[..n.min(8)].to_string()),
        (any::<i16>(), any::<u8>()).prop_map(|(a, b)| format!("{a}.{b}")),
        any::<u64>().prop_map(|v| v.to_string()),
        prop::collection::vec(any::<char>(), 0..4).prop_map(|c| c.into_iter().collect()),
    ]
}

fn line_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::collection::vec(token(), 0..8).prop_map(|t| t.join(" ")),
        0..12,
    )
    .prop_map(|lines| format!("nao-rs recording 1\n{}", lines.join("\n")))
}

/// 25 f32 of any bit pattern (NaN, infinities, subnormals included), drawn
/// from one seed: cheap, so a case stays in microseconds.
fn f32s() -> impl Strategy<Value = [f32; JOINTS]> {
    any::<u64>().prop_map(|mut seed| {
        let mut out = [0f32; JOINTS];
        for v in &mut out {
            // splitmix64
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // Mostly ordinary values, sometimes any bit pattern.
            *v = if z & 3 == 0 {
                f32::from_bits((z >> 32) as u32)
            } else {
                ((z >> 40) as i32 - (1 << 23)) as f32 / 4096.0
            };
        }
        out
    })
}

fn command() -> impl Strategy<Value = Command> {
    (
        f32s(),
        f32s(),
        any::<[u8; 3]>(),
        any::<[u8; 3]>(),
        any::<[u8; 3]>(),
        any::<u8>(),
    )
        .prop_map(
            |(stiffness, position, chest_led, left_foot_led, right_foot_led, sonar_mode)| Command {
                stiffness,
                position,
                chest_led,
                left_foot_led,
                right_foot_led,
                sonar_mode,
            },
        )
}

/// Arbitrary bytes, up to `max`, drawn from one seed (cheap).
fn seeded_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), 0..max).prop_map(|(seed, n)| {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                // xorshift64
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    })
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn call() -> impl Strategy<Value = Recorded> {
    prop_oneof![
        (any::<u16>(), any::<u16>())
            .prop_map(|(vendor, product)| Recorded::Open { vendor, product }),
        any::<u8>().prop_map(Recorded::SetConfiguration),
        any::<u8>().prop_map(Recorded::ClaimInterface),
        Just(Recorded::Close),
        (
            0u8..0x80,
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            seeded_bytes(40)
        )
            .prop_map(
                |(request_type, request, value, index, data)| Recorded::ControlOut {
                    setup: Setup {
                        request_type,
                        request,
                        value,
                        index,
                    },
                    data
                }
            ),
        (
            0x80u8..=0xff,
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            seeded_bytes(40),
            0u16..10
        )
            .prop_map(|(request_type, request, value, index, answer, extra)| {
                Recorded::ControlIn {
                    setup: Setup {
                        request_type,
                        request,
                        value,
                        index,
                    },
                    length: answer.len() as u16 + extra,
                    answer,
                }
            }),
        (0u8..0x80, seeded_bytes(80))
            .prop_map(|(endpoint, data)| Recorded::BulkOut { endpoint, data }),
        (
            0x80u8..=0xff,
            0usize..600,
            prop_oneof![
                seeded_bytes(80).prop_map(Ok),
                Just(Err(LinkError::Timeout)),
                Just(Err(LinkError::Pipe)),
                Just(Err(LinkError::NoDevice)),
            ]
        )
            .prop_map(|(endpoint, extra, answer)| Recorded::BulkIn {
                endpoint,
                length: answer.as_ref().map_or(0, Vec::len) + extra,
                answer,
            }),
    ]
}

/// A joint and limits tightened at random, each within what is allowed.
fn bringup() -> impl Strategy<Value = Item> {
    (
        0usize..JOINTS,
        prop::collection::vec((0usize..Limit::ALL.len(), 1u32..=1000), 0..6),
    )
        .prop_map(|(j, tightenings)| {
            let mut limits = BringUpLimits::default();
            for (i, per_mille) in tightenings {
                let l = Limit::ALL[i];
                let (lo, hi) = l.allowed();
                let frac = f64::from(per_mille) / 1000.0;
                let v = match l.tighter() {
                    Tighter::Lower if lo >= 1.0 => (hi * frac).ceil().max(1.0),
                    Tighter::Lower => hi * frac,
                    Tighter::Higher => lo + (hi - lo) * frac,
                };
                limits = limits.tighten(l, v).unwrap_or(limits);
            }
            Item::BringUp {
                joint: Joint::ALL[j],
                limits,
            }
        })
}

/// A body item; cycles come as (dk, dt) deltas, made absolute later.
#[derive(Debug, Clone)]
enum Body {
    Cycle(u64, u64),
    Item(Item),
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        (1u64..5, 0u64..200).prop_map(|(dk, dt)| Body::Cycle(dk, dt)),
        command().prop_map(|c| Body::Item(Item::Command(Box::new(c)))),
        Just(Body::Item(Item::Silence)),
        Just(Body::Item(Item::Rearm)),
        Just(Body::Item(Item::Jog(Jog::Plus))),
        Just(Body::Item(Item::Jog(Jog::Minus))),
        prop::sample::select(
            deathswitch::Reason::ALL
                .map(Some)
                .iter()
                .copied()
                .chain([None])
                .collect::<Vec<_>>()
        )
        .prop_map(|r| Body::Item(Item::Trip(r))),
        call().prop_map(|c| Body::Item(Item::Call(c))),
        call().prop_map(|c| Body::Item(Item::Call(c))),
    ]
}

fn recording() -> impl Strategy<Value = Vec<Item>> {
    (
        prop::option::of(
            prop::collection::btree_set(any::<u8>(), 1..17)
                .prop_map(|v| v.into_iter().collect::<Vec<u8>>()),
        ),
        prop::option::of(any::<bool>()),
        prop::option::of(bringup()),
        prop::collection::vec(body(), 0..20),
    )
        .prop_map(|(accepted, switch, bringup, body)| {
            let mut items = Vec::new();
            items.extend(accepted.map(Item::Accepted));
            items.extend(switch.map(Item::SwitchArmed));
            // Jogs only after a bringup line.
            let bringup_seen = bringup.is_some();
            items.extend(bringup);
            let mut jogged = false;
            let (mut k, mut t) = (0u64, 0u64);
            // At most one command or silence, and one jog, a cycle (inputs
            // before the first cycle line are the first cycle's).
            let mut commanded = false;
            let mut cycle_seen = false;
            for b in body {
                match b {
                    Body::Cycle(dk, dt) => {
                        k += dk;
                        t += dt;
                        items.push(Item::Cycle { k, t_ms: t });
                        commanded &= !cycle_seen;
                        jogged &= !cycle_seen;
                        cycle_seen = true;
                    }
                    Body::Item(Item::Command(_) | Item::Silence) if commanded => {}
                    Body::Item(Item::Jog(_)) if jogged || !bringup_seen => {}
                    Body::Item(Item::Jog(j)) => {
                        jogged = true;
                        items.push(Item::Jog(j));
                    }
                    Body::Item(i) => {
                        commanded |= matches!(i, Item::Command(_) | Item::Silence);
                        items.push(i);
                    }
                }
            }
            items
        })
}

fn same_f32(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn same_item(a: &Item, b: &Item) -> bool {
    match (a, b) {
        (Item::Command(x), Item::Command(y)) => {
            same_f32(&x.stiffness, &y.stiffness)
                && same_f32(&x.position, &y.position)
                && (x.chest_led, x.left_foot_led, x.right_foot_led, x.sonar_mode)
                    == (y.chest_led, y.left_foot_led, y.right_foot_led, y.sonar_mode)
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_recording_reader_arbitrary_bytes_never_panic(data in bytes(300)) {
        if let Err(e) = parse_bytes(&data) {
            prop_assert!(e.line >= 1 && e.line <= line_count(&data), "{e}");
        }
        let mut with_header = b"nao-rs recording 1\n".to_vec();
        with_header.extend_from_slice(&data);
        if let Err(e) = parse_bytes(&with_header) {
            prop_assert!(e.line >= 2 && e.line <= line_count(&with_header), "{e}");
            prop_assert!(!e.reason.is_empty());
        }
    }

    #[test]
    fn fuzz_recording_reader_line_soup_names_the_bad_line(text in line_soup()) {
        match parse(&text) {
            Ok(lines) => {
                for l in &lines {
                    prop_assert!(l.number >= 2 && l.number <= line_count(text.as_bytes()));
                }
            }
            Err(e) => {
                prop_assert!(e.line >= 2 && e.line <= line_count(text.as_bytes()), "{e}");
                // The lines before the bad one are fine on their own.
                let before: Vec<&str> = text.split('\n').take(e.line - 1).collect();
                prop_assert!(parse(&before.join("\n")).is_ok(), "{e}");
            }
        }
    }

    #[test]
    fn fuzz_recording_writer_round_trips(items in recording()) {
        let lines: Vec<Line> = items.iter().cloned().enumerate().map(|(i, item)| Line { number: i + 2, item }).collect();
        let text = to_text(&lines).expect("a valid recording is written");
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back.len(), lines.len());
        for (a, b) in lines.iter().zip(&back) {
            prop_assert_eq!(a.number, b.number);
            prop_assert!(same_item(&a.item, &b.item), "{:?} != {:?}", a.item, b.item);
        }
        // Writing what was read gives the same text.
        prop_assert_eq!(to_text(&back).expect("write"), text);
    }
}
