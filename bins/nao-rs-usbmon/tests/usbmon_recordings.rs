//! The importer against the worked examples: each recording in
//! `recordings/` is turned into the usbmon capture HAL would have made of its
//! calls (at its cycle times), imported back, and must give the same calls
//! and the same `cycle` lines.

mod usbmon_support;

use nao_rs_usbmon::{import, ImportOptions};
use nao_wire::recording::{parse, read_file, Item};
use testkit::recordings;
use usbmon_support::{Cap, Session};

/// The capture of a recording's calls: transfers 1 ms apart from the start
/// of each cycle (the recordings' cycles are 12 ms apart with at most 3
/// transfers each, so cycle times stay exact).
fn capture(items: &[Item]) -> Vec<u8> {
    let mut s = Session::new();
    s.calls_of(items, 0);
    Cap {
        little: true,
        mmapped: true,
    }
    .pcap(&s.events)
}

#[test]
fn usbmon_import_of_each_recordings_capture_gives_its_calls_and_cycles() {
    for path in recordings() {
        let lines = read_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let items: Vec<Item> = lines.into_iter().map(|l| l.item).collect();
        let want: Vec<&Item> = items
            .iter()
            .filter(|i| matches!(i, Item::Call(_) | Item::Cycle { .. }))
            .collect();
        let i = import(&capture(&items), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            i.warnings.is_empty(),
            "{}: {:?}",
            path.display(),
            i.warnings
        );
        let got: Vec<Item> = parse(&i.text)
            .expect("parses")
            .into_iter()
            .map(|l| l.item)
            .collect();
        assert_eq!(got.len(), want.len(), "{}", path.display());
        for (n, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(&g, w, "{}: item {n}", path.display());
        }
    }
}
