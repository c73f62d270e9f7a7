//! Bring-up: the first motion with a person present, one joint at a time
//! (`docs/bringup.md`, "The rules").
//!
//! A pure state machine, time passed in, no allocation, no I/O. Each cycle
//! [`BringUp::step`] takes the cycle's [`Sensors`], whether the chosen
//! joint's board is accepted, the person's jog and what the gate knows of the
//! switch ([`Readiness`]), and returns a [`BringUpVerdict`]: the one joint,
//! its stiffness (0 unless every precondition holds and a toe bumper is
//! held; ramped; capped), its target (inside a small window, the joint's
//! range, rate-limited), the first precondition missing ([`Missing`], with
//! what the person should do) and a trip for the switch, if any. Every other
//! joint gets stiffness 0: the gate's apply does that masking; the verdict
//! only says the joint, its stiffness and target.
//!
//! The bounds are [`BringUpLimits`]: named defaults, configurable only
//! tighter ([`BringUpLimits::tighten`]).

use super::devices::Sensors;
use super::joint_ranges::{joint_range, JointRange};
use super::prefs::PressureCalibration;
use crate::command::Joint;
use deathswitch::Reason;

// ------------------------------------------------------------------ limits

/// Standard gravity, m/s^2: the largest lying bound that a lying robot can pass.
const GRAVITY_M_S2: f64 = 9.80665;
/// The longest time limit a tightening may set, s.
const LONGEST_TIME_LIMIT_S: f64 = 60.0;
/// A gap between two steps counts as at most this for the rate limit, ns.
const MAX_STEP_GAP_NS: u64 = 100_000_000;

/// Which way a limit is made tighter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tighter {
    /// Smaller is tighter: allowed `0 < value <= bound` (`1 <=` for counts).
    Lower,
    /// Larger is tighter: allowed `bound <= value <= ceiling`.
    Higher,
}

/// One bring-up limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The stiffness cap, 0..1 (default 0.2; never above 0.3).
    MaxStiffness,
    /// The window around the position measured when the joint was enabled,
    /// +- rad.
    Window,
    /// The commanded position's largest rate, rad/s.
    Rate,
    /// One jog step, rad.
    JogStep,
    /// No jog press for this long holds the target where it is, s.
    JogHold,
    /// Time for the stiffness to ramp from 0 to the cap, s.
    Ramp,
    /// The following error bound: |measured - commanded|, rad ...
    FollowingError,
    /// ... for this many cycles in a row while stiff.
    FollowingErrorCycles,
    /// Moving more than this against a commanded step, rad.
    WrongDirection,
    /// The over-current bound, mA ...
    OverCurrent,
    /// ... for this many cycles in a row.
    OverCurrentCycles,
    /// A start only below this joint temperature; stiff at or above it
    /// trips, degC.
    StartTemperature,
    /// Lying: |a_x| above this, m/s^2 (sign-free: on the back or the front).
    LyingAccel,
    /// Lying: |a_y| and |a_z| below this, m/s^2.
    LyingCrossAccel,
    /// Still: the gyroscope below this on every axis, rad/s.
    StillGyro,
    /// Lying and still for this long, s.
    LyingHeld,
    /// No weight on the feet: the load of the eight foot pressure sensors,
    /// summed, at most this, kg (through the preference block's
    /// calibration, as LoLA's `FSR`). Its default, 0.5 kg, is a tenth of the
    /// NAO's 5.3 kg: a standing robot reads about 5.3 kg in the virtual
    /// robot, a sitting one 1.0 kg, a lying one 0 (`docs/sim.md`,
    /// "Postures").
    FootLoad,
}

/// Number of [`Limit`]s.
pub(crate) const LIMIT_COUNT: usize = 17;

struct Spec {
    name: &'static str,
    unit: &'static str,
    default: f64,
    bound: f64,
    tighter: Tighter,
    count: bool,
    ceiling: f64,
}

/// Smaller is tighter; the default is the bound.
const fn lower(name: &'static str, unit: &'static str, default: f64) -> Spec {
    Spec {
        name,
        unit,
        default,
        bound: default,
        tighter: Tighter::Lower,
        count: false,
        ceiling: default,
    }
}

