//! The sensor frame: one msgpack map of exactly [`FRAME_LEN`] (896) bytes per
//! cycle, with LoLA's 13 keys in LoLA's order and LoLA's units.
//!
//! Every float is a msgpack float32, every `Status` value a positive fixint
//! and the four `RobotConfig` strings have fixed lengths (20, 5, 20, 5), so
//! every frame has the same layout byte for byte. Clients rely on that:
//! B-Human's NaoProvider parses the first frame once and then reads every
//! later frame through pointers into the same offsets, and `nao_lola` reads
//! exactly 896 bytes per frame.
//!
//! Encoding goes through `rmp-serde` into a caller's `[u8; 896]`: no
//! allocation.

use serde::Serialize;

use nao_wire::protocol::prefs::PressureCalibration;
use nao_wire::JOINTS;

use crate::SensorFrame;

/// Bytes of every sensor frame (LoLA's size).
pub(crate) const FRAME_LEN: usize = 896;

/// Characters of the body id and the head id in `RobotConfig`.
pub(super) const ID_LEN: usize = 20;
/// Characters of the body version and the head version in `RobotConfig`.
pub(super) const VERSION_LEN: usize = 5;

/// LoLA's `Status` value of a joint at or above [`HOT_TRIP_C`]: "critically
/// hot" (B-Human's `TemperatureStatus` 3).
pub(super) const STATUS_CRITICAL: u8 = 3;
/// The temperature at which the runtime trips the switch (`docs/protocol.md`
/// section 7),
/// degC; the frame's `Status` is [`STATUS_CRITICAL`] from here on.
pub(super) const HOT_TRIP_C: i8 = 90;

/// The four `RobotConfig` strings, normalised to LoLA's fixed lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotConfig {
    body_id: String,
    body_version: String,
    head_id: String,
    head_version: String,
}

/// Normalises `s` to exactly `len` printable ASCII characters: other
/// characters become `_`, a shorter text is padded with spaces, a longer one
/// cut.
fn fixed(s: &str, len: usize) -> String {
    let mut out: String = s
        .chars()
        .take(len)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while out.len() < len {
        out.push(' ');
    }
    out
}

impl RobotConfig {
    /// LoLA's `RobotConfig`: body id (from the preference block), body
    /// version, head id and head version. Each is made exactly as long as
    /// LoLA's (20, 5, 20, 5 characters): non-printable or non-ASCII
    /// characters become `_`, short texts are padded with spaces, long ones
    /// cut.
    pub(crate) fn new(
        body_id: &str,
        body_version: &str,
        head_id: &str,
        head_version: &str,
    ) -> Self {
        RobotConfig {
            body_id: fixed(body_id, ID_LEN),
            body_version: fixed(body_version, VERSION_LEN),
            head_id: fixed(head_id, ID_LEN),
            head_version: fixed(head_version, VERSION_LEN),
        }
    }

    /// The four strings in `RobotConfig` order.
    pub(crate) fn strings(&self) -> [&str; 4] {
        [
            &self.body_id,
            &self.body_version,
            &self.head_id,
            &self.head_version,
        ]
    }
}

impl Default for RobotConfig {
    /// Body and head id `P0000000000000000000`, versions `6.0.0` (a NAO V6).
    fn default() -> Self {
        RobotConfig::new(
            "P0000000000000000000",
            "6.0.0",
            "P0000000000000000000",
            "6.0.0",
        )
    }
}

/// One sensor frame in LoLA's units, in LoLA's key order.
/// Each key is its field's name in PascalCase (`FSR` excepted).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct LolaSensorFrame<'a> {
    /// Body id, body version, head id, head version.
    pub robot_config: [&'a str; 4],
    /// x, y, z in m/s^2.
    pub accelerometer: [f32; 3],
    /// x, y in rad.
    pub angles: [f32; 2],
    /// Charge (0..1), status word, current (A, negative while discharging),
    /// temperature (degC).
    pub battery: [f32; 4],
    /// Per joint, A.
    pub current: [f32; JOINTS],
    /// Left foot front-left, front-right, rear-left, rear-right, then the
    /// right foot; kg.
    #[serde(rename = "FSR")]
    pub fsr: [f32; 8],
    /// x, y, z in rad/s.
    pub gyroscope: [f32; 3],
    /// Per joint, rad.
    pub position: [f32; JOINTS],
    /// Left, right in m.
    pub sonar: [f32; 2],
    /// Per joint, the stiffness applied in this cycle, 0..1.
    pub stiffness: [f32; JOINTS],
    /// Per joint, degC.
    pub temperature: [f32; JOINTS],
    /// 14 touch sensors, 1.0 pressed, 0.0 not (see [`touch`]).
    pub touch: [f32; 14],
    /// Per joint, LoLA's temperature status 0..=3.
    pub status: [u8; JOINTS],
}

