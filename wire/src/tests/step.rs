//! The runtime's step (`crate::step`): the switch read once, the gate,
//! the cycle, the heartbeat and the answer's trips, against a fake chest
//! board and the page's own cells in memory (`deathswitch::MemorySwitch`).

use super::support::FakeBoard;
use crate::protocol::bringup::{BringUp, BringUpLimits, Jog, Missing};
use crate::protocol::gate::{Change, WakeLatch};
use crate::protocol::startup::Startup;
use crate::step::{Step, StepInput, StepOutput};
use crate::{Command, Joint, JOINTS};
use deathswitch::{MemorySwitch, Motion, Reason, Switch};
use nao_kit::clock::Clock;

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

/// In `hold:300` a press shorter than 300 ms reaches the sensors only and
/// the robot stays stiff; a press held 300 ms trips `chest-button` and the
/// next frame is all-off, limp until a re-arm and a wake.
#[test]
fn chest_button_hold_trips_a_long_press_and_passes_a_short_one() {
    use crate::protocol::chest_button::ChestButtonMode;
    let mut r = Rig::new(WakeLatch::On);
    r.step = r
        .step
        .clone()
        .with_chest_button(ChestButtonMode::Hold { ms: 300 });
    let c = stiff(1.0);
    r.runs(&c, 5);
    let g = r.generation();
    r.run(Some(&c), g);
    r.runs(&c, 5);
    // A short press: 20 answers (240 ms) show it, then released.
    r.board.chest_button = true;
    let mut seen = 0;
    for _ in 0..20 {
        let out = r.run(Some(&c), None);
        assert!(!out.cycle.all_off, "a short press does not stop the robot");
        assert_eq!(out.answer_trip, None);
        seen += usize::from(out.cycle.sensors.chest_button);
    }
    assert!(seen >= 18, "the program sees the press: {seen} answers");
    r.board.chest_button = false;
    r.runs(&c, 5);
    assert!(r.switch.snapshot().armed);
    // A long press: the first answer that shows it starts the count; the
    // step 300 ms later trips, the frame after it is all-off.
    r.board.chest_button = true;
    let mut first = None;
    let mut trip = None;
    for _ in 0..40 {
        let out = r.run(Some(&c), None);
        if out.cycle.sensors.chest_button && first.is_none() {
            first = Some(r.t_ms);
        }
        if out.answer_trip.is_some() {
            assert_eq!(out.answer_trip, Some(Reason::ChestButton));
            trip = Some(r.t_ms);
            break;
        }
        assert!(!out.cycle.all_off);
    }
    let (first, trip) = (first.unwrap(), trip.expect("a trip within 40 cycles"));
    assert_eq!(trip - first, 300, "held exactly 300 ms");
    assert_eq!(r.switch.snapshot().reason, Some(Reason::ChestButton));
    let out = r.run(Some(&c), None);
    assert!(out.cycle.all_off, "the next frame is all-off");
    // Released, re-armed: limp until a wake (the wake latch).
    r.board.chest_button = false;
    r.runs(&c, 2);
    r.switch.rearm();
    for _ in 0..10 {
        assert!(
            r.run(Some(&c), None).cycle.all_off,
            "a re-arm resumes nothing"
        );
    }
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

// ---- Bring-up over minutes of simulated cycles ----
//
// HAL's controller-lost ramp (`docs/protocol.md` section 9) fades the held
// command of a controller that sent nothing for 25 cycles. In bring-up the
// gate is the joint's controller: its verdict is a new command every cycle,
// so a joint held stiff stays at its cap for as long as the bumper is held.
// The cycle-stall and battery ramps still scale it. Cycles of 12 ms,
// simulated time.

/// The joint brought up.
const BU_JOINT: Joint = Joint::LShoulderPitch;
/// The default stiffness cap, per mille on the wire.
const BU_CAP: u16 = 200;
/// Accelerometer lying on the back, mm/s^2 (LoLA's sign).
const LYING_BACK: [i16; 3] = [-9810, 0, 0];

/// A bring-up rig: a lying robot whose joint reaches the position of each
/// frame that gives it stiffness by the next answer (unless stuck); the
/// runtime in bring-up sends no controller command.
struct BringUpRig {
    r: Rig,
    stuck: bool,
}

impl BringUpRig {
    /// Lying, woken in the first cycle, no bumper held.
    fn new() -> BringUpRig {
        let bringup = BringUp::new(BU_JOINT, BringUpLimits::default());
        let mut r = Rig::with(WakeLatch::On, Some(bringup));
        r.board.accelerometer = LYING_BACK;
        let mut b = BringUpRig { r, stuck: false };
        let g = b.r.generation();
        b.cycle(None, g);
        b
    }

    fn t_ms(&self) -> u64 {
        self.r.t_ms
    }

    /// One cycle: no controller command (`nao-runtime` passes none in
    /// bring-up), the jog and wake given; then the joint follows the frame.
    fn cycle(&mut self, jog: Option<Jog>, wake: Option<u64>) -> StepOutput {
        self.r.t_ms += 12;
        let input = StepInput {
            command: None,
            wake,
            jog,
            now_ns: self.r.t_ms * MS,
            ..StepInput::default()
        };
        let out = self
            .r
            .step
            .run(&self.r.switch, &mut *self.r.board, &input, |_, _| {});
        let j = BU_JOINT.index();
        if !self.stuck && out.cycle.stiffness[j] > 0 {
            self.r.board.count[j] = out.cycle.position_count[j];
        }
        out
    }

    /// Holds (`true`) or releases the left toe bumper: the answer to the
    /// next frame carries it.
    fn bumper(&mut self, held: bool) {
        self.r.board.bumpers = [u8::from(held), 0];
    }

    /// Cycles without a jog until `t_ms`, each frame checked by `check`.
    fn until(&mut self, t_ms: u64, mut check: impl FnMut(&StepOutput, u64)) {
        while self.t_ms() < t_ms {
            let out = self.cycle(None, None);
            check(&out, self.t_ms());
        }
    }
}

/// Only the joint may be stiff, never above the cap; its stiffness on the
/// wire.
fn bu_stiffness(out: &StepOutput) -> u16 {
    let j = BU_JOINT.index();
    for (k, &s) in out.cycle.stiffness.iter().enumerate() {
        assert!(
            k == j || s == 0,
            "cycle {}: joint {k} stiff ({s})",
            out.cycle.k
        );
    }
    let s = out.cycle.stiffness[j];
    assert!(s <= BU_CAP, "cycle {}: {s} above the cap", out.cycle.k);
    s
}

/// Presses the bumper at the rig's time and holds it until `until_ms`: the
/// joint ramps to the cap within the ramp (1 s) and two frames, then stays
/// exactly at the cap on the wire, the controller-lost level at 1000,
/// through a jog step every 5 s (`+` then `-`). Returns the frames held.
fn hold_at_cap(b: &mut BringUpRig, until_ms: u64) -> usize {
    b.bumper(true);
    let press = b.t_ms();
    let mut frames = 0;
    let mut jogs = 0;
    while b.t_ms() < until_ms {
        let jog = (b.t_ms() - press) % 5_000 < 12 && b.t_ms() > press + 2_000;
        let jog = jog.then(|| {
            jogs += 1;
            if jogs % 2 == 1 {
                Jog::Plus
            } else {
                Jog::Minus
            }
        });
        let out = b.cycle(jog, None);
        let s = bu_stiffness(&out);
        assert_eq!(out.cycle.levels.controller, 1000, "at {} ms", b.t_ms());
        assert!(!out.verdict.limp, "at {} ms: {:?}", b.t_ms(), out.verdict);
        if b.t_ms() >= press + 1_000 + 3 * 12 {
            assert_eq!(s, BU_CAP, "at {} ms, pressed at {press} ms", b.t_ms());
        }
        frames += 1;
    }
    frames
}

/// Releases the bumper: the frame built from the first answer without it
/// (two cycles on) and every one after, for 1 s, is limp.
fn release(b: &mut BringUpRig) {
    b.bumper(false);
    for n in 0..2 {
        let out = b.cycle(None, None);
        assert_eq!(bu_stiffness(&out), BU_CAP, "frame {n} after the release");
    }
    for n in 2..85 {
        let out = b.cycle(None, None);
        assert_eq!(bu_stiffness(&out), 0, "frame {n} after the release");
        assert!(out.cycle.all_off);
    }
}

#[test]
fn bringup_holds_the_joint_at_its_cap_for_as_long_as_the_bumper_is_held() {
    let mut b = BringUpRig::new();
    // Past the old 6.3 s mark with nothing held: limp, waiting for the
    // bumper.
    b.until(8_000, |out, t| {
        assert!(out.cycle.all_off, "at {t} ms");
    });
    let out = b.cycle(None, None);
    let v = out.verdict.bringup.expect("bring-up's verdict");
    assert_eq!(v.missing, Some(Missing::BumperNotHeld));
    // Pressed at 8 s, held for more than 60 s.
    let frames = hold_at_cap(&mut b, 75_000);
    assert!(frames >= 5_500, "{frames} frames held");
    release(&mut b);
    // A fresh press long after: the same again.
    hold_at_cap(&mut b, 140_000);
    release(&mut b);
}

#[test]
fn bringup_after_a_trip_a_rearm_wake_and_fresh_press_hold_the_joint_again() {
    let mut b = BringUpRig::new();
    b.until(1_000, |_, _| {});
    hold_at_cap(&mut b, 30_000);
    // A trip while the joint is stiff: the next frame is all-off.
    b.r.switch.trip(Reason::Naoctl);
    let out = b.cycle(None, None);
    assert!(out.cycle.all_off && out.verdict.tripped);
    // Re-armed, the bumper still held: limp, waiting for a wake.
    b.r.switch.rearm();
    b.until(32_000, |out, t| {
        assert!(out.cycle.all_off, "re-armed, not woken, at {t} ms");
        assert_eq!(out.verdict.motion, Motion::LimpWaitingForWake);
    });
    // Woken: a hold that outlived the trip does not count.
    let g = b.r.generation();
    b.cycle(None, g);
    b.until(34_000, |out, t| {
        assert!(out.cycle.all_off, "woken, the old hold, at {t} ms");
        let v = out.verdict.bringup.expect("bring-up's verdict");
        assert_eq!(v.missing, Some(Missing::ReleaseBumper), "at {t} ms");
    });
    // Released and pressed again: held at the cap for more than 60 s.
    b.bumper(false);
    b.until(35_000, |out, t| assert!(out.cycle.all_off, "at {t} ms"));
    hold_at_cap(&mut b, 100_000);
    release(&mut b);
    assert!(b.r.switch.snapshot().armed);
}

#[test]
fn bringup_following_error_trips_with_stiffness_on_the_wire() {
    let mut b = BringUpRig::new();
    b.until(8_000, |_, _| {});
    hold_at_cap(&mut b, 70_000);
    // Stuck from now on; `+` steps every 120 ms move the command away.
    b.stuck = true;
    let j = BU_JOINT.index();
    let measured = b.r.step.cycle().sensors().position[j];
    let mut stiff_while_off = 0;
    let mut tripped = None;
    for n in 0..400 {
        let jog = (n % 10 == 0).then_some(Jog::Plus);
        let out = b.cycle(jog, None);
        let s = bu_stiffness(&out);
        if let Some(r) = out.verdict.trip {
            assert!(out.cycle.all_off, "the trip's frame is all-off");
            tripped = Some(r);
            break;
        }
        let commanded = out.verdict.bringup.expect("verdict").target;
        if (commanded - measured).abs() > 0.15 {
            // The command left the stuck joint: the frames stiff on the
            // wire, at the cap, until the trip.
            assert_eq!(s, BU_CAP, "cycle {n}: a real following error");
            stiff_while_off += 1;
        }
    }
    assert_eq!(tripped, Some(Reason::BringupFollowingError));
    assert!(
        stiff_while_off >= 9,
        "{stiff_while_off} frames stiff with the joint off"
    );
    assert_eq!(
        b.r.switch.snapshot().reason,
        Some(Reason::BringupFollowingError)
    );
    b.until(b.t_ms() + 1_000, |out, t| {
        assert!(out.cycle.all_off, "after the trip, at {t} ms")
    });
}

#[test]
fn bringup_keeps_hals_cycle_stall_and_battery_over_current_ramps() {
    let mut b = BringUpRig::new();
    b.until(8_000, |_, _| {});
    hold_at_cap(&mut b, 20_000);
    // A stall: 0 for 1 s after it, then up by 5 per mille a cycle.
    b.r.t_ms += 150;
    let stalled = b.t_ms() + 12;
    let mut last = 0;
    b.until(stalled + 4_000, |out, t| {
        let s = bu_stiffness(out);
        if t < stalled + 1_000 {
            assert_eq!(s, 0, "stalled at {stalled} ms, at {t} ms");
            assert_eq!(out.cycle.levels.stall, 0);
        } else {
            assert!(s >= last, "ramps up");
            assert_eq!(s, hal_scale(BU_CAP, out.cycle.levels.stall));
        }
        last = s;
    });
    assert_eq!(last, BU_CAP);
    // Battery over-current: down to 240 per mille of the cap, and back.
    b.r.board.battery_ma = 5_000;
    b.until(b.t_ms() + 2_000, |out, _| {
        let s = bu_stiffness(out);
        assert_eq!(s, hal_scale(BU_CAP, out.cycle.levels.overcurrent));
    });
    let out = b.cycle(None, None);
    assert_eq!(out.cycle.levels.overcurrent, 240);
    assert_eq!(bu_stiffness(&out), 48);
    b.r.board.battery_ma = 1_000;
    b.until(b.t_ms() + 2_000, |_, _| {});
    assert_eq!(bu_stiffness(&b.cycle(None, None)), BU_CAP);
}

/// `cap` per mille scaled by one HAL level (the others at 1000), floored.
fn hal_scale(cap: u16, level: u16) -> u16 {
    (u32::from(cap) * u32::from(level) / 1000) as u16
}

#[test]
fn outside_bringup_a_silent_controller_fades_by_the_controller_lost_ramp() {
    let mut r = Rig::new(WakeLatch::Off);
    let c = stiff(1.0);
    r.runs(&c, 20);
    // 24 silent cycles: still 1000; then 2 per mille a cycle, 0 after 500.
    for n in 1..=24 {
        let out = r.run(None, None);
        assert_eq!(out.cycle.levels.controller, 1000, "silent cycle {n}");
    }
    for n in 1..=500u16 {
        let out = r.run(None, None);
        assert_eq!(out.cycle.levels.controller, 1000 - 2 * n);
        assert_eq!(out.cycle.stiffness[0], 1000 - 2 * n);
    }
    assert!(r.run(None, None).cycle.all_off);
}

#[test]
fn the_step_takes_its_time_only_from_its_input() {
    // The switch's clock is virtual and never moves: the step reads no
    // clock, so the heartbeat carries the input's time, exactly.
    let clock = nao_kit::clock::VirtualClock::new(1);
    let mut board = FakeBoard::new();
    let id = Startup::run(&mut *board).expect("start-up");
    let switch = MemorySwitch::with_clock(clock.clone());
    switch.rearm();
    switch.register(std::process::id());
    let mut step = Step::new(&id, &[10], &switch.read(), WakeLatch::On);
    for (k, now_ns) in [5_000_123_456u64, 5_012_000_001, 5_024_999_999]
        .into_iter()
        .enumerate()
    {
        let input = StepInput {
            now_ns,
            ..StepInput::default()
        };
        let out = step.run(&switch, &mut *board, &input, |_, _| {});
        let s = switch.snapshot();
        assert_eq!(s.last_cycle, Some(out.cycle.k), "cycle {k}");
        assert_eq!(s.last_beat_ns, Some(now_ns), "cycle {k}");
    }
    assert_eq!(clock.now_ns(), 1);
    // A trip the answer or the gate raises is the switch's, on its clock.
    switch.trip(Reason::Api);
    assert_eq!(switch.snapshot().tripped_at_ns, 1);
}
