//! The bring-up rules (`docs/bringup.md`, "The rules"), one test per rule,
//! on the pure state machine `protocol::bringup`: time passed in, the
//! sensors set by hand, a joint that follows its command when asked to.

use super::*;
use crate::command::JOINTS;

/// The runtime's cycle period.
const CYCLE_NS: u64 = 12_000_000;
/// The joint brought up.
const J: Joint = Joint::LShoulderPitch;
/// Where it rests.
const P0: f32 = 0.4;
/// 1 kg per 100 raw, no offset.
const CAL: [[PressureCalibration; 4]; 2] = [[PressureCalibration {
    gain: 0.01,
    offset: 0.0,
}; 4]; 2];

/// Accelerometer, mm/s^2 in LoLA's sign (`docs/sim.md`, "Postures").
const LYING_BACK: [i16; 3] = [-9810, 0, 0];
const LYING_FRONT: [i16; 3] = [9810, 0, 0];
const STANDING: [i16; 3] = [0, 0, -9810];
const SITTING: [i16; 3] = [1708, 0, -9660];

/// One bring-up and the robot around it.
struct Bench {
    bringup: BringUp,
    sensors: Sensors,
    board_accepted: bool,
    ready: Readiness,
    t: u64,
    /// The joint reaches each verdict's target by the next answer.
    follow: bool,
    last: Option<BringUpVerdict>,
}

impl Bench {
    /// Lying on its back, still, no load on the feet, the joint measured at
    /// [`P0`] and cool, armed and woken, its board accepted, no bumper held.
    fn new(limits: BringUpLimits) -> Self {
        let mut sensors = Sensors::new(&[2048; JOINTS]);
        sensors.imu.accelerometer = LYING_BACK;
        sensors.measured = [true; JOINTS];
        sensors.position[J] = P0;
        sensors.temperature = [30; JOINTS];
        Bench {
            bringup: BringUp::new(J, limits),
            sensors,
            board_accepted: true,
            ready: Readiness {
                armed: true,
                woken: true,
            },
            t: 1_000_000_000,
            follow: false,
            last: None,
        }
    }

    /// [`Bench::new`] with the defaults, lying still for long enough.
    fn settled() -> Self {
        let mut b = Bench::new(BringUpLimits::default());
        b.settle();
        b
    }

    /// [`Bench::settled`] with a toe bumper pressed: enabled.
    fn enabled(limits: BringUpLimits) -> Self {
        let mut b = Bench::new(limits);
        b.settle();
        b.press();
        let v = b.step(None);
        assert_eq!((v.missing, v.trip), (None, None));
        b
    }

    /// Lying still for 1.2 s (no bumper).
    fn settle(&mut self) {
        for _ in 0..100 {
            self.step(None);
        }
    }

    fn press(&mut self) {
        self.sensors.bumpers = [1, 0];
    }

    fn release(&mut self) {
        self.sensors.bumpers = [0, 0];
    }

    /// One cycle, 12 ms after the last.
    fn step(&mut self, jog: Option<Jog>) -> BringUpVerdict {
        self.t += CYCLE_NS;
        if self.follow {
            if let Some(v) = self.last {
                if v.stiffness > 0.0 {
                    self.sensors.position[J] = v.target;
                }
            }
        }
        let input = BringUpInput {
            sensors: &self.sensors,
            foot_calibration: &CAL,
            board_accepted: self.board_accepted,
            now_ns: self.t,
            jog,
        };
        let v = self.bringup.step(&input, self.ready);
        self.last = Some(v);
        v
    }

    /// `n` cycles without a press; the last verdict.
    fn run(&mut self, n: usize) -> BringUpVerdict {
        let mut v = self.last.unwrap_or_else(|| self.step(None));
        for _ in 0..n {
            v = self.step(None);
        }
        v
    }

    /// No trip for `cycles - 1` cycles, then the trip `reason`, limp in the
    /// same verdict.
    fn trips_after(&mut self, cycles: usize, reason: Reason) {
        for k in 1..cycles {
            assert_eq!(self.step(None).trip, None, "cycle {k}");
        }
        let v = self.step(None);
        assert_eq!(v.trip, Some(reason), "cycle {cycles}");
        assert_eq!(v.stiffness, 0.0, "cycle {cycles}");
    }
}

