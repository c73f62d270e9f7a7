//! The controller's command for one cycle: what a robot program asks of the
//! body. The same type travels through the runtime's command ring, the
//! recording's `command` lines and the replay.

/// Number of joints (spec section 4).
pub const JOINTS: usize = 25;

/// One command: 25 stiffnesses (0..1) and positions (radians) in joint index
/// order, the LEDs the chest board drives, and the sonar mode.
///
/// Values come straight from the program: non-finite numbers and stiffness
/// outside 0..1 are allowed here and made safe in the cycle (spec section 10).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Command {
    /// Stiffness per joint, 0..=1 (clamped in the cycle).
    pub stiffness: [f32; JOINTS],
    /// Position per joint in radians.
    pub position: [f32; JOINTS],
    /// Chest LED r, g, b.
    pub chest_led: [u8; 3],
    /// Left foot LED r, g, b.
    pub left_foot_led: [u8; 3],
    /// Right foot LED r, g, b.
    pub right_foot_led: [u8; 3],
    /// Sonar mode byte.
    pub sonar_mode: u8,
}

impl Default for Command {
    fn default() -> Self {
        Command {
            stiffness: [0.0; JOINTS],
            position: [0.0; JOINTS],
            chest_led: [0; 3],
            left_foot_led: [0; 3],
            right_foot_led: [0; 3],
            sonar_mode: 0,
        }
    }
}
