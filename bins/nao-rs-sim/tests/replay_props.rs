//! Random sessions against the virtual robot, recorded with the recording
//! link and replayed: every one passes, and every frame after a trip is
//! all-off on the virtual robot's side.
//!
//! A session is a run of cycles, each with its inputs and faults: commands
//! with non-finite, negative, above-1 and per-mille-boundary values;
//! silences; trips of each kind (`trip` lines with every reason, and chest
//! button, heat and fault trips from the answers); a trip and a re-arm in
//! the same and in the next cycle; cycle gaps around 100 ms; battery
//! over-current around 4500 mA; answer faults (lost or corrupt answers) in
//! runs of 10, 11 and more. The virtual robot (`nao_rs_sim::device::Device`)
//! runs in this process with the session's clock, so the sessions are
//! deterministic and take no wall time.
//!
//! The session count is fixed here ([`SESSIONS`]), not taken from
//! `PROPTEST_CASES`, so that the test stays at a few seconds.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use deathswitch::{MemorySwitch, Switch as _};
use nao_rs_sim::ctl::CtlCommand;
use nao_rs_sim::device::{Device, InProcessLink};
use nao_rs_sim::settings::BoardSettings;
use nao_wire::link::{Call, Link, LinkError};
use nao_wire::protocol::cycle::Reconnect;
use nao_wire::protocol::gate::WakeLatch;
use nao_wire::protocol::startup::Startup;
use nao_wire::recording::parse;
use nao_wire::recording::record_link::RecordingLink;
use nao_wire::replay::replay_file;
use nao_wire::step::{Step as RuntimeStep, StepInput};
use nao_wire::Reason;
use nao_wire::{Command, JOINTS};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Random sessions per run (fixed, see the module doc).
const SESSIONS: u32 = 300;

/// The virtual robot in this process as a [`Link`]: each call is handed to
/// the device at the session's time, and the last valid frame it received
/// is kept. The session keeps a second handle to set the time and the
/// faults and to see the frames while the recording link owns this one.
#[derive(Clone)]
struct RobotLink(Arc<Mutex<InProcessLink>>);

impl RobotLink {
    fn new() -> RobotLink {
        let (cfg, prefs, _) = BoardSettings::default().build().expect("default settings");
        let robot = InProcessLink::new(Device::new(cfg, prefs));
        RobotLink(Arc::new(Mutex::new(robot)))
    }

    fn robot(&self) -> MutexGuard<'_, InProcessLink> {
        self.0.lock().expect("the robot's lock")
    }

    /// Whether the last valid frame the robot received was all-off.
    fn last_frame_all_off(&self) -> Option<bool> {
        self.robot().last_frame.map(|f| f.stiffness.all_off())
    }
}

impl Link for RobotLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        self.robot().call(call, answer)
    }
}

/// The controller's part of a cycle.
#[derive(Debug, Clone)]
enum Ctl {
    /// Sends the held command again (or nothing after a silence).
    Keep,
    /// A new command (a `command` line).
    New(Box<Command>),
    /// A `silence` line.
    Silence,
}

/// A person's (or a program's) part of a cycle, in order.
#[derive(Debug, Clone, PartialEq)]
enum Switch {
    Trip(Reason),
    Rearm,
}

/// A fault of the virtual robot, set before the cycle's calls.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Robot(CtlCommand),
}

#[derive(Debug, Clone)]
struct Step {
    gap_ms: u64,
    ctl: Ctl,
    switch: Vec<Switch>,
    fault: Fault,
}

/// One of NaN, the infinities and `values`.
fn special(values: &[f32]) -> impl Strategy<Value = f32> {
    let non_finite = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    prop::sample::select([&non_finite[..], values].concat())
}

/// Stiffness values: non-finite, negative, above 1, around each per-mille
/// step's rounding boundary, and plain ones.
fn stiffness() -> impl Strategy<Value = f32> {
    prop_oneof![
        special(&[
            -1.0,
            -0.0005,
            -0.0,
            0.0,
            0.0004,
            0.0005,
            0.000_499_9,
            0.0015,
            0.4995,
            0.5,
            0.9994,
            0.9995,
            1.0,
            1.0005,
            2.0,
            f32::MAX,
        ]),
        (0u32..=2000).prop_map(|m| m as f32 / 2000.0),
        -2.0f32..3.0,
    ]
}

fn position() -> impl Strategy<Value = f32> {
    prop_oneof![special(&[0.0, -0.0, 3.2, -3.2, 100.0]), -4.0f32..4.0,]
}

fn command() -> impl Strategy<Value = Command> {
    (
        prop::collection::vec(stiffness(), JOINTS),
        prop::collection::vec(position(), JOINTS),
        any::<[u8; 3]>(),
        any::<u8>(),
    )
        .prop_map(|(s, p, led, sonar)| {
            let mut c = Command {
                chest_led: led,
                left_foot_led: [led[1], led[2], led[0]],
                right_foot_led: led,
                sonar_mode: sonar,
                ..Command::default()
            };
            c.stiffness.copy_from_slice(&s);
            c.position.copy_from_slice(&p);
            c
        })
}