fn limits(pairs: &[(Limit, f64)]) -> BringUpLimits {
    pairs.iter().fold(BringUpLimits::default(), |l, &(k, v)| {
        l.tighten(k, v).expect("a tighter limit")
    })
}

fn near(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-4
}

#[test]
fn bringup_refuses_stiffness_until_every_precondition_holds() {
    type Setup = fn(&mut Bench);
    let rows: &[(&str, Setup, Option<Missing>)] = &[
        ("every precondition holds", |_| {}, None),
        (
            "lying on the front",
            |b| b.sensors.imu.accelerometer = LYING_FRONT,
            None,
        ),
        (
            "switch tripped",
            |b| b.ready.armed = false,
            Some(Missing::SwitchTripped),
        ),
        (
            "not woken",
            |b| b.ready.woken = false,
            Some(Missing::NotWoken),
        ),
        (
            "board not accepted",
            |b| b.board_accepted = false,
            Some(Missing::BoardNotAccepted),
        ),
        (
            "joint not measured",
            |b| b.sensors.measured[J] = false,
            Some(Missing::NotMeasured),
        ),
        (
            "standing",
            |b| b.sensors.imu.accelerometer = STANDING,
            Some(Missing::NotLying),
        ),
        (
            "sitting",
            |b| b.sensors.imu.accelerometer = SITTING,
            Some(Missing::NotLying),
        ),
        (
            "lying on the side",
            |b| b.sensors.imu.accelerometer = [0, 9810, 0],
            Some(Missing::NotLying),
        ),
        (
            "lying, gyro 0.1 rad/s on y",
            |b| b.sensors.imu.gyroscope = [0, 100, 0],
            Some(Missing::Moving),
        ),
        (
            "lying, gyro 0.099 rad/s",
            |b| b.sensors.imu.gyroscope = [99, -99, 99],
            None,
        ),
        (
            "weight on the feet: 0.6 kg",
            |b| b.sensors.foot_pressure = [[8; 4], [7; 4]],
            Some(Missing::WeightOnFeet),
        ),
        (
            "0.48 kg on the feet",
            |b| b.sensors.foot_pressure = [[6; 4]; 2],
            None,
        ),
        (
            "standing load, 5.3 kg",
            |b| b.sensors.foot_pressure = [[66; 4]; 2],
            Some(Missing::WeightOnFeet),
        ),
        (
            "joint at 60 degC",
            |b| b.sensors.temperature[J] = 60,
            Some(Missing::TooHot),
        ),
        ("joint at 59 degC", |b| b.sensors.temperature[J] = 59, None),
        (
            "no bumper held",
            |b| b.release(),
            Some(Missing::BumperNotHeld),
        ),
    ];
    for (name, setup, expected) in rows {
        let mut b = Bench::settled();
        b.press();
        setup(&mut b);
        let v = b.run(200);
        assert_eq!(v.missing, *expected, "{name}");
        assert_eq!(v.trip, None, "{name}");
        if expected.is_some() {
            assert_eq!(v.stiffness, 0.0, "{name}");
            assert_eq!(v.window, None, "{name}");
        } else {
            assert!(
                near(v.stiffness, Limit::MaxStiffness.default_value() as f32),
                "{name}"
            );
        }
    }
    // The person is told what to do for each.
    for m in [
        Missing::NotLying,
        Missing::ReleaseBumper,
        Missing::WeightOnFeet,
    ] {
        assert!(!m.what_to_do().is_empty() && !m.name().is_empty());
    }
}

#[test]
fn bringup_lying_must_be_held_still_for_1_s() {
    let mut b = Bench::new(BringUpLimits::default());
    b.release();
    b.step(None);
    b.press();
    // 0.9 s lying still: not yet.
    for _ in 0..75 {
        assert_eq!(b.step(None).missing, Some(Missing::Settling));
    }
    // A shake restarts the second.
    b.sensors.imu.gyroscope = [0, 0, 150];
    assert_eq!(b.step(None).missing, Some(Missing::Moving));
    b.sensors.imu.gyroscope = [0, 0, 0];
    b.release();
    for _ in 0..80 {
        assert_eq!(b.step(None).missing, Some(Missing::Settling));
    }
    for _ in 0..5 {
        b.step(None);
    }
    assert_eq!(b.step(None).missing, Some(Missing::BumperNotHeld));
    b.press();
    assert_eq!(b.step(None).missing, None);
}

