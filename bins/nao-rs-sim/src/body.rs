//! The body model: every board behind the chest board, as a pure state
//! machine. [`VirtualBody::step`] takes one frame and the time (CLOCK_MONOTONIC ns,
//! passed in), advances the physics to that time and writes the answer.
//!
//! Numbers (all integer, see `docs/sim.md`):
//! - joints move toward the commanded count at up to
//!   [`MAX_SPEED_COUNTS_PER_S`] x stiffness / 1000, and stay put at stiffness 0;
//! - a joint's current is `stiffness x (32 + 8 x min(|error|, 120)) / 1000` mA;
//! - its temperature approaches `30 degC + current / 20 (degC per mA)` with a
//!   time constant of [`TEMP_TAU_NS`] (30 s), so it rises with load and falls
//!   at rest;
//! - the battery draws [`BASE_CURRENT_MA`] plus every joint's current, and its
//!   charge falls with the charge drawn from a 2,150 mAh cell;
//! - the IMU shows gravity in LoLA's sign (upright: about -9,810 mm/s^2 on
//!   z; lying on the back x about -9,810, on the front x about +9,810), with
//!   +-8 of noise, by the [`Posture`] set with `--posture` / `ctl posture`;
//! - sonar reads 1,566 / 1,366 mm while a sonar mode is set (0 before);
//! - the foot sensors carry the posture's load (standing: the NAO's 5.3 kg on
//!   both feet, sitting 1 kg, lying none), converted to raw counts with the
//!   preference block's calibration; the toe bumpers report what `ctl
//!   bumper` holds;
//! - injectable joint faults ([`JointFault`]): a reversed sign, a zero
//!   offset, a stuck joint, a high current.
//!
//! Noise comes from a fixed-seed xorshift, so the same frames at the same
//! times give the same answers.

use nao_wire::protocol::frame::Frame;
use nao_wire::protocol::frame::{FrameWriter, Message};
use nao_wire::protocol::prefs::PressureCalibration;
use nao_wire::protocol::tables::{
    self, device_kind, joint_board, AnswerKind, BoardCommand, Bus, DeviceKind, HANDSHAKE_BOARDS,
    HANDSHAKE_BOARD_COUNT, JOINT_BOARDS, MAX_COUNT,
};
use nao_wire::JOINTS;
use serde::{Deserialize, Serialize};

/// Fastest joint speed at stiffness 1000, encoder counts per second (about
/// 4.6 rad/s).
pub const MAX_SPEED_COUNTS_PER_S: i64 = 3000;
/// Current of the rest of the robot (head computer, boards), mA.
pub const BASE_CURRENT_MA: i64 = 1000;
/// Ambient and resting joint temperature, micro degC.
pub const AMBIENT_UDEG: i64 = 30_000_000;
/// Temperature time constant of a joint, ns.
pub const TEMP_TAU_NS: i64 = 30_000_000_000;
/// Battery capacity in picocoulombs (2,150 mAh).
pub const BATTERY_CAPACITY_PC: i64 = 2150 * 3600 * 1_000_000_000;
/// Battery charge at power-on, per mille.
pub const INITIAL_CHARGE_PER_MILLE: i64 = 900;
/// Longest time step the physics integrates at once (a longer gap between
/// frames is treated as this long), ns.
pub const MAX_STEP_NS: u64 = 1_000_000_000;
/// Default temperature of a heated joint (`heat J`), degC.
pub const DEFAULT_HEAT_DEG_C: i8 = 95;
/// Default battery current of the over-current fault, mA.
pub const DEFAULT_OVERCURRENT_MA: i16 = 5200;
/// The NAO V6's mass, g (Aldebaran: about 5.3 kg).
pub const BODY_MASS_G: u32 = 5300;
/// The load on both feet while sitting, g (the legs' share; the rest of the
/// body rests on the floor).
pub const SITTING_FOOT_LOAD_G: u32 = 1000;
/// Noise of a foot pressure sensor, raw counts (+-).
pub const FOOT_NOISE_RAW: i32 = 3;
/// Encoder counts per revolution.
const COUNTS_PER_REV: f64 = 4096.0;

/// How the virtual robot is placed: sets the IMU and the foot load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Posture {
    /// Upright on both feet (the default).
    #[default]
    Standing,
    /// Sitting on the floor, torso about upright (leaning 10 degrees forward).
    Sitting,
    /// Lying on its back (torso x axis up).
    LyingBack,
    /// Lying on its front (torso x axis down).
    LyingFront,
}

impl Posture {
    /// Every posture, in the order of their names in errors.
    pub const ALL: [Posture; 4] = [
        Posture::Standing,
        Posture::Sitting,
        Posture::LyingBack,
        Posture::LyingFront,
    ];

    /// The name of the command line and the trace (`lying-back`).
    pub fn name(self) -> &'static str {
        match self {
            Posture::Standing => "standing",
            Posture::Sitting => "sitting",
            Posture::LyingBack => "lying-back",
            Posture::LyingFront => "lying-front",
        }
    }

    /// A posture by its name (case-insensitive).
    pub fn parse(s: &str) -> Result<Posture, String> {
        Posture::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown posture {s:?}: use standing, sitting, lying-back or lying-front")
            })
    }

    /// The torso's pitch, mrad: positive leaning forward (the IMU's angle
    /// y), -pi/2 on the back, +pi/2 on the front.
    pub fn pitch_mrad(self) -> i16 {
        match self {
            Posture::Standing => 0,
            Posture::Sitting => 175,
            Posture::LyingBack => -1571,
            Posture::LyingFront => 1571,
        }
    }

    /// The accelerometer at rest in LoLA's sign, mm/s^2: gravity as a vector
    /// in the torso frame (x forward, y left, z up), so upright reads
    /// `(0, 0, -9810)`, on the back `(-9810, 0, 0)`, on the front
    /// `(+9810, 0, 0)` (see `docs/lola.md` for the evidence).
    /// (`(g sin pitch, 0, -g cos pitch)`, with g = 9,810 mm/s^2.)
    pub fn accelerometer(self) -> [i16; 3] {
        match self {
            Posture::Standing => [0, 0, -9810],
            Posture::Sitting => [1708, 0, -9660],
            Posture::LyingBack => [-9810, 0, 0],
            Posture::LyingFront => [9810, 0, 0],
        }
    }

    /// The load on both feet together, g.
    pub fn foot_load_g(self) -> u32 {
        match self {
            Posture::Standing => BODY_MASS_G,
            Posture::Sitting => SITTING_FOOT_LOAD_G,
            Posture::LyingBack | Posture::LyingFront => 0,
        }
    }
}

/// The raw count a foot sensor with calibration `cal` (`kg = raw x gain +
/// offset`) reports under `load_g` grams, rounded and clamped to `u16`; 0 for
/// a calibration that cannot be inverted (gain 0, not finite).
pub fn foot_raw(load_g: f32, cal: PressureCalibration) -> u16 {
    let usable = cal.gain.is_finite() && cal.offset.is_finite() && cal.gain.abs() > 1e-9;
    if !usable {
        return 0;
    }
    let raw = (f64::from(load_g) / 1000.0 - f64::from(cal.offset)) / f64::from(cal.gain);
    raw.round().clamp(0.0, f64::from(u16::MAX)) as u16
}

/// The toe bumper bits of the foot boards' answers (bit 0 the foot's left
/// contact, bit 1 its right contact).
pub const BUMPER_LEFT_CONTACT: u8 = 1;
/// See [`BUMPER_LEFT_CONTACT`].
pub const BUMPER_RIGHT_CONTACT: u8 = 2;

/// How the robot is placed and handled (not faults: `clear` keeps them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct World {
    /// The posture (IMU, foot load).
    pub posture: Posture,
    /// The toe bumpers held, `[left foot, right foot]` (bit 0 the foot's
    /// left contact, bit 1 its right contact), as the foot boards report.
    pub bumpers: [u8; 2],
    /// The robot is being shaken: the gyroscope reports +-this on every
    /// axis, its sign alternating with each IMU answer, mrad/s (0: at rest).
    pub shake_mrad_s: u16,
    /// The shaking ends at this time (ns); 0 for never.
    pub shake_until_ns: u64,
}

