//! Every recording in `recordings/` replays byte for byte, and a copy with
//! one byte of a `bulk_out` line flipped fails naming that line.

use nao_wire::replay::{replay_file, ReplayFailure};
use testkit::recordings;

#[test]
fn every_recording_replays_byte_for_byte() {
    for path in recordings() {
        match replay_file(&path) {
            Ok(r) => {
                assert!(
                    r.cycles >= 100,
                    "{}: only {} cycles",
                    path.display(),
                    r.cycles
                );
                assert!(r.startup_error.is_none());
                eprintln!(
                    "{}: {} calls, {} cycles, {:?}",
                    path.display(),
                    r.calls,
                    r.cycles,
                    r.elapsed
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Flips one data byte of the `nth` bulk_out line of `text`; returns the new
/// text and the line number changed.
fn flip_bulk_out(text: &str, nth: usize, byte: usize) -> (String, usize) {
    let mut seen = 0;
    let mut out = Vec::new();
    let mut changed = 0;
    for (i, line) in text.lines().enumerate() {
        if let Some(data) = line.strip_prefix("bulk_out 02 ") {
            if seen == nth {
                let mut bytes: Vec<u8> = (0..data.len() / 2)
                    .map(|k| u8::from_str_radix(&data[2 * k..2 * k + 2], 16).unwrap())
                    .collect();
                let at = byte.min(bytes.len() - 1);
                bytes[at] ^= 0x01;
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                out.push(format!("bulk_out 02 {hex}"));
                changed = i + 1;
                seen += 1;
                continue;
            }
            seen += 1;
        }
        out.push(line.to_string());
    }
    assert_ne!(changed, 0, "no bulk_out number {nth}");
    (out.join("\n") + "\n", changed)
}

#[test]
fn flipping_one_byte_of_a_bulk_out_line_fails_naming_that_line() {
    let dir = tempfile::tempdir().unwrap();
    for path in recordings() {
        let text = std::fs::read_to_string(&path).unwrap();
        let count = text.lines().filter(|l| l.starts_with("bulk_out ")).count();
        // the start-up frames, cycle 0, the handshake, late cycles; header,
        // a position, a stiffness and the CRC bytes
        for (nth, byte) in [
            (0, 0),
            (1, 3),
            (2, 5),
            (3, 70),
            (5, 100),
            (count / 2, 4),
            (count - 1, 1000),
        ] {
            let (copy, line) = flip_bulk_out(&text, nth.min(count - 1), byte);
            let p = dir.path().join(format!("flip-{nth}-{byte}.rec"));
            std::fs::write(&p, copy).unwrap();
            match replay_file(&p) {
                Ok(_) => panic!(
                    "{}: flipped bulk_out line {line} still passes",
                    path.display()
                ),
                Err(ReplayFailure::Mismatch { mismatch, .. }) => {
                    assert_eq!(mismatch.line, line, "{mismatch}");
                    assert!(mismatch.offset.is_some(), "{mismatch}");
                    assert!(mismatch.expected.starts_with("bulk_out 02 "));
                    assert!(mismatch.actual.starts_with("bulk_out 02 "));
                }
                Err(e) => panic!("unexpected failure: {e}"),
            }
        }
    }
}
