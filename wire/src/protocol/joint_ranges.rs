//! The NAO V6's joint ranges: the one table of them in the house.
//!
//! Source: Aldebaran (SoftBank Robotics), "NAO - Joints", the technical
//! documentation of the NAO V6 (NAOqi 2.8:
//! <http://doc.aldebaran.com/2-8/family/nao_technical/joints_naov6.html>);
//! the NAO V4.0 page gives the same values for every joint
//! (<https://www.cs.cmu.edu/~cga/nao/doc/reference-documentation/nao/hardware/kinematics/nao-joints-40.html>).
//! The radians are the documentation's own (rounded by Aldebaran from the
//! degrees). Two things the table does not carry:
//!
//! - The head's pitch range narrows at large yaw (the shell, a table over
//!   yaw on the same page); the table gives the range at yaw 0, the
//!   widest.
//! - Aldebaran gives the hands as "open and close", 0 (closed) to 1 (open),
//!   not as an angle. nao-rs sends a hand's position through the same
//!   encoding as every joint's (`docs/protocol.md` section 4); no public
//!   source says what unit the hand's board takes, so the table keeps 0..1
//!   as Aldebaran states it.
//!
//! The normal runtime never clamps to these ranges (teams command some joints
//! past them on purpose, to press against an end stop): the bring-up window
//! does ([`super::bringup`]). The joints by name: [`Joint::from_name`].

use crate::command::{Joint, JOINTS};

/// A joint's range in radians, `min <= max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JointRange {
    /// The smallest position, rad.
    pub min: f32,
    /// The largest position, rad.
    pub max: f32,
}

impl JointRange {
    const fn new(min: f32, max: f32) -> Self {
        JointRange { min, max }
    }

    /// Whether `position` (rad) is inside the range (its ends included).
    #[cfg(test)]
    pub(crate) fn contains(&self, position: f32) -> bool {
        self.min <= position && position <= self.max
    }
}

/// Every joint's range, in joint index order ([`Joint`] indexes it through
/// [`joint_range`]).
#[rustfmt::skip]
pub(crate) const JOINT_RANGES: [JointRange; JOINTS] = [
    JointRange::new(-2.0857, 2.0857),     // HeadYaw            -119.5 .. 119.5 deg
    JointRange::new(-0.6720, 0.5149),     // HeadPitch           -38.5 .. 29.5
    JointRange::new(-2.0857, 2.0857),     // LShoulderPitch     -119.5 .. 119.5
    JointRange::new(-0.3142, 1.3265),     // LShoulderRoll       -18   .. 76
    JointRange::new(-2.0857, 2.0857),     // LElbowYaw          -119.5 .. 119.5
    JointRange::new(-1.5446, -0.0349),    // LElbowRoll          -88.5 .. -2
    JointRange::new(-1.8238, 1.8238),     // LWristYaw          -104.5 .. 104.5
    JointRange::new(-1.145303, 0.740810), // LHipYawPitch       -65.62 .. 42.44
    JointRange::new(-0.379472, 0.790477), // LHipRoll           -21.74 .. 45.29
    JointRange::new(-1.535889, 0.484090), // LHipPitch          -88.00 .. 27.73
    JointRange::new(-0.092346, 2.112528), // LKneePitch          -5.29 .. 121.04
    JointRange::new(-1.189516, 0.922747), // LAnklePitch        -68.15 .. 52.86
    JointRange::new(-0.397880, 0.769001), // LAnkleRoll         -22.79 .. 44.06
    JointRange::new(-0.790477, 0.379472), // RHipRoll           -45.29 .. 21.74
    JointRange::new(-1.535889, 0.484090), // RHipPitch          -88.00 .. 27.73
    JointRange::new(-0.103083, 2.120198), // RKneePitch          -5.90 .. 121.47
    JointRange::new(-1.186448, 0.932056), // RAnklePitch        -67.97 .. 53.40
    JointRange::new(-0.768992, 0.397935), // RAnkleRoll         -44.06 .. 22.80
    JointRange::new(-2.0857, 2.0857),     // RShoulderPitch     -119.5 .. 119.5
    JointRange::new(-1.3265, 0.3142),     // RShoulderRoll       -76   .. 18
    JointRange::new(-2.0857, 2.0857),     // RElbowYaw          -119.5 .. 119.5
    JointRange::new(0.0349, 1.5446),      // RElbowRoll            2   .. 88.5
    JointRange::new(-1.8238, 1.8238),     // RWristYaw          -104.5 .. 104.5
    JointRange::new(0.0, 1.0),            // LHand              closed 0 .. open 1
    JointRange::new(0.0, 1.0),            // RHand              closed 0 .. open 1
];

/// Joint `j`'s range.
pub(crate) const fn joint_range(j: Joint) -> JointRange {
    JOINT_RANGES[j.index()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joint_ranges_are_ordered_and_the_right_side_mirrors_the_left() {
        for j in Joint::ALL {
            let r = joint_range(j);
            assert!(r.min < r.max, "{j}");
            assert!(r.contains(r.min) && r.contains(r.max) && !r.contains(r.max + 0.01));
        }
        // Rolls mirror (min and max swap sign); pitches and yaws are equal.
        let mirrored = [
            (Joint::LShoulderRoll, Joint::RShoulderRoll),
            (Joint::LElbowRoll, Joint::RElbowRoll),
            (Joint::LHipRoll, Joint::RHipRoll),
        ];
        for (l, r) in mirrored {
            let (l, r) = (joint_range(l), joint_range(r));
            assert_eq!((l.min, l.max), (-r.max, -r.min));
        }
        let equal = [
            (Joint::LShoulderPitch, Joint::RShoulderPitch),
            (Joint::LElbowYaw, Joint::RElbowYaw),
            (Joint::LWristYaw, Joint::RWristYaw),
            (Joint::LHipPitch, Joint::RHipPitch),
            (Joint::LHand, Joint::RHand),
        ];
        for (l, r) in equal {
            assert_eq!(joint_range(l), joint_range(r));
        }
        // The radians agree with Aldebaran's degrees to their rounding.
        let deg = |d: f32| d.to_radians();
        assert!((joint_range(Joint::HeadPitch).min - deg(-38.5)).abs() < 1e-4);
        assert!((joint_range(Joint::LKneePitch).max - deg(121.04)).abs() < 1e-4);
        assert!((joint_range(Joint::RAnkleRoll).min - deg(-44.06)).abs() < 1e-4);
    }
}
