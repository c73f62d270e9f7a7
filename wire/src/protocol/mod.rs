//! The protocol core of `docs/protocol.md`: no I/O, time passed in.
//!
//! - [`tables`]: addresses, boards, joints, bus slots, command bytes, encodings.
//! - [`frame`]: frames and answers, both ways, without allocating.

pub mod cycle;
pub mod devices;
pub mod frame;
pub mod handshake;
pub mod joints;
pub mod prefs;
pub mod safety;
pub mod startup;
pub mod tables;
pub mod trip_latch;