impl World {
    /// The shake amplitude at `now_ns`, mrad/s.
    pub fn shake_at(&self, now_ns: u64) -> u16 {
        if self.shake_until_ns == 0 || now_ns < self.shake_until_ns {
            self.shake_mrad_s
        } else {
            0
        }
    }
}

/// One injected fault of a joint (`ctl joint-fault JOINT KIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JointFaultKind {
    /// `reversed`: the motor obeys the mirror of the command about the
    /// joint's zero (a wrong sign): commanded zero + d, it goes to zero - d.
    Reversed,
    /// `offset:RAD`: the reported position is the true one plus this many
    /// counts (a wrong zero).
    Offset(i16),
    /// `stuck`: the joint does not move.
    Stuck,
    /// `high-current:MA`: the joint draws (and reports) MA mA while stiff.
    HighCurrent(u16),
    /// `clear`: the joint's faults end.
    Clear,
}

/// The injected faults of one joint (they combine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JointFault {
    /// The motor moves opposite to the command (mirrored about the zero).
    pub reversed: bool,
    /// Reported position = true position + this, counts.
    pub offset_counts: i16,
    /// The joint does not move.
    pub stuck: bool,
    /// While stiff (stiffness above 0), the joint draws this current, mA.
    pub high_current_ma: Option<u16>,
}

impl JointFault {
    /// No fault at all.
    pub fn is_none(&self) -> bool {
        *self == JointFault::default()
    }

    /// Adds `kind` (or clears every fault of the joint).
    pub fn apply(&mut self, kind: JointFaultKind) {
        match kind {
            JointFaultKind::Reversed => self.reversed = true,
            JointFaultKind::Offset(c) => self.offset_counts = c,
            JointFaultKind::Stuck => self.stuck = true,
            JointFaultKind::HighCurrent(ma) => self.high_current_ma = Some(ma),
            JointFaultKind::Clear => *self = JointFault::default(),
        }
    }
}

/// An angle in radians as encoder counts (`round(rad x 4096 / TAU)`);
/// `None` unless finite and within half a turn.
pub fn counts_of_rad(rad: f64) -> Option<i16> {
    if !rad.is_finite() || rad.abs() > std::f64::consts::PI {
        return None;
    }
    Some((rad * COUNTS_PER_REV / std::f64::consts::TAU).round() as i16)
}

/// Encoder counts as radians.
pub fn rad_of_counts(counts: i16) -> f64 {
    f64::from(counts) * std::f64::consts::TAU / COUNTS_PER_REV
}

/// How one handshake board answers CONFIG_REQUEST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoardConfig {
    /// The configuration version it answers with.
    pub version: u8,
    /// It answers from its `from`-th request on (1: the first).
    pub from: u16,
    /// It never answers.
    pub never: bool,
}

impl Default for BoardConfig {
    fn default() -> Self {
        BoardConfig {
            version: 10,
            from: 1,
            never: false,
        }
    }
}

/// The settings of a body: fixed while the simulator runs.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyConfig {
    /// Per handshake board, in address order (`0x10`..=`0x1e`).
    pub boards: [BoardConfig; HANDSHAKE_BOARD_COUNT],
    /// The versions the trace's `max_stiffness_accepted` counts as accepted
    /// (the runtime's default: 10).
    pub accepted: Vec<u8>,
    /// Joint zero positions (the preference block's), where the body starts.
    pub zeros: [u16; JOINTS],
    /// Foot pressure calibration (the preference block's), `[left,
    /// right][sensor]`: the foot boards report the posture's load through it.
    pub foot_calibration: [[PressureCalibration; 4]; 2],
}

impl Default for BodyConfig {
    fn default() -> Self {
        BodyConfig {
            boards: [BoardConfig::default(); HANDSHAKE_BOARD_COUNT],
            accepted: vec![10],
            zeros: crate::prefs::DEFAULT_ZEROS,
            foot_calibration: crate::prefs::default_foot_calibration(),
        }
    }
}

/// The index of handshake board `address` in [`HANDSHAKE_BOARDS`].
pub fn handshake_index(address: u8) -> Option<usize> {
    HANDSHAKE_BOARDS.iter().position(|&a| a == address)
}

#[derive(Debug, Clone, Copy)]
struct JointState {
    /// Position in milli-counts.
    pos_mc: i64,
    /// Commanded count.
    target: u16,
    /// Commanded stiffness, per mille.
    stiffness: u16,
    /// Temperature, micro degC.
    temp_udeg: i64,
    /// Current, mA.
    current_ma: i64,
}

/// A board's handshake state since the last [`VirtualBody::reset_session`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoardHandshake {
    /// CONFIG_REQUESTs received.
    pub requests: u16,
    /// The version of its first answer, once it answered.
    pub answered: Option<u8>,
}

/// Faults that change what the boards report (set by `ctl` or flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyFaults {
    /// The next chest answer reports button 1 (then it is cleared).
    pub button_once: bool,
    /// Every chest answer before this time reports button 1, ns.
    pub button_until_ns: u64,
    /// Per joint: reported temperature at least this (degC), 0 for none.
    pub heat: [i8; JOINTS],
    /// Per joint: reported status has bit 0 (fault) set.
    pub fault: [bool; JOINTS],
    /// Battery current reported instead of the model's, mA.
    pub overcurrent_ma: Option<i16>,
    /// The over-current ends at this time (ns); 0 for never.
    pub overcurrent_until_ns: u64,
    /// Per joint: injected joint faults (reversed, offset, stuck, high
    /// current).
    pub joint: [JointFault; JOINTS],
}

/// The stiffness a frame commands, for the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StiffnessSummary {
    /// Number of stiffness slots in the frame's STIFFNESS messages (25 in a
    /// cycle frame, 0 in the start-up frames).
    pub slots: u16,
    /// Largest stiffness over every slot, per mille (clamped to 1000).
    pub max_all: u16,
    /// Largest stiffness over the joints of boards whose handshake answer
    /// carried a version in [`BodyConfig::accepted`].
    pub max_accepted: u16,
}

impl StiffnessSummary {
    /// Every slot is 0 (also true with no slot at all).
    pub fn all_off(&self) -> bool {
        self.max_all == 0
    }
}

/// What [`VirtualBody::step`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome {
    /// The frame's seq (the answer carries it).
    pub seq: u16,
    /// Length of the answer written to the output buffer.
    pub answer_len: usize,
    /// The stiffness the frame commands.
    pub stiffness: StiffnessSummary,
}

/// The simulated boards. See the module docs for the numbers.
#[derive(Debug, Clone)]
pub struct VirtualBody {
    config: BodyConfig,
    joints: [JointState; JOINTS],
    last_ns: Option<u64>,
    consumed_pc: i64,
    rng: u32,
    sonar_mode: u8,
    chest_led: [u8; 3],
    foot_led: [[u8; 3]; 2],
    client_state: u8,
    handshake: [BoardHandshake; HANDSHAKE_BOARD_COUNT],
    /// Faults the boards report; set directly.
    pub faults: BodyFaults,
    /// Posture, toe bumpers, shaking; set directly.
    pub world: World,
    /// The sign of the next shake sample (alternates).
    shake_sign: bool,
}

/// The EEPROM contents behind the chest board (the first 64 bytes are what
/// the start-up reads).
fn eeprom_byte(which: usize, offset: usize) -> u8 {
    const TAIL: [u8; 32] = [
        0xa7, 0xc4, 0xe1, 0xfe, 0x1b, 0x38, 0x55, 0x72, 0x8f, 0xac, 0xc9, 0xe6, 0x03, 0x20, 0x3d,
        0x5a, 0x77, 0x94, 0xb1, 0xce, 0xeb, 0x08, 0x25, 0x42, 0x5f, 0x7c, 0x99, 0xb6, 0xd3, 0xf0,
        0x0d, 0x2a,
    ];
    let name: &[u8] = if which == 0 {
        b"NAO EEPROM A rev 3"
    } else {
        b"NAO EEPROM B rev 3"
    };
    match offset {
        o if o < name.len() => name[o],
        o if o < 32 => 0,
        o if o < 64 => TAIL[o - 32],
        _ => 0,
    }
}