#[test]
fn bringup_a_hold_begun_before_the_checks_passed_must_be_released_first() {
    // Held from the first cycle on: never counts.
    let mut b = Bench::new(BringUpLimits::default());
    b.press();
    let v = b.run(200);
    assert_eq!(
        (v.missing, v.stiffness),
        (Some(Missing::ReleaseBumper), 0.0)
    );
    // Held while standing, then laid down: still the same hold.
    let mut b = Bench::settled();
    b.sensors.imu.accelerometer = STANDING;
    b.press();
    b.run(10);
    b.sensors.imu.accelerometer = LYING_BACK;
    let v = b.run(200);
    assert_eq!(
        (v.missing, v.stiffness),
        (Some(Missing::ReleaseBumper), 0.0)
    );
    b.release();
    b.step(None);
    b.press();
    assert_eq!(b.step(None).missing, None);
}

#[test]
fn bringup_stiffness_only_while_a_toe_bumper_is_held() {
    // Any one of the four contacts is a hand on it.
    for bumpers in [[1, 0], [2, 0], [0, 1], [0, 2], [3, 3]] {
        let mut b = Bench::settled();
        b.sensors.bumpers = bumpers;
        let v = b.run(200);
        assert!(v.stiffness > 0.0, "{bumpers:?}");
        b.release();
        let v = b.step(None);
        assert_eq!(v.stiffness, 0.0, "released: limp from the next frame");
        assert_eq!(v.missing, Some(Missing::BumperNotHeld));
    }
    // Bits other than the two contacts are no hold.
    let mut b = Bench::settled();
    b.sensors.bumpers = [4, 8];
    assert_eq!(b.run(200).stiffness, 0.0);
}

#[test]
fn bringup_only_the_chosen_joint_gets_stiffness() {
    let mut b = Bench::enabled(BringUpLimits::default());
    let v = b.run(200);
    assert_eq!(v.joint, J);
    assert!(v.stiffness > 0.0);
    for j in Joint::ALL {
        let s = v.joint_stiffness(j);
        if j == J {
            assert_eq!(s, v.stiffness);
        } else {
            assert_eq!(s, 0.0, "{j}");
        }
    }
}

#[test]
fn bringup_stiffness_ramps_from_0_and_never_exceeds_the_cap() {
    let mut b = Bench::enabled(BringUpLimits::default());
    assert_eq!(b.last.unwrap().stiffness, 0.0, "the press's frame: 0");
    let mut prev = 0.0;
    let mut seen = vec![];
    for _ in 0..200 {
        let v = b.step(None);
        assert!(v.stiffness >= prev, "rising");
        assert!(v.stiffness <= 0.2 + 1e-6, "capped");
        prev = v.stiffness;
        seen.push(v.stiffness);
    }
    // 0.5 s in: about half the cap; 1 s in: the cap.
    assert!((seen[40] - 0.1).abs() < 0.01, "{}", seen[40]);
    assert!(near(seen[199], 0.2));
    // A tighter cap holds too; the bound is 0.3.
    let mut b = Bench::enabled(limits(&[(Limit::MaxStiffness, 0.1)]));
    assert!(near(b.run(200).stiffness, 0.1));
    let mut b = Bench::enabled(limits(&[(Limit::MaxStiffness, 0.3)]));
    assert!(near(b.run(200).stiffness, 0.3));
}

#[test]
fn bringup_targets_stay_in_the_window_taken_at_the_press() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    let w = b.last.unwrap().window.unwrap();
    assert!(near(w.min, P0 - 0.3) && near(w.max, P0 + 0.3));
    for _ in 0..100 {
        let v = b.step(Some(Jog::Plus));
        assert!(v.target <= P0 + 0.3 + 1e-6);
    }
    assert!(near(b.run(100).target, P0 + 0.3), "at the window's edge");
    for _ in 0..200 {
        let v = b.step(Some(Jog::Minus));
        assert!(v.target >= P0 - 0.3 - 1e-6);
    }
    assert!(near(b.run(100).target, P0 - 0.3));
}

