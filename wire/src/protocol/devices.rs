//! The devices' data (`docs/protocol.md` section 5, answers) and handing an answer to the
//! devices (section 7): each answering device's data is updated, and the
//! chest button, a hot joint or a joint fault raise a trip.

use super::frame::Frame;
use super::handshake::Handshake;
use super::tables::*;
use crate::command::{Joint, JOINTS};
use deathswitch::Reason;

/// The inertial unit's latest reading (raw units of the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Imu {
    /// Accelerometer x, y, z in mm/s^2.
    pub accelerometer: [i16; 3],
    /// Gyroscope x, y, z in mrad/s.
    pub gyroscope: [i16; 3],
    /// Angle x, y in mrad.
    pub angle: [i16; 2],
}

/// The battery's latest reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Battery {
    /// Charge, per mille.
    pub charge: u16,
    /// Current in mA (positive: drawn).
    pub current_ma: i16,
    /// Temperature in 0.1 degC.
    pub temperature_decideg: i16,
    /// Status word.
    pub status: u16,
}

/// Every device's latest data. A device that does not answer keeps its last
/// data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sensors {
    /// The inertial unit.
    pub imu: Imu,
    /// The battery.
    pub battery: Battery,
    /// Sonar left, right in mm.
    pub sonar_mm: [u16; 2],
    /// The chest button is pressed.
    pub chest_button: bool,
    /// The client state the chest board reports.
    pub chest_client_state: u8,
    /// Each joint's measured position in counts (`zero[j]` until measured).
    pub position_count: [u16; JOINTS],
    /// Each joint's measured position in radians (0 until measured).
    pub position: [f32; JOINTS],
    /// Whether joint j has been measured at all.
    pub measured: [bool; JOINTS],
    /// Each joint's current in mA.
    pub current_ma: [u16; JOINTS],
    /// Each joint's temperature in degC.
    pub temperature: [i8; JOINTS],
    /// Each joint's status byte (bit 0: fault).
    pub joint_status: [u8; JOINTS],
    /// Foot pressure sensors, raw: `[left, right][sensor]`.
    pub foot_pressure: [[u16; 4]; 2],
    /// Bumpers per foot board (bit 0 left, bit 1 right): `[left foot, right foot]`.
    pub bumpers: [u8; 2],
    /// EEPROM status bytes (`0x40`, `0x41`).
    pub(crate) eeprom_status: [u8; 2],
    /// Cycle-local count of answer messages this runtime did not understand
    /// (wrong length, unknown address); they are ignored.
    pub(crate) ignored_messages: u32,
}

impl Sensors {
    /// No data yet: positions at the zero counts.
    pub(crate) fn new(zero: &[u16; JOINTS]) -> Self {
        Sensors {
            imu: Imu::default(),
            battery: Battery::default(),
            sonar_mm: [0; 2],
            chest_button: false,
            chest_client_state: 0,
            position_count: *zero,
            position: [0.0; JOINTS],
            measured: [false; JOINTS],
            current_ma: [0; JOINTS],
            temperature: [0; JOINTS],
            joint_status: [0; JOINTS],
            foot_pressure: [[0; 4]; 2],
            bumpers: [0; 2],
            eeprom_status: [0; 2],
            ignored_messages: 0,
        }
    }
}

/// The trips an answer raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trips {
    /// The chest button trips (reason `chest-button`). The answer sets it
    /// when it shows the button pressed (the `trip` mode); the runtime's
    /// step puts the chest button rule's decision here
    /// ([`super::chest_button`]).
    pub chest_button: bool,
    /// What the chest's message in this answer said: `Some(true)` pressed,
    /// `Some(false)` released, `None` no chest message (the chest button
    /// rule's input).
    pub chest_seen: Option<bool>,
    /// A joint reports 90 degC or more (reason `heat`); the first such joint.
    pub heat: Option<Joint>,
    /// A joint reports status bit 0 (reason `fault`); the first such joint.
    pub fault: Option<Joint>,
}

