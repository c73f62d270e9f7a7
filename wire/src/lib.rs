//! The chest board protocol of `docs/protocol.md`, as a functional core
//! with no I/O, and the links that carry it (real USB, the virtual robot,
//! replay of a recording).
//!
//! # The public face
//!
//! Everything else is `pub(crate)`. The lints below warn on an
//! undocumented or unreachable public item and on a public function
//! without its `# Errors` or `# Panics` section (`scripts/test.sh` runs
//! clippy with `-D warnings`).
//!
//! - [`Command`], [`Joint`], [`JOINTS`]: one cycle's command, the 25
//!   joints in LoLA's order ([`command`]).
//! - [`Call`], [`Link`], [`LinkError`]: one USB call, the trait that
//!   performs it, its failure kind ([`link`]).
//! - [`Reason`]: the death switch's trip reasons (from `deathswitch`).
//! - [`step`]: [`step::Step`], the runtime's cycle (gate and protocol
//!   core) that the runtime runs and `nao-rs replay` replays.
//! - [`protocol`]: the core without I/O: start-up, the cycle, frames, the
//!   gate, the handshake, bring-up, the tables.
//! - [`link`]: [`link::sim::SimLink`] (the virtual robot), `link::usb`
//!   (the chest board, `usb` feature), [`link::codec`] (the simulator's
//!   socket encoding).
//! - [`recording`]: the recording format both ways ([`recording::parse`],
//!   [`recording::RecordingWriter`]) and its links
//!   ([`recording::record_link::RecordingLink`], and the replay's own
//!   `ReplayLink` behind [`replay`]).
//! - [`replay`]: [`replay::replay_file`], a recording through the
//!   runtime's own start-up and step.

#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::missing_errors_doc, clippy::missing_panics_doc)]

pub(crate) mod command;
pub mod link;
pub mod protocol;
pub mod recording;
pub mod replay;
pub mod step;
#[cfg(test)]
mod tests;

pub use command::{Command, Joint, JOINTS};
/// The death switch's trip reasons: answer trips and `trip` lines carry
/// them typed.
pub use deathswitch::Reason;
pub use link::{Call, Link, LinkError};
