//! The chest board protocol of `docs/protocol.md`, as a functional core
//! with no I/O, and the links that carry it (real USB, the virtual robot,
//! replay of a recording).

#![warn(missing_docs, unreachable_pub)]

pub mod command;
pub mod link;
pub mod protocol;
pub mod recording;
pub mod replay;
pub mod step;

pub use command::{Command, Joint, JOINTS};
/// The death switch's trip reasons: answer trips and `trip` lines carry
/// them typed.
pub use deathswitch::Reason;
pub use link::{Call, Link, LinkError};
