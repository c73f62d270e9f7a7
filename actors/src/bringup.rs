//! Bring-up in the runtime (`docs/bringup.md`): which joint, under which
//! limits. The rules are the gate's (`nao_wire::protocol::bringup`), below
//! every controller: while the runtime runs in bring-up, controllers'
//! commands are ignored and only [`crate::Handle::jog`] moves the joint.

use nao_wire::protocol::bringup::BringUpLimits;
use nao_wire::Joint;

/// The runtime in bring-up: one joint, its limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BringUpSetup {
    /// The one joint that may move.
    pub joint: Joint,
    /// The bounds, the defaults or tighter.
    pub limits: BringUpLimits,
}