impl Trips {
    /// The death switch reason of the first trip (chest button, heat,
    /// fault), if any.
    pub(crate) fn reason(&self) -> Option<Reason> {
        if self.chest_button {
            Some(Reason::ChestButton)
        } else if self.heat.is_some() {
            Some(Reason::Heat)
        } else if self.fault.is_some() {
            Some(Reason::Fault)
        } else {
            None
        }
    }
}

fn u16_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

fn i16_at(p: &[u8], at: usize) -> i16 {
    i16::from_le_bytes([p[at], p[at + 1]])
}

/// Hands a validated answer to the devices: updates `sensors`, feeds
/// configuration answers to `handshake`, and returns the trips raised.
/// Messages of a wrong length or from an unknown address are counted in
/// `sensors.ignored_messages` and otherwise ignored. Never panics.
pub(crate) fn hand_answer(
    answer: &Frame<'_>,
    zero: &[u16; JOINTS],
    sensors: &mut Sensors,
    handshake: &mut Handshake,
) -> Trips {
    let mut trips = Trips::default();
    for m in answer.messages() {
        let p = m.payload;
        let ok = match (AnswerKind::try_from(m.command), device_kind(m.address)) {
            (Ok(AnswerKind::Read), Some(kind)) if Some(p.len()) == read_answer_len(m.address) => {
                match kind {
                    DeviceKind::Imu => {
                        let imu = &mut sensors.imu;
                        for i in 0..3 {
                            imu.accelerometer[i] = i16_at(p, 2 * i);
                            imu.gyroscope[i] = i16_at(p, 6 + 2 * i);
                        }
                        imu.angle = [i16_at(p, 12), i16_at(p, 14)];
                    }
                    DeviceKind::Battery => {
                        sensors.battery = Battery {
                            charge: u16_at(p, 0),
                            current_ma: i16_at(p, 2),
                            temperature_decideg: i16_at(p, 4),
                            status: u16_at(p, 6),
                        }
                    }
                    DeviceKind::Sonar => sensors.sonar_mm = [u16_at(p, 0), u16_at(p, 2)],
                    DeviceKind::Chest => {
                        sensors.chest_button = p[0] == 1;
                        sensors.chest_client_state = p[1];
                        trips.chest_button |= p[0] == 1;
                        trips.chest_seen = Some(trips.chest_seen == Some(true) || p[0] == 1);
                    }
                    DeviceKind::JointBoard(b) => {
                        for (i, &j) in JOINT_BOARDS[b].joints.iter().enumerate() {
                            let q = &p[READ_LEN_PER_JOINT * i..READ_LEN_PER_JOINT * (i + 1)];
                            let count = u16_at(q, 0);
                            let temperature = q[4] as i8;
                            let status = q[5];
                            sensors.position_count[j] = count;
                            sensors.position[j] = decode_position(count, zero[j]);
                            sensors.measured[j] = true;
                            sensors.current_ma[j] = u16_at(q, 2);
                            sensors.temperature[j] = temperature;
                            sensors.joint_status[j] = status;
                            if temperature >= HEAT_TRIP_DEG_C && trips.heat.is_none() {
                                trips.heat = Joint::from_index(j);
                            }
                            if status & JOINT_STATUS_FAULT != 0 && trips.fault.is_none() {
                                trips.fault = Joint::from_index(j);
                            }
                        }
                    }
                    DeviceKind::FootBoard(f) => {
                        for s in 0..4 {
                            sensors.foot_pressure[f][s] = u16_at(p, 2 * s);
                        }
                        sensors.bumpers[f] = p[8];
                    }
                    DeviceKind::Eeprom(e) => sensors.eeprom_status[e] = p[0],
                    DeviceKind::Bus(_) => {}
                }
                true
            }
            (
                Ok(AnswerKind::Config),
                Some(DeviceKind::JointBoard(_) | DeviceKind::FootBoard(_)),
            ) if p.len() == CONFIG_LEN => {
                handshake.on_config(m.address, p[0]);
                true
            }
            // Late start-up answers carry nothing for the cycle.
            (Ok(AnswerKind::Status | AnswerKind::EepromRead), Some(_)) => true,
            _ => false,
        };
        if !ok {
            sensors.ignored_messages = sensors.ignored_messages.saturating_add(1);
        }
    }
    trips
}