/// Larger is tighter, up to `ceiling`; the default is the bound.
const fn higher(name: &'static str, unit: &'static str, default: f64, ceiling: f64) -> Spec {
    Spec {
        tighter: Tighter::Higher,
        ceiling,
        ..lower(name, unit, default)
    }
}

/// A count of cycles in a row: smaller is tighter, at least 1.
const fn count(name: &'static str, default: f64) -> Spec {
    Spec {
        count: true,
        ..lower(name, "cycles", default)
    }
}

impl Limit {
    /// Every limit, in declaration order.
    pub const ALL: [Limit; LIMIT_COUNT] = [
        Limit::MaxStiffness,
        Limit::Window,
        Limit::Rate,
        Limit::JogStep,
        Limit::JogHold,
        Limit::Ramp,
        Limit::FollowingError,
        Limit::FollowingErrorCycles,
        Limit::WrongDirection,
        Limit::OverCurrent,
        Limit::OverCurrentCycles,
        Limit::StartTemperature,
        Limit::LyingAccel,
        Limit::LyingCrossAccel,
        Limit::StillGyro,
        Limit::LyingHeld,
        Limit::FootLoad,
    ];

    /// The one table of the limits: name, unit, default, and the bound
    /// when it is not the default.
    const fn spec(self) -> Spec {
        match self {
            Limit::MaxStiffness => Spec {
                bound: 0.3,
                ceiling: 0.3,
                ..lower("max-stiffness", "", 0.2)
            },
            Limit::Window => lower("window", "rad", 0.3),
            Limit::Rate => lower("rate", "rad/s", 0.5),
            Limit::JogStep => lower("jog-step", "rad", 0.05),
            Limit::JogHold => lower("jog-hold", "s", 1.0),
            Limit::Ramp => higher("ramp", "s", 1.0, LONGEST_TIME_LIMIT_S),
            Limit::FollowingError => lower("following-error", "rad", 0.15),
            Limit::FollowingErrorCycles => count("following-error-cycles", 10.0),
            Limit::WrongDirection => lower("wrong-direction", "rad", 0.02),
            Limit::OverCurrent => lower("over-current", "mA", 1500.0),
            Limit::OverCurrentCycles => count("over-current-cycles", 20.0),
            Limit::StartTemperature => lower("start-temperature", "degC", 60.0),
            Limit::LyingAccel => higher("lying-accel", "m/s^2", 8.0, GRAVITY_M_S2),
            Limit::LyingCrossAccel => lower("lying-cross-accel", "m/s^2", 3.0),
            Limit::StillGyro => lower("still-gyro", "rad/s", 0.1),
            Limit::LyingHeld => higher("lying-held", "s", 1.0, LONGEST_TIME_LIMIT_S),
            Limit::FootLoad => lower("foot-load", "kg", 0.5),
        }
    }

    /// The limit's name (`"max-stiffness"`): the bring-up command's option
    /// without its dashes.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// The limit with that [`Limit::name`], if any.
    pub(crate) fn from_name(name: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Its unit (`"rad"`, `"s"`, `""` for the stiffness).
    pub const fn unit(self) -> &'static str {
        self.spec().unit
    }

    /// Its named default.
    pub const fn default_value(self) -> f64 {
        self.spec().default
    }

    /// The loosest value a tightening may set (the default, except the
    /// stiffness cap's 0.3).
    pub const fn bound(self) -> f64 {
        self.spec().bound
    }

    /// Which way is tighter.
    pub const fn tighter(self) -> Tighter {
        self.spec().tighter
    }

