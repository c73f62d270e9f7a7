//! The controller's command for one cycle: what a robot program asks of the
//! body. The same type travels through the runtime's command ring, the
//! recording's `command` lines and the replay.

/// Number of joints (`docs/protocol.md` section 4).
pub const JOINTS: usize = 25;

/// A joint of the body, by its LoLA name; its discriminant is the joint
/// index of every per-joint array (commands, sensors, the frame's slots).
///
/// Arrays of [`JOINTS`] values are indexed by it directly:
///
/// ```
/// use nao_wire::{Command, Joint};
/// let mut c = Command::default();
/// c.position[Joint::LShoulderPitch] = 1.5;
/// assert_eq!(c.position[2], 1.5);
/// assert_eq!(Joint::LShoulderPitch.name(), "LShoulderPitch");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Joint {
    /// `HeadYaw`, joint index 0.
    HeadYaw = 0,
    /// `HeadPitch`, joint index 1.
    HeadPitch = 1,
    /// `LShoulderPitch`, joint index 2.
    LShoulderPitch = 2,
    /// `LShoulderRoll`, joint index 3.
    LShoulderRoll = 3,
    /// `LElbowYaw`, joint index 4.
    LElbowYaw = 4,
    /// `LElbowRoll`, joint index 5.
    LElbowRoll = 5,
    /// `LWristYaw`, joint index 6.
    LWristYaw = 6,
    /// `LHipYawPitch`, joint index 7.
    LHipYawPitch = 7,
    /// `LHipRoll`, joint index 8.
    LHipRoll = 8,
    /// `LHipPitch`, joint index 9.
    LHipPitch = 9,
    /// `LKneePitch`, joint index 10.
    LKneePitch = 10,
    /// `LAnklePitch`, joint index 11.
    LAnklePitch = 11,
    /// `LAnkleRoll`, joint index 12.
    LAnkleRoll = 12,
    /// `RHipRoll`, joint index 13.
    RHipRoll = 13,
    /// `RHipPitch`, joint index 14.
    RHipPitch = 14,
    /// `RKneePitch`, joint index 15.
    RKneePitch = 15,
    /// `RAnklePitch`, joint index 16.
    RAnklePitch = 16,
    /// `RAnkleRoll`, joint index 17.
    RAnkleRoll = 17,
    /// `RShoulderPitch`, joint index 18.
    RShoulderPitch = 18,
    /// `RShoulderRoll`, joint index 19.
    RShoulderRoll = 19,
    /// `RElbowYaw`, joint index 20.
    RElbowYaw = 20,
    /// `RElbowRoll`, joint index 21.
    RElbowRoll = 21,
    /// `RWristYaw`, joint index 22.
    RWristYaw = 22,
    /// `LHand`, joint index 23.
    LHand = 23,
    /// `RHand`, joint index 24.
    RHand = 24,
}

impl Joint {
    /// Every joint, in joint index order.
    pub const ALL: [Joint; JOINTS] = [
        Joint::HeadYaw,
        Joint::HeadPitch,
        Joint::LShoulderPitch,
        Joint::LShoulderRoll,
        Joint::LElbowYaw,
        Joint::LElbowRoll,
        Joint::LWristYaw,
        Joint::LHipYawPitch,
        Joint::LHipRoll,
        Joint::LHipPitch,
        Joint::LKneePitch,
        Joint::LAnklePitch,
        Joint::LAnkleRoll,
        Joint::RHipRoll,
        Joint::RHipPitch,
        Joint::RKneePitch,
        Joint::RAnklePitch,
        Joint::RAnkleRoll,
        Joint::RShoulderPitch,
        Joint::RShoulderRoll,
        Joint::RElbowYaw,
        Joint::RElbowRoll,
        Joint::RWristYaw,
        Joint::LHand,
        Joint::RHand,
    ];

    /// The joint index (0..25).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The joint of index `i`, if `i < 25`.
    pub(crate) const fn from_index(i: usize) -> Option<Joint> {
        if i < JOINTS {
            Some(Joint::ALL[i])
        } else {
            None
        }
    }

    /// The LoLA name (`"LShoulderPitch"`).
    pub const fn name(self) -> &'static str {
        match self {
            Joint::HeadYaw => "HeadYaw",
            Joint::HeadPitch => "HeadPitch",
            Joint::LShoulderPitch => "LShoulderPitch",
            Joint::LShoulderRoll => "LShoulderRoll",
            Joint::LElbowYaw => "LElbowYaw",
            Joint::LElbowRoll => "LElbowRoll",
            Joint::LWristYaw => "LWristYaw",
            Joint::LHipYawPitch => "LHipYawPitch",
            Joint::LHipRoll => "LHipRoll",
            Joint::LHipPitch => "LHipPitch",
            Joint::LKneePitch => "LKneePitch",
            Joint::LAnklePitch => "LAnklePitch",
            Joint::LAnkleRoll => "LAnkleRoll",
            Joint::RHipRoll => "RHipRoll",
            Joint::RHipPitch => "RHipPitch",
            Joint::RKneePitch => "RKneePitch",
            Joint::RAnklePitch => "RAnklePitch",
            Joint::RAnkleRoll => "RAnkleRoll",
            Joint::RShoulderPitch => "RShoulderPitch",
            Joint::RShoulderRoll => "RShoulderRoll",
            Joint::RElbowYaw => "RElbowYaw",
            Joint::RElbowRoll => "RElbowRoll",
            Joint::RWristYaw => "RWristYaw",
            Joint::LHand => "LHand",
            Joint::RHand => "RHand",
        }
    }

    /// The joint named `name` (its LoLA name, exactly), if any.
    pub fn from_name(name: &str) -> Option<Joint> {
        Joint::ALL.into_iter().find(|j| j.name() == name)
    }
}

impl core::fmt::Display for Joint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[T; JOINTS]` indexed by [`Joint`], for the element types the per-joint
/// arrays hold (the orphan rule allows it only for concrete types).
macro_rules! index_by_joint {
    ($($t:ty),*) => {$(
        impl core::ops::Index<Joint> for [$t; JOINTS] {
            type Output = $t;
            fn index(&self, j: Joint) -> &$t {
                &self[j.index()]
            }
        }
        impl core::ops::IndexMut<Joint> for [$t; JOINTS] {
            fn index_mut(&mut self, j: Joint) -> &mut $t {
                &mut self[j.index()]
            }
        }
    )*};
}

index_by_joint!(f32, f64, bool, u8, i8, u16, i16, i32, i64, u32, u64, usize);

/// One command: 25 stiffnesses (0..1) and positions (radians) in joint index
/// order ([`Joint`] indexes them), the LEDs the chest board drives, and the sonar mode.
///
/// Values come straight from the program: non-finite numbers and stiffness
/// outside 0..1 are allowed here and made safe in the cycle (`docs/protocol.md` section 10).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joints_by_name_and_index_agree() {
        for (i, j) in Joint::ALL.into_iter().enumerate() {
            assert_eq!(j.index(), i);
            assert_eq!(Joint::from_index(i), Some(j));
            assert_eq!(Joint::from_name(j.name()), Some(j));
        }
        assert_eq!(Joint::from_index(JOINTS), None);
        assert_eq!(Joint::from_name("lshoulderpitch"), None);
        let mut a = [0u16; JOINTS];
        a[Joint::RHand] = 7;
        assert_eq!(a[24], 7);
    }
}
