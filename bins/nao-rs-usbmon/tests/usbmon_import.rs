//! The usbmon importer on small captures that the tests build: pcap in both
//! byte orders with both usbmon headers, and pcapng.

use nao_rs_usbmon::{import, import_pcap, ImportOptions};
use nao_wire::recording::{parse, Item};

mod usbmon_support;

use usbmon_support::{Cap, Session};

fn items(text: &str) -> Vec<Item> {
    parse(text)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .into_iter()
        .map(|l| l.item)
        .collect()
}

/// The items of recording lines (`lines` without the header).
fn calls(lines: &str) -> Vec<Item> {
    items(&format!("nao-rs recording 1\n{lines}"))
}

/// `Session::hal`'s calls as recording lines, the cycle times 0.
const EXPECTED: &str = "\
open ffff:0006
set_configuration 1
control_out 40 01 0000 0000 -
claim_interface 0
control_in c0 02 0000 0000 4 02110700
bulk_out 02 a5000001
bulk_in 81 512 5a000001
bulk_out 02 a5010001
bulk_in 81 512 5a010001
cycle 0 0
control_out 40 05 0024 0000 -
bulk_out 02 a5020001
cycle 1 0
bulk_in 81 512 !timeout
bulk_out 02 a5030001
cycle 2 0
bulk_in 81 512 5a030001
bulk_out 02 a5040001
";

/// The items with the cycle times zeroed, and the times apart.
fn split_times(items: Vec<Item>) -> (Vec<Item>, Vec<u64>) {
    let mut times = Vec::new();
    let items = items
        .into_iter()
        .map(|i| match i {
            Item::Cycle { k, t_ms } => {
                times.push(t_ms);
                Item::Cycle { k, t_ms: 0 }
            }
            other => other,
        })
        .collect();
    (items, times)
}

#[test]
fn usbmon_import_pairs_events_into_calls_for_every_pcap_flavour() {
    let session = Session::hal();
    let mut texts = Vec::new();
    for little in [true, false] {
        for mmapped in [true, false] {
            let cap = Cap { little, mmapped };
            for bytes in [cap.pcap(&session.events), cap.pcapng(&session.events)] {
                let text = import_pcap(&bytes, &ImportOptions::default())
                    .unwrap_or_else(|e| panic!("little {little} mmapped {mmapped}: {e}"));
                let (got, times) = split_times(items(&text));
                assert_eq!(
                    got,
                    calls(EXPECTED),
                    "little {little} mmapped {mmapped}\n{text}"
                );
                // The session's transfers are 1 ms apart (the mouse's too) with
                // 10 ms pauses before each cycle: cycle 0 follows 10 transfers.
                assert_eq!(times, vec![20, 32, 45], "{text}");
                texts.push(text);
            }
        }
    }
    assert!(
        texts.windows(2).all(|w| w[0] == w[1]),
        "every flavour gives the same text"
    );
    assert!(
        texts[0].contains("# skipped: packet 1: standard request 80 06 0100 0000 left out"),
        "{}",
        texts[0]
    );
}

#[test]
fn usbmon_import_keeps_only_the_named_device() {
    let cap = Cap {
        little: true,
        mmapped: true,
    };
    let bytes = cap.pcap(&Session::hal().events);
    let opts = ImportOptions {
        device: Some((1, 2)),
        cycles: false,
        ..ImportOptions::default()
    };
    let i = import(&bytes, &opts).expect("import");
    assert_eq!(i.device, (1, 2));
    // The mouse's interrupt transfers are left out: only `open` remains.
    assert_eq!(items(&i.text), calls("open ffff:0006\n"));
    let none = ImportOptions {
        device: Some((3, 9)),
        ..ImportOptions::default()
    };
    assert!(import(&bytes, &none)
        .unwrap_err()
        .reason
        .contains("no event of bus 3 device 9"));
}