/// LoLA's `Touch` index of the chest button.
pub(super) const TOUCH_CHEST: usize = 0;
/// LoLA's `Touch` index of the left foot's left bumper.
pub(super) const TOUCH_LFOOT_LEFT: usize = 4;
/// LoLA's `Touch` index of the left foot's right bumper.
pub(super) const TOUCH_LFOOT_RIGHT: usize = 5;
/// LoLA's `Touch` index of the right foot's left bumper.
pub(super) const TOUCH_RFOOT_LEFT: usize = 9;
/// LoLA's `Touch` index of the right foot's right bumper.
pub(super) const TOUCH_RFOOT_RIGHT: usize = 10;

/// LoLA's 14 `Touch` values from the chest button and the bumper bytes
/// (bit 0 left, bit 1 right; `[left foot, right foot]`). Order: chest, head
/// front, middle, rear, left foot left, right, left hand back, left, right,
/// right foot left, right, right hand back, left, right. Head and hand
/// touch sensors are not on the chest board's bus: always 0.
pub(super) fn touch(chest_button: bool, bumpers: [u8; 2]) -> [f32; 14] {
    let on = |b: bool| if b { 1.0 } else { 0.0 };
    let mut t = [0.0; 14];
    t[TOUCH_CHEST] = on(chest_button);
    t[TOUCH_LFOOT_LEFT] = on(bumpers[0] & 1 != 0);
    t[TOUCH_LFOOT_RIGHT] = on(bumpers[0] & 2 != 0);
    t[TOUCH_RFOOT_LEFT] = on(bumpers[1] & 1 != 0);
    t[TOUCH_RFOOT_RIGHT] = on(bumpers[1] & 2 != 0);
    t
}

/// LoLA's `Status` (temperature status) of a joint at `temperature_c`: 0
/// below [`HOT_TRIP_C`], [`STATUS_CRITICAL`] from there (the runtime trips
/// the switch at that temperature, so the joint is off). The runtime has no
/// temperature-dependent stiffness limit below it, so no 1 or 2.
pub(super) fn temperature_status(temperature_c: i8) -> u8 {
    if temperature_c >= HOT_TRIP_C {
        STATUS_CRITICAL
    } else {
        0
    }
}

impl<'a> LolaSensorFrame<'a> {
    /// The frame of one cycle's sensors, converted to LoLA's units (see
    /// `docs/lola.md` for every field's answer byte and unit).
    pub(super) fn from_body(
        s: &SensorFrame,
        robot_config: &'a RobotConfig,
        foot_pressure: &[[PressureCalibration; 4]; 2],
    ) -> Self {
        let milli = |v: i16| f32::from(v) / 1000.0;
        let imu = &s.imu;
        let b = &s.battery;
        LolaSensorFrame {
            robot_config: robot_config.strings(),
            accelerometer: imu.accelerometer.map(milli),
            angles: imu.angle.map(milli),
            battery: [
                f32::from(b.charge) / 1000.0,
                f32::from(b.status),
                -f32::from(b.current_ma) / 1000.0,
                f32::from(b.temperature_decideg) / 10.0,
            ],
            current: s.current_ma.map(|c| f32::from(c) / 1000.0),
            fsr: std::array::from_fn(|i| {
                let (foot, sensor) = (i / 4, i % 4);
                foot_pressure[foot][sensor].kg(s.foot_pressure[foot][sensor])
            }),
            gyroscope: imu.gyroscope.map(milli),
            position: s.position,
            sonar: s.sonar_mm.map(|d| f32::from(d) / 1000.0),
            stiffness: s.stiffness_sent.map(|q| f32::from(q) / 1000.0),
            temperature: s.temperature.map(f32::from),
            touch: touch(s.chest_button, s.bumpers),
            status: s.temperature.map(temperature_status),
        }
    }

