//! nao-rs-guard: the second layer of the death switch. A separate process,
//! started before the runtime, that takes the chest board over when the
//! runtime hangs, crashes or does not obey a trip (`docs/guard.md`).
//!
//! - [`core`]: the guard's logic as a pure state machine, time passed in.

pub mod board;
pub mod core;
pub mod fds;
pub mod link;
pub mod lock;
pub mod log;
pub mod poller;
pub mod process;
pub mod rt;
pub mod signals;
pub mod udp;
