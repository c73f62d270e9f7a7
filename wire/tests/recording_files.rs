//! Every recording in `recordings/` parses with the reader.

use nao_wire::recording::{parse, read_file, to_text, Item, Recorded};
use testkit::recordings;

#[test]
fn every_recording_parses() {
    for path in recordings() {
        let lines = read_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let calls = lines
            .iter()
            .filter(|l| matches!(l.item, Item::Call(_)))
            .count();
        let cycles = lines
            .iter()
            .filter(|l| matches!(l.item, Item::Cycle { .. }))
            .count();
        assert!(calls > 1000, "{}: only {calls} calls", path.display());
        assert!(cycles > 100, "{}: only {cycles} cycles", path.display());
        assert_eq!(
            lines[0].item,
            Item::Accepted(vec![10]),
            "{}",
            path.display()
        );
        assert_eq!(
            lines[2].item,
            Item::Call(Recorded::Open {
                vendor: 0xffff,
                product: 0x0006
            })
        );
    }
}

#[test]
fn a_missing_file_names_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("nope.rec");
    let e = read_file(&p).expect_err("missing file");
    assert_eq!(e.line, 0);
    assert!(e.to_string().contains("nope.rec"), "{e}");
}

#[test]
fn an_error_in_a_file_names_path_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.rec");
    std::fs::write(
        &p,
        "nao-rs recording 1\n# c\nopen ffff:0006\nbulk_out 02 a5000\n",
    )
    .expect("write");
    let e = read_file(&p).expect_err("bad data");
    assert_eq!(
        e.to_string(),
        format!(
            "{}:4: bulk_out: data is not hex (odd length 5)",
            p.display()
        )
    );
}

/// Items equal, with NaN equal to NaN (a `Command` holds f32s).
fn same_item(a: &Item, b: &Item) -> bool {
    match (a, b) {
        (Item::Command(x), Item::Command(y)) => {
            let same = |p: &[f32], q: &[f32]| {
                p.iter()
                    .zip(q)
                    .all(|(u, v)| u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan()))
            };
            same(&x.stiffness, &y.stiffness)
                && same(&x.position, &y.position)
                && (x.chest_led, x.left_foot_led, x.right_foot_led, x.sonar_mode)
                    == (y.chest_led, y.left_foot_led, y.right_foot_led, y.sonar_mode)
        }
        _ => a == b,
    }
}

#[test]
fn writer_round_trips_every_recording() {
    for path in recordings() {
        let lines = read_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = to_text(&lines).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let back = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(back.len(), lines.len());
        for (a, b) in lines.iter().zip(&back) {
            assert!(
                same_item(&a.item, &b.item),
                "{}:{}: {:?} != {:?}",
                path.display(),
                a.number,
                a.item,
                b.item
            );
        }
    }
}

#[test]
fn writer_output_is_text_identical_to_each_recordings_lines() {
    for path in recordings() {
        let original = std::fs::read_to_string(&path).expect("read");
        let lines = read_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = to_text(&lines).expect("write");
        let kept: Vec<&str> = original
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect();
        let written: Vec<&str> = text.lines().collect();
        assert_eq!(written.len(), kept.len(), "{}", path.display());
        for (i, (w, k)) in written.iter().zip(&kept).enumerate() {
            assert_eq!(w, k, "{}: meaningful line {i} differs", path.display());
        }
    }
}
