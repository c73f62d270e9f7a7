//! What a LoLA client knows of the socket, as real clients (B-Human,
//! HULKs, `nao_lola`) know it: the fixed frame size, how to read a sensor
//! frame and how to write an actuator map. Independent of the runtime's own
//! codec, so a test that speaks through it checks the runtime against
//! LoLA. Shared by the runtime's integration tests (`common`) and the LoLA
//! server's unit tests (`src/lola/tests.rs`).

// Public to the tests that include it; a private module inside the
// library's unit tests.
#![allow(unreachable_pub, dead_code)]

use nao_wire::JOINTS;
use serde::Serialize;

/// LoLA's sensor frame: always exactly this many bytes; every client reads
/// it with one fixed-size read.
pub const FRAME_LEN: usize = 896;

/// LoLA's sensor keys, in the order of the frame.
pub const SENSOR_KEYS: [&str; 13] = [
    "RobotConfig",
    "Accelerometer",
    "Angles",
    "Battery",
    "Current",
    "FSR",
    "Gyroscope",
    "Position",
    "Sonar",
    "Stiffness",
    "Temperature",
    "Touch",
    "Status",
];

/// A sensor frame as a LoLA client reads it: its keys in order and three
/// of its arrays.
pub struct Frame {
    pub keys: Vec<String>,
    pub position: Vec<f32>,
    pub stiffness: Vec<f32>,
    /// LoLA's 14 touch values; index 0 is the chest button (1.0 pressed).
    pub touch: Vec<f32>,
}

/// Decodes one sensor frame (MessagePack map); panics when it is not one.
pub fn decode(frame: &[u8]) -> Frame {
    let v = rmpv::decode::read_value(&mut &frame[..]).unwrap();
    let map = v.as_map().unwrap();
    let floats = |key: &str| -> Vec<f32> {
        map.iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .1
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    Frame {
        keys: map
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_string())
            .collect(),
        position: floats("Position"),
        stiffness: floats("Stiffness"),
        touch: floats("Touch"),
    }
}

/// A LoLA client's actuator map: every joint's position and stiffness,
/// the chest LED, the left eye and the sonars.
#[derive(Serialize)]
pub struct Answer {
    #[serde(rename = "Position")]
    pub position: [f32; JOINTS],
    #[serde(rename = "Stiffness")]
    pub stiffness: [f32; JOINTS],
    #[serde(rename = "Chest")]
    pub chest: [f32; 3],
    #[serde(rename = "LEye")]
    pub left_eye: [f32; 24],
    #[serde(rename = "Sonar")]
    pub sonar: [bool; 2],
}

impl Answer {
    /// `position` and `stiffness`, the chest blue, the left eye on, both
    /// sonars on.
    pub fn new(position: [f32; JOINTS], stiffness: [f32; JOINTS]) -> Answer {
        Answer {
            position,
            stiffness,
            chest: [0.0, 0.0, 1.0],
            left_eye: [1.0; 24],
            sonar: [true, true],
        }
    }

    /// The MessagePack bytes a client writes.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap()
    }
}