    /// The values a tightening may set, `(least, most)`, both included.
    pub fn allowed(self) -> (f64, f64) {
        let s = self.spec();
        match (s.tighter, s.count) {
            (Tighter::Lower, true) => (1.0, s.bound),
            (Tighter::Lower, false) => (0.0, s.bound),
            (Tighter::Higher, _) => (s.bound, s.ceiling),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A limit that cannot be set: the value asked for and the bound it broke.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitError {
    /// The limit.
    pub limit: Limit,
    /// The value asked for, handed back.
    pub value: f64,
}

impl core::fmt::Display for LimitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let l = self.limit;
        let (lo, hi) = l.allowed();
        let unit = l.unit();
        let sp = if unit.is_empty() { "" } else { " " };
        let range = match (l.tighter(), l.spec().count) {
            (Tighter::Lower, true) => format!("a whole number from {lo} to {hi}"),
            (Tighter::Lower, false) => format!("above {lo}{sp}{unit} and at most {hi}{sp}{unit}"),
            (Tighter::Higher, _) => format!("at least {lo}{sp}{unit} and at most {hi}{sp}{unit}"),
        };
        write!(
            f,
            "bring-up limit {}: {}{sp}{unit} is not allowed: it must be {range} (default {}{sp}{unit}; bring-up limits can only be made tighter than their bound {}{sp}{unit})",
            l.name(),
            self.value,
            l.default_value(),
            l.bound(),
        )
    }
}

impl std::error::Error for LimitError {}

/// The bring-up bounds: every [`Limit`] at its named default, or tighter.
/// Only [`BringUpLimits::tighten`] changes one, so no value looser than its
/// bound can be set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BringUpLimits {
    values: [f64; LIMIT_COUNT],
}

impl Default for BringUpLimits {
    fn default() -> Self {
        let mut values = [0.0; LIMIT_COUNT];
        for l in Limit::ALL {
            values[l.index()] = l.default_value();
        }
        BringUpLimits { values }
    }
}

impl BringUpLimits {
    /// These limits with `limit` set to `value`, if `value` is the bound or
    /// tighter ([`Limit::allowed`]).
    ///
    /// # Errors
    ///
    /// A [`LimitError`] handing `value` back when it is looser than the
    /// bound, not a number, or (for a count) not whole.
    pub fn tighten(mut self, limit: Limit, value: f64) -> Result<Self, LimitError> {
        let (lo, hi) = limit.allowed();
        let ok = match (limit.tighter(), limit.spec().count) {
            (Tighter::Lower, true) => value.fract() == 0.0 && lo <= value && value <= hi,
            (Tighter::Lower, false) => lo < value && value <= hi,
            (Tighter::Higher, _) => lo <= value && value <= hi,
        };
        if !ok {
            return Err(LimitError { limit, value });
        }
        self.values[limit.index()] = value;
        Ok(self)
    }

    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> f64 {
        self.values[limit.index()]
    }
}

/// The limits in the units [`BringUp::step`] works in.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bounds {
    cap: f32,
    window: f32,
    rate: f32,
    jog_step: f32,
    jog_hold_ns: u64,
    ramp_ns: u64,
    following_error: f32,
    following_cycles: u32,
    wrong_direction: f32,
    over_current_ma: f32,
    over_current_cycles: u32,
    start_temperature: f32,
    lying_accel: f32,
    lying_cross: f32,
    still_gyro: f32,
    lying_held_ns: u64,
    foot_load_kg: f32,
}

impl Bounds {
    fn from(l: &BringUpLimits) -> Self {
        let f = |x: Limit| l.get(x) as f32;
        let ns = |x: Limit| (l.get(x) * 1e9) as u64;
        let n = |x: Limit| l.get(x) as u32;
        Bounds {
            cap: f(Limit::MaxStiffness),
            window: f(Limit::Window),
            rate: f(Limit::Rate),
            jog_step: f(Limit::JogStep),
            jog_hold_ns: ns(Limit::JogHold),
            ramp_ns: ns(Limit::Ramp),
            following_error: f(Limit::FollowingError),
            following_cycles: n(Limit::FollowingErrorCycles),
            wrong_direction: f(Limit::WrongDirection),
            over_current_ma: f(Limit::OverCurrent),
            over_current_cycles: n(Limit::OverCurrentCycles),
            start_temperature: f(Limit::StartTemperature),
            lying_accel: f(Limit::LyingAccel),
            lying_cross: f(Limit::LyingCrossAccel),
            still_gyro: f(Limit::StillGyro),
            lying_held_ns: ns(Limit::LyingHeld),
            foot_load_kg: f(Limit::FootLoad),
        }
    }
}

// ------------------------------------------------------------------ inputs

/// One key press of the person: the target moves by one jog step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jog {
    /// + one step.
    Plus,
    /// - one step.
    Minus,
}

impl Jog {
    fn sign(self) -> f32 {
        match self {
            Jog::Plus => 1.0,
            Jog::Minus => -1.0,
        }
    }
}

