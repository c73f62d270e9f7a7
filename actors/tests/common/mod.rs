//! Shared by the runtime's integration tests: the quiet test
//! configuration, the virtual robot (a `testkit::Rig`) with a runtime on an
//! in-process switch, and a LoLA client's frame and answer.
#![allow(dead_code)]

use std::sync::Arc;

use deathswitch::MemorySwitch;
use nao_runtime::{Config, CycleHook, ProgramIo, Runtime};
use nao_wire::link::sim::SimLink;
use nao_wire::JOINTS;
use serde::Serialize;
pub use testkit::Rig;

/// A logger that drops everything.
pub fn quiet() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// The tests' configuration: normal priority, no UDP stop, quiet.
pub fn config() -> Config {
    Config {
        cycle_priority: None,
        udp_port: None,
        logger: Some(quiet()),
        ..Config::default()
    }
}

/// The runtime started with `cfg` and `hook` on the virtual robot of `rig`
/// and the in-process switch `board`; panics when it does not start.
pub fn start<H: CycleHook<SimLink> + Send + 'static>(
    rig: &Rig,
    board: &Arc<MemorySwitch>,
    cfg: Config,
    hook: H,
) -> (Runtime<SimLink>, ProgramIo) {
    Runtime::start_with_hook(SimLink::new(rig.sim_socket()), board.clone(), cfg, hook)
        .expect("start the runtime on the virtual robot")
}

/// A sensor frame as a LoLA client reads it: its keys in order and two of
/// its arrays.
pub struct Frame {
    pub keys: Vec<String>,
    pub position: Vec<f32>,
    pub stiffness: Vec<f32>,
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
