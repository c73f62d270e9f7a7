//! The nao-rs actor kit and the runtime's actors.
//!
//! - [`kit`]: fixed-priority threads, CPU affinity, `rtrb` rings, the
//!   absolute-deadline ticker, the logging actor.
//! - [`runtime`]: the runtime a robot program links, and its actors.
//! - [`lola`]: the LoLA-compatible socket.

pub mod kit;
pub mod lola;
pub mod runtime;
