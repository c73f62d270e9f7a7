//! Controllers: users of the library API that run in their own thread.
//!
//! A [`Controller`] turns each cycle's sensors into a command (or none);
//! [`run`] drives one with a [`ProgramIo`] until the runtime stops. `nao-rs
//! run --controller none|stand` uses these; `--controller lola` hands the
//! `ProgramIo` to the LoLA socket (`crate::lola`) instead.
//!
//! [`Stand`] ramps slowly into a standing pose and drops to its unstiff
//! state while the runtime holds the robot limp. It keeps no latch of its
//! own: "limp after a trip until a person's wake after the re-arm" is the
//! runtime's rule, below every controller (`nao_wire::protocol::gate`); the stand
//! controller follows what each cycle reports (`SwitchState::limp`) and
//! ramps afresh from the measured pose when it ends.

use nao_wire::{Command, Joint as J, JOINTS};

use super::program::{ProgramIo, SensorFrame};

/// One cycle's decision.
pub trait Controller: Send {
    /// The command for the next cycle, or `None` to send nothing.
    fn step(&mut self, sensors: &SensorFrame) -> Option<Command>;
}

/// Commands nothing (`--controller none`): HAL's controller-lost ramp
/// keeps every joint at stiffness 0.
#[derive(Debug, Default, Clone, Copy)]
pub struct Idle;

impl Controller for Idle {
    fn step(&mut self, _sensors: &SensorFrame) -> Option<Command> {
        None
    }
}

/// The standing pose, radians, joint index order (knees slightly bent,
/// arms down along the body).
pub(crate) const STAND_POSE: [f32; JOINTS] = {
    let mut p = [0.0f32; JOINTS];
    p[J::LShoulderPitch.index()] = 1.5;
    p[J::LShoulderRoll.index()] = 0.15;
    p[J::LElbowYaw.index()] = -1.2;
    p[J::LElbowRoll.index()] = -0.4;
    p[J::LHipPitch.index()] = -0.45;
    p[J::LKneePitch.index()] = 0.9;
    p[J::LAnklePitch.index()] = -0.45;
    p[J::RHipPitch.index()] = -0.45;
    p[J::RKneePitch.index()] = 0.9;
    p[J::RAnklePitch.index()] = -0.45;
    p[J::RShoulderPitch.index()] = 1.5;
    p[J::RShoulderRoll.index()] = -0.15;
    p[J::RElbowYaw.index()] = 1.2;
    p[J::RElbowRoll.index()] = 0.4;
    p
};
/// The stiffness when standing.
pub(crate) const STAND_STIFFNESS: f32 = 0.6;
/// The ramp into the pose: 3 s at 12 ms.
pub(crate) const RAMP_CYCLES: u32 = 250;

/// Where the stand controller is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum StandPhase {
    /// Stiffness 0: the runtime holds the robot limp (tripped, or
    /// re-armed and waiting for a wake).
    Limp,
    /// Ramping from the pose measured at the start of the ramp.
    Ramping {
        /// Cycles into the ramp.
        step: u32,
        /// The measured positions when the ramp began.
        from: [f32; JOINTS],
    },
    /// In the pose.
    Standing,
}

/// The `stand` controller (pure: the sensors in, a command out).
#[derive(Debug, Clone)]
pub struct Stand {
    phase: StandPhase,
}

impl Default for Stand {
    fn default() -> Self {
        Self::new()
    }
}

impl Stand {
    /// A stand controller: ramps up from the measured pose whenever the
    /// runtime does not hold the robot limp (at once on a switch armed at
    /// start; after a trip, once re-armed and woken).
    pub fn new() -> Self {
        Stand {
            phase: StandPhase::Limp,
        }
    }

    /// The phase.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> StandPhase {
        self.phase
    }

    fn limp(sensors: &SensorFrame) -> Command {
        Command {
            position: sensors.position,
            ..Command::default()
        }
    }
}

