//! The bridge's rules as a pure state machine: which command goes to the
//! body in a cycle, if any.
//!
//! - Only the controlling client's messages count; they are merged into one
//!   [`Command`] (absent keys keep their value).
//! - A cycle with no new message from the controller pushes nothing, so the
//!   runtime's controller-lost ramp (spec section 9) takes over.
//! - After a trip, every pushed command has stiffness 0 until the robot is
//!   woken again, whatever the client sends; also while the robot is not
//!   awake. While limp a command is pushed every cycle, also when the
//!   client is silent or gone, so the runtime's latest command (which it
//!   keeps using) is never a stiff one from before the trip.

use nao_wire::{Command, JOINTS};

use super::actuator::Actuation;

/// The bridge's state between cycles.
#[derive(Debug, Clone)]
pub struct Bridge {
    command: Command,
    fresh: bool,
    held: bool,
    asleep_since_trip: bool,
    silent_cycles: u32,
}

impl Default for Bridge {
    fn default() -> Self {
        Self::new()
    }
}

impl Bridge {
    /// A bridge with no controller, not held (the awake flag still gates).
    pub fn new() -> Self {
        Bridge {
            command: Command::default(),
            fresh: false,
            held: false,
            asleep_since_trip: false,
            silent_cycles: 0,
        }
    }

    /// A controlling client connected: its command starts at stiffness 0,
    /// the measured positions, LEDs and sonar off, so a client that sends
    /// only `Stiffness` holds the pose it finds.
    pub fn controller_attached(&mut self, measured: &[f32; JOINTS]) {
        self.command = Command {
            position: *measured,
            ..Command::default()
        };
        self.fresh = false;
        self.silent_cycles = 0;
    }

    /// The controlling client is gone: nothing is pushed until another one
    /// connects and sends.
    pub fn controller_detached(&mut self) {
        self.fresh = false;
    }

    /// A message from the controlling client.
    pub fn on_message(&mut self, a: &Actuation) {
        a.apply(&mut self.command);
        self.fresh = true;
    }

    /// Whether the bridge forces stiffness 0 because of a trip not yet
    /// followed by a wake.
    pub fn held(&self) -> bool {
        self.held
    }

    /// Cycles in a row without a message from the controller.
    pub fn silent_cycles(&self) -> u32 {
        self.silent_cycles
    }

    /// One cycle, with the switch's state and the awake flag as the body
    /// reports them now. Returns the command to push: the controller's, if
    /// it sent one since the last cycle; while limp, a command with
    /// stiffness 0 every cycle, whether the controller sent one or not.
    ///
    /// Limp means tripped, held or not awake. A trip latches "held"; held
    /// ends only when the robot is seen not awake and then awake again with
    /// the switch armed (a wake after the trip).
    pub fn on_cycle(&mut self, tripped: bool, awake: bool) -> Option<Command> {
        if tripped {
            self.held = true;
            self.asleep_since_trip = false;
        }
        if self.held && !awake {
            self.asleep_since_trip = true;
        }
        if self.held && !tripped && awake && self.asleep_since_trip {
            self.held = false;
        }
        let limp = tripped || self.held || !awake;
        if self.fresh {
            self.silent_cycles = 0;
        } else {
            self.silent_cycles = self.silent_cycles.saturating_add(1);
            if !limp {
                return None;
            }
        }
        self.fresh = false;
        let mut cmd = self.command;
        if limp {
            // Pushed every limp cycle, also without a message: the runtime
            // keeps the last command it got, and that must not be a stiff
            // one from before the trip once the switch is re-armed.
            cmd.stiffness = [0.0; JOINTS];
        }
        Some(cmd)
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

    #[test]
    fn controller_message_is_pushed_once() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        let c = b.on_cycle(false, true).unwrap();
        assert_eq!(c.stiffness, [0.8; JOINTS]);
        assert_eq!(c.position, [0.1; JOINTS]);
        assert_eq!(b.on_cycle(false, true), None);
    }

