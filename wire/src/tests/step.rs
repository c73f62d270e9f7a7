//! The runtime's step (`crate::step`): the switch read once, the gate,
//! the cycle, the heartbeat and the answer's trips, against a fake chest
//! board and the page's own cells in memory (`deathswitch::MemorySwitch`).

use super::support::FakeBoard;
use crate::protocol::bringup::{BringUp, BringUpLimits};
use crate::protocol::gate::{Change, WakeLatch};
use crate::protocol::startup::Startup;
use crate::step::{Step, StepInput, StepOutput};
use crate::{Command, Joint, JOINTS};
use deathswitch::{MemorySwitch, Motion, Reason, Switch};

const MS: u64 = 1_000_000;

fn stiff(s: f32) -> Command {
    Command {
        stiffness: [s; JOINTS],
        position: [0.1; JOINTS],
        ..Command::default()
    }
}

struct Rig {
    board: Box<FakeBoard>,
    switch: MemorySwitch,
    step: Step,
    t_ms: u64,
}

impl Rig {
    fn new(wake: WakeLatch) -> Rig {
        Rig::with(wake, None)
    }

    /// A rig whose step runs in bring-up of `bringup`, if any.
    fn with(wake: WakeLatch, bringup: Option<BringUp>) -> Rig {
        let mut board = FakeBoard::new();
        let id = Startup::run(&mut *board).expect("start-up");
        let switch = MemorySwitch::armed();
        switch.register(std::process::id());
        switch.register(std::process::id());
        let mut step = Step::new(&id, &[10], &switch.read(), wake);
        if let Some(b) = bringup {
            step = step.with_bringup(b);
        }
        Rig {
            board,
            switch,
            step,
            t_ms: 0,
        }
    }

    fn run(&mut self, command: Option<&Command>, wake: Option<u64>) -> StepOutput {
        self.t_ms += 12;
        let input = StepInput {
            command,
            wake,
            now_ns: self.t_ms * MS,
            ..StepInput::default()
        };
        self.step
            .run(&self.switch, &mut *self.board, &input, |_, _| {})
    }

    /// `n` cycles of `command`, no wake.
    fn runs(&mut self, command: &Command, n: usize) {
        for _ in 0..n {
            self.run(Some(command), None);
        }
    }

    fn generation(&self) -> Option<u64> {
        self.switch.snapshot().wake_generation()
    }
}

#[test]
fn every_start_is_limp_until_a_wake_and_the_step_drives_after_it() {
    let mut r = Rig::new(WakeLatch::On);
    let c = stiff(0.6);
    for _ in 0..20 {
        let out = r.run(Some(&c), None);
        assert!(out.cycle.all_off, "limp until the wake");
        assert_eq!(out.verdict.motion, Motion::LimpWaitingForWake);
    }
    let g = r.generation();
    let out = r.run(Some(&c), g);
    assert_eq!(out.verdict.change, Change::Woken);
    // The boards are accepted by now: the command reaches the frame.
    let out = r.run(Some(&c), None);
    assert!(!out.cycle.all_off);
    assert_eq!(r.switch.snapshot().motion, Motion::Awake);
}

#[test]
fn chest_button_in_an_answer_trips_and_the_next_frame_is_all_off() {
    let mut r = Rig::new(WakeLatch::Off);
    let c = stiff(1.0);
    r.runs(&c, 20);
    r.board.chest_button = true;
    let out = r.run(Some(&c), None); // answer pressed
    assert!(!out.cycle.all_off);
    r.board.chest_button = false;
    let out = r.run(Some(&c), None); // hands it over: the step trips the switch
    assert_eq!(out.answer_trip, Some(Reason::ChestButton));
    assert_eq!(r.switch.snapshot().reason, Some(Reason::ChestButton));
    // Re-armed at once, before the next read: the frame is still all-off.
    r.switch.rearm();
    let out = r.run(Some(&c), None);
    assert!(out.cycle.all_off, "an answer trip is never unseen");
    // Then, in the protocol model, the re-armed switch drives again.
    let out = r.run(Some(&c), None);
    assert!(!out.cycle.all_off);
}

#[test]
fn a_silent_controller_never_leaves_a_stiff_command_held() {
    let mut r = Rig::new(WakeLatch::On);
    let c = stiff(0.6);
    r.run(Some(&c), r.generation());
    for _ in 0..20 {
        assert!(!r.run(Some(&c), None).cycle.all_off || r.step.cycle().k() < 5);
    }
    // A trip and a re-arm, the controller silent from the trip on.
    r.switch.trip(Reason::Naoctl);
    assert!(r.run(None, None).cycle.all_off);
    r.switch.rearm();
    let g = r.generation();
    r.run(None, g);
    for _ in 0..20 {
        let out = r.run(None, None);
        assert!(
            out.cycle.all_off,
            "woken, but the held command was made limp by the trip"
        );
    }
    // A new command drives.
    assert!(!r.run(Some(&c), None).cycle.all_off);
}

#[test]
fn the_step_beats_after_every_frame_and_confirms_all_off() {
    let mut r = Rig::new(WakeLatch::On);
    let out = r.run(Some(&stiff(0.6)), None);
    let s = r.switch.snapshot();
    assert_eq!(s.last_cycle, Some(out.cycle.k));
    assert_eq!(s.all_off_confirmed_cycle, Some(out.cycle.k));
    assert_eq!(s.motion, Motion::LimpWaitingForWake);
}

#[test]
fn a_damaged_page_reads_tripped_page_lost_and_the_frame_is_all_off() {
    let mut r = Rig::new(WakeLatch::Off);
    let c = stiff(0.6);
    r.runs(&c, 10);
    r.switch.damage();
    let out = r.run(Some(&c), None);
    assert!(out.cycle.all_off);
    assert_eq!(out.verdict.reason, Some(Reason::PageLost));
}

#[test]
fn in_bring_up_no_joint_is_stiff_while_the_preconditions_fail() {
    // The fake board reports no IMU (not lying) and no toe bumper: bring-up
    // gives no joint any stiffness, whatever the command says.
    let bringup = BringUp::new(Joint::LShoulderPitch, BringUpLimits::default());
    let mut r = Rig::with(WakeLatch::On, Some(bringup));
    let c = stiff(1.0);
    let g = r.generation();
    for k in 0..50u64 {
        let out = r.run(Some(&c), if k == 0 { g } else { None });
        assert!(out.cycle.all_off, "cycle {k}");
        let v = out.verdict.bringup.expect("bring-up's verdict");
        assert!(v.missing.is_some(), "cycle {k}: a precondition is missing");
        if k > 0 {
            assert_eq!(out.verdict.motion, Motion::BringUp);
        }
    }
}