impl VirtualBody {
    /// A body at rest at its zero positions, at ambient temperature, with
    /// the battery at 900 per mille.
    pub fn new(config: BodyConfig) -> Self {
        let mut joints = [JointState {
            pos_mc: 0,
            target: 0,
            stiffness: 0,
            temp_udeg: AMBIENT_UDEG,
            current_ma: 0,
        }; JOINTS];
        for (j, joint) in joints.iter_mut().enumerate() {
            joint.pos_mc = i64::from(config.zeros[j]) * 1000;
            joint.target = config.zeros[j];
        }
        VirtualBody {
            config,
            joints,
            last_ns: None,
            consumed_pc: 0,
            rng: 0x9e37_79b9,
            sonar_mode: 0,
            chest_led: [0; 3],
            foot_led: [[0; 3]; 2],
            client_state: tables::CLIENT_DISCONNECTED,
            handshake: [BoardHandshake::default(); HANDSHAKE_BOARD_COUNT],
            faults: BodyFaults::default(),
            world: World::default(),
            shake_sign: false,
        }
    }

    /// The settings.
    pub fn config(&self) -> &BodyConfig {
        &self.config
    }

    /// A new client session (a claim was granted, or the board was
    /// replugged): the handshake counters restart and the client state is
    /// disconnected again. The body keeps its pose and temperatures.
    pub fn reset_session(&mut self) {
        self.handshake = [BoardHandshake::default(); HANDSHAKE_BOARD_COUNT];
        self.client_state = tables::CLIENT_DISCONNECTED;
    }

    /// CLIENT_STATE control request: the state the chest reports.
    pub fn set_client_state(&mut self, state: u8) {
        self.client_state = state;
    }

    /// The client state the chest board reports.
    pub fn client_state(&self) -> u8 {
        self.client_state
    }

    /// The handshake state of each board, in address order.
    pub fn handshake(&self) -> &[BoardHandshake; HANDSHAKE_BOARD_COUNT] {
        &self.handshake
    }

    /// Joint `j`'s measured count as the board reports it: the true
    /// position plus an injected offset (`None` for `j >= 25`).
    pub fn position(&self, j: usize) -> Option<u16> {
        self.joints.get(j).map(|jt| self.reported_count(j, jt))
    }

    /// Joint `j`'s true count (without an injected offset).
    pub fn true_position(&self, j: usize) -> Option<u16> {
        self.joints.get(j).map(|jt| count_of(jt.pos_mc))
    }

    fn reported_count(&self, j: usize, jt: &JointState) -> u16 {
        let offset = i64::from(self.faults.joint[j].offset_counts);
        (i64::from(count_of(jt.pos_mc)) + offset).clamp(0, i64::from(MAX_COUNT)) as u16
    }

    /// The accelerometer, gyroscope and angles the IMU reports at rest in the
    /// current posture, without noise (mm/s^2, mrad/s, mrad).
    pub fn imu_at_rest(&self) -> ([i16; 3], [i16; 3], [i16; 2]) {
        let p = self.world.posture;
        (p.accelerometer(), [0; 3], [0, p.pitch_mrad()])
    }

    /// The raw counts the foot boards report in the current posture, without
    /// noise: the posture's load split evenly over the 8 sensors, through
    /// each sensor's calibration.
    pub fn foot_pressure_at_rest(&self) -> [[u16; 4]; 2] {
        let per_sensor = self.world.posture.foot_load_g() as f32 / 8.0;
        let cal = &self.config.foot_calibration;
        std::array::from_fn(|f| std::array::from_fn(|s| foot_raw(per_sensor, cal[f][s])))
    }

    /// Joint `j`'s temperature as reported (degC, faults included).
    pub fn temperature(&self, j: usize) -> Option<i8> {
        self.joints.get(j).map(|jt| self.reported_temp(j, jt))
    }

    /// Joint `j`'s current, mA.
    pub fn current(&self, j: usize) -> Option<i64> {
        self.joints.get(j).map(|jt| jt.current_ma)
    }

    /// Joint `j`'s commanded position, counts.
    pub fn target(&self, j: usize) -> Option<u16> {
        self.joints.get(j).map(|jt| jt.target)
    }

    /// Joint `j`'s commanded stiffness, per mille.
    pub fn stiffness(&self, j: usize) -> Option<u16> {
        self.joints.get(j).map(|jt| jt.stiffness)
    }

    /// The battery current as reported at `now_ns`, mA.
    pub fn battery_current(&self, now_ns: u64) -> i16 {
        if let Some(ma) = self.faults.overcurrent_ma {
            if self.faults.overcurrent_until_ns == 0 || now_ns < self.faults.overcurrent_until_ns {
                return ma;
            }
        }
        let total = BASE_CURRENT_MA + self.joints.iter().map(|j| j.current_ma).sum::<i64>();
        total.clamp(0, i64::from(i16::MAX)) as i16
    }

    /// The battery charge, per mille.
    pub fn charge(&self) -> u16 {
        let used = self.consumed_pc.saturating_mul(1000) / BATTERY_CAPACITY_PC;
        (INITIAL_CHARGE_PER_MILLE - used).clamp(0, 1000) as u16
    }

    /// The LEDs last commanded: chest, left foot, right foot.
    pub fn leds(&self) -> ([u8; 3], [u8; 3], [u8; 3]) {
        (self.chest_led, self.foot_led[0], self.foot_led[1])
    }

    /// The sonar mode last commanded.
    pub fn sonar_mode(&self) -> u8 {
        self.sonar_mode
    }

    fn noise(&mut self, amplitude: i32) -> i32 {
        // xorshift32: deterministic, fixed seed.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        let span = (2 * amplitude + 1) as u32;
        (x % span) as i32 - amplitude
    }

    fn reported_temp(&self, j: usize, jt: &JointState) -> i8 {
        let deg = (jt.temp_udeg / 1_000_000).clamp(-128, 127) as i8;
        deg.max(self.faults.heat[j])
    }

    /// Integrates the physics from the last step to `now_ns`.
    pub fn advance(&mut self, now_ns: u64) {
        let dt = match self.last_ns {
            Some(last) if now_ns > last => (now_ns - last).min(MAX_STEP_NS) as i64,
            Some(_) => 0,
            None => 0,
        };
        if !matches!(self.last_ns, Some(last) if now_ns <= last) {
            self.last_ns = Some(now_ns);
        }
        if dt == 0 {
            return;
        }
        for (j, jt) in self.joints.iter_mut().enumerate() {
            let fault = self.faults.joint[j];
            let target = if fault.reversed {
                mirror(jt.target, self.config.zeros[j])
            } else {
                jt.target
            };
            let target_mc = i64::from(target) * 1000;
            let err = target_mc - jt.pos_mc;
            if jt.stiffness > 0 && !fault.stuck {
                // counts/s x stiffness/1000 x dt/1e9 s x 1000 mc/count
                let max_move =
                    MAX_SPEED_COUNTS_PER_S * i64::from(jt.stiffness) * dt / 1_000_000_000;
                jt.pos_mc += err.clamp(-max_move, max_move);
            }
            // The effort of the step: the error at its start.
            let err_counts = (err.abs() / 1000).min(120);
            jt.current_ma = i64::from(jt.stiffness) * (32 + 8 * err_counts) / 1000;
            if let (Some(ma), true) = (fault.high_current_ma, jt.stiffness > 0) {
                jt.current_ma = i64::from(ma);
            }
            let target_temp = AMBIENT_UDEG + jt.current_ma * 50_000;
            jt.temp_udeg += (target_temp - jt.temp_udeg) * dt / TEMP_TAU_NS;
        }
        let total = BASE_CURRENT_MA + self.joints.iter().map(|j| j.current_ma).sum::<i64>();
        self.consumed_pc = self.consumed_pc.saturating_add(total.max(0) * dt);
    }

    /// Handles one valid frame received at `now_ns`: advances the physics,
    /// applies its commands and writes the answer (sync `0x5a`, the frame's
    /// seq) to `out`. Messages to unknown addresses or with unknown commands
    /// get no answer (the device is absent); an answer that would not fit
    /// 512 bytes is cut after the last message that fits. Never panics.
    pub fn step(&mut self, frame: &Frame<'_>, now_ns: u64, out: &mut [u8]) -> StepOutcome {
        self.advance(now_ns);
        let mut summary = StiffnessSummary::default();
        for m in frame.messages() {
            self.apply(&m, &mut summary);
        }
        let answer_len = match FrameWriter::answer(out, frame.seq) {
            Ok(mut w) => {
                for m in frame.messages() {
                    if self.answer(&m, now_ns, &mut w).is_err() {
                        break;
                    }
                }
                w.finish()
            }
            Err(_) => 0,
        };
        StepOutcome {
            seq: frame.seq,
            answer_len,
            stiffness: summary,
        }
    }

