//! HAL's stiffness safety (`docs/protocol.md` section 9): three levels per mille, each
//! updated once per cycle, that scale every joint's stiffness.

/// The highest level.
pub(crate) const LEVEL_MAX: u16 = 1000;
/// Cycles in a row without a new command from which the controller counts as
/// lost.
pub(crate) const CONTROLLER_LOST_AFTER: u32 = 25;
/// Controller lost: the level falls by this much a cycle.
pub(crate) const CONTROLLER_LOST_DOWN: u16 = 2;
/// Controller back: the level rises by this much a cycle.
pub(crate) const CONTROLLER_LOST_UP: u16 = 5;
/// A cycle that starts more than this after the one before is a stall (ns).
pub(crate) const STALL_GAP_NS: u64 = 100_000_000;
/// After a stall the level stays 0 this long (ns).
pub(crate) const STALL_HOLD_NS: u64 = 1_000_000_000;
/// After the hold the level rises by this much a cycle.
pub(crate) const STALL_UP: u16 = 5;
/// Battery current above this (mA) is an over-current.
pub(crate) const OVERCURRENT_MA: i32 = 4500;
/// The over-current level falls by this much a cycle ...
pub(crate) const OVERCURRENT_DOWN: u16 = 10;
/// ... but not below this.
pub(crate) const OVERCURRENT_FLOOR: u16 = 240;
/// Without over-current the level rises by this much a cycle.
pub(crate) const OVERCURRENT_UP: u16 = 10;

/// The three levels, per mille.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// Controller lost.
    pub controller: u16,
    /// Cycle stall.
    pub stall: u16,
    /// Battery over-current.
    pub overcurrent: u16,
}

impl Default for Levels {
    fn default() -> Self {
        Levels {
            controller: LEVEL_MAX,
            stall: LEVEL_MAX,
            overcurrent: LEVEL_MAX,
        }
    }
}

impl Levels {
    /// `s_q * lost * stall * overcurrent / 1_000_000_000`, floored (section 10
    /// rule 2).
    #[inline]
    pub(crate) fn scale(&self, s_q: u16) -> u16 {
        (s_q as u64 * self.controller as u64 * self.stall as u64 * self.overcurrent as u64
            / 1_000_000_000) as u16
    }
}

/// The safety state machine. Time is monotonic nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Safety {
    levels: Levels,
    without_command: u32,
    stall_until_ns: u64,
    last_start_ns: Option<u64>,
}

impl Default for Safety {
    fn default() -> Self {
        Self::new()
    }
}

impl Safety {
    /// Every level at 1000.
    pub fn new() -> Self {
        Safety {
            levels: Levels::default(),
            without_command: 0,
            stall_until_ns: 0,
            last_start_ns: None,
        }
    }

    /// The levels now.
    #[cfg(test)]
    pub(crate) fn levels(&self) -> Levels {
        self.levels
    }

