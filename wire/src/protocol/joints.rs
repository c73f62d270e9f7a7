//! Each joint's values in a frame (`docs/protocol.md` section 10).

use super::safety::Levels;
use super::tables::{encode_position, joint_board, stiffness_per_mille};
use crate::command::{Command, JOINTS};

/// One joint's wire values: stiffness per mille and position count.
///
/// `accepted` is whether j's board passed the handshake; `measured` is the
/// latest measured count (`zero[j]` while none was measured yet).
#[inline]
pub(crate) fn joint_value(
    j: usize,
    command: &Command,
    levels: &Levels,
    accepted: bool,
    zero: u16,
    measured: u16,
) -> (u16, u16) {
    let s = command.stiffness[j];
    let p = command.position[j];
    // Rule 1: quantise; non-finite s or p is limp.
    let s_q = if s.is_finite() && p.is_finite() {
        stiffness_per_mille(s)
    } else {
        0
    };
    // Rule 2: scale by the three levels.
    let mut s_eff = levels.scale(s_q);
    // Rule 3: the handshake (the switch is the gate's: `super::gate`, applied
    // to the command before this).
    if !accepted {
        s_eff = 0;
    }
    // Rule 4: a joint without stiffness follows its sensor.
    let pos = if s_eff == 0 {
        measured
    } else {
        encode_position(p, zero)
    };
    (s_eff, pos)
}

/// Every joint's wire values, in joint index order: `(stiffness per mille,
/// position count)`. `board_accepted[b]` is joint board b's handshake result.
pub(crate) fn joint_values(
    command: &Command,
    levels: &Levels,
    board_accepted: &[bool; 13],
    zero: &[u16; JOINTS],
    measured: &[u16; JOINTS],
) -> ([u16; JOINTS], [u16; JOINTS]) {
    let mut stiffness = [0u16; JOINTS];
    let mut position = [0u16; JOINTS];
    for j in 0..JOINTS {
        let (s, p) = joint_value(
            j,
            command,
            levels,
            board_accepted[joint_board(j)],
            zero[j],
            measured[j],
        );
        stiffness[j] = s;
        position[j] = p;
    }
    (stiffness, position)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: f32, p: f32) -> Command {
        Command {
            stiffness: [s; JOINTS],
            position: [p; JOINTS],
            ..Command::default()
        }
    }

    const FULL: Levels = Levels {
        controller: 1000,
        stall: 1000,
        overcurrent: 1000,
    };

    /// Joint 0 commanded stiffness `s` at position `p`, measured at
    /// `measured`: full levels, not held, its board accepted, zero 2048.
    fn unheld(s: f32, p: f32, measured: u16) -> (u16, u16) {
        joint_value(0, &cmd(s, p), &FULL, true, 2048, measured)
    }

    #[test]
    fn joint_stiffness_is_rounded_per_mille_and_clamped() {
        assert_eq!(unheld(0.5, 0.0, 2000), (500, 2048));
        assert_eq!(unheld(1.5, 0.0, 2000).0, 1000);
        assert_eq!(unheld(-1.0, 0.0, 2000), (0, 2000));
    }

    #[test]
    fn joint_with_non_finite_stiffness_or_position_is_limp_at_its_measured_position() {
        assert_eq!(unheld(0.5, f32::NAN, 1999), (0, 1999));
        assert_eq!(unheld(f32::INFINITY, 0.1, 1999), (0, 1999));
    }

    #[test]
    fn joint_stiffness_is_scaled_by_the_safety_levels() {
        let l = Levels {
            controller: 500,
            stall: 1000,
            overcurrent: 240,
        };
        assert_eq!(joint_value(0, &cmd(1.0, 0.0), &l, true, 2048, 0).0, 120);
    }

    #[test]
    fn joint_is_limp_when_its_board_is_not_accepted() {
        let c = cmd(1.0, 0.3);
        assert_eq!(joint_value(3, &c, &FULL, false, 2048, 2222), (0, 2222));
    }

    #[test]
    fn stiff_joint_gets_the_encoded_commanded_position() {
        let (s, p) = joint_value(0, &cmd(1.0, 0.3), &FULL, true, 2051, 0);
        assert_eq!(s, 1000);
        assert_eq!(
            p,
            2051 + (0.3f32 as f64 * 4096.0 / std::f64::consts::TAU).round() as u16
        );
    }
}
