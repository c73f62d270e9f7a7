//! The runtime a robot program links (as hulk does) and `nao-rs run` hosts.
//!
//! [`Runtime::start`] registers the process in the page (`driver_pid`),
//! brings the chest board up (retrying every 50 ms for up to 5 s while
//! another process holds it), runs the protocol core's start-up and returns
//! the robot's [`Identity`](nao_wire::protocol::startup::Identity) at once with a [`ProgramIo`]; the motor board
//! handshake goes on in the first cycles.
//!
//! Actors (threads made with [`nao_kit`]):
//! - `nao-rs-cycle` (SCHED_FIFO 30): every 12 ms on absolute deadlines, one
//!   `nao_wire::step::Step`: the death switch read once, the gate (limp
//!   after any trip until a person's wake after the re-arm, below every
//!   controller: `nao_wire::protocol::gate`), the protocol core's cycle
//!   (safety ramps, frame, USB exchange, answer), the heartbeat and the
//!   trips from the answer; then the safety status and the sensors
//!   (`cycle_actor`);
//! - `nao-rs-udp` (SCHED_FIFO 20): the UDP stop, the one listener of both
//!   processes (`deathswitch::stop::udp`);
//! - `nao-rs-log` (normal): writes the events the others queue ([`nao_kit::log`]);
//! - `nao-rs-status` (normal): the runtime's non-real-time side: the
//!   status file ([`status_file`], `status.json` next to the page, 10 Hz)
//!   and, once a second, whether the guard named in the page is alive
//!   (flag `guard-dead`).
//! - `nao-rs-exitwatch` (normal): from the registration on, this process's
//!   connection to the guard's exit watch (`deathswitch::exit_watch`), so
//!   the guard sees its exit at once without pidfds too.
//!
//! Stopping ([`Handle::request_stop`], a signal in `nao-rs run`, a panic)
//! trips the switch (`shutdown`, or `fault` for a panic) before the last
//! cycle ends, sends one more all-off frame and closes the board.

//!
//! Its public face:
//! - starting and stopping: [`Runtime`] (with a [`CycleHook`], [`NoHook`]),
//!   [`Config`] (with [`BringUpSetup`]), [`StartError`], [`RunSummary`];
//!   the constant [`CYCLE_PRIORITY`] (the period is the page's
//!   `deathswitch::rules::FRAME_PERIOD_NS`, which the guard keeps too);
//! - the program's side: [`ProgramIo`], [`SensorFrame`], [`SwitchState`],
//!   [`SafetyFlags`]; from any thread: [`Handle`] (trip, wake, jog, stop),
//!   [`Status`], [`wake::WakeRefused`]; the death switch's [`Switch`],
//!   [`Reason`] and [`Motion`];
//! - [`controller`]: the `none` and `stand` controllers and [`controller::run`];
//! - [`lola`]: the LoLA-compatible socket;
//! - [`wake`]: a person's wake (the wake socket, `nao-rs wake`);
//! - [`status_file`]: the status file the beacon, `nao-rs demo` and the
//!   bench read;
//! - `fault` (feature `fault-injection`, the guard's tests only).

#![warn(missing_docs, unreachable_pub)]

mod bringup;
mod config;
pub mod controller;
mod cycle_actor;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod flags;
mod handle;
pub mod lola;
mod program;
mod runtime;
mod socket_file;
pub mod status_file;
pub mod wake;

pub use bringup::BringUpSetup;
pub use config::{Config, StartError, CYCLE_PRIORITY};
pub use deathswitch::{Motion, Reason, Switch};
pub use flags::SafetyFlags;
pub use handle::{Handle, Status};
pub use program::{ProgramIo, SensorFrame, SwitchState};
pub use runtime::{CycleHook, NoHook, RunSummary, Runtime};
