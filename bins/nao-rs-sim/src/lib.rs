//! The virtual robot `nao-rs-sim`: the chest board and every board behind
//! it, speaking the chest board protocol (`docs/protocol.md`) over a Unix socket (the link
//! `nao_wire::link::sim::SimLink`, `--link sim:PATH`).
//!
//! - [`body`]: the boards as a pure step function (frame and time in,
//!   answer out);
//! - [`device`]: the USB device (claim, plug, transport faults), pure;
//! - [`server`]: the sockets and the trace file;
//! - [`functionfs`]: the same device as a real USB device (FunctionFS,
//!   `--functionfs DIR`), the virtual head's chest board;
//! - [`ctl`]: the control commands and the control socket's client;
//! - [`trace`]: the trace's lines, writer and readers (for tests);
//! - [`prefs`]: the preference block;
//! - [`settings`]: the command line settings of the boards;
//! - [`Spawned`]: a test guard running the simulator binary;
//! - [`Holder`]: a test guard holding its interface 0 (busy) until killed.

pub mod body;
pub mod ctl;
pub mod device;
pub mod functionfs;
pub mod prefs;
pub mod server;
pub mod settings;
mod spawned;
pub mod trace;

pub use spawned::{Holder, Spawned};
pub use trace::{Tail, TraceLine, TraceRecord};