/// What the gate knows of the switch this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Readiness {
    /// The switch is armed (and its page whole).
    pub(crate) armed: bool,
    /// A person's wake came in the armed generation (the wake latch is open).
    pub(crate) woken: bool,
}

/// The cycle's inputs of bring-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BringUpInput<'a> {
    /// The devices' latest data: IMU (LoLA's sign; the lying check is
    /// sign-free), foot pressure, toe bumpers, the joint's position (rad),
    /// current and temperature.
    pub(crate) sensors: &'a Sensors,
    /// The foot pressure calibration of the preference block.
    pub(crate) foot_calibration: &'a [[PressureCalibration; 4]; 2],
    /// The chosen joint's board passed the handshake.
    pub(crate) board_accepted: bool,
    /// The cycle's time, monotonic ns.
    pub(crate) now_ns: u64,
    /// The person's key press this cycle, if any.
    pub(crate) jog: Option<Jog>,
}

// ----------------------------------------------------------------- verdict

/// The first precondition that does not hold, in the order checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The switch is tripped.
    SwitchTripped,
    /// No wake since the last re-arm.
    NotWoken,
    /// The joint's board was not accepted in the handshake.
    BoardNotAccepted,
    /// No position of the joint measured yet.
    NotMeasured,
    /// The robot is not lying (gravity not along the torso's x axis).
    NotLying,
    /// The robot lies but moves (the gyroscope).
    Moving,
    /// Lying still, not yet for long enough.
    Settling,
    /// Weight on the feet.
    WeightOnFeet,
    /// The joint is at or above the start temperature.
    TooHot,
    /// No toe bumper is held.
    BumperNotHeld,
    /// The bumper was held before every other check passed, or through a
    /// stop: it must be released and pressed again.
    ReleaseBumper,
}

impl Missing {
    /// A short name (`"not-lying"`), for recordings and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Missing::SwitchTripped => "switch-tripped",
            Missing::NotWoken => "not-woken",
            Missing::BoardNotAccepted => "board-not-accepted",
            Missing::NotMeasured => "not-measured",
            Missing::NotLying => "not-lying",
            Missing::Moving => "moving",
            Missing::Settling => "settling",
            Missing::WeightOnFeet => "weight-on-feet",
            Missing::TooHot => "too-hot",
            Missing::BumperNotHeld => "bumper-not-held",
            Missing::ReleaseBumper => "release-bumper",
        }
    }

    /// What the person at the robot should do, for the terminal.
    pub const fn what_to_do(self) -> &'static str {
        match self {
            Missing::SwitchTripped => {
                "the switch is tripped: check the robot, then re-arm it with `naoctl rearm`"
            }
            Missing::NotWoken => "the runtime waits for a person's wake: run `nao-rs wake`",
            Missing::BoardNotAccepted => {
                "the joint's motor board was not accepted: start bring-up with `--accepted` listing its configuration version"
            }
            Missing::NotMeasured => {
                "no position of the joint measured yet: wait for the chest board's answers"
            }
            Missing::NotLying => "lay the robot down on its back or its front",
            Missing::Moving => "hold the robot still: the gyroscope reads motion",
            Missing::Settling => "keep the robot lying still a moment longer",
            Missing::WeightOnFeet => "take the weight off the feet: nothing may press on the soles",
            Missing::TooHot => "the joint is too hot to start: let it cool down, limp",
            Missing::BumperNotHeld => {
                "hold a toe bumper to give the joint stiffness; release it to make the joint limp"
            }
            Missing::ReleaseBumper => {
                "release the toe bumper and press it again: a hold that began before every check passed does not count"
            }
        }
    }
}

/// What bring-up allows this cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BringUpVerdict {
    /// The one joint that may have stiffness.
    pub joint: Joint,
    /// Its stiffness, `0..=cap`: 0 unless every precondition holds and a
    /// toe bumper is held.
    pub stiffness: f32,
    /// Its commanded position, rad: inside [`BringUpVerdict::window`] and
    /// rate-limited while enabled; the measured position otherwise.
    pub target: f32,
    /// The positions allowed while enabled: the window around the position
    /// measured at the press, within the joint's range; `None` while not
    /// enabled.
    pub window: Option<JointRange>,
    /// The first precondition missing, if any.
    pub missing: Option<Missing>,
    /// Trip the switch with this reason.
    pub trip: Option<Reason>,
}