    fn joint_accepted(&self, j: usize) -> bool {
        let b = joint_board(j);
        matches!(self.handshake[b].answered, Some(v) if self.config.accepted.contains(&v))
    }

    /// Applies a command message (no answer yet).
    fn apply(&mut self, m: &Message<'_>, summary: &mut StiffnessSummary) {
        match (BoardCommand::try_from(m.command), device_kind(m.address)) {
            (Ok(BoardCommand::Positions), Some(DeviceKind::Bus(b))) => {
                let bus = if b == 0 { Bus::A } else { Bus::B };
                for (&j, v) in bus.slots().iter().zip(m.payload.chunks_exact(2)) {
                    self.joints[j].target = u16::from_le_bytes([v[0], v[1]]).min(MAX_COUNT);
                }
            }
            (Ok(BoardCommand::Stiffness), Some(DeviceKind::Bus(b))) => {
                let bus = if b == 0 { Bus::A } else { Bus::B };
                for (&j, v) in bus.slots().iter().zip(m.payload.chunks_exact(2)) {
                    let s = u16::from_le_bytes([v[0], v[1]]).min(1000);
                    self.joints[j].stiffness = s;
                    summary.slots += 1;
                    summary.max_all = summary.max_all.max(s);
                    if self.joint_accepted(j) {
                        summary.max_accepted = summary.max_accepted.max(s);
                    }
                }
            }
            (Ok(BoardCommand::ChestLed), Some(DeviceKind::Chest)) if m.payload.len() >= 3 => {
                self.chest_led.copy_from_slice(&m.payload[..3]);
            }
            (Ok(BoardCommand::FootLed), Some(DeviceKind::FootBoard(f))) if m.payload.len() >= 3 => {
                self.foot_led[f].copy_from_slice(&m.payload[..3]);
            }
            (Ok(BoardCommand::SonarMode), Some(DeviceKind::Sonar)) if !m.payload.is_empty() => {
                self.sonar_mode = m.payload[0];
            }
            _ => {}
        }
    }

    /// Writes the answer message to `m`, if its device answers it.
    fn answer(
        &mut self,
        m: &Message<'_>,
        now_ns: u64,
        w: &mut FrameWriter<'_>,
    ) -> Result<(), nao_wire::protocol::frame::FrameError> {
        let Some(kind) = device_kind(m.address) else {
            return Ok(());
        };
        let Ok(command) = BoardCommand::try_from(m.command) else {
            return Ok(());
        };
        match command {
            BoardCommand::Read => self.answer_read(m.address, kind, now_ns, w),
            BoardCommand::Start if !matches!(kind, DeviceKind::Bus(_)) => {
                w.push(m.address, AnswerKind::Status.into(), &[0])
            }
            BoardCommand::TempTracking if matches!(kind, DeviceKind::Bus(_)) => {
                w.push(m.address, AnswerKind::Status.into(), &[0])
            }
            BoardCommand::EepromRead => {
                let (DeviceKind::Eeprom(e), [lo, hi, len, ..]) = (kind, m.payload) else {
                    return Ok(());
                };
                let offset = usize::from(u16::from_le_bytes([*lo, *hi]));
                let dst = w.reserve(m.address, AnswerKind::EepromRead.into(), usize::from(*len))?;
                for (i, b) in dst.iter_mut().enumerate() {
                    *b = eeprom_byte(e, offset + i);
                }
                Ok(())
            }
            BoardCommand::ConfigRequest => {
                let Some(i) = handshake_index(m.address) else {
                    return Ok(());
                };
                let cfg = self.config.boards[i];
                let hs = &mut self.handshake[i];
                hs.requests = hs.requests.saturating_add(1);
                if cfg.never || hs.requests < cfg.from {
                    return Ok(());
                }
                if hs.answered.is_none() {
                    hs.answered = Some(cfg.version);
                }
                let kind_byte = if i < 13 { 1 } else { 2 };
                let serial = (0x2250u16).wrapping_add(0x25 * i as u16).to_le_bytes();
                w.push(
                    m.address,
                    AnswerKind::Config.into(),
                    &[
                        cfg.version,
                        kind_byte,
                        m.address,
                        0x02,
                        0x03,
                        cfg.version,
                        0x17,
                        serial[0],
                        serial[1],
                    ],
                )
            }
            _ => Ok(()),
        }
    }

    fn answer_read(
        &mut self,
        address: u8,
        kind: DeviceKind,
        now_ns: u64,
        w: &mut FrameWriter<'_>,
    ) -> Result<(), nao_wire::protocol::frame::FrameError> {
        match kind {
            DeviceKind::Imu => {
                let (accel, _, angles) = self.imu_at_rest();
                let mut v = [0i16; 8];
                for (x, a) in v.iter_mut().zip(accel) {
                    *x = a.saturating_add(self.noise(8) as i16);
                }
                let shake = i16::try_from(self.world.shake_at(now_ns)).unwrap_or(i16::MAX);
                let shake = if shake == 0 {
                    0
                } else {
                    self.shake_sign = !self.shake_sign;
                    if self.shake_sign {
                        shake
                    } else {
                        shake.saturating_neg()
                    }
                };
                for g in v.iter_mut().skip(3).take(3) {
                    *g = (self.noise(3) as i16).saturating_add(shake);
                }
                v[6] = angles[0];
                v[7] = angles[1];
                let dst = w.reserve(address, AnswerKind::Read.into(), 16)?;
                for (c, x) in dst.chunks_exact_mut(2).zip(v) {
                    c.copy_from_slice(&x.to_le_bytes());
                }
                Ok(())
            }
            DeviceKind::Battery => {
                let charge = self.charge();
                let current = self.battery_current(now_ns);
                let dst = w.reserve(address, AnswerKind::Read.into(), 8)?;
                dst[0..2].copy_from_slice(&charge.to_le_bytes());
                dst[2..4].copy_from_slice(&current.to_le_bytes());
                dst[4..6].copy_from_slice(&312i16.to_le_bytes());
                Ok(())
            }
            DeviceKind::Sonar => {
                let (l, r) = if self.sonar_mode == 0 {
                    (0u16, 0u16)
                } else {
                    ((1566 + self.noise(5)) as u16, (1366 + self.noise(5)) as u16)
                };
                let dst = w.reserve(address, AnswerKind::Read.into(), 4)?;
                dst[0..2].copy_from_slice(&l.to_le_bytes());
                dst[2..4].copy_from_slice(&r.to_le_bytes());
                Ok(())
            }
            DeviceKind::Chest => {
                let pressed = self.faults.button_once || now_ns < self.faults.button_until_ns;
                self.faults.button_once = false;
                w.push(
                    address,
                    AnswerKind::Read.into(),
                    &[u8::from(pressed), self.client_state],
                )
            }
            DeviceKind::JointBoard(b) => {
                let board = &JOINT_BOARDS[b];
                let mut vals = [(0u16, 0u16, 0i8, 0u8); 3];
                for (slot, &j) in vals.iter_mut().zip(board.joints) {
                    let jt = &self.joints[j];
                    *slot = (
                        self.reported_count(j, jt),
                        jt.current_ma.clamp(0, i64::from(u16::MAX)) as u16,
                        self.reported_temp(j, jt),
                        u8::from(self.faults.fault[j]),
                    );
                }
                let dst = w.reserve(address, AnswerKind::Read.into(), 6 * board.joints.len())?;
                for (c, (pos, cur, temp, status)) in dst.chunks_exact_mut(6).zip(vals) {
                    c[0..2].copy_from_slice(&pos.to_le_bytes());
                    c[2..4].copy_from_slice(&cur.to_le_bytes());
                    c[4] = temp as u8;
                    c[5] = status;
                }
                Ok(())
            }
            DeviceKind::FootBoard(f) => {
                let rest = self.foot_pressure_at_rest();
                let mut v = [0u16; 4];
                for (x, r) in v.iter_mut().zip(rest[f]) {
                    let raw = i32::from(r) + self.noise(FOOT_NOISE_RAW);
                    *x = raw.clamp(0, i32::from(u16::MAX)) as u16;
                }
                let bumpers = self.world.bumpers[f];
                let dst = w.reserve(address, AnswerKind::Read.into(), 9)?;
                for (c, x) in dst.chunks_exact_mut(2).zip(v) {
                    c.copy_from_slice(&x.to_le_bytes());
                }
                dst[8] = bumpers;
                Ok(())
            }
            DeviceKind::Eeprom(_) => w.push(address, AnswerKind::Read.into(), &[0]),
            DeviceKind::Bus(_) => Ok(()),
        }
    }
}