#[test]
fn usbmon_import_writes_settings_and_reconnects() {
    let mut s = Session::hal();
    // A reconnect: set configuration again, START, VERSION.
    s.control(0x00, 0x09, 1, 0, &[], &[]);
    s.control(0x40, 0x01, 0, 0, &[], &[]);
    s.control(0xc0, 0x02, 0, 0, &[], &[2, 0x11, 7, 0]);
    // The next cycle's frame (seq goes on: a reconnect, not a new program).
    s.control(0x40, 0x05, 0x24, 0, &[], &[]);
    s.bulk_out(&[0xa5, 5, 0, 1]);
    let bytes = Cap {
        little: true,
        mmapped: false,
    }
    .pcap(&s.events);
    let opts = ImportOptions {
        accepted: Some(vec![10]),
        switch_armed: Some(true),
        ..ImportOptions::default()
    };
    let got = items(&import_pcap(&bytes, &opts).expect("import"));
    assert_eq!(
        &got[..2],
        &[Item::Accepted(vec![10]), Item::SwitchArmed(true)]
    );
    let tail: Vec<Item> = got[got.len() - 9..got.len() - 3].to_vec();
    // The reconnect's calls, as at the start.
    let reconnect = "close\nopen ffff:0006\nset_configuration 1\ncontrol_out 40 01 0000 0000 -\n\
                     claim_interface 0\ncontrol_in c0 02 0000 0000 4 02110700\n";
    assert_eq!(tail, calls(reconnect));
}