    /// One cycle's update: `start_ns` is the cycle's start, `new_command`
    /// whether the controller sent a command for this cycle,
    /// `battery_current_ma` the latest battery current (0 before any).
    pub fn step(&mut self, start_ns: u64, new_command: bool, battery_current_ma: i16) -> Levels {
        // Controller lost.
        self.without_command = if new_command {
            0
        } else {
            self.without_command.saturating_add(1)
        };
        let l = &mut self.levels;
        l.controller = if self.without_command >= CONTROLLER_LOST_AFTER {
            l.controller.saturating_sub(CONTROLLER_LOST_DOWN)
        } else {
            (l.controller + CONTROLLER_LOST_UP).min(LEVEL_MAX)
        };
        // Cycle stall (not in the first cycle).
        let stalled = match self.last_start_ns {
            Some(prev) => start_ns.saturating_sub(prev) > STALL_GAP_NS,
            None => false,
        };
        self.last_start_ns = Some(start_ns);
        if stalled {
            l.stall = 0;
            self.stall_until_ns = start_ns.saturating_add(STALL_HOLD_NS);
        } else if start_ns < self.stall_until_ns {
            l.stall = 0;
        } else {
            l.stall = (l.stall + STALL_UP).min(LEVEL_MAX);
        }
        // Battery over-current.
        l.overcurrent = if battery_current_ma as i32 > OVERCURRENT_MA {
            l.overcurrent
                .saturating_sub(OVERCURRENT_DOWN)
                .max(OVERCURRENT_FLOOR)
        } else {
            (l.overcurrent + OVERCURRENT_UP).min(LEVEL_MAX)
        };
        *l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Steps `s` every 12 ms from `t` (commanded or not) until `done`;
    /// returns how many cycles that took.
    fn cycles_until(s: &mut Safety, t: &mut u64, command: bool, done: fn(&Levels) -> bool) -> u32 {
        let mut cycles = 0;
        while !done(&s.levels()) {
            *t += 12 * MS;
            s.step(*t, command, 0);
            cycles += 1;
        }
        cycles
    }

    #[test]
    fn controller_lost_ramps_down_in_500_cycles() {
        let mut s = Safety::new();
        let mut t = 0;
        for _ in 0..24 {
            t += 12 * MS;
            assert_eq!(s.step(t, false, 0).controller, 1000);
        }
        assert_eq!(
            cycles_until(&mut s, &mut t, false, |l| l.controller == 0),
            500
        );
    }

    #[test]
    fn controller_back_ramps_up_in_200_cycles() {
        let mut s = Safety::new();
        let mut t = 0;
        // Lost until the level is 0.
        cycles_until(&mut s, &mut t, false, |l| l.controller == 0);
        assert_eq!(
            cycles_until(&mut s, &mut t, true, |l| l.controller >= 1000),
            200
        );
    }

    #[test]
    fn controller_lost_needs_25_cycles_in_a_row() {
        let mut s = Safety::new();
        for i in 0..100u64 {
            // a command every 20th cycle keeps n below 25
            assert_eq!(s.step(i * 12 * MS, i % 20 == 0, 0).controller, 1000);
        }
    }

    #[test]
    fn cycle_stall_over_100_ms_holds_0_for_1000_ms_then_ramps_up() {
        let mut s = Safety::new();
        s.step(0, true, 0);
        assert_eq!(
            s.step(100 * MS, true, 0).stall,
            1000,
            "exactly 100 ms is no stall"
        );
        assert_eq!(s.step(201 * MS, true, 0).stall, 0);
        let mut t = 201 * MS;
        while t + 12 * MS < 1201 * MS {
            t += 12 * MS;
            assert_eq!(s.step(t, true, 0).stall, 0, "at {t}");
        }
        assert_eq!(s.step(1201 * MS, true, 0).stall, 5);
        assert_eq!(s.step(1213 * MS, true, 0).stall, 10);
    }

    #[test]
    fn cycle_stall_is_not_checked_in_the_first_cycle() {
        let mut s = Safety::new();
        assert_eq!(s.step(5_000 * MS, true, 0).stall, 1000);
    }

    #[test]
    fn battery_overcurrent_above_4500_ma_falls_to_240() {
        let mut s = Safety::new();
        assert_eq!(s.step(0, true, 4500).overcurrent, 1000);
        assert_eq!(s.step(MS, true, 4501).overcurrent, 990);
        for i in 0..200 {
            s.step((2 + i) * MS, true, 5200);
        }
        assert_eq!(s.levels().overcurrent, 240);
        assert_eq!(s.step(300 * MS, true, 100).overcurrent, 250);
    }

    #[test]
    fn stiffness_is_scaled_by_the_three_levels_floored() {
        let l = Levels {
            controller: 999,
            stall: 1000,
            overcurrent: 1000,
        };
        assert_eq!(l.scale(500), 499);
        let l = Levels {
            controller: 500,
            stall: 500,
            overcurrent: 240,
        };
        assert_eq!(l.scale(1000), 60);
        assert_eq!(Levels::default().scale(1000), 1000);
    }
}
