//! The runtime's motion state, published in the page's `motion` word so
//! that every reader (`naoctl status`, the beacon) sees a robot that is
//! limp and waiting for a person's wake.

/// What the runtime's last frame let the joints do. The discriminant is the
/// code stored in the page (`docs/page.md`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Motion {
    /// No runtime said anything since the page was made whole or the
    /// driver was cleared.
    #[default]
    None = 0,
    /// Limp: the switch is tripped (or the page lost).
    LimpTripped = 1,
    /// Limp: re-armed, waiting for a person's wake.
    LimpWaitingForWake = 2,
    /// Awake: the controller's commands pass.
    Awake = 3,
    /// Bring-up: only the bring-up gate's one joint may be stiff.
    BringUp = 4,
}

impl Motion {
    /// Every state, in code order.
    pub const ALL: [Motion; 5] = [
        Motion::None,
        Motion::LimpTripped,
        Motion::LimpWaitingForWake,
        Motion::Awake,
        Motion::BringUp,
    ];

    /// The code stored in the page.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The state stored as `code`, if any.
    pub fn from_code(code: u32) -> Option<Motion> {
        Motion::ALL.get(code as usize).copied()
    }

    /// The name `naoctl status --json` and the beacon give.
    pub fn name(self) -> &'static str {
        match self {
            Motion::None => "none",
            Motion::LimpTripped => "limp-tripped",
            Motion::LimpWaitingForWake => "limp-waiting-for-wake",
            Motion::Awake => "awake",
            Motion::BringUp => "bring-up",
        }
    }

    /// The state with `name`, if any.
    pub fn from_name(name: &str) -> Option<Motion> {
        Motion::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn motion_codes_and_names_round_trip() {
        for (i, m) in Motion::ALL.into_iter().enumerate() {
            assert_eq!(m.code(), i as u32);
            assert_eq!(Motion::from_code(m.code()), Some(m));
            assert_eq!(Motion::from_name(m.name()), Some(m));
        }
        assert_eq!(Motion::from_code(5), None);
        assert_eq!(Motion::from_name("Awake"), None);
    }
}
