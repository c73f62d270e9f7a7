//! Sessions recorded against the fake chest board (with failed reads, a
//! reconnect, a chest button press, a trip and a re-arm) replay byte for
//! byte; a recording with a call missing or left over fails naming its line.

use std::path::Path;

use super::support::FakeBoard;
use crate::protocol::cycle::{Cycle, CycleInput, Reconnect};
use crate::protocol::frame::{Frame, FrameWriter, MAX_FRAME_LEN};
use crate::protocol::gate::{Verdict, WakeLatch};
use crate::protocol::startup::Startup;
use crate::protocol::tables::SYNC_ANSWER;
use crate::recording::record_link::RecordingLink;
use crate::recording::{parse, Mismatch};
use crate::replay::{replay_lines, ReplayFailure};
use crate::step::{Step, StepInput};
use crate::{Command, JOINTS};
use deathswitch::{MemorySwitch, Switch};

/// A recording of the fake board, accepted 10, the switch armed, started
/// up: the link, the switch and the runtime's step.
fn recorded_start(wake: WakeLatch) -> (RecordingLink<Box<FakeBoard>, Vec<u8>>, MemorySwitch, Step) {
    let mut rec = RecordingLink::new(FakeBoard::new(), Vec::new()).unwrap();
    rec.accepted(&[10]).unwrap();
    rec.switch(true).unwrap();
    let switch = MemorySwitch::armed();
    switch.register(std::process::id());
    let id = Startup::run(&mut rec).unwrap();
    let step = Step::new(&id, &[10], &switch.read(), wake);
    (rec, switch, step)
}

/// Records a 120-cycle session; returns its text.
fn session() -> String {
    let (mut rec, switch, mut step) = recorded_start(WakeLatch::Off);
    let stand = Command {
        stiffness: [0.5; JOINTS],
        position: [0.25; JOINTS],
        chest_led: [0, 255, 0],
        sonar_mode: 0x0c,
        ..Command::default()
    };
    let mut reconnects = 0;
    for k in 0..120u64 {
        let t_ms = k * 12 + if k >= 90 { 150 } else { 0 };
        rec.cycle(k, t_ms).unwrap();
        if k == 10 {
            rec.command(&stand).unwrap();
        }
        if k == 60 {
            rec.trip(deathswitch::Reason::Udp).unwrap();
            switch.trip(deathswitch::Reason::Udp);
        }
        if k == 70 || k == 100 {
            rec.rearm().unwrap();
            switch.rearm();
        }
        if k == 95 {
            rec.silence().unwrap();
        }
        rec.inner_mut().fail_reads = if k == 30 { 11 } else { rec.inner().fail_reads };
        rec.inner_mut().chest_button = k == 80;
        let command = (10..95).contains(&k).then_some(&stand);
        let input = StepInput {
            command,
            now_ns: t_ms * 1_000_000,
            ..StepInput::default()
        };
        let out = step.run(&switch, &mut rec, &input, |_, _| {});
        reconnects += (out.cycle.reconnect == Reconnect::Done) as u32;
    }
    assert_eq!(reconnects, 1);
    let (_, bytes) = rec.finish().unwrap();
    String::from_utf8(bytes).unwrap()
}

fn replay_text(text: &str) -> Result<crate::replay::ReplayReport, ReplayFailure> {
    replay_lines(parse(text).unwrap(), Path::new("session.rec"))
}

/// The index of the first of `lines` that starts with `prefix` (there is one).
fn line_of<S: AsRef<str>>(lines: impl IntoIterator<Item = S>, prefix: &str) -> usize {
    let at = lines
        .into_iter()
        .position(|l| l.as_ref().starts_with(prefix));
    at.unwrap_or_else(|| panic!("no line starts with {prefix:?}"))
}

/// The first difference the replay of `text` meets (it must meet one).
fn mismatch(text: &str) -> Mismatch {
    match replay_text(text) {
        Err(ReplayFailure::Mismatch { mismatch, .. }) => mismatch,
        other => panic!("{other:?}"),
    }
}

#[test]
fn recorded_session_with_timeouts_reconnect_and_trips_replays_byte_for_byte() {
    let text = session();
    assert!(text.contains("bulk_in 81 512 !timeout"));
    assert!(text.contains("\nclose\n"));
    let r = replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 120);
}