#[test]
fn bringup_targets_stay_in_the_joints_range() {
    let max = joint_range(J).max;
    // Resting 0.1 rad below the range's end: the window stops at the end.
    let mut b = Bench::settled();
    b.sensors.position[J] = max - 0.1;
    b.follow = true;
    b.press();
    let w = b.step(None).window.unwrap();
    assert!(near(w.max, max) && near(w.min, max - 0.4));
    for _ in 0..100 {
        assert!(b.step(Some(Jog::Plus)).target <= max);
    }
    // Measured past the end (a joint pressed against its stop): held where
    // it is, moved only back toward the range.
    let mut b = Bench::settled();
    b.sensors.position[J] = max + 0.05;
    b.follow = true;
    b.press();
    let v = b.step(None);
    assert!(near(v.target, max + 0.05));
    for _ in 0..50 {
        assert!(b.step(Some(Jog::Plus)).target <= max + 0.05 + 1e-6);
    }
    for _ in 0..10 {
        b.step(Some(Jog::Minus));
    }
    assert!(b.run(50).target < max + 0.05);
}

#[test]
fn bringup_commanded_position_is_rate_limited() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    let per_cycle = 0.5 * CYCLE_NS as f32 / 1e9;
    let mut prev = b.last.unwrap().target;
    for k in 0..300 {
        let jog = if k < 150 { Jog::Plus } else { Jog::Minus };
        let v = b.step(Some(jog));
        assert!((v.target - prev).abs() <= per_cycle + 1e-6, "cycle {k}");
        prev = v.target;
    }
    // A gap between two steps (a late cycle) never moves more than one
    // step: the gap counts as at most 100 ms.
    let before = b.step(Some(Jog::Plus)).target;
    b.t += 500_000_000;
    let after = b.step(None).target;
    assert!((after - before).abs() <= 0.5 * 0.1 + 1e-6);
}

#[test]
fn bringup_each_press_moves_the_target_at_most_one_step() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    b.run(100);
    b.step(Some(Jog::Plus));
    assert!(near(b.run(100).target, P0 + 0.05));
    // Presses faster than the rate: the target never runs more than one
    // step ahead of the commanded position.
    for _ in 0..3 {
        b.step(Some(Jog::Plus));
    }
    // Three steps would lead to P0 + 0.2; the target is one step from
    // where the command was at the last press (P0 + 0.068).
    let v = b.run(100);
    assert!(v.target > P0 + 0.1 && v.target < P0 + 0.15, "{}", v.target);
}

#[test]
fn bringup_no_press_for_1_s_holds_the_target() {
    // At 0.01 rad/s one step takes 5 s: after 1 s without a press the
    // target stays where it got to.
    let mut b = Bench::enabled(limits(&[(Limit::Rate, 0.01)]));
    b.follow = true;
    b.step(Some(Jog::Plus));
    let v = b.run(84);
    assert!(
        v.target > P0 + 0.009 && v.target < P0 + 0.0105,
        "{}",
        v.target
    );
    let held = b.run(2).target;
    let later = b.run(300).target;
    assert_eq!(held, later);
}

#[test]
fn bringup_release_makes_the_joint_limp_and_a_new_press_starts_afresh() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    for _ in 0..2 {
        b.step(Some(Jog::Plus));
        b.run(20);
    }
    let v = b.run(100);
    assert!(near(v.target, P0 + 0.1));
    assert!(v.stiffness > 0.0);
    b.release();
    let v = b.step(None);
    assert_eq!((v.stiffness, v.window), (0.0, None));
    // Moved by hand while limp, then pressed again: the window is re-taken
    // there and the stiffness ramps from 0.
    b.sensors.position[J] = -0.5;
    b.run(10);
    b.press();
    let v = b.step(None);
    assert_eq!(v.stiffness, 0.0);
    assert!(near(v.target, -0.5));
    let w = v.window.unwrap();
    assert!(near(w.min, -0.8) && near(w.max, -0.2));
    let v = b.step(None);
    assert!(v.stiffness > 0.0 && v.stiffness < 0.01);
}

#[test]
fn bringup_trips_on_a_step_the_wrong_way() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.run(100);
    b.step(Some(Jog::Plus));
    // 0.015 rad the wrong way: no trip yet.
    b.sensors.position[J] = P0 - 0.015;
    assert_eq!(b.step(None).trip, None);
    // 0.021 rad: trip, limp in the same verdict.
    b.sensors.position[J] = P0 - 0.021;
    b.trips_after(1, Reason::BringupWrongDirection);
    // Same for a step down.
    let mut b = Bench::enabled(BringUpLimits::default());
    b.step(Some(Jog::Minus));
    b.sensors.position[J] = P0 + 0.03;
    assert_eq!(b.step(None).trip, Some(Reason::BringupWrongDirection));
}