impl BringUpVerdict {
    /// Joint `j`'s stiffness under bring-up: [`BringUpVerdict::stiffness`]
    /// for the one joint, 0 for every other.
    pub(crate) fn joint_stiffness(&self, j: Joint) -> f32 {
        if j == self.joint {
            self.stiffness
        } else {
            0.0
        }
    }
}

// ------------------------------------------------------------------- state

/// The joint enabled: from a fresh bumper press until the release, a
/// missing precondition or a trip.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    started_ns: u64,
    window: JointRange,
    /// The position commanded in the last verdict.
    commanded: f32,
    /// Where the jog steps lead (at most one step from `commanded`).
    jog_target: f32,
    last_press_ns: u64,
    /// The measured position at the last press and the step's sign.
    step: Option<(f32, f32)>,
    /// The stiffness of the last verdict.
    stiffness: f32,
    following_cycles: u32,
}

/// Bring-up of one joint: the state between cycles.
#[derive(Debug, Clone, PartialEq)]
pub struct BringUp {
    joint: Joint,
    range: JointRange,
    limits: BringUpLimits,
    bounds: Bounds,
    still_since: Option<u64>,
    /// A hold seen that did not enable the joint: a release must come first.
    needs_release: bool,
    over_current_cycles: u32,
    last_ns: Option<u64>,
    run: Option<Run>,
}

impl BringUp {
    /// Bring-up of `joint` within `limits`. A toe bumper already held at the
    /// first step does not count: it must be released and pressed.
    pub fn new(joint: Joint, limits: BringUpLimits) -> Self {
        BringUp {
            joint,
            range: joint_range(joint),
            limits,
            bounds: Bounds::from(&limits),
            still_since: None,
            needs_release: true,
            over_current_cycles: 0,
            last_ns: None,
            run: None,
        }
    }

    /// The joint.
    pub(crate) fn joint(&self) -> Joint {
        self.joint
    }

