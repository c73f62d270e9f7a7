//! The LoLA-compatible socket: every framework written for Aldebaran's LoLA
//! (B-Human, HULKs' HuLA, rUNSWift, NaoTH, `nao_lola`, ...) runs on nao-rs
//! unchanged.
//!
//! - `frame`: the 896-byte msgpack sensor frame, one per cycle to every
//!   client.
//! - `actuator`: decoding a client's actuator message and mapping it to a
//!   [`Command`].
//! - `bridge`: the rules (one controller, silence) as a pure state
//!   machine; trips and the wake are the runtime's (`nao_wire::protocol::gate`).
//! - `server`: the non-blocking Unix socket server (default
//!   `DEFAULT_SOCKET`), a normal (not real-time) thread.
//! - `double`: a test double of `Body`, for the unit tests (`tests`:
//!   the socket spoken to as real clients do).
//! - [`runtime_body`]: the adapter from the runtime's `ProgramIo`, and
//!   [`serve_runtime`], the `nao-rs run --controller lola` entry point.
//!
//! The bridge talks to the runtime through the small `Body` trait; a thin
//! adapter makes the runtime's API one. Bind the socket with
//! [`LolaServer::bind`] and serve the runtime on it with
//! [`serve_runtime_on`] (or both at once: [`serve_runtime`]).

use std::path::PathBuf;
use std::time::Duration;

use nao_wire::protocol::prefs::PressureCalibration;
use nao_wire::Command;

use crate::SensorFrame;

mod actuator;
mod bridge;
#[cfg(test)]
mod double;
mod frame;
pub mod runtime_body;
mod server;
#[cfg(test)]
mod tests;

pub use frame::RobotConfig;
pub use runtime_body::{serve_runtime, serve_runtime_on};
pub use server::LolaServer;

/// LoLA's socket path.
pub(crate) const DEFAULT_SOCKET: &str = "/tmp/robocup";

/// The stack of the thread that serves the socket (`nao-rs run
/// --controller lola`), 1 MiB: the actuator decoder skips a nested value a
/// client sends under an ignored key by recursion, up to `rmp-serde`'s depth
/// limit (1,024; deeper is `Malformed`), which takes under 512 KiB in a
/// debug build. Smaller than std's 2 MiB because the runtime locks its
/// memory: see [`nao_kit::actor::STACK_BYTES`].
pub const SERVER_STACK_BYTES: usize = 1 << 20;

/// What the bridge needs of the runtime: one small capability.
pub(crate) trait Body {
    /// Waits up to `timeout` for the next cycle's sensors (the runtime's
    /// [`SensorFrame`]); `None` when no cycle ended in that time. Each
    /// cycle's sensors are returned once.
    fn next_sensors(&mut self, timeout: Duration) -> Option<SensorFrame>;
    /// Pushes a command into the runtime's command ring; a full ring hands
    /// it back (the runtime ring's contract, so no box).
    ///
    /// # Errors
    ///
    /// The ring is full: the command comes back.
    #[allow(clippy::result_large_err)]
    fn push(&mut self, cmd: Command) -> Result<(), Command>;
    /// Whether the body still runs; the server stops serving when not.
    fn running(&self) -> bool {
        true
    }
}

/// Why the LoLA socket could not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LolaError(pub String);

impl std::fmt::Display for LolaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LolaError {}

/// The bridge's settings.
#[derive(Debug, Clone)]
pub struct LolaConfig {
    /// The socket path (LoLA's: `DEFAULT_SOCKET`).
    pub socket: PathBuf,
    /// `RobotConfig`: body id, body version, head id, head version.
    pub robot_config: RobotConfig,
    /// The foot pressure calibration of the preference block:
    /// `[left, right][sensor]`.
    pub foot_pressure: [[PressureCalibration; 4]; 2],
    /// Most clients at once (the controller and monitors); further
    /// connections are closed at once. Default 8.
    pub max_clients: usize,
    /// Where connects, disconnects and rejected messages are logged.
    pub log: slog::Logger,
}

impl LolaConfig {
    /// Defaults: `socket` at `DEFAULT_SOCKET`, [`RobotConfig::default`], unit
    /// foot pressure gains (raw values), 8 clients.
    pub fn new(log: slog::Logger) -> Self {
        LolaConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            robot_config: RobotConfig::default(),
            foot_pressure: [[PressureCalibration {
                gain: 1.0,
                offset: 0.0,
            }; 4]; 2],
            max_clients: 8,
            log,
        }
    }
}