#[test]
fn replay_with_a_call_missing_fails_naming_the_line_after_it() {
    let text = session();
    let mut lines: Vec<&str> = text.lines().collect();
    let at = lines.len() - 1 - line_of(lines.iter().rev(), "bulk_in ");
    lines.remove(at);
    let mismatch = mismatch(&(lines.join("\n") + "\n"));
    // the runtime's bulk_in meets the recording's bulk_out
    assert_eq!(mismatch.line, at + 1, "{mismatch}");
    assert!(mismatch.actual.starts_with("bulk_in 81 512"), "{mismatch}");
}

#[test]
fn replay_with_a_call_left_over_fails_naming_it() {
    let mut text = session();
    let n = text.lines().count();
    text.push_str("bulk_out 02 a5\n");
    let mismatch = mismatch(&text);
    assert_eq!(mismatch.line, n + 1, "{mismatch}");
    assert_eq!(mismatch.actual, "no call");
}

#[test]
fn replay_with_a_changed_answer_follows_it_and_still_checks_every_frame() {
    // An answer with a pressed chest button that the session never had makes
    // the runtime's next frames all-off: the replay names the first of them.
    let text = session();
    let lines: Vec<&str> = text.lines().collect();
    let at = line_of(&lines, "cycle 50 ");
    let bulk_in = at + line_of(&lines[at..], "bulk_in ");
    let answer = parse(&format!("nao-rs recording 1\n{}\n", lines[bulk_in])).unwrap();
    let crate::recording::Item::Call(crate::recording::Recorded::BulkIn {
        answer: Ok(bytes), ..
    }) = &answer[0].item
    else {
        panic!()
    };
    // The same answer written again with the chest button pressed.
    let f = Frame::parse(bytes, SYNC_ANSWER).unwrap();
    let mut buf = [0u8; MAX_FRAME_LEN];
    let mut w = FrameWriter::answer(&mut buf, f.seq).unwrap();
    for m in f.messages() {
        let mut payload = m.payload.to_vec();
        if (m.address, m.command) == (0x04, 0x81) {
            payload[0] = 1;
        }
        w.push(m.address, m.command, &payload).unwrap();
    }
    let n = w.finish();
    let bytes = &buf[..n];
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut changed: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    changed[bulk_in] = format!("bulk_in 81 512 {hex}");
    let mismatch = mismatch(&(changed.join("\n") + "\n"));
    assert!(mismatch.line > bulk_in + 1, "{mismatch}");
    assert!(mismatch.expected.starts_with("bulk_out 02 "), "{mismatch}");
    assert!(mismatch.offset.is_some());
}

#[test]
fn recording_of_a_start_up_with_a_bad_preference_block_replays_and_sends_no_frame() {
    let (board, text) = bad_prefs_start();
    assert_eq!(board.frames_written, 0);
    let r = replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 0);
    let e = r.startup_error.expect("the start-up error");
    assert!(e.contains("magic"), "{e}");
    // A frame after the failed start-up would be a call left over.
    mismatch(&(text + "bulk_out 02 a5000000ffff\n"));
}

/// A start-up on a board whose preference block lacks its magic, recorded:
/// the board and the text.
fn bad_prefs_start() -> (Box<FakeBoard>, String) {
    let mut board = FakeBoard::new();
    board.prefs[0] = b'X';
    let mut rec = RecordingLink::new(board, Vec::new()).unwrap();
    assert!(Startup::run(&mut rec).is_err());
    let (board, bytes) = rec.finish().unwrap();
    (board, String::from_utf8(bytes).unwrap())
}

#[test]
fn recording_that_starts_tripped_replays_all_off_frames() {
    let board = FakeBoard::new();
    let mut rec = RecordingLink::new(board, Vec::new()).unwrap();
    rec.switch(false).unwrap();
    let id = Startup::run(&mut rec).unwrap();
    let mut cycle = Cycle::from_identity(&id, &[10]);
    let stand = Command {
        stiffness: [1.0; JOINTS],
        ..Command::default()
    };
    rec.cycle(0, 0).unwrap();
    rec.command(&stand).unwrap();
    for k in 0..10u64 {
        if k > 0 {
            rec.cycle(k, k * 12).unwrap();
        }
        let input = CycleInput {
            command: Some(&stand),
            verdict: &Verdict::LIMP,
        };
        assert!(cycle.run(&mut rec, &input, k * 12_000_000).all_off);
    }
    let (_, bytes) = rec.finish().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    // The same recording with the switch armed expects other frames.
    let armed = text.replace("switch tripped", "switch armed");
    assert!(replay_text(&armed).is_err());
}