#[cfg(test)]
mod tests {
    use super::super::frame::FrameWriter;
    use super::super::handshake::DEFAULT_ACCEPTED;
    use super::*;

    fn answer(build: impl FnOnce(&mut FrameWriter)) -> Vec<u8> {
        let mut b = [0u8; 512];
        let mut w = FrameWriter::answer(&mut b, 9).unwrap();
        build(&mut w);
        let n = w.finish();
        b[..n].to_vec()
    }

    fn hand(bytes: &[u8], s: &mut Sensors, h: &mut Handshake) -> Trips {
        hand_answer(
            &Frame::parse_answer(bytes, 9).unwrap(),
            &[2048; JOINTS],
            s,
            h,
        )
    }

    /// Sensors at zero 2048 and the default handshake, nothing read yet.
    fn fresh() -> (Sensors, Handshake) {
        (
            Sensors::new(&[2048; JOINTS]),
            Handshake::new(&DEFAULT_ACCEPTED),
        )
    }

    /// An answer with one READ answer from `address`, handed over.
    fn read(address: u8, data: &[u8], s: &mut Sensors, h: &mut Handshake) -> Trips {
        hand(
            &answer(|w| w.push(address, AnswerKind::Read.into(), data).unwrap()),
            s,
            h,
        )
    }

    #[test]
    fn chest_button_pressed_trips_the_switch() {
        let (mut s, mut h) = fresh();
        let t = read(ADDR_CHEST, &[1, 0x24], &mut s, &mut h);
        assert_eq!(t.reason(), Some(Reason::ChestButton));
        assert!(s.chest_button);
        assert_eq!(t.chest_seen, Some(true));
        let t = read(ADDR_CHEST, &[0, 0x24], &mut s, &mut h);
        assert_eq!(t.reason(), None, "no trip");
        assert_eq!(t.chest_seen, Some(false));
    }

    #[test]
    fn joint_at_90_degrees_trips_heat_and_status_bit_0_trips_fault() {
        let (mut s, mut h) = fresh();
        // The LWrist board: LWristYaw, then LHand.
        let mut p = [0u8; 12];
        p[0..2].copy_from_slice(&2100u16.to_le_bytes());
        p[4] = 89;
        p[6..8].copy_from_slice(&2000u16.to_le_bytes());
        p[10] = 90;
        let t = read(0x13, &p, &mut s, &mut h);
        assert_eq!(t.heat, Some(Joint::LHand));
        assert_eq!(t.fault, None);
        assert_eq!(s.position_count[Joint::LWristYaw], 2100);
        assert_eq!(s.position_count[Joint::LHand], 2000);
        assert!(
            (s.position[Joint::LWristYaw] - 52.0 * std::f32::consts::TAU / 4096.0).abs() < 1e-5
        );
        p[10] = 20;
        p[5] = 1;
        let t = read(0x13, &p, &mut s, &mut h);
        assert_eq!(
            (t.heat, t.fault, t.reason()),
            (None, Some(Joint::LWristYaw), Some(Reason::Fault))
        );
    }

    #[test]
    fn device_that_does_not_answer_keeps_its_last_data() {
        let (mut s, mut h) = fresh();
        let mut b = [0u8; 8];
        b[2..4].copy_from_slice(&5200i16.to_le_bytes());
        read(ADDR_BATTERY, &b, &mut s, &mut h);
        read(ADDR_SONAR, &[1, 0, 2, 0], &mut s, &mut h);
        assert_eq!(s.battery.current_ma, 5200);
        assert_eq!(s.sonar_mm, [1, 2]);
    }

    #[test]
    fn wrong_length_or_unknown_messages_are_ignored() {
        let (mut s, mut h) = fresh();
        let t = hand(
            &answer(|w| {
                w.push(ADDR_CHEST, AnswerKind::Read.into(), &[1]).unwrap();
                w.push(0x77, AnswerKind::Read.into(), &[1, 2]).unwrap();
                w.push(0x10, AnswerKind::Config.into(), &[10]).unwrap();
            }),
            &mut s,
            &mut h,
        );
        assert_eq!(t, Trips::default(), "no trip");
        assert_eq!(s.ignored_messages, 3);
        assert_eq!(h.accepted_mask(), 0);
    }
}
