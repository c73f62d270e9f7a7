//! How the runtime runs: its constants, [`Config`], and why a start fails.

use std::fmt;
use std::path::PathBuf;

use nao_wire::protocol::chest_button::ChestButtonMode;
use nao_wire::protocol::handshake::DEFAULT_ACCEPTED;
use nao_wire::protocol::startup::StartupError;

use crate::bringup::BringUpSetup;

/// The cycle actor's SCHED_FIFO priority.
pub const CYCLE_PRIORITY: u8 = 30;
/// The UDP listener's SCHED_FIFO priority (below the cycle's).
const UDP_PRIORITY: u8 = 20;
/// The status file is rewritten this often (10 Hz).
pub(crate) const STATUS_PERIOD_NS: u64 = 100_000_000;
/// The guard named in the page is checked this often.
pub(crate) const GUARD_CHECK_PERIOD_NS: u64 = 1_000_000_000;

/// How the runtime runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The cycle period, ns (12 ms).
    pub period_ns: u64,
    /// The cycle actor's SCHED_FIFO priority (30), `None`: normal policy.
    pub cycle_priority: Option<u8>,
    /// The CPU the cycle actor is pinned to, if any.
    pub cycle_cpu: Option<usize>,
    /// The UDP stop port (7701), `None`: no listener.
    pub udp_port: Option<u16>,
    /// The UDP listener's SCHED_FIFO priority (20).
    pub udp_priority: Option<u8>,
    /// The UDP stop's hand-over socket file
    /// (`deathswitch::stop::udp::handover_path` of the page); `None`: next to the default page (`$NAO_RS_DEATHSWITCH`).
    pub udp_handover: Option<std::path::PathBuf>,
    /// The accepted motor board configuration versions (`[10]`).
    pub accepted: Vec<u8>,
    /// Busy-board retry period, ns (50 ms).
    pub open_retry_ns: u64,
    /// Busy-board retry limit, ns (5 s).
    pub open_timeout_ns: u64,
    /// Slots of the command ring (4).
    pub command_capacity: usize,
    /// Stop by itself after exactly this many cycles (`nao-rs record
    /// --cycles`): `shutdown` is tripped before the last two cycles (all of
    /// them when fewer), so their frames are all-off; 0 runs no cycle.
    pub max_cycles: Option<u64>,
    /// Where log lines go (default: stderr).
    pub logger: Option<slog::Logger>,
    /// The status file ([`status_file`](crate::status_file)); `None`: `$NAO_RS_STATUS`, else
    /// `status.json` next to the page (none for a switch without a file).
    pub status_file: Option<PathBuf>,
    /// Which chest button press trips the switch (`docs/game-day.md`):
    /// `Trip` (the default: every press) or `Hold { ms }` (a press held
    /// `ms`; a shorter one reaches the program only). The status file
    /// says which (`chest_button`).
    pub chest_button: ChestButtonMode,
    /// Bring-up (`docs/bringup.md`): only this joint may move, under the
    /// gate's bring-up rules; controllers' commands are ignored.
    pub bringup: Option<BringUpSetup>,
    /// A fault to inject (the guard's tests only; never in a robot build).
    #[cfg(feature = "fault-injection")]
    pub fault: Option<crate::fault::Fault>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period_ns: deathswitch::rules::FRAME_PERIOD_NS,
            cycle_priority: Some(CYCLE_PRIORITY),
            cycle_cpu: None,
            udp_port: Some(deathswitch::stop::PORT),
            udp_priority: Some(UDP_PRIORITY),
            udp_handover: None,
            accepted: DEFAULT_ACCEPTED.to_vec(),
            // The runtime's side of its contract with the guard: a busy
            // chest board retried every 50 ms for 5 s.
            open_retry_ns: deathswitch::rules::RUNTIME_OPEN_RETRY_NS,
            open_timeout_ns: deathswitch::rules::RUNTIME_OPEN_TIMEOUT_NS,
            command_capacity: 4,
            max_cycles: None,
            logger: None,
            status_file: None,
            chest_button: ChestButtonMode::Trip,
            bringup: None,
            #[cfg(feature = "fault-injection")]
            fault: None,
        }
    }
}

/// Why the runtime did not start.
#[derive(Debug)]
pub enum StartError {
    /// The chest board stayed busy (held by the guard or another runtime).
    Busy {
        /// How long it was retried, ms.
        waited_ms: u64,
        /// The last error.
        error: StartupError,
    },
    /// The start-up failed (no frame was sent).
    Startup(StartupError),
    /// A thread could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Busy { waited_ms, error } => write!(
                f,
                "the chest board stayed busy for {waited_ms} ms ({error}): another process \
                 holds it. If nao-rs-guard holds it after a takeover it hands it over once this \
                 runtime registers; else stop the other runtime (`systemctl stop hulk`, or find \
                 it with `fuser -v /dev/bus/usb/*/*`)"
            ),
            StartError::Startup(e) => write!(f, "{e}"),
            StartError::Thread(e) => write!(f, "cannot start a runtime thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {}