/// A scripted session against the fake board: the controller commands
/// stiffness 0.5 in every cycle; `inputs` are `(k, "trip" | "rearm" |
/// "wake")` among cycle k's inputs, in order; the answers handed over in the
/// cycles of `faults` report a joint fault (status bit 0). A script with a
/// wake runs the step's wake latch (as its recording, with `wake` lines,
/// replays). The switch is modelled as the runtime's page: a trip that finds
/// it armed counts; an answer trip trips it. `count_trips: false` gives the
/// cycle a constant trip count (a runtime blind to a trip and re-arm between
/// two frames). Returns the text and each cycle's stiffness of joint 0.
fn scripted(
    cycles: u64,
    inputs: &[(u64, &str)],
    faults: std::ops::Range<u64>,
    count_trips: bool,
) -> (String, Vec<u16>) {
    let latch = if inputs.iter().any(|&(_, what)| what == "wake") {
        WakeLatch::On
    } else {
        WakeLatch::Off
    };
    let (mut rec, switch, mut step) = recorded_start(latch);
    // The blind runtime: the protocol core's cycle given the switch's
    // armed state alone.
    let mut cycle = step.cycle().clone();
    let stand = Command {
        stiffness: [0.5; JOINTS],
        position: [0.25; JOINTS],
        ..Command::default()
    };
    let mut stiffness = Vec::new();
    for k in 0..cycles {
        rec.cycle(k, k * 12).unwrap();
        if k == 0 {
            rec.command(&stand).unwrap();
        }
        let mut wake = None;
        for &(_, what) in inputs.iter().filter(|(at, _)| *at == k) {
            match what {
                "trip" => {
                    rec.trip(deathswitch::Reason::Naoctl).unwrap();
                    switch.trip(deathswitch::Reason::Naoctl);
                }
                "rearm" => {
                    rec.rearm().unwrap();
                    switch.rearm();
                }
                _ => {
                    rec.wake().unwrap();
                    wake = Some(switch.snapshot().wake_generation().unwrap_or(0));
                }
            }
        }
        // The answer read in cycle k+1 is made by this cycle's write.
        rec.inner_mut().status[3] = u8::from(faults.contains(&(k + 1)));
        let out = if count_trips {
            let input = StepInput {
                command: Some(&stand),
                wake,
                now_ns: k * 12_000_000,
                ..StepInput::default()
            };
            step.run(&switch, &mut rec, &input, |_, _| {}).cycle
        } else {
            let verdict = if switch.snapshot().armed {
                Verdict::AWAKE
            } else {
                Verdict::LIMP
            };
            let input = CycleInput {
                command: Some(&stand),
                verdict: &verdict,
            };
            let out = cycle.run(&mut rec, &input, k * 12_000_000);
            if let Some(r) = out.trips.reason() {
                switch.trip(r);
            }
            out
        };
        stiffness.push(out.stiffness[0]);
    }
    let (_, bytes) = rec.finish().unwrap();
    (String::from_utf8(bytes).unwrap(), stiffness)
}

#[test]
fn replay_of_a_trip_and_a_rearm_among_one_cycles_inputs_expects_that_frame_all_off() {
    let (text, s) = scripted(20, &[(10, "trip"), (10, "rearm")], 0..0, true);
    assert_eq!(s[9], 500);
    assert_eq!(s[10], 0, "the frame after the trip is all-off");
    assert_eq!(s[11], 500, "the frame after it follows the switch");
    let r = replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 20);
    // The same inputs with cycle 10's frame stiff (a trip unseen) fail at
    // that frame.
    let (unseen, s) = scripted(20, &[(10, "trip"), (10, "rearm")], 0..0, false);
    assert_eq!(s[10], 500);
    let mismatch = mismatch(&unseen);
    let line = unseen.lines().nth(mismatch.line - 1).unwrap();
    let cycle_10 = line_of(unseen.lines(), "cycle 10 120");
    assert!(mismatch.line > cycle_10, "{mismatch}");
    assert!(line.starts_with("bulk_out 02 "), "{mismatch}");
}

#[test]
fn replay_of_an_answer_trip_then_a_rearm_expects_all_off_until_the_rearm_then_the_command() {
    // The example: stiffness 0.5 every cycle, a joint fault in the
    // answers that trips the switch in cycle 24, `rearm` in cycle 28.
    let (text, s) = scripted(40, &[(28, "rearm")], 24..27, true);
    assert_eq!(&s[3..25], &[500; 22]);
    assert_eq!(&s[25..28], &[0, 0, 0], "all-off in cycles 25-27");
    assert_eq!(&s[28..], &[500; 12], "the command again from cycle 28");
    assert!(text.contains("\nrearm\n"));
    let r = replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 40);
}