#[test]
fn usbmon_import_rejects_what_is_not_a_usbmon_capture() {
    let e = import_pcap(b"hello world, not a capture", &ImportOptions::default()).unwrap_err();
    assert_eq!(e.offset, 0);
    assert!(e.reason.contains("not a pcap"), "{e}");
    let mut ethernet = Cap {
        little: true,
        mmapped: true,
    }
    .pcap(&[]);
    ethernet[20] = 1; // LINKTYPE_ETHERNET
    let e = import_pcap(&ethernet, &ImportOptions::default()).unwrap_err();
    assert!(e.reason.contains("link type 1"), "{e}");
    let e = import_pcap(
        &Cap {
            little: true,
            mmapped: true,
        }
        .pcap(&[]),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(e.reason.contains("no chest board traffic"), "{e}");
}

#[test]
fn usbmon_import_of_a_cut_capture_warns_and_keeps_the_whole_packets() {
    let bytes = Cap {
        little: true,
        mmapped: true,
    }
    .pcap(&Session::hal().events);
    let cut = &bytes[..bytes.len() - 3];
    let i = import(cut, &ImportOptions::default()).expect("import");
    assert!(
        i.warnings.iter().any(|w| w.contains("ends inside packet")),
        "{:?}",
        i.warnings
    );
    // The last bulk_out lost its completion.
    assert!(
        i.text.contains("submitted but never completed"),
        "{}",
        i.text
    );
}

/// HAL's start-up again (a new program: its frames count from seq 0).
fn start_up_again(s: &mut Session) {
    s.t_us += 2_000_000;
    s.control(0x00, 0x09, 1, 0, &[], &[]);
    s.control(0x40, 0x01, 0, 0, &[], &[]);
    s.control(0xc0, 0x02, 0, 0, &[], &[2, 0x11, 7, 0]);
    s.bulk_out(&[0xa5, 0, 0, 1]);
    s.bulk_in(Ok(&[0x5a, 0, 0, 1]));
    s.bulk_out(&[0xa5, 1, 0, 1]);
    s.bulk_in(Ok(&[0x5a, 1, 0, 1]));
    s.control(0x40, 0x05, 0x24, 0, &[], &[]);
    s.bulk_out(&[0xa5, 2, 0, 1]);
}

#[test]
fn usbmon_import_table_of_what_a_real_capture_holds() {
    struct Case {
        name: &'static str,
        build: fn() -> Vec<u8>,
        /// (holds a start-up, frames written as calls) per session.
        sessions: &'static [(bool, usize)],
        devices: &'static [(u16, u8)],
        /// A text some warning or note holds ("": none asked).
        says: &'static str,
    }
    let cases = [
        Case {
            name: "a failed write: the cycle holding it and the rest are not compared",
            build: || {
                let mut s = Session::hal();
                s.bulk_in(Ok(&[0x5a, 4, 0, 1]));
                s.bulk_out_status(&[0xa5, 5, 0, 1], -110);
                s.bulk_out(&[0xa5, 6, 0, 1]);
                Cap { little: true, mmapped: true }.pcap(&s.events)
            },
            sessions: &[(true, 5)],
            devices: &[(1, 5)],
            says: "failed with status -110 (ETIMEDOUT): the recording format cannot hold a failed transfer",
        },
        Case {
            name: "a failed control transfer in the start-up: the recording ends before it",
            build: || {
                let mut s = Session::hal();
                // VERSION (the 5th transfer) times out.
                s.events[9].status = -110;
                s.events[9].data.clear();
                Cap { little: true, mmapped: true }.pcap(&s.events)
            },
            sessions: &[(true, 0)],
            devices: &[(1, 5)],
            says: "control_in c0 02 0000 0000 failed with status -110 (ETIMEDOUT)",
        },
        Case {
            name: "HAL restarted: a second session from its start-up",
            build: || {
                let mut s = Session::hal();
                start_up_again(&mut s);
                Cap { little: true, mmapped: true }.pcap(&s.events)
            },
            sessions: &[(true, 5), (true, 3)],
            devices: &[(1, 5)],
            says: "",
        },
        Case {
            name: "re-enumerated as device 7, then HAL's start-up on it",
            build: || {
                let mut s = Session::hal();
                s.enumerate(7, (0xffff, 0x0006));
                start_up_again(&mut s);
                Cap { little: true, mmapped: false }.pcap(&s.events)
            },
            sessions: &[(true, 5), (true, 3)],
            devices: &[(1, 5), (1, 7)],
            says: "re-enumerated: followed as device numbers 5, 7",
        },
        Case {
            name: "another device enumerated is not followed",
            build: || {
                let mut s = Session::hal();
                s.enumerate(8, (0x046d, 0xc077));
                s.dev = 5;
                Cap { little: true, mmapped: true }.pcap(&s.events)
            },
            sessions: &[(true, 5)],
            devices: &[(1, 5)],
            says: "",
        },
        Case {
            name: "the capture started after the start-up",
            build: || {
                let mut s = Session::hal();
                s.events.drain(..16);
                Cap { little: true, mmapped: true }.pcap(&s.events)
            },
            sessions: &[(false, 4)],
            devices: &[(1, 5)],
            says: "no set_configuration in the capture before its first frame",
        },
        Case {
            name: "a truncated file: the whole packets are imported",
            build: || {
                let mut s = Session::hal();
                start_up_again(&mut s);
                let b = Cap { little: true, mmapped: true }.pcap(&s.events);
                b[..b.len() - 7].to_vec()
            },
            sessions: &[(true, 5), (true, 2)],
            devices: &[(1, 5)],
            says: "the capture ends inside packet",
        },
    ];
    for c in cases {
        let i = import(&(c.build)(), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let got: Vec<(bool, usize)> = i.segments.iter().map(|s| (s.startup, s.frames)).collect();
        assert_eq!(got, c.sessions, "{}: {:#?}", c.name, i.segments);
        assert_eq!(i.devices, c.devices, "{}", c.name);
        assert!(
            c.says.is_empty() || i.warnings.iter().any(|w| w.contains(c.says)),
            "{}: {:?}",
            c.name,
            i.warnings
        );
        for s in &i.segments {
            parse(&s.text).unwrap_or_else(|e| panic!("{}: {e}\n{}", c.name, s.text));
        }
    }
}
