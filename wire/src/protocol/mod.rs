//! The protocol core of `docs/protocol.md`: no I/O, time passed in.
//!
//! - [`tables`]: addresses, boards, joints, bus slots, command bytes, encodings.
//! - [`frame`]: frames and answers, both ways, without allocating.
//! - [`prefs`]: the preference block; [`startup`]: start-up ([`startup::Startup`],
//!   [`startup::link_up`]).
//! - [`cycle`]: the cycle ([`cycle::Cycle`]), with [`devices`] (the answer's
//!   sensors and trips), [`handshake`] (the motor boards) and [`safety`]
//!   (HAL's stiffness levels); each joint's values stay inside (`joints`).
//! - [`gate`]: what a frame may do ([`gate::Verdict`], [`gate::WakeLatch`]).
//! - [`bringup`]: the first motion, one joint at a time
//!   ([`bringup::BringUp`], [`bringup::BringUpLimits`]);
//!   [`joint_ranges`]: the joints' ranges.

pub mod bringup;
pub mod chest_button;
pub mod cycle;
pub mod devices;
pub mod frame;
pub mod gate;
pub mod handshake;
pub(crate) mod joint_ranges;
mod joints;
pub mod prefs;
pub mod safety;
pub mod startup;
pub mod tables;

/// What the unit tests of the protocol core share.
#[cfg(test)]
pub(crate) mod test_bytes {
    /// The first start-up frame of every recording.
    pub(crate) const STARTUP_FRAME_0: &str =
        "a5000006030200040200400200410200400303000040410303000040f4d1";

    /// The bytes of a string of hex digits (a test's literal).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
