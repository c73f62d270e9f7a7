//! Bad input on the usbmon importer: arbitrary bytes, mutated and cut real
//! captures and random usbmon events never panic, every error's offset lies
//! in the capture, and every import that succeeds is a recording that
//! parses. Case count: PROPTEST_CASES (CI: 100,000).

mod usbmon_support;

use nao_rs_usbmon::{import, ImportOptions};
use nao_wire::recording::parse;
use proptest::prelude::*;
use usbmon_support::{Cap, Ev, Session};

fn check(bytes: &[u8], opts: &ImportOptions) -> Result<(), TestCaseError> {
    match import(bytes, opts) {
        Ok(i) => {
            let parsed = parse(&i.text);
            prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed.err(), i.text);
            for s in &i.segments {
                let parsed = parse(&s.text);
                prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed.err(), s.text);
            }
            // Verify reads what import reads, and never panics.
            let verified = nao_rs_usbmon::verify::verify(
                bytes,
                std::path::Path::new("fuzz.pcap"),
                &nao_rs_usbmon::verify::VerifyOptions {
                    device: opts.device,
                    accepted: None,
                },
            );
            prop_assert!(verified.is_ok(), "{:?}", verified.err());
        }
        Err(e) => {
            prop_assert!(
                e.offset <= bytes.len(),
                "{e} (capture of {} bytes)",
                bytes.len()
            );
            prop_assert!(!e.reason.is_empty());
        }
    }
    Ok(())
}

fn captures() -> Vec<Vec<u8>> {
    let s = Session::hal();
    let mut out = Vec::new();
    for little in [true, false] {
        for mmapped in [true, false] {
            let cap = Cap { little, mmapped };
            out.push(cap.pcap(&s.events));
            out.push(cap.pcapng(&s.events));
        }
    }
    out
}

fn event() -> impl Strategy<Value = Ev> {
    (
        (
            0u64..4,
            prop::sample::select(vec![b'S', b'C', b'E', b'X']),
            0u8..5,
            any::<u8>(),
        ),
        (
            1u16..3,
            4u8..7,
            prop_oneof![
                Just(None),
                any::<[u8; 8]>().prop_map(Some),
                // The protocol's vendor requests and SET_CONFIGURATION, any wValue, wIndex, wLength.
                (
                    prop::sample::select(vec![
                        (0x40u8, 1u8),
                        (0xc0, 2),
                        (0xc0, 3),
                        (0x40, 5),
                        (0x00, 9)
                    ]),
                    any::<[u8; 6]>()
                )
                    .prop_map(|((rt, rq), rest)| {
                        let mut s = [rt, rq, 0, 0, 0, 0, 0, 0];
                        s[2..].copy_from_slice(&rest);
                        Some(s)
                    }),
            ],
        ),
        (
            0i64..10_000_000,
            prop::sample::select(vec![0, -2, -19, -32, -71, -104, -110, -115, 5]),
        ),
        (0u32..600, prop::collection::vec(any::<u8>(), 0..40)),
    )
        .prop_map(
            |((id, kind, xfer, ep), (bus, dev, setup), (ts_us, status), (length, data))| Ev {
                id,
                kind,
                xfer,
                ep,
                bus,
                dev,
                setup,
                ts_us,
                status,
                length,
                data,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_usbmon_arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200), magic in 0usize..6) {
        let mut bytes = match magic {
            0 => vec![0xd4, 0xc3, 0xb2, 0xa1],
            1 => vec![0xa1, 0xb2, 0xc3, 0xd4],
            2 => vec![0x0a, 0x0d, 0x0d, 0x0a],
            _ => vec![],
        };
        bytes.extend_from_slice(&data);
        check(&bytes, &ImportOptions::default())?;
    }

    #[test]
    fn fuzz_usbmon_mutated_captures_never_panic(
        which in 0usize..8,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        thread_local! {
            static CAPTURES: Vec<Vec<u8>> = captures();
        }
        let mut bytes = CAPTURES.with(|c| c[which].clone());
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if do_cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        check(&bytes, &ImportOptions::default())?;
    }

    #[test]
    fn fuzz_usbmon_random_events_import_or_fail_cleanly(
        events in prop::collection::vec(event(), 0..12),
        little in any::<bool>(),
        mmapped in any::<bool>(),
        ng in any::<bool>(),
        device in prop::option::of((1u16..3, 4u8..7)),
    ) {
        let cap = Cap { little, mmapped };
        let bytes = if ng { cap.pcapng(&events) } else { cap.pcap(&events) };
        check(&bytes, &ImportOptions { device, ..ImportOptions::default() })?;
    }
}
