//! `nao-rs-app`: the operator's view of the team on a laptop
//! (`docs/app.md`). Nothing of it runs on a robot.
//!
//! - [`fleet`]: the functional core, one card per body id (time passed in).
//! - [`stop`]: STOP and STOP ALL, each on its own thread.
//! - [`server`]: the thin shell: the beacon receiver thread, the web page,
//!   the JSON API and the server-sent events.

pub mod fleet;
pub mod server;
pub mod stop;

use std::net::SocketAddr;
use std::path::PathBuf;

/// How the app runs (the command line's options).
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// The web page's address (`--listen`, 127.0.0.1:8077).
    pub listen: SocketAddr,
    /// Where beacons are received (`--beacon-bind`:`--beacon-port`,
    /// 0.0.0.0:7702).
    pub beacon: SocketAddr,
    /// The team key file (`--key`): without it, no network wake.
    pub key: Option<PathBuf>,
    /// The robots' UDP stop port (7701).
    pub stop_port: u16,
    /// The robots' wake port (7703).
    pub wake_port: u16,
    /// More stop addresses for STOP ALL (`--target`), e.g. robots whose
    /// beacon is off.
    pub targets: Vec<SocketAddr>,
    /// STOP ALL also sends to every interface's subnet broadcast (off:
    /// `--no-broadcast`).
    pub broadcast: bool,
    /// Send stops and wakes to loopback addresses only (tests).
    pub loopback_only: bool,
}

impl Default for AppOptions {
    fn default() -> AppOptions {
        AppOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 8077)),
            beacon: SocketAddr::from(([0, 0, 0, 0], nao_rs_beacon::format::PORT)),
            key: None,
            stop_port: nao_rs_beacon::STOP_PORT,
            wake_port: nao_rs_beacon::auth::PORT,
            targets: Vec::new(),
            broadcast: true,
            loopback_only: false,
        }
    }
}