#[test]
fn replay_of_an_answer_trip_and_a_rearm_in_the_next_cycle_expects_one_all_off_frame() {
    // The fault in one answer only (handed over in cycle 24); re-armed among
    // cycle 25's inputs, before cycle 25's frame: that frame is still
    // tripped, cycle 26's carries the command.
    let (text, s) = scripted(30, &[(25, "rearm")], 24..25, true);
    assert_eq!(s[24], 500);
    assert_eq!(s[25], 0);
    assert_eq!(&s[26..], &[500; 4]);
    replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
}

/// A start-up recorded against the fake board whose answer to the request
/// on `line` (1-based, a `control_in`) is cut to `len` bytes; every call
/// after it removed, and input lines (a cycle, a command, a trip) added
/// after it.
fn short_answer(request: &str, len: usize) -> (String, usize) {
    let mut rec = RecordingLink::new(FakeBoard::new(), Vec::new()).unwrap();
    Startup::run(&mut rec).unwrap();
    let (_, bytes) = rec.finish().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = line_of(&lines, request);
    let mut out: Vec<String> = lines[..at].iter().map(|s| s.to_string()).collect();
    let fields: Vec<&str> = lines[at].split(' ').collect();
    let answer = &fields[6][..2 * len];
    out.push(format!("{} {}", fields[..6].join(" "), answer));
    out.push("cycle 0 0".into());
    out.push("silence".into());
    out.push("trip naoctl".into());
    out.push("cycle 1 12".into());
    (out.join("\n") + "\n", at + 1)
}

#[test]
fn short_version_prefs_or_boot_id_answer_ends_the_start_up_naming_the_request() {
    for (request, len, names) in [
        (
            "control_in c0 02 0000 0000 4 ",
            3,
            "VERSION request: expected 4 bytes",
        ),
        (
            "control_in c0 03 0000 0800 1024 ",
            1000,
            "PREFS request at offset 2048: expected 1024 bytes",
        ),
        (
            "control_in c0 04 0001 0000 8 ",
            7,
            "BOOT_ID request 1: expected 8 bytes",
        ),
    ] {
        let (text, line) = short_answer(request, len);
        let r = replay_text(&text).unwrap_or_else(|e| panic!("{request}: {e}\n{text}"));
        assert_eq!(r.cycles, 0);
        assert_eq!(r.calls, line - 1, "the short request is the last call");
        let e = r.startup_error.expect("a start-up error");
        assert!(e.contains(names), "{e}");
        // A further call after it is one the runtime did not make.
        mismatch(&(text.clone() + "close\n"));
    }
}

#[test]
fn input_lines_after_the_last_call_of_a_failed_start_up_are_not_calls() {
    let (_, text) = bad_prefs_start();
    let c = format!(
        "command {} 000000 000000 000000 00\n",
        vec!["0.5"; 50].join(" ")
    );
    let trailing = format!("{text}cycle 0 0\n{c}trip udp\nrearm\ncycle 1 12\nsilence\n");
    let r = replay_text(&trailing).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 0);
    assert!(r.startup_error.is_some());
}

#[test]
fn replay_of_a_recording_with_wake_lines_runs_the_wake_latch() {
    // Limp until the first wake, stiff after it, limp after a trip and
    // re-arm until the next wake.
    let (text, s) = scripted(
        60,
        &[(10, "wake"), (30, "trip"), (35, "rearm"), (45, "wake")],
        0..0,
        true,
    );
    assert!(s[..10].iter().all(|&x| x == 0), "limp until the first wake");
    assert_eq!(s[20], 500, "stiff after the wake");
    assert!(
        s[30..45].iter().all(|&x| x == 0),
        "limp after the trip until the next wake"
    );
    assert_eq!(s[50], 500, "stiff after the second wake");
    let r = replay_text(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cycles, 60);
    // Without its wake lines the recording replays the protocol model,
    // which drives before the first wake: its frames are not these.
    let unwoken: String = text
        .lines()
        .filter(|l| *l != "wake")
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(replay_text(&unwoken).is_err());
    // A wake line moved after the re-arm's wake is a different session too.
    let late = text.replacen("wake\n", "", 1);
    assert!(replay_text(&late).is_err(), "the first wake is what drives");
}