    /// Encodes the frame into `out` with `rmp-serde` (a map with string
    /// keys). Returns the bytes written: always [`FRAME_LEN`] for a frame
    /// built by [`LolaSensorFrame::from_body`]; an error when the frame does not
    /// fit (a `Status` above 127 or `RobotConfig` strings of other lengths).
    pub(super) fn encode(&self, out: &mut [u8; FRAME_LEN]) -> Result<usize, String> {
        let mut w: &mut [u8] = &mut out[..];
        let mut ser = rmp_serde::Serializer::new(&mut w).with_struct_map();
        self.serialize(&mut ser)
            .map_err(|e| format!("LoLA sensor frame: does not fit in {FRAME_LEN} bytes: {e}"))?;
        Ok(FRAME_LEN - w.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lola::tests::lola_client::SENSOR_KEYS;
    use nao_wire::protocol::devices::{Battery, Imu};

    fn sensors() -> SensorFrame {
        SensorFrame {
            imu: Imu {
                accelerometer: [10, -20, 9810],
                gyroscope: [1, 2, -3],
                angle: [100, -200],
            },
            battery: Battery {
                charge: 875,
                current_ma: 1500,
                temperature_decideg: 312,
                status: 0x80,
            },
            sonar_mm: [1566, 1366],
            chest_button: true,
            position: std::array::from_fn(|j| j as f32 * 0.01),
            stiffness_sent: std::array::from_fn(|j| [500, 1000, 0][j % 3]),
            current_ma: std::array::from_fn(|j| j as u16 * 10),
            temperature: std::array::from_fn(|j| if j == 3 { 90 } else { 35 }),
            foot_pressure: [[650; 4], [700; 4]],
            bumpers: [0b01, 0b10],
            ..SensorFrame::default()
        }
    }

    fn cal() -> [[PressureCalibration; 4]; 2] {
        [[PressureCalibration {
            gain: 0.01,
            offset: -1.0,
        }; 4]; 2]
    }

    /// The frame of `s` and `id`, encoded: its length and its bytes.
    fn encoded(s: &SensorFrame, id: &RobotConfig) -> (usize, [u8; FRAME_LEN]) {
        let mut out = [0u8; FRAME_LEN];
        let n = LolaSensorFrame::from_body(s, id, &cal())
            .encode(&mut out)
            .unwrap();
        (n, out)
    }

    /// The frame of [`sensors`] and the default robot, encoded and read
    /// back as a msgpack value.
    fn decoded() -> (rmpv::Value, [u8; FRAME_LEN]) {
        let (_, out) = encoded(&sensors(), &RobotConfig::default());
        (rmpv::decode::read_value(&mut &out[..]).unwrap(), out)
    }

    #[test]
    fn sensor_frame_is_exactly_896_bytes() {
        assert_eq!(encoded(&sensors(), &RobotConfig::default()).0, FRAME_LEN);
        // Extreme values keep the size: floats are always float32, status
        // stays a fixint.
        let mut s = sensors();
        s.position = [f32::NAN; JOINTS];
        s.temperature = [i8::MIN; JOINTS];
        s.current_ma = [u16::MAX; JOINTS];
        let id = RobotConfig::new("", "", "a much longer head id than twenty", "6");
        assert_eq!(encoded(&s, &id).0, FRAME_LEN);
    }

    #[test]
    fn sensor_frame_has_lolas_keys_in_lolas_order() {
        let (v, out) = decoded();
        let keys: Vec<&str> = v
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        assert_eq!(keys, SENSOR_KEYS);
        // Map header: fixmap of 13.
        assert_eq!(out[0], 0x80 | 13);
    }

    #[test]
    fn sensor_frame_units_follow_lola() {
        let id = RobotConfig::new("P0000074A05S94F00027", "6.0.0", "HEAD", "6.0.0");
        let f = LolaSensorFrame::from_body(&sensors(), &id, &cal());
        assert_eq!(f.accelerometer, [0.01, -0.02, 9.81]);
        assert_eq!(f.gyroscope, [0.001, 0.002, -0.003]);
        assert_eq!(f.angles, [0.1, -0.2]);
        assert_eq!(f.battery, [0.875, 128.0, -1.5, 31.2]);
        assert_eq!(f.sonar, [1.566, 1.366]);
        assert_eq!(f.current[2], 0.02);
        assert_eq!(f.temperature[3], 90.0);
        assert_eq!(f.status[3], STATUS_CRITICAL);
        assert_eq!(f.status[4], 0);
        assert_eq!(f.fsr[0], 650.0 * 0.01 - 1.0);
        assert_eq!(f.fsr[7], 700.0 * 0.01 - 1.0);
        // Per mille as sent, 0..1 for LoLA.
        assert_eq!(&f.stiffness[..3], [0.5, 1.0, 0.0]);
        assert_eq!(f.position[24], 0.24);
        assert_eq!(f.robot_config[2], "HEAD                ");
        assert_eq!(f.robot_config[0], "P0000074A05S94F00027");
    }

    #[test]
    fn touch_maps_chest_button_and_bumpers_to_lola_indices() {
        let t = touch(true, [0b11, 0b10]);
        let pressed: Vec<usize> = (0..14).filter(|&i| t[i] == 1.0).collect();
        assert_eq!(pressed, vec![0, 4, 5, 10]);
        assert_eq!(touch(false, [0, 0]), [0.0; 14]);
    }

    #[test]
    fn robot_config_strings_are_fixed_length_printable_ascii() {
        let id = RobotConfig::new("ab\u{e9}\n", "6.0.0.1", "", "6");
        let s = id.strings();
        assert_eq!(s[0], "ab__                ");
        assert_eq!(s[1], "6.0.0");
        assert_eq!(s[2].len(), ID_LEN);
        assert_eq!(s[3], "6    ");
    }

    #[test]
    fn every_float_is_float32_and_status_is_fixint() {
        let (v, _) = decoded();
        for (k, val) in v.as_map().unwrap() {
            let key = k.as_str().unwrap();
            for item in val.as_array().unwrap() {
                match key {
                    "RobotConfig" => assert!(item.is_str()),
                    "Status" => assert!(item.is_u64()),
                    _ => assert!(matches!(item, rmpv::Value::F32(_)), "{key}: {item:?}"),
                }
            }
        }
    }
}