#[test]
fn bringup_trips_on_a_following_error_for_10_cycles() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.run(100);
    // A stuck joint 0.16 rad from the command: 9 cycles, no trip; the 10th trips.
    b.sensors.position[J] = P0 + 0.16;
    b.trips_after(10, Reason::BringupFollowingError);
    // Back inside the bound in between: the count starts again.
    let mut b = Bench::enabled(BringUpLimits::default());
    b.run(100);
    for _ in 0..3 {
        b.sensors.position[J] = P0 + 0.16;
        b.run(8);
        b.sensors.position[J] = P0 + 0.1;
        assert_eq!(b.step(None).trip, None);
    }
}

#[test]
fn bringup_trips_on_over_current_for_20_cycles() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    b.run(100);
    b.sensors.current_ma[J] = 1501;
    b.trips_after(20, Reason::BringupOverCurrent);
    // 1500 mA is not over.
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    b.sensors.current_ma[J] = 1500;
    assert_eq!(b.run(100).trip, None);
}

#[test]
fn bringup_trips_when_the_joint_gets_too_hot_while_stiff() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.follow = true;
    b.sensors.temperature[J] = 59;
    assert_eq!(b.run(100).trip, None);
    b.sensors.temperature[J] = 60;
    b.trips_after(1, Reason::BringupTooHot);
}

#[test]
fn bringup_after_a_trip_the_joint_stays_limp_until_a_fresh_press() {
    let mut b = Bench::enabled(BringUpLimits::default());
    b.run(100);
    b.sensors.position[J] = P0 + 0.2;
    let v = b.run(10);
    assert_eq!(v.trip, Some(Reason::BringupFollowingError));
    // The switch trips; re-armed and woken with the bumper still held: limp.
    b.ready.armed = false;
    assert_eq!(b.step(None).missing, Some(Missing::SwitchTripped));
    b.ready.armed = true;
    let v = b.run(50);
    assert_eq!(
        (v.stiffness, v.missing),
        (0.0, Some(Missing::ReleaseBumper))
    );
    b.release();
    b.step(None);
    b.press();
    let v = b.run(50);
    assert_eq!((v.missing, v.trip), (None, None));
    assert!(v.stiffness > 0.0);
}

#[test]
fn bringup_a_precondition_lost_while_stiff_makes_the_joint_limp() {
    type Setup = fn(&mut Bench);
    let rows: &[(&str, Setup, Missing)] = &[
        (
            "switch tripped",
            |b| b.ready.armed = false,
            Missing::SwitchTripped,
        ),
        (
            "picked up",
            |b| b.sensors.imu.accelerometer = STANDING,
            Missing::NotLying,
        ),
        (
            "shaken",
            |b| b.sensors.imu.gyroscope = [300, 0, 0],
            Missing::Moving,
        ),
        (
            "stood on its feet",
            |b| b.sensors.foot_pressure = [[50; 4]; 2],
            Missing::WeightOnFeet,
        ),
        (
            "board lost",
            |b| b.board_accepted = false,
            Missing::BoardNotAccepted,
        ),
    ];
    for (name, setup, missing) in rows {
        let mut b = Bench::enabled(BringUpLimits::default());
        assert!(b.run(100).stiffness > 0.0);
        setup(&mut b);
        let v = b.step(None);
        assert_eq!((v.stiffness, v.missing), (0.0, Some(*missing)), "{name}");
    }
}

