//! The adapter from the runtime's program API ([`ProgramIo`]) to `Body`,
//! and the `nao-rs run --controller lola` entry point [`serve_runtime`].
//!
//! Trips and the wake are not the adapter's business: the runtime's wake
//! latch (`nao_wire::protocol::gate`) holds every stiffness at 0 after a trip
//! until a person's wake after the re-arm, whatever the LoLA client sends.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use nao_wire::protocol::startup::Identity;
use nao_wire::Command;

use super::frame::RobotConfig;
use super::{Body, LolaConfig, LolaError, LolaServer};
use crate::{ProgramIo, SensorFrame};

/// Where the NAO's head id is on the robot (the same id LoLA reports).
pub(crate) const HEAD_ID_PATH: &str = "/sys/qi/head_id";

/// The head id from `HEAD_ID_PATH`, if readable.
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

/// The runtime's [`ProgramIo`] as a `Body`.
pub(crate) struct RuntimeBody {
    io: ProgramIo,
}

impl RuntimeBody {
    /// Wraps `io`.
    pub(crate) fn new(io: ProgramIo) -> Self {
        RuntimeBody { io }
    }
}

impl Body for RuntimeBody {
    fn next_sensors(&mut self, timeout: Duration) -> Option<SensorFrame> {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.io.next_sensors(ns)
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
///
/// # Errors
///
/// As [`LolaServer::bind`]: the socket could not be bound.
pub fn serve_runtime(io: ProgramIo, config: LolaConfig) -> Result<(), LolaError> {
    let server = LolaServer::bind(config)?;
    serve_runtime_on(server, io);
    Ok(())
}

/// [`serve_runtime`] on a socket bound before (`nao-rs run` binds it before
/// the runtime starts, so a held path is an error before any frame).
pub fn serve_runtime_on(mut server: LolaServer, io: ProgramIo) {
    let mut body = RuntimeBody::new(io);
    let never = AtomicBool::new(false);
    server.serve(&mut body, &never);
}