/// The mirror of `target` about `zero`, clamped to the encoder's range.
fn mirror(target: u16, zero: u16) -> u16 {
    (2 * i64::from(zero) - i64::from(target)).clamp(0, i64::from(MAX_COUNT)) as u16
}

fn count_of(pos_mc: i64) -> u16 {
    ((pos_mc + 500) / 1000).clamp(0, i64::from(MAX_COUNT)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use nao_wire::protocol::frame::MAX_FRAME_LEN;
    use nao_wire::protocol::tables::SYNC_FRAME;
    use nao_wire::Joint;

    const MS: u64 = 1_000_000;

    // The spec's bytes (`docs/protocol.md`), written out here: these tests
    // hold the virtual robot to the spec, not to the host's own tables.

    /// The sync byte of an answer (section 5).
    const SYNC_ANSWER: u8 = 0x5a;

    /// Every device in HAL's order, the order of a frame's READs (section 3).
    const DEVICES: [u8; 21] = [
        0x01, 0x02, 0x03, 0x04, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a,
        0x1b, 0x1c, 0x1d, 0x1e, 0x40, 0x41,
    ];

    /// The READ answer's payload length of the device at `address`
    /// (section 5): 6 bytes per joint of a joint board.
    fn spec_read_len(address: u8) -> usize {
        match address {
            0x01 => 16,
            0x02 => 8,
            0x03 => 4,
            0x04 => 2,
            0x10..=0x1c => 6 * JOINT_BOARDS[usize::from(address - 0x10)].joints.len(),
            0x1d | 0x1e => 9,
            0x40 | 0x41 => 1,
            _ => panic!("no device at {address:#04x}"),
        }
    }

    /// The bytes of a string of hex digits (a recording's bytes).
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The u16 values little endian: a POSITIONS or STIFFNESS payload.
    fn u16s(values: impl Iterator<Item = u16>) -> Vec<u8> {
        values.flat_map(u16::to_le_bytes).collect()
    }

    /// An answer's messages: (address, command, payload).
    type Msgs = Vec<(u8, u8, Vec<u8>)>;

    /// A cycle frame: every READ, both buses with `pos`/`stiff` per joint,
    /// and CONFIG_REQUEST to `config` boards.
    fn cycle_frame(seq: u16, pos: &[u16; JOINTS], stiff: &[u16; JOINTS], config: &[u8]) -> Vec<u8> {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let mut w = FrameWriter::frame(&mut buf, seq).unwrap();
        for a in DEVICES {
            w.push(a, u8::from(BoardCommand::Read), &[]).unwrap();
        }
        // Each bus's broadcast address (section 3) and slots.
        for (address, bus) in [(0xf0, Bus::A), (0xf1, Bus::B)] {
            let slots = bus.slots();
            let positions = u16s(slots.iter().map(|&j| pos[j]));
            w.push(address, u8::from(BoardCommand::Positions), &positions)
                .unwrap();
            let stiffness = u16s(slots.iter().map(|&j| stiff[j]));
            w.push(address, u8::from(BoardCommand::Stiffness), &stiffness)
                .unwrap();
        }
        for &a in config {
            w.push(a, u8::from(BoardCommand::ConfigRequest), &[])
                .unwrap();
        }
        let n = w.finish();
        buf[..n].to_vec()
    }

    /// Steps `body` with `bytes` at `t`; returns the answer's messages as
    /// (address, command, payload).
    fn step(body: &mut VirtualBody, bytes: &[u8], t: u64) -> (u16, Msgs, StepOutcome) {
        let frame = Frame::parse(bytes, SYNC_FRAME).unwrap();
        let mut out = [0u8; MAX_FRAME_LEN];
        let o = body.step(&frame, t, &mut out);
        let a = Frame::parse(&out[..o.answer_len], SYNC_ANSWER).expect("answer is a valid frame");
        let msgs = a
            .messages()
            .map(|m| (m.address, m.command, m.payload.to_vec()))
            .collect();
        (a.seq, msgs, o)
    }

    fn joint_reading(msgs: &[(u8, u8, Vec<u8>)], j: usize) -> (u16, u16, i8, u8) {
        let b = joint_board(j);
        let board = &JOINT_BOARDS[b];
        let k = board.joints.iter().position(|&x| x == j).unwrap();
        let (_, _, p) = msgs
            .iter()
            .find(|(a, c, _)| *a == board.address && *c == u8::from(AnswerKind::Read))
            .unwrap();
        let p = &p[6 * k..6 * k + 6];
        (
            u16::from_le_bytes([p[0], p[1]]),
            u16::from_le_bytes([p[2], p[3]]),
            p[4] as i8,
            p[5],
        )
    }

    fn read_payload(msgs: &[(u8, u8, Vec<u8>)], addr: u8) -> Vec<u8> {
        msgs.iter()
            .find(|(a, c, _)| *a == addr && *c == u8::from(AnswerKind::Read))
            .unwrap()
            .2
            .clone()
    }

    #[test]
    fn answer_carries_the_seq_of_the_frame_it_answers() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let (seq, _, _) = step(&mut body, &cycle_frame(4711, &z, &[0; JOINTS], &[]), 0);
        assert_eq!(seq, 4711);
    }

    #[test]
    fn every_device_read_is_answered_with_the_spec_length() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let (_, msgs, _) = step(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &[]), 0);
        let reads: Vec<_> = msgs
            .iter()
            .filter(|m| m.1 == u8::from(AnswerKind::Read))
            .collect();
        assert_eq!(reads.len(), 21);
        for (a, _, p) in reads {
            assert_eq!(p.len(), spec_read_len(*a), "device {a:#04x}");
        }
    }

    #[test]
    fn answer_to_a_full_cycle_frame_is_449_bytes_and_fits_512() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &HANDSHAKE_BOARDS);
        let (_, msgs, o) = step(&mut body, &f, 0);
        assert_eq!(msgs.len(), 21 + 15);
        assert_eq!(o.answer_len, 449);
    }

    #[test]
    fn startup_frames_answer_status_0_and_64_eeprom_bytes() {
        let mut body = VirtualBody::new(BodyConfig::default());
        // The two start-up frames (the recordings' bytes: nao_wire's own
        // start-up tests hold the builders to them).
        let f0 = hex("a5000006030200040200400200410200400303000040410303000040f4d1");
        let f1 = hex("a5010003f01200f112000102005c21");
        let (f0, f1) = (&f0[..], &f1[..]);
        let (_, m0, _) = step(&mut body, f0, 0);
        let statuses: Vec<_> = m0
            .iter()
            .filter(|m| m.1 == u8::from(AnswerKind::Status))
            .map(|m| (m.0, m.2.clone()))
            .collect();
        assert_eq!(
            statuses,
            [(3, vec![0]), (4, vec![0]), (0x40, vec![0]), (0x41, vec![0])]
        );
        let ee: Vec<_> = m0
            .iter()
            .filter(|m| m.1 == u8::from(AnswerKind::EepromRead))
            .collect();
        assert_eq!(ee.len(), 2);
        assert!(ee.iter().all(|m| m.2.len() == 64));
        assert!(ee[0].2.starts_with(b"NAO EEPROM A"));
        let (_, m1, _) = step(&mut body, f1, MS);
        let got: Vec<_> = m1.iter().map(|m| (m.0, m.1, m.2.clone())).collect();
        assert_eq!(
            got,
            [
                (0xf0, 0x82, vec![0]),
                (0xf1, 0x82, vec![0]),
                (0x01, 0x82, vec![0])
            ]
        );
    }

    /// The joint the motion tests command.
    const KNEE: usize = Joint::LKneePitch.index();

    /// A body at rest whose knee has the fault `kind`, and its zero
    /// positions.
    fn knee_faulted(kind: JointFaultKind) -> (VirtualBody, [u16; JOINTS]) {
        let mut body = VirtualBody::new(BodyConfig::default());
        body.faults.joint[KNEE].apply(kind);
        let z = body.config().zeros;
        (body, z)
    }

    /// A cycle frame commanding the knee `delta` counts past its zero at
    /// `stiffness`; every other joint at its zero, limp.
    fn knee_frame(body: &VirtualBody, delta: u16, stiffness: u16) -> Vec<u8> {
        let mut target = body.config().zeros;
        target[KNEE] += delta;
        let mut stiff = [0u16; JOINTS];
        stiff[KNEE] = stiffness;
        cycle_frame(2, &target, &stiff, &[])
    }

    #[test]
    fn joints_move_toward_the_commanded_count_rate_limited_when_stiff() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = knee_frame(&body, 500, 1000);
        step(&mut body, &f, 0);
        // 12 ms at full stiffness: 3000 counts/s * 0.012 s = 36 counts.
        let (_, msgs, _) = step(&mut body, &f, 12 * MS);
        let (pos, cur, _, _) = joint_reading(&msgs, KNEE);
        assert_eq!(pos, z[KNEE] + 36);
        assert!(cur > 500, "moving joint draws current, got {cur}");
        // After 1 s it has arrived and holds.
        for i in 2..100u64 {
            step(&mut body, &f, i * 12 * MS);
        }
        let (_, msgs, _) = step(&mut body, &f, 1200 * MS);
        let (pos, cur, _, _) = joint_reading(&msgs, KNEE);
        assert_eq!(pos, z[KNEE] + 500);
        assert_eq!(cur, 32, "holding at stiffness 1000 draws 32 mA");
        // Half stiffness moves at half speed.
        let mut body = VirtualBody::new(BodyConfig::default());
        let f = knee_frame(&body, 500, 500);
        step(&mut body, &f, 0);
        let (_, msgs, _) = step(&mut body, &f, 12 * MS);
        assert_eq!(joint_reading(&msgs, KNEE).0, z[KNEE] + 18);
    }

    #[test]
    fn joints_stay_where_they_are_when_stiffness_is_zero() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let mut target = z;
        target[3] = 100;
        let f = cycle_frame(2, &target, &[0; JOINTS], &[]);
        for i in 0..50u64 {
            step(&mut body, &f, i * 12 * MS);
        }
        let (_, msgs, _) = step(&mut body, &f, 600 * MS);
        let (pos, cur, _, _) = joint_reading(&msgs, 3);
        assert_eq!((pos, cur), (z[3], 0));
    }

    #[test]
    fn temperature_rises_with_load_and_falls_at_rest() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let mut stiff = [0u16; JOINTS];
        stiff[KNEE] = 1000;
        // The knee is commanded back and forth: it is always moving.
        let mut far = z;
        far[KNEE] = z[KNEE] + 1000;
        let there = cycle_frame(2, &far, &stiff, &[]);
        let back = cycle_frame(2, &z, &stiff, &[]);
        let mut t = 0;
        let start = body.temperature(KNEE).unwrap();
        while t < 60_000 * MS {
            step(
                &mut body,
                if (t / (100 * MS)) & 1 == 0 {
                    &there
                } else {
                    &back
                },
                t,
            );
            t += 100 * MS;
        }
        let hot = body.temperature(KNEE).unwrap();
        assert!(hot >= start + 10, "loaded: {start} -> {hot}");
        let rest = cycle_frame(2, &z, &[0; JOINTS], &[]);
        let end = t + 120_000 * MS;
        while t < end {
            step(&mut body, &rest, t);
            t += 500 * MS;
        }
        let cool = body.temperature(KNEE).unwrap();
        assert!(cool < hot - 5, "at rest: {hot} -> {cool}");
    }

    #[test]
    fn battery_current_follows_load() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let idle = cycle_frame(2, &z, &[0; JOINTS], &[]);
        step(&mut body, &idle, 0);
        let (_, msgs, _) = step(&mut body, &idle, 12 * MS);
        let b = read_payload(&msgs, 0x02);
        let idle_ma = i16::from_le_bytes([b[2], b[3]]);
        assert_eq!(idle_ma, BASE_CURRENT_MA as i16);
        let loaded = cycle_frame(3, &[4095; JOINTS], &[1000; JOINTS], &[]);
        step(&mut body, &loaded, 24 * MS);
        let (_, msgs, _) = step(&mut body, &loaded, 36 * MS);
        let b = read_payload(&msgs, 0x02);
        let loaded_ma = i16::from_le_bytes([b[2], b[3]]);
        assert!(loaded_ma > idle_ma + 2000, "{idle_ma} -> {loaded_ma}");
        assert!(u16::from_le_bytes([b[0], b[1]]) <= 900);
    }

    #[test]
    fn imu_shows_gravity_on_z_in_lolas_sign_and_sonar_reads_once_a_mode_is_set() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let (_, msgs, _) = step(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &[]), 0);
        let imu = read_payload(&msgs, 0x01);
        let az = i16::from_le_bytes([imu[4], imu[5]]);
        assert!((-9818..=-9802).contains(&az), "{az}");
        assert_eq!(read_payload(&msgs, 0x03), [0, 0, 0, 0]);
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::frame(&mut buf, 3).unwrap();
        w.push(0x03, u8::from(BoardCommand::SonarMode), &[0x0c])
            .unwrap();
        w.push(0x03, u8::from(BoardCommand::Read), &[]).unwrap();
        let n = w.finish();
        let (_, msgs, _) = step(&mut body, &buf[..n], MS);
        let s = read_payload(&msgs, 0x03);
        assert!(u16::from_le_bytes([s[0], s[1]]) > 1500);
    }

    /// (accelerometer, gyroscope, angles) of an IMU answer.
    fn imu(msgs: &[(u8, u8, Vec<u8>)]) -> ([i16; 3], [i16; 3], [i16; 2]) {
        let p = read_payload(msgs, 0x01);
        let v = |i: usize| i16::from_le_bytes([p[2 * i], p[2 * i + 1]]);
        ([v(0), v(1), v(2)], [v(3), v(4), v(5)], [v(6), v(7)])
    }

    /// Total foot load in kg (the default calibration) and the bumper bytes.
    fn feet(msgs: &[(u8, u8, Vec<u8>)]) -> (f32, [u8; 2]) {
        let cal = crate::prefs::default_foot_calibration();
        let mut kg = 0.0;
        let mut bumpers = [0u8; 2];
        for (f, addr) in [0x1d, 0x1e].into_iter().enumerate() {
            let p = read_payload(msgs, addr);
            for s in 0..4 {
                let raw = u16::from_le_bytes([p[2 * s], p[2 * s + 1]]);
                kg += f32::from(raw) * cal[f][s].gain + cal[f][s].offset;
            }
            bumpers[f] = p[8];
        }
        (kg, bumpers)
    }

    #[test]
    fn posture_sets_the_accelerometer_in_lolas_sign_and_the_angles() {
        assert_eq!(Posture::Standing.accelerometer(), [0, 0, -9810]);
        assert_eq!(Posture::LyingBack.accelerometer(), [-9810, 0, 0]);
        assert_eq!(Posture::LyingFront.accelerometer(), [9810, 0, 0]);
        let [sx, _, sz] = Posture::Sitting.accelerometer();
        assert!(
            sx > 1000 && sx < 3000 && sz < -9000,
            "about upright: {sx} {sz}"
        );
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        let near = |a: i16, b: i16| (i32::from(a) - i32::from(b)).abs() <= 8;
        for (k, p) in Posture::ALL.into_iter().enumerate() {
            body.world.posture = p;
            let (_, m, _) = step(&mut body, &f, k as u64 * 12 * MS);
            let (a, g, angles) = imu(&m);
            let want = p.accelerometer();
            assert!((0..3).all(|i| near(a[i], want[i])), "{p:?}: {a:?}");
            assert!(g.iter().all(|g| g.abs() <= 3), "{p:?}: at rest {g:?}");
            assert_eq!(angles, [0, p.pitch_mrad()], "{p:?}");
        }
        // Lying passes the bring-up's sign-free check: |a_x| > 8, |a_y|, |a_z| < 3 m/s^2.
        for p in [Posture::LyingBack, Posture::LyingFront] {
            let [x, y, z] = p.accelerometer();
            assert!(x.abs() > 8000 && y.abs() < 3000 && z.abs() < 3000, "{p:?}");
        }
        for p in [Posture::Standing, Posture::Sitting] {
            assert!(p.accelerometer()[0].abs() < 8000, "{p:?} is not lying");
        }
    }

    #[test]
    fn posture_sets_the_foot_load_standing_body_weight_sitting_some_lying_none() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        let want = [
            (Posture::Standing, 5.3),
            (Posture::Sitting, 1.0),
            (Posture::LyingBack, 0.0),
            (Posture::LyingFront, 0.0),
        ];
        for (k, (p, kg)) in want.into_iter().enumerate() {
            body.world.posture = p;
            let (_, m, _) = step(&mut body, &f, k as u64 * 12 * MS);
            let (got, bumpers) = feet(&m);
            assert!((got - kg).abs() < 0.4, "{p:?}: {got} kg, want {kg}");
            assert_eq!(bumpers, [0, 0]);
        }
        // Standing splits the weight evenly: each foot about 2.65 kg.
        body.world.posture = Posture::Standing;
        let rest = body.foot_pressure_at_rest();
        let cal = crate::prefs::default_foot_calibration();
        for (f, foot) in rest.iter().enumerate() {
            let kg: f32 = (0..4)
                .map(|s| f32::from(foot[s]) * cal[f][s].gain + cal[f][s].offset)
                .sum();
            assert!((kg - 2.65).abs() < 0.05, "foot {f}: {kg}");
        }
    }

    #[test]
    fn foot_raw_inverts_the_calibration_and_refuses_an_unusable_one() {
        let cal = PressureCalibration {
            gain: 0.01,
            offset: -1.0,
        };
        assert_eq!(foot_raw(0.0, cal), 100);
        assert_eq!(foot_raw(500.0, cal), 150);
        assert_eq!(foot_raw(-5000.0, cal), 0, "clamped at 0");
        assert_eq!(foot_raw(1e12, cal), u16::MAX, "clamped at u16::MAX");
        for bad in [0.0, f32::NAN, f32::INFINITY] {
            let c = PressureCalibration {
                gain: bad,
                offset: 0.0,
            };
            assert_eq!(foot_raw(100.0, c), 0, "gain {bad}");
        }
        let c = PressureCalibration {
            gain: 0.01,
            offset: f32::NAN,
        };
        assert_eq!(foot_raw(100.0, c), 0);
    }

    #[test]
    fn gyro_is_still_at_rest_and_shakes_while_set() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        body.world.shake_mrad_s = 300;
        body.world.shake_until_ns = 100 * MS;
        let (_, m, _) = step(&mut body, &f, 0);
        let (_, g1, _) = imu(&m);
        let (_, m, _) = step(&mut body, &f, 12 * MS);
        let (_, g2, _) = imu(&m);
        assert!(
            g1.iter().chain(&g2).all(|g| g.abs() >= 297),
            "{g1:?} {g2:?}"
        );
        assert!(
            g1[0].signum() != g2[0].signum(),
            "alternates: {g1:?} {g2:?}"
        );
        let (_, m, _) = step(&mut body, &f, 100 * MS);
        assert!(imu(&m).1.iter().all(|g| g.abs() <= 3), "ended");
        assert_eq!(body.world.shake_at(100 * MS), 0);
        body.world.shake_until_ns = 0;
        assert_eq!(body.world.shake_at(u64::MAX), 300, "until changed");
    }

    #[test]
    fn toe_bumpers_are_reported_in_every_foot_answer_while_held() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        let (_, m, _) = step(&mut body, &f, 0);
        assert_eq!(feet(&m).1, [0, 0]);
        body.world.bumpers = [BUMPER_LEFT_CONTACT | BUMPER_RIGHT_CONTACT, 0];
        for k in 1..4u64 {
            let (_, m, _) = step(&mut body, &f, k * 12 * MS);
            assert_eq!(feet(&m).1, [3, 0], "held, answer {k}");
        }
        body.world.bumpers = [0, BUMPER_RIGHT_CONTACT];
        let (_, m, _) = step(&mut body, &f, 60 * MS);
        assert_eq!(feet(&m).1, [0, 2]);
        body.world.bumpers = [0, 0];
        let (_, m, _) = step(&mut body, &f, 72 * MS);
        assert_eq!(feet(&m).1, [0, 0], "released");
    }

    /// Runs `f` from `t0` for `n` steps of 12 ms; returns the last answer.
    fn run(body: &mut VirtualBody, f: &[u8], t0: u64, n: u64) -> Msgs {
        let mut last = Vec::new();
        for i in 0..n {
            last = step(body, f, t0 + i * 12 * MS).1;
        }
        last
    }

    #[test]
    fn reversed_joint_moves_opposite_to_the_command() {
        let (mut body, z) = knee_faulted(JointFaultKind::Reversed);
        let f = knee_frame(&body, 100, 1000);
        step(&mut body, &f, 0);
        let (_, m, _) = step(&mut body, &f, 12 * MS);
        assert_eq!(
            joint_reading(&m, KNEE).0,
            z[KNEE] - 36,
            "first step the wrong way"
        );
        let m = run(&mut body, &f, 24 * MS, 100);
        assert_eq!(
            joint_reading(&m, KNEE).0,
            z[KNEE] - 100,
            "mirrored about the zero"
        );
        // Other joints are untouched.
        assert_eq!(joint_reading(&m, 3).0, z[3]);
    }

    #[test]
    fn offset_joint_reports_the_true_position_plus_the_offset() {
        let (mut body, z) = knee_faulted(JointFaultKind::Offset(65));
        let (_, m, _) = step(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &[]), 0);
        assert_eq!(joint_reading(&m, KNEE).0, z[KNEE] + 65);
        assert_eq!(body.position(KNEE), Some(z[KNEE] + 65));
        assert_eq!(body.true_position(KNEE), Some(z[KNEE]));
        // Commanded to the position it reports, it moves there: the
        // reported one stays 65 counts ahead (a constant following error).
        let mut target = z;
        target[KNEE] = z[KNEE] + 65;
        let mut stiff = [0u16; JOINTS];
        stiff[KNEE] = 1000;
        let m = run(
            &mut body,
            &cycle_frame(3, &target, &stiff, &[]),
            12 * MS,
            50,
        );
        assert_eq!(joint_reading(&m, KNEE).0, z[KNEE] + 130);
        assert_eq!(body.true_position(KNEE), Some(z[KNEE] + 65));
        body.faults.joint[KNEE].apply(JointFaultKind::Offset(-5000));
        assert_eq!(body.position(KNEE), Some(0), "clamped to the encoder");
        assert_eq!(counts_of_rad(0.1), Some(65));
        assert!((rad_of_counts(65) - 0.0997).abs() < 1e-4);
        assert_eq!(counts_of_rad(f64::NAN), None);
        assert_eq!(counts_of_rad(3.5), None);
    }

    #[test]
    fn stuck_joint_does_not_move_but_draws_current_against_its_error() {
        let (mut body, z) = knee_faulted(JointFaultKind::Stuck);
        let f = knee_frame(&body, 100, 1000);
        let m = run(&mut body, &f, 0, 50);
        let (pos, cur, _, _) = joint_reading(&m, KNEE);
        assert_eq!(pos, z[KNEE]);
        assert_eq!(cur, 32 + 8 * 100, "stalled against 100 counts of error");
    }

    #[test]
    fn high_current_joint_draws_its_current_while_stiff_only() {
        let (mut body, z) = knee_faulted(JointFaultKind::HighCurrent(2000));
        let m = run(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &[]), 0, 3);
        assert_eq!(joint_reading(&m, KNEE).1, 0, "limp: no current");
        let mut stiff = [0u16; JOINTS];
        stiff[KNEE] = 200;
        let m = run(&mut body, &cycle_frame(3, &z, &stiff, &[]), 36 * MS, 3);
        assert_eq!(joint_reading(&m, KNEE).1, 2000);
        let b = read_payload(&m, 0x02);
        assert!(
            i16::from_le_bytes([b[2], b[3]]) >= 3000,
            "the battery carries it"
        );
        // Cleared: the model's current again (200 per mille holding: 6 mA).
        body.faults.joint[KNEE].apply(JointFaultKind::Clear);
        assert!(body.faults.joint[KNEE].is_none());
        let m = run(&mut body, &cycle_frame(4, &z, &stiff, &[]), 72 * MS, 3);
        assert_eq!(joint_reading(&m, KNEE).1, 6);
    }

    #[test]
    fn joint_faults_combine_and_leave_other_joints_alone() {
        let mut f = JointFault::default();
        assert!(f.is_none());
        f.apply(JointFaultKind::Reversed);
        f.apply(JointFaultKind::Offset(-10));
        f.apply(JointFaultKind::HighCurrent(1600));
        assert_eq!(
            f,
            JointFault {
                reversed: true,
                offset_counts: -10,
                stuck: false,
                high_current_ma: Some(1600)
            }
        );
        f.apply(JointFaultKind::Clear);
        assert!(f.is_none());
        assert_eq!(Posture::parse("LYING-front"), Ok(Posture::LyingFront));
        assert!(Posture::parse("upside-down")
            .unwrap_err()
            .contains("lying-back"));
    }

    #[test]
    fn config_request_answers_the_configured_version_late_or_never() {
        let mut cfg = BodyConfig::default();
        cfg.boards[3].version = 11; // 0x13
        cfg.boards[3].from = 2;
        cfg.boards[14].never = true; // 0x1e
        let mut body = VirtualBody::new(cfg);
        let z = body.config().zeros;
        let all = HANDSHAKE_BOARDS;
        let (_, m, _) = step(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &all), 0);
        let config: Vec<_> = m
            .iter()
            .filter(|m| m.1 == u8::from(AnswerKind::Config))
            .collect();
        assert_eq!(config.len(), 13, "0x13 is late, 0x1e never answers");
        assert!(config
            .iter()
            .all(|c| c.2.len() == 9 && c.2[0] == 10 && c.2[2] == c.0));
        let (_, m, _) = step(
            &mut body,
            &cycle_frame(3, &z, &[0; JOINTS], &[0x13, 0x1e]),
            MS,
        );
        let config: Vec<_> = m
            .iter()
            .filter(|m| m.1 == u8::from(AnswerKind::Config))
            .collect();
        assert_eq!(config.len(), 1);
        assert_eq!((config[0].0, config[0].2[0]), (0x13, 11));
        assert_eq!(body.handshake()[14].requests, 2);
        assert_eq!(body.handshake()[14].answered, None);
    }

    #[test]
    fn trace_summary_counts_every_slot_and_accepted_boards_apart() {
        let mut cfg = BodyConfig::default();
        cfg.boards[0].version = 11; // the Head board (0x10), rejected by accepted [10]
        let mut body = VirtualBody::new(cfg);
        let z = body.config().zeros;
        let mut stiff = [0u16; JOINTS];
        stiff[Joint::HeadYaw] = 700;
        stiff[Joint::LKneePitch] = 300;
        let (_, _, o) = step(&mut body, &cycle_frame(2, &z, &stiff, &[]), 0);
        assert_eq!(
            o.stiffness,
            StiffnessSummary {
                slots: 25,
                max_all: 700,
                max_accepted: 0
            }
        );
        step(
            &mut body,
            &cycle_frame(3, &z, &[0; JOINTS], &HANDSHAKE_BOARDS),
            MS,
        );
        let (_, _, o) = step(&mut body, &cycle_frame(4, &z, &stiff, &[]), 2 * MS);
        assert_eq!(o.stiffness.max_accepted, 300);
        assert!(!o.stiffness.all_off());
        let (_, _, o) = step(&mut body, &cycle_frame(5, &z, &[0; JOINTS], &[]), 3 * MS);
        assert!(o.stiffness.all_off());
    }

    #[test]
    fn chest_button_once_is_one_answer_and_held_lasts_its_time() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        body.faults.button_once = true;
        let (_, m, _) = step(&mut body, &f, 0);
        assert_eq!(read_payload(&m, 0x04)[0], 1);
        let (_, m, _) = step(&mut body, &f, MS);
        assert_eq!(read_payload(&m, 0x04)[0], 0);
        body.faults.button_until_ns = 50 * MS;
        let (_, m, _) = step(&mut body, &f, 49 * MS);
        assert_eq!(read_payload(&m, 0x04)[0], 1);
        let (_, m, _) = step(&mut body, &f, 50 * MS);
        assert_eq!(read_payload(&m, 0x04)[0], 0);
    }

    #[test]
    fn heated_joint_reports_90_or_more_and_faulted_joint_status_bit_0() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        body.faults.heat[Joint::LHand] = DEFAULT_HEAT_DEG_C;
        body.faults.fault[Joint::LHipYawPitch] = true;
        let (_, m, _) = step(&mut body, &cycle_frame(2, &z, &[0; JOINTS], &[]), 0);
        // The runtime trips at 90 degC or more, on status bit 0.
        assert!(joint_reading(&m, Joint::LHand.index()).2 >= 90);
        assert!(joint_reading(&m, Joint::LWristYaw.index()).2 < 90);
        assert_eq!(joint_reading(&m, Joint::LHipYawPitch.index()).3 & 0x01, 1);
        assert_eq!(joint_reading(&m, Joint::LHipRoll.index()).3, 0);
    }

    #[test]
    fn overcurrent_reports_the_battery_current_for_its_time() {
        let mut body = VirtualBody::new(BodyConfig::default());
        let z = body.config().zeros;
        body.faults.overcurrent_ma = Some(DEFAULT_OVERCURRENT_MA);
        body.faults.overcurrent_until_ns = 100 * MS;
        let f = cycle_frame(2, &z, &[0; JOINTS], &[]);
        let (_, m, _) = step(&mut body, &f, 0);
        let b = read_payload(&m, 0x02);
        assert_eq!(i16::from_le_bytes([b[2], b[3]]), 5200);
        let (_, m, _) = step(&mut body, &f, 100 * MS);
        let b = read_payload(&m, 0x02);
        assert_eq!(i16::from_le_bytes([b[2], b[3]]), 1000);
    }

    #[test]
    fn same_frames_at_same_times_give_the_same_answers() {
        let run = || {
            let mut body = VirtualBody::new(BodyConfig::default());
            let z = body.config().zeros;
            let f = cycle_frame(2, &z, &[500; JOINTS], &HANDSHAKE_BOARDS);
            (0..20u64)
                .map(|i| step(&mut body, &f, i * 12 * MS).1)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).map_or(256, |n: u32| n.min(2000))
        ))]
        #[test]
        fn body_never_panics_on_any_valid_frame(msgs in proptest::collection::vec(
            (proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>(),
             proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)), 0..40),
            t in proptest::prelude::any::<u64>(),
            posture in 0usize..4, bumpers in proptest::prelude::any::<[u8; 2]>(),
            joint in 0usize..JOINTS, offset in proptest::prelude::any::<i16>(),
            ma in proptest::prelude::any::<u16>(), shake in proptest::prelude::any::<u16>()) {
            let mut buf = [0u8; 4096];
            let mut w = FrameWriter::frame(&mut buf, 9).unwrap();
            for (a, c, p) in &msgs {
                if w.push(*a, *c, p).is_err() { break; }
            }
            let n = w.finish();
            let frame = Frame::parse(&buf[..n], SYNC_FRAME).unwrap();
            let mut body = VirtualBody::new(BodyConfig::default());
            body.world.posture = Posture::ALL[posture];
            body.world.bumpers = bumpers;
            body.world.shake_mrad_s = shake;
            for k in [JointFaultKind::Reversed, JointFaultKind::Offset(offset),
                      JointFaultKind::Stuck, JointFaultKind::HighCurrent(ma)] {
                body.faults.joint[joint].apply(k);
            }
            let mut out = [0u8; MAX_FRAME_LEN];
            let o = body.step(&frame, t, &mut out);
            let o2 = body.step(&frame, t.saturating_add(12_000_000), &mut out);
            proptest::prop_assert!(o2.answer_len > 0 || o.answer_len == 0);
            proptest::prop_assert!(Frame::parse(&out[..o.answer_len], SYNC_ANSWER).is_ok());
        }
    }
}