    /// One cycle: the verdict for this cycle's frame.
    pub(crate) fn step(&mut self, input: &BringUpInput<'_>, ready: Readiness) -> BringUpVerdict {
        let b = self.bounds;
        let s = input.sensors;
        let j = self.joint.index();
        let t = input.now_ns;
        let dt_ns = self
            .last_ns
            .map_or(0, |l| t.saturating_sub(l))
            .min(MAX_STEP_GAP_NS);
        self.last_ns = Some(t);
        let measured = s.position[j];
        let held = (s.bumpers[0] | s.bumpers[1]) & 0b11 != 0;
        let temperature = f32::from(s.temperature[j]);

        // Lying and still, held for a while.
        let a = s.imu.accelerometer.map(|v| f32::from(v) / 1000.0);
        let lying =
            a[0].abs() > b.lying_accel && a[1].abs() < b.lying_cross && a[2].abs() < b.lying_cross;
        let still = s
            .imu
            .gyroscope
            .iter()
            .all(|&g| (f32::from(g) / 1000.0).abs() < b.still_gyro);
        if lying && still {
            self.still_since.get_or_insert(t);
        } else {
            self.still_since = None;
        }
        let settled = self
            .still_since
            .is_some_and(|s0| t.saturating_sub(s0) >= b.lying_held_ns);

        // Over-current: counted every cycle, stiff or not.
        if f32::from(s.current_ma[j]) > b.over_current_ma {
            self.over_current_cycles = self.over_current_cycles.saturating_add(1);
        } else {
            self.over_current_cycles = 0;
        }

        // Trips, judged on the answer to the last frame.
        let mut trip = None;
        if let Some(run) = &mut self.run {
            if let Some((reference, sign)) = run.step {
                if (measured - reference) * sign < -b.wrong_direction {
                    trip = Some(Reason::BringupWrongDirection);
                }
            }
            if run.stiffness > 0.0 && (measured - run.commanded).abs() > b.following_error {
                run.following_cycles = run.following_cycles.saturating_add(1);
            } else {
                run.following_cycles = 0;
            }
            if trip.is_none() && run.following_cycles >= b.following_cycles {
                trip = Some(Reason::BringupFollowingError);
            }
            if trip.is_none() && temperature >= b.start_temperature {
                trip = Some(Reason::BringupTooHot);
            }
        }
        if trip.is_none() && self.over_current_cycles >= b.over_current_cycles {
            trip = Some(Reason::BringupOverCurrent);
        }

        // Preconditions, in the order shown. A load that is not a number
        // (a calibration that is not) counts as weight on the feet.
        let load = foot_load_kg(s, input.foot_calibration);
        let weight_on_feet = !load.is_finite() || load > b.foot_load_kg;
        let missing_before_bumper = if !ready.armed {
            Some(Missing::SwitchTripped)
        } else if !ready.woken {
            Some(Missing::NotWoken)
        } else if !input.board_accepted {
            Some(Missing::BoardNotAccepted)
        } else if !s.measured[j] {
            Some(Missing::NotMeasured)
        } else if !lying {
            Some(Missing::NotLying)
        } else if !still {
            Some(Missing::Moving)
        } else if !settled {
            Some(Missing::Settling)
        } else if weight_on_feet {
            Some(Missing::WeightOnFeet)
        } else if self.run.is_none() && temperature >= b.start_temperature {
            Some(Missing::TooHot)
        } else {
            None
        };

        let joint = self.joint;
        let limp = |missing: Option<Missing>, trip: Option<Reason>| BringUpVerdict {
            joint,
            stiffness: 0.0,
            target: measured,
            window: None,
            missing,
            trip,
        };

        if trip.is_some() || missing_before_bumper.is_some() || !held {
            // Hold-to-run: the joint is limp from this frame; a hold that
            // outlives this must be released before it counts again.
            self.run = None;
            self.needs_release = held;
            let missing = missing_before_bumper.or((!held).then_some(Missing::BumperNotHeld));
            return limp(missing, trip);
        }
        if self.run.is_none() && self.needs_release {
            return limp(Some(Missing::ReleaseBumper), None);
        }

        // Enabled: a fresh press starts a run at the measured position.
        let range = self.range;
        let run = self.run.get_or_insert_with(|| Run {
            started_ns: t,
            window: window_around(measured, b.window, range),
            commanded: measured,
            jog_target: measured,
            last_press_ns: t,
            step: None,
            stiffness: 0.0,
            following_cycles: 0,
        });
        let w = run.window;
        if let Some(jog) = input.jog {
            let sign = jog.sign();
            run.jog_target = (run.commanded + sign * b.jog_step).clamp(w.min, w.max);
            run.last_press_ns = t;
            run.step = Some((measured, sign));
        } else if t.saturating_sub(run.last_press_ns) >= b.jog_hold_ns {
            run.jog_target = run.commanded;
        }
        let max_move = b.rate * (dt_ns as f32 / 1e9);
        let delta = (run.jog_target - run.commanded).clamp(-max_move, max_move);
        run.commanded = (run.commanded + delta).clamp(w.min, w.max);
        let elapsed = t.saturating_sub(run.started_ns);
        let ramp = if b.ramp_ns == 0 {
            1.0
        } else {
            (elapsed as f64 / b.ramp_ns as f64).min(1.0) as f32
        };
        run.stiffness = (b.cap * ramp).clamp(0.0, b.cap);
        BringUpVerdict {
            joint: self.joint,
            stiffness: run.stiffness,
            target: run.commanded,
            window: Some(w),
            missing: None,
            trip: None,
        }
    }
}

/// The positions allowed around `p0`: `p0 +- window`, within `range`. A
/// joint measured outside its range keeps `p0` in the window (it may be held
/// where it is and moved back toward the range, never farther out).
fn window_around(p0: f32, window: f32, range: JointRange) -> JointRange {
    let min = (p0 - window).max(range.min).min(p0);
    let max = (p0 + window).min(range.max).max(p0);
    JointRange { min, max }
}

/// The load on the feet, kg: the eight foot pressure sensors through their
/// calibration ([`PressureCalibration::kg`], as LoLA's `FSR`), summed. Not a
/// number when a calibration is not.
pub(crate) fn foot_load_kg(sensors: &Sensors, calibration: &[[PressureCalibration; 4]; 2]) -> f32 {
    let mut kg = 0.0;
    for (raw, cal) in sensors.foot_pressure.iter().zip(calibration) {
        for (&r, c) in raw.iter().zip(cal) {
            kg += c.kg(r);
        }
    }
    kg
}

#[cfg(test)]
mod tests;
