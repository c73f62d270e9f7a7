//! The adapter from the runtime's program API ([`ProgramIo`]) to [`Body`],
//! and the `nao-rs run --controller lola` entry point [`serve_runtime`].
//!
//! Trips and the wake are not the adapter's business: the runtime's wake
//! latch (`crate::runtime::latch`) holds every stiffness at 0 after a trip
//! until a person's wake after the re-arm, whatever the LoLA client sends.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use nao_wire::protocol::startup::Identity;
use nao_wire::{Command, JOINTS};

use super::frame::RobotConfig;
use super::{Body, BodySensors, LolaConfig, LolaError, LolaServer};
use crate::runtime::{ProgramIo, SensorFrame};

/// Where the NAO's head id is on the robot (the same id LoLA reports).
pub const HEAD_ID_PATH: &str = "/sys/qi/head_id";

/// The head id from [`HEAD_ID_PATH`], if readable.
pub fn system_head_id() -> Option<String> {
    let s = std::fs::read_to_string(HEAD_ID_PATH).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

impl LolaConfig {
    /// The settings for the robot the runtime started: the body id and the
    /// foot pressure calibration from its preference block, versions
    /// `6.0.0`, and `head_id` (else [`system_head_id`], else 20 zeros after
    /// a `P`).
    pub fn from_identity(robot: &Identity, head_id: Option<&str>, log: slog::Logger) -> Self {
        let head = head_id
            .map(str::to_string)
            .or_else(system_head_id)
            .unwrap_or_else(|| "P0000000000000000000".to_string());
        let mut c = LolaConfig::new(log);
        c.robot_config = RobotConfig::new(robot.body_id(), "6.0.0", &head, "6.0.0");
        c.foot_pressure = robot.prefs.foot_pressure;
        c
    }
}

/// The runtime's [`ProgramIo`] as a [`Body`].
pub struct RuntimeBody {
    io: ProgramIo,
}

impl RuntimeBody {
    /// Wraps `io`.
    pub fn new(io: ProgramIo) -> Self {
        RuntimeBody { io }
    }
}

/// One runtime sensor frame as the bridge's sensors.
pub fn body_sensors(f: &SensorFrame) -> BodySensors {
    let mut stiffness = [0.0f32; JOINTS];
    for (s, &q) in stiffness.iter_mut().zip(f.stiffness_sent.iter()) {
        *s = f32::from(q) / 1000.0;
    }
    BodySensors {
        imu: f.imu,
        battery: f.battery,
        sonar_mm: f.sonar_mm,
        chest_button: f.chest_button,
        position: f.position,
        stiffness,
        current_ma: f.current_ma,
        temperature_c: f.temperature,
        foot_pressure: f.foot_pressure,
        bumpers: f.bumpers,
    }
}

impl Body for RuntimeBody {
    fn next_sensors(&mut self, timeout: Duration) -> Option<BodySensors> {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let f = self.io.next_sensors(ns)?;
        Some(body_sensors(&f))
    }

    fn push(&mut self, cmd: Command) -> Result<(), Command> {
        self.io.push_command(cmd)
    }

    fn running(&self) -> bool {
        self.io.handle().is_running()
    }
}

/// `nao-rs run --controller lola`: serves the LoLA socket at
/// `config.socket` for the runtime behind `io` until the runtime stops.
/// Run it on its own normal-priority thread.
pub fn serve_runtime(io: ProgramIo, config: LolaConfig) -> Result<(), LolaError> {
    let mut server = LolaServer::bind(config)?;
    let mut body = RuntimeBody::new(io);
    let never = AtomicBool::new(false);
    server.serve(&mut body, &never);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stiffness_sent_per_mille_becomes_0_to_1() {
        let mut f = SensorFrame::default();
        f.stiffness_sent[3] = 500;
        f.stiffness_sent[4] = 1000;
        let s = body_sensors(&f);
        assert_eq!(
            (s.stiffness[3], s.stiffness[4], s.stiffness[0]),
            (0.5, 1.0, 0.0)
        );
    }
}