    #[test]
    fn silent_controller_pushes_nothing_so_controller_lost_ramp_takes_over() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        assert!(b.on_cycle(false, true).is_some());
        for _ in 0..30 {
            assert_eq!(b.on_cycle(false, true), None);
        }
        assert_eq!(b.silent_cycles(), 30);
        b.on_message(&stiff());
        assert!(b.on_cycle(false, true).is_some());
        assert_eq!(b.silent_cycles(), 0);
    }

    #[test]
    fn disconnected_controller_pushes_nothing() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        b.controller_detached();
        assert_eq!(b.on_cycle(false, true), None);
    }

    #[test]
    fn new_controller_starts_limp_at_measured_positions() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        b.on_cycle(false, true);
        b.controller_attached(&[0.4; JOINTS]);
        b.on_message(&Actuation {
            chest: Some([1.0, 0.0, 0.0]),
            ..Actuation::default()
        });
        let c = b.on_cycle(false, true).unwrap();
        assert_eq!(c.stiffness, [0.0; JOINTS]);
        assert_eq!(c.position, [0.4; JOINTS]);
        assert_eq!(c.chest_led, [255, 0, 0]);
    }

    #[test]
    fn trip_forces_stiffness_zero_whatever_the_client_sends() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        let c = b.on_cycle(true, true).unwrap();
        assert_eq!(c.stiffness, [0.0; JOINTS]);
        assert_eq!(c.position, [0.1; JOINTS]);
    }

    #[test]
    fn rearm_without_wake_never_resumes_motion() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        // Tripped while the awake flag stays set (an adapter that does not
        // clear it): re-arming alone never releases.
        b.on_message(&stiff());
        b.on_cycle(true, true);
        for _ in 0..100 {
            b.on_message(&stiff());
            let c = b.on_cycle(false, true).unwrap();
            assert_eq!(c.stiffness, [0.0; JOINTS]);
        }
        assert!(b.held());
    }

    #[test]
    fn wake_after_rearm_resumes_motion() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        b.on_cycle(true, false); // tripped, the runtime clears awake
        b.on_message(&stiff());
        assert_eq!(b.on_cycle(false, false).unwrap().stiffness, [0.0; JOINTS]); // re-armed, asleep
        b.on_message(&stiff());
        assert_eq!(b.on_cycle(false, true).unwrap().stiffness, [0.8; JOINTS]); // woken
        assert!(!b.held());
    }

    #[test]
    fn wake_while_still_tripped_does_not_release() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_cycle(true, false);
        b.on_cycle(true, true);
        b.on_message(&stiff());
        assert_eq!(b.on_cycle(true, true).unwrap().stiffness, [0.0; JOINTS]);
        assert!(b.held());
    }

    #[test]
    fn trip_pushes_a_limp_command_every_cycle_even_without_a_client_message() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        assert_eq!(b.on_cycle(false, true).unwrap().stiffness, [0.8; JOINTS]);
        // The client goes silent as the switch trips: limp commands still go out.
        for (tripped, awake) in [(true, false), (true, false), (false, false), (false, false)] {
            assert_eq!(b.on_cycle(tripped, awake).unwrap().stiffness, [0.0; JOINTS]);
        }
        // Woken, client still silent: nothing pushed, the runtime keeps the
        // limp command.
        assert_eq!(b.on_cycle(false, true), None);
        b.controller_detached();
        assert_eq!(b.on_cycle(true, false).unwrap().stiffness, [0.0; JOINTS]);
    }

    #[test]
    fn not_awake_forces_stiffness_zero() {
        let mut b = Bridge::new();
        b.controller_attached(&[0.0; JOINTS]);
        b.on_message(&stiff());
        assert_eq!(b.on_cycle(false, false).unwrap().stiffness, [0.0; JOINTS]);
    }
}