fn ctl() -> impl Strategy<Value = Ctl> {
    prop_oneof![
        12 => Just(Ctl::Keep),
        2 => command().prop_map(|c| Ctl::New(Box::new(c))),
        1 => Just(Ctl::Silence),
    ]
}

fn switch() -> impl Strategy<Value = Vec<Switch>> {
    let reason = prop::sample::select(vec![
        Reason::Naoctl,
        Reason::Udp,
        Reason::Api,
        Reason::PageLost,
        Reason::Shutdown,
    ]);
    prop_oneof![
        20 => Just(vec![]),
        1 => reason.clone().prop_map(|r| vec![Switch::Trip(r)]),
        1 => Just(vec![Switch::Rearm]),
        1 => reason.clone().prop_map(|r| vec![Switch::Trip(r), Switch::Rearm]),
        1 => reason.prop_map(|r| vec![Switch::Rearm, Switch::Trip(r)]),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    let joint = 0usize..JOINTS;
    prop_oneof![
        40 => Just(Fault::None),
        1 => Just(Fault::Robot(CtlCommand::Button(None))),
        1 => (joint.clone(), 88i8..=92).prop_map(|(j, d)| Fault::Robot(CtlCommand::Heat(j, d))),
        1 => joint.prop_map(|j| Fault::Robot(CtlCommand::Fault(j))),
        1 => (4490i16..=4510, prop::option::of(0u64..300))
            .prop_map(|(ma, ms)| Fault::Robot(CtlCommand::Overcurrent(ma, ms))),
        1 => prop::sample::select(vec![10u32, 11, 12, 20])
            .prop_map(|n| Fault::Robot(CtlCommand::Drop(n))),
        1 => prop::sample::select(vec![10u32, 11, 13])
            .prop_map(|n| Fault::Robot(CtlCommand::Corrupt(n))),
        3 => Just(Fault::Robot(CtlCommand::Clear)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![
            8 => Just(12u64),
            1 => prop::sample::select(vec![0u64, 1, 99, 100, 101, 150, 1100]),
        ],
        ctl(),
        switch(),
        fault(),
    )
        .prop_map(|(gap_ms, ctl, switch, fault)| Step {
            gap_ms,
            ctl,
            switch,
            fault,
        })
}

fn session() -> impl Strategy<Value = (bool, Option<Box<Command>>, Vec<Step>)> {
    (
        prop::bool::weighted(0.9),
        prop::option::weighted(0.8, command().prop_map(Box::new)),
        prop::collection::vec(step(), 20..90),
    )
}

/// What one session gave: the recording's text and what the frames were.
struct Run {
    text: String,
    cycles: u64,
    reconnects: u32,
    tripped_frames: u32,
    /// Each cycle's frame was all-off.
    all_off: Vec<bool>,
}

/// Runs a session the way the runtime does (the switch is the page: a trip
/// that finds it armed counts, an answer trip trips it) and records it.
/// Checks, from the virtual robot's side, that every frame that must be
/// all-off was: the switch tripped, a trip since the last frame (even when
/// re-armed before it), and a held command made limp by a trip until the
/// controller sends a command again.
fn run(armed_at_start: bool, first: Option<&Command>, steps: &[Step]) -> Result<Run, String> {
    let robot = RobotLink::new();
    let mut rec = RecordingLink::new(robot.clone(), Vec::new()).map_err(|e| e.to_string())?;
    rec.accepted(&[10]).map_err(|e| e.to_string())?;
    rec.switch(armed_at_start).map_err(|e| e.to_string())?;
    let id = Startup::run(&mut rec).map_err(|e| format!("start-up: {e}"))?;
    let switch = MemorySwitch::armed();
    if !armed_at_start {
        switch.trip(deathswitch::Reason::Boot);
    }
    let mut step = RuntimeStep::new(&id, &[10], &switch.read(), WakeLatch::Off);
    let mut held: Option<Command> = None;
    // The oracle's own memory, apart from the core's.
    let (mut seen_count, mut answer_tripped, mut limp) =
        (switch.snapshot().trip_count, false, false);
    let (mut t_ms, mut reconnects, mut tripped_frames) = (0u64, 0u32, 0u32);
    let mut all_off = Vec::with_capacity(steps.len());
    for (k, s) in steps.iter().enumerate() {
        let k = k as u64;
        if k > 0 {
            t_ms += s.gap_ms;
        }
        robot.robot().now_ns = t_ms * 1_000_000;
        if let Fault::Robot(c) = s.fault {
            robot.robot().device.control(c, t_ms * 1_000_000);
        }
        rec.cycle(k, t_ms).map_err(|e| e.to_string())?;
        let ctl = match (k, &s.ctl, first) {
            (0, Ctl::Keep, Some(c)) => Ctl::New(Box::new(*c)),
            (_, c, _) => c.clone(),
        };
        match ctl {
            Ctl::Keep => {}
            Ctl::New(c) => {
                rec.command(&c).map_err(|e| e.to_string())?;
                held = Some(*c);
            }
            Ctl::Silence => {
                rec.silence().map_err(|e| e.to_string())?;
                held = None;
            }
        }
        for sw in &s.switch {
            match sw {
                Switch::Trip(r) => {
                    rec.trip(*r).map_err(|e| e.to_string())?;
                    switch.trip(*r);
                }
                Switch::Rearm => {
                    rec.rearm().map_err(|e| e.to_string())?;
                    switch.rearm();
                }
            }
        }
        let input = StepInput {
            command: held.as_ref(),
            now_ns: t_ms * 1_000_000,
            ..StepInput::default()
        };
        let read = switch.snapshot();
        let (armed, trip_count) = (read.armed, read.trip_count);
        // The oracle: is this frame tripped, must it be all-off?
        let frame_tripped = !armed || trip_count != seen_count || answer_tripped;
        seen_count = trip_count;
        if held.is_some() {
            limp = false;
        }
        limp |= frame_tripped;
        tripped_frames += u32::from(frame_tripped);
        robot.robot().last_frame = None;
        let out = step.run(&switch, &mut rec, &input, |_, _| {});
        if limp {
            if !out.cycle.all_off {
                return Err(format!("cycle {k}: a stiff frame where all-off was due"));
            }
            if robot.last_frame_all_off() == Some(false) {
                return Err(format!("cycle {k}: the robot received a stiff frame"));
            }
        }
        all_off.push(out.cycle.all_off);
        answer_tripped = out.answer_trip.is_some();
        reconnects += u32::from(out.cycle.reconnect == Reconnect::Done);
    }
    let (_, bytes) = rec.finish().map_err(|e| e.to_string())?;
    Ok(Run {
        text: String::from_utf8(bytes).map_err(|e| e.to_string())?,
        cycles: steps.len() as u64,
        reconnects,
        tripped_frames,
        all_off,
    })
}

/// Replays the session's recording from a file in `dir`, as `nao-rs
/// replay` does.
fn replays(r: &Run, dir: &Path) -> Result<(), String> {
    parse(&r.text).map_err(|e| format!("the recording does not parse: {e}"))?;
    let path = dir.join("session.rec");
    std::fs::write(&path, &r.text).map_err(|e| format!("{}: {e}", path.display()))?;
    let report = replay_file(&path).map_err(|e| e.to_string())?;
    if report.cycles != r.cycles {
        return Err(format!("{} cycles replayed of {}", report.cycles, r.cycles));
    }
    Ok(())
}

#[test]
fn random_sessions_against_the_virtual_robot_record_and_replay() {
    let mut runner = TestRunner::new(Config {
        cases: SESSIONS,
        failure_persistence: None,
        ..Config::default()
    });
    let dir = tempfile::tempdir().expect("a temp dir");
    let reconnects = std::cell::Cell::new(0u32);
    let tripped = std::cell::Cell::new(0u32);
    let result = runner.run(&session(), |(armed, first, steps)| {
        let r = run(armed, first.as_deref(), &steps).map_err(TestCaseError::fail)?;
        replays(&r, dir.path()).map_err(|e| TestCaseError::fail(format!("{e}\n{}", r.text)))?;
        reconnects.set(reconnects.get() + r.reconnects);
        tripped.set(tripped.get() + r.tripped_frames);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator reaches what it is for.
    assert!(reconnects.get() > 0, "no session reconnected");
    assert!(tripped.get() > 0, "no session tripped");
}

fn keep() -> Step {
    Step {
        gap_ms: 12,
        ctl: Ctl::Keep,
        switch: vec![],
        fault: Fault::None,
    }
}

fn half() -> Command {
    Command {
        stiffness: [0.5; JOINTS],
        ..Command::default()
    }
}

#[test]
fn trip_and_rearm_in_one_cycle_against_the_virtual_robot_record_and_replay() {
    let mut steps = vec![keep(); 20];
    steps[10].switch = vec![Switch::Trip(Reason::Naoctl), Switch::Rearm];
    let r = run(true, Some(&half()), &steps).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.tripped_frames, 1);
    assert!(
        !r.all_off[9] && r.all_off[10] && !r.all_off[11],
        "{:?}",
        r.all_off
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    replays(&r, dir.path()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn answer_fault_at_cycle_24_and_rearm_at_28_against_the_virtual_robot_record_and_replay() {
    let mut steps = vec![keep(); 40];
    // The fault is reported in the answer to cycle 23's frame, handed over
    // in cycle 24; cleared so that later answers are fine.
    steps[23].fault = Fault::Robot(CtlCommand::Fault(3));
    steps[24].fault = Fault::Robot(CtlCommand::Clear);
    steps[28].switch = vec![Switch::Rearm];
    let r = run(true, Some(&half()), &steps).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.tripped_frames, 3, "cycles 25, 26 and 27");
    let stiff: Vec<u64> = (0..40).filter(|&k| !r.all_off[k as usize]).collect();
    let want: Vec<u64> = (2..25).chain(28..40).collect();
    assert_eq!(stiff, want, "all-off in 25-27, the command again from 28");
    let dir = tempfile::tempdir().expect("a temp dir");
    replays(&r, dir.path()).unwrap_or_else(|e| panic!("{e}"));
}