impl Controller for Stand {
    fn step(&mut self, s: &SensorFrame) -> Option<Command> {
        if s.switch.tripped || s.switch.limp {
            // Held limp by the runtime: unstiff at the measured positions,
            // and the ramp starts afresh when it ends.
            self.phase = StandPhase::Limp;
            return Some(Self::limp(s));
        }
        if self.phase == StandPhase::Limp {
            self.phase = StandPhase::Ramping {
                step: 0,
                from: s.position,
            };
        }
        let mut c = Command::default();
        match &mut self.phase {
            StandPhase::Ramping { step, from } => {
                *step += 1;
                let a = *step as f32 / RAMP_CYCLES as f32;
                for j in 0..JOINTS {
                    c.position[j] = from[j] + (STAND_POSE[j] - from[j]) * a;
                    c.stiffness[j] = STAND_STIFFNESS * a;
                }
                if *step >= RAMP_CYCLES {
                    self.phase = StandPhase::Standing;
                }
            }
            StandPhase::Standing | StandPhase::Limp => {
                c.position = STAND_POSE;
                c.stiffness = [STAND_STIFFNESS; JOINTS];
            }
        }
        c.chest_led = [0, 0, 255];
        Some(c)
    }
}

/// Drives `controller` with `io` until the runtime stops: waits for each
/// cycle's sensors, pushes the command (a full ring drops it: the newer
/// command of the next cycle follows).
pub fn run(io: &mut ProgramIo, controller: &mut dyn Controller) {
    while io.handle().is_running() {
        let Some(s) = io.next_sensors(200_000_000) else {
            continue;
        };
        if let Some(c) = controller.step(&s) {
            let _ = io.push_command(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::SwitchState;
    use crate::Reason;

    fn frame(tripped: bool, limp: bool) -> SensorFrame {
        SensorFrame {
            switch: SwitchState {
                tripped,
                reason: tripped.then_some(Reason::Naoctl),
                page_lost: false,
                limp: tripped || limp,
            },
            position: [0.1; JOINTS],
            ..SensorFrame::default()
        }
    }

    #[test]
    fn stand_ramps_slowly_into_the_pose() {
        let mut st = Stand::new();
        let first = st.step(&frame(false, false)).unwrap();
        let knee = first.stiffness[J::LKneePitch];
        assert!(knee > 0.0 && knee < 0.01);
        for _ in 1..RAMP_CYCLES {
            st.step(&frame(false, false));
        }
        assert_eq!(st.phase(), StandPhase::Standing);
        let c = st.step(&frame(false, false)).unwrap();
        assert_eq!(c.position, STAND_POSE);
        assert_eq!(c.stiffness, [STAND_STIFFNESS; JOINTS]);
    }

    #[test]
    fn stand_drops_to_unstiff_while_tripped() {
        let mut st = Stand::new();
        for _ in 0..300 {
            st.step(&frame(false, false));
        }
        let c = st.step(&frame(true, true)).unwrap();
        assert_eq!(c.stiffness, [0.0; JOINTS]);
        assert_eq!(c.position, [0.1; JOINTS], "at the measured positions");
        assert_eq!(st.phase(), StandPhase::Limp);
    }

    #[test]
    fn stand_follows_the_runtimes_limp_latch_and_ramps_afresh_when_woken() {
        let mut st = Stand::new();
        for _ in 0..300 {
            st.step(&frame(false, false));
        }
        // Re-armed but not woken: the runtime reports limp; so is stand.
        for _ in 0..10 {
            assert_eq!(
                st.step(&frame(false, true)).unwrap().stiffness,
                [0.0; JOINTS]
            );
        }
        // Woken: the ramp starts again from the measured pose, not a jump.
        let c = st.step(&frame(false, false)).unwrap();
        let head = c.stiffness[J::HeadYaw];
        assert!(head > 0.0 && head < 0.01, "{c:?}");
        assert!(matches!(st.phase(), StandPhase::Ramping { step: 1, .. }));
    }

    #[test]
    fn idle_controller_commands_nothing() {
        assert!(Idle.step(&frame(false, false)).is_none());
    }
}
