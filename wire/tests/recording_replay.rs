//! The recording link over the replay link: running the runtime's own
//! start-up and cycle code over `RecordingLink<ReplayLink>` and writing the
//! inputs where they stand records each worked example again, text for text.
//! This is what `nao-rs record` does against a live link.

use nao_wire::protocol::cycle::{Cycle, CycleInput};
use nao_wire::protocol::handshake::DEFAULT_ACCEPTED;
use nao_wire::protocol::startup::Startup;
use nao_wire::recording::record_link::RecordingLink;
use nao_wire::recording::replay_link::ReplayLink;
use nao_wire::recording::{read_file, Item};
use nao_wire::Command;
use testkit::recordings;

type Rec = RecordingLink<ReplayLink, Vec<u8>>;

fn peek(rec: &Rec) -> Option<Item> {
    rec.inner().peek().map(|l| l.item.clone())
}

/// Records one recording again over its own replay.
fn record_again(path: &std::path::Path) -> String {
    let lines = read_file(path).unwrap_or_else(|e| panic!("{e}"));
    let mut rec = RecordingLink::new(ReplayLink::new(lines), Vec::new()).expect("header");
    let mut accepted = DEFAULT_ACCEPTED.to_vec();
    let mut armed = true;
    let mut command: Option<Command> = None;
    // Settings before the first call.
    while let Some(item) = peek(&rec) {
        match item {
            Item::Accepted(v) => {
                rec.accepted(&v).expect("accepted");
                accepted = v;
            }
            Item::SwitchArmed(a) => {
                rec.switch(a).expect("switch");
                armed = a;
            }
            _ => break,
        }
        rec.inner_mut().advance();
    }
    let identity =
        Startup::run(&mut rec).unwrap_or_else(|e| panic!("{}: start-up: {e}", path.display()));
    let mut cycle = Cycle::from_identity(&identity, &accepted);
    let mut trip_count = 0u64;
    cycle.set_initial_trip_count(trip_count);
    while let Some(Item::Cycle { k, t_ms }) = peek(&rec) {
        assert_eq!(k, cycle.k(), "{}", path.display());
        rec.inner_mut().advance();
        rec.cycle(k, t_ms).expect("cycle");
        // The inputs of this cycle, where they stand.
        loop {
            match peek(&rec) {
                Some(Item::Command(c)) => {
                    rec.command(&c).expect("command");
                    command = Some(*c);
                }
                Some(Item::Silence) => {
                    rec.silence().expect("silence");
                    command = None;
                }
                Some(Item::Trip(r)) => {
                    rec.trip(r).expect("trip");
                    trip_count += u64::from(armed);
                    armed = false;
                }
                Some(Item::Rearm) => {
                    rec.rearm().expect("rearm");
                    armed = true;
                }
                _ => break,
            }
            rec.inner_mut().advance();
        }
        let input = CycleInput {
            command: command.as_ref(),
            tripped: !armed,
            page_lost: false,
            trip_count,
        };
        let out = cycle.run(&mut rec, &input, t_ms * 1_000_000);
        if out.trips.any() {
            trip_count += u64::from(armed);
            armed = false;
        }
        if let Some(m) = rec.inner().mismatch() {
            panic!("{}: {m}", path.display());
        }
    }
    assert!(
        peek(&rec).is_none(),
        "{}: lines left over: {:?}",
        path.display(),
        peek(&rec)
    );
    let (_, out) = rec.finish().expect("no write error");
    String::from_utf8(out).expect("ASCII")
}

#[test]
fn recording_link_over_replay_records_each_recording_again() {
    for path in recordings() {
        let text = record_again(&path);
        let original = std::fs::read_to_string(&path).expect("read");
        let kept: Vec<&str> = original
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect();
        let written: Vec<&str> = text.lines().collect();
        for (i, (w, k)) in written.iter().zip(&kept).enumerate() {
            assert_eq!(w, k, "{}: meaningful line {i} differs", path.display());
        }
        assert_eq!(written.len(), kept.len(), "{}", path.display());
    }
}
