//! The recording link over the replay link: running the runtime's own
//! start-up and cycle code over `RecordingLink<ReplayLink>` and writing the
//! inputs where they stand records each worked example again, text for text.
//! This is what `nao-rs record` does against a live link.

use super::ReplayLink;
use crate::protocol::gate::WakeLatch;
use crate::protocol::handshake::DEFAULT_ACCEPTED;
use crate::protocol::startup::Startup;
use crate::recording::record_link::RecordingLink;
use crate::recording::{read_file, Item};
use crate::step::{Step, StepInput};
use crate::Command;
use deathswitch::{MemorySwitch, Reason, Switch};
use testkit::recordings;

type Rec = RecordingLink<ReplayLink, Vec<u8>>;

fn peek(rec: &Rec) -> Option<Item> {
    rec.inner().peek().map(|l| l.item.clone())
}

/// Records one recording again over its own replay.
fn record_again(path: &std::path::Path) -> String {
    let lines = read_file(path).unwrap_or_else(|e| panic!("{e}"));
    let wake_latch = if lines.iter().any(|l| matches!(l.item, Item::Wake)) {
        WakeLatch::On
    } else {
        WakeLatch::Off
    };
    let mut rec = RecordingLink::new(ReplayLink::new(lines), Vec::new()).expect("header");
    let mut accepted = DEFAULT_ACCEPTED.to_vec();
    let switch = MemorySwitch::armed();
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
                if a {
                    switch.rearm();
                } else {
                    switch.trip(Reason::Boot);
                }
            }
            _ => break,
        }
        rec.inner_mut().advance();
    }
    let identity =
        Startup::run(&mut rec).unwrap_or_else(|e| panic!("{}: start-up: {e}", path.display()));
    let mut step = Step::new(&identity, &accepted, &switch.read(), wake_latch);
    while let Some(Item::Cycle { k, t_ms }) = peek(&rec) {
        assert_eq!(k, step.cycle().k(), "{}", path.display());
        let mut wake = false;
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
                    switch.trip(r.unwrap_or(Reason::PageLost));
                }
                Some(Item::Rearm) => {
                    rec.rearm().expect("rearm");
                    switch.rearm();
                }
                Some(Item::Wake) => {
                    rec.wake().expect("wake");
                    wake = true;
                }
                _ => break,
            }
            rec.inner_mut().advance();
        }
        let input = StepInput {
            command: command.as_ref(),
            wake: wake.then(|| switch.snapshot().trip_count),
            now_ns: t_ms * 1_000_000,
            ..StepInput::default()
        };
        step.run(&switch, &mut rec, &input, |_, _| {});
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
