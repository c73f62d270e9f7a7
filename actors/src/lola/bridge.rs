//! The bridge's rules as a pure state machine: which command goes to the
//! body in a cycle, if any.
//!
//! - Only the controlling client's messages count; they are merged into one
//!   [`Command`] (absent keys keep their value).
//! - A cycle with no new message from the controller pushes nothing, so the
//!   runtime's controller-lost ramp (`docs/protocol.md` section 9) takes
//!   over.
//!
//! The bridge keeps no trip or wake state: "limp after a trip until a
//! person's wake after the re-arm" is the runtime's rule, below every
//! controller (`nao_wire::protocol::gate`), so a stalled or confused bridge
//! cannot bring stiffness back.

use nao_wire::{Command, JOINTS};

use super::actuator::Actuation;

/// The bridge's state between cycles.
#[derive(Debug, Clone, Default)]
pub(super) struct Bridge {
    command: Command,
    fresh: bool,
    silent_cycles: u32,
}

impl Bridge {
    /// A bridge with no controller.
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// A controlling client connected: its command starts at stiffness 0,
    /// the measured positions, LEDs and sonar off, so a client that sends
    /// only `Stiffness` holds the pose it finds.
    pub(super) fn controller_attached(&mut self, measured: &[f32; JOINTS]) {
        self.command = Command {
            position: *measured,
            ..Command::default()
        };
        self.fresh = false;
        self.silent_cycles = 0;
    }

    /// The controlling client is gone: nothing is pushed until another one
    /// connects and sends.
    pub(super) fn controller_detached(&mut self) {
        self.fresh = false;
    }

    /// A message from the controlling client.
    pub(super) fn on_message(&mut self, a: &Actuation) {
        a.apply(&mut self.command);
        self.fresh = true;
    }

    /// Cycles in a row without a message from the controller.
    pub(super) fn silent_cycles(&self) -> u32 {
        self.silent_cycles
    }

    /// One cycle: the controller's merged command if it sent a message
    /// since the last cycle, else `None`.
    pub(super) fn on_cycle(&mut self) -> Option<Command> {
        if !self.fresh {
            self.silent_cycles = self.silent_cycles.saturating_add(1);
            return None;
        }
        self.fresh = false;
        self.silent_cycles = 0;
        Some(self.command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stiff() -> Actuation {
        Actuation {
            stiffness: Some([0.8; JOINTS]),
            position: Some([0.1; JOINTS]),
            ..Actuation::default()
        }
    }

    /// A bridge whose controller, attached at position 0, sent [`stiff`].
    fn commanded() -> Bridge {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        b
    }

    #[test]
    fn controller_message_is_pushed_once() {
        let mut b = commanded();
        let c = b.on_cycle().unwrap();
        assert_eq!(c.stiffness, [0.8; JOINTS]);
        assert_eq!(c.position, [0.1; JOINTS]);
        assert_eq!(b.on_cycle(), None);
    }

    #[test]
    fn silent_controller_pushes_nothing_so_controller_lost_ramp_takes_over() {
        let mut b = commanded();
        assert!(b.on_cycle().is_some());
        for _ in 0..30 {
            assert_eq!(b.on_cycle(), None);
        }
        assert_eq!(b.silent_cycles(), 30);
        b.on_message(&stiff());
        assert!(b.on_cycle().is_some());
        assert_eq!(b.silent_cycles(), 0);
    }

    #[test]
    fn disconnected_controller_pushes_nothing() {
        let mut b = commanded();
        b.controller_detached();
        assert_eq!(b.on_cycle(), None);
    }

    #[test]
    fn new_controller_starts_limp_at_measured_positions() {
        let mut b = commanded();
        b.on_cycle();
        b.controller_attached(&[0.4; JOINTS]);
        b.on_message(&Actuation {
            chest: Some([1.0, 0.0, 0.0]),
            ..Actuation::default()
        });
        let c = b.on_cycle().unwrap();
        assert_eq!(c.stiffness, [0.0; JOINTS]);
        assert_eq!(c.position, [0.4; JOINTS]);
        assert_eq!(c.chest_led, [255, 0, 0]);
    }
}