#[test]
fn bringup_limits_can_only_be_made_tighter() {
    let d = BringUpLimits::default();
    // Every default is allowed as it is.
    for l in Limit::ALL {
        assert_eq!(d.get(l), l.default_value(), "{}", l.name());
        assert!(d.tighten(l, l.default_value()).is_ok(), "{}", l.name());
        assert_eq!(Limit::from_name(l.name()), Some(l));
    }
    // (limit, allowed, refused)
    let rows: &[(Limit, &[f64], &[f64])] = &[
        (
            Limit::MaxStiffness,
            &[0.05, 0.2, 0.3],
            &[0.31, 1.0, 0.0, -0.1],
        ),
        (Limit::Window, &[0.1, 0.3], &[0.31, 0.0]),
        (Limit::Rate, &[0.01, 0.5], &[0.6, 0.0]),
        (Limit::JogStep, &[0.01, 0.05], &[0.06]),
        (Limit::JogHold, &[0.5, 1.0], &[1.5, 0.0]),
        (Limit::Ramp, &[1.0, 3.0], &[0.5, 0.0, 61.0]),
        (Limit::FollowingError, &[0.1, 0.15], &[0.2]),
        (Limit::FollowingErrorCycles, &[1.0, 10.0], &[11.0, 0.0, 5.5]),
        (Limit::WrongDirection, &[0.01, 0.02], &[0.03]),
        (Limit::OverCurrent, &[1000.0, 1500.0], &[1501.0]),
        (Limit::OverCurrentCycles, &[5.0, 20.0], &[21.0, 2.5]),
        (Limit::StartTemperature, &[50.0, 60.0], &[61.0]),
        (Limit::LyingAccel, &[8.0, 9.0], &[7.9, 10.0]),
        (Limit::LyingCrossAccel, &[2.0, 3.0], &[3.5]),
        (Limit::StillGyro, &[0.05, 0.1], &[0.2]),
        (Limit::LyingHeld, &[1.0, 2.0], &[0.9]),
        (Limit::FootLoad, &[0.2, 0.5], &[0.6]),
    ];
    assert_eq!(rows.len(), Limit::ALL.len(), "a row per limit");
    for (l, ok, refused) in rows {
        for &v in *ok {
            assert_eq!(
                d.tighten(*l, v).map(|x| x.get(*l)),
                Ok(v),
                "{} {v}",
                l.name()
            );
        }
        for &v in refused.iter().chain(&[f64::NAN, f64::INFINITY]) {
            let e = d.tighten(*l, v).expect_err(l.name());
            assert_eq!(e.limit, *l);
            assert!(e.value == v || v.is_nan(), "the value is handed back");
            let text = e.to_string();
            assert!(text.contains(l.name()), "{text}");
            assert!(text.contains(&format!("bound {}", l.bound())), "{text}");
        }
    }
    assert_eq!(
        d.tighten(Limit::MaxStiffness, 0.5).unwrap_err().to_string(),
        "bring-up limit max-stiffness: 0.5 is not allowed: it must be above 0 and at most 0.3 (default 0.2; bring-up limits can only be made tighter than their bound 0.3)"
    );
}

#[test]
fn bringup_foot_load_is_the_calibrated_sum_of_the_eight_sensors() {
    let mut s = Sensors::new(&[2048; JOINTS]);
    s.foot_pressure = [[10, 20, 30, 40], [50, 60, 70, 80]];
    assert!(near(foot_load_kg(&s, &CAL), 3.6));
    let mut cal = CAL;
    cal[1][3].offset = -0.8;
    assert!(near(foot_load_kg(&s, &cal), 2.8));
    // A calibration that is not a number reads as weight on the feet.
    cal[0][0].gain = f32::NAN;
    let mut b = Bench::settled();
    b.press();
    let input = BringUpInput {
        sensors: &b.sensors,
        foot_calibration: &cal,
        board_accepted: true,
        now_ns: b.t + CYCLE_NS,
        jog: None,
    };
    let v = b.bringup.step(&input, b.ready);
    assert_eq!(v.missing, Some(Missing::WeightOnFeet));
}

#[test]
fn bringup_step_allocates_nothing() {
    let mut b = Bench::settled();
    b.follow = true;
    let mut stiff = 0;
    let mut trips = 0;
    let n = nao_kit::alloc::allocations(|| {
        for k in 0..2000u32 {
            match k % 500 {
                0 => {
                    b.release();
                    b.follow = true;
                }
                10 => b.press(),
                400 => {
                    b.follow = false;
                    b.sensors.position[J] += 0.3;
                }
                _ => {}
            }
            let jog = match k % 37 {
                0 => Some(Jog::Plus),
                18 => Some(Jog::Minus),
                _ => None,
            };
            let v = b.step(jog);
            stiff += (v.stiffness > 0.0) as u32;
            trips += v.trip.is_some() as u32;
        }
    });
    let probe = nao_kit::alloc::allocations(|| drop(std::hint::black_box(Box::new(7u64))));
    assert_eq!(n, 0, "allocations in BringUp::step");
    assert_eq!(probe, 1, "the counting allocator counts");
    assert!(stiff > 1000 && trips > 0, "stiff {stiff}, trips {trips}");
}
