//! The "limp until woken" latch: one rule, below every controller.
//!
//! After any trip, every joint's stiffness is 0 until a person wakes the
//! robot (`nao-rs wake`, [`super::Handle::wake`]) AFTER the switch was
//! re-armed, whatever any controller (`stand`, the LoLA socket, a program
//! using the library API) sends. A trip is any of:
//!
//! - the switch tripped (or the page lost) when the cycle read it;
//! - the page's trip count changed since the last cycle (any change, also
//!   a decrease: a repaired or replaced page starts again at 1), so a trip
//!   that was re-armed before the cycle read the page still counts;
//! - the page's re-arm stamp changed: a re-arm means a trip came before
//!   it (this covers a page another process repaired, its count back at
//!   1 which may be the value seen before, and re-armed between two reads);
//! - a trip from the last answer (chest button, heat, fault).
//!
//! A wake counts only if it was stamped at or after the page's last re-arm
//! (both on the Unix clock: the wake's arrival, the page's
//! `armed_at_unix_ns`), so `naoctl rearm; nao-rs wake` within one period
//! wakes, and a wake that came while tripped is used up and does nothing,
//! even when the re-arm follows within the same period. Commands are not a
//! way out: a controller cannot wake the robot.
//!
//! The latch sits between the controllers' command and the protocol core
//! (`nao_wire::protocol::cycle`), which stays HAL's model plus its safety
//! deviations (`docs/protocol.md`); the command it hands on is the one the core uses and the one
//! a recording records, so a recording needs no line for it. Pure: the time
//! and the observations are passed in; it allocates nothing.

use nao_wire::{Command, JOINTS};

/// What the cycle saw before building a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatchInput {
    /// The page's trip count as read for this frame.
    pub trip_count: u64,
    /// When the page was last re-armed (ns since the Unix epoch, the
    /// page's `armed_at_unix_ns`), as read for this frame.
    pub rearm_stamp: u64,
    /// The switch is tripped or the page is lost.
    pub tripped: bool,
    /// The last answer tripped the switch (chest button, heat, fault).
    pub answer_trip: bool,
    /// The newest wake since the last cycle (ns since the Unix epoch, the
    /// clock of the re-arm stamp), if any.
    pub wake_ns: Option<u64>,
}

/// Where the latch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatchState {
    /// Commands pass unchanged.
    Awake,
    /// A trip was seen; the switch has not been seen re-armed since.
    Tripped,
    /// The switch was seen re-armed at `since_ns` (the page's re-arm
    /// stamp); limp until a wake at or after that time.
    AwaitingWake {
        /// The page's re-arm time (ns since the Unix epoch).
        since_ns: u64,
    },
}

/// What one observation changed (for the log; at most one a cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing changed.
    Unchanged,
    /// A trip was seen: limp until re-armed and woken.
    Tripped,
    /// The switch was seen re-armed: still limp, waiting for a wake.
    Rearmed,
    /// A wake after the re-arm: commands pass again.
    Woken,
    /// A wake came while the switch is tripped: used up, no effect.
    WakeWhileTripped,
    /// A wake stamped before the page's re-arm: used up, no effect.
    WakeBeforeRearm,
}

/// The latch between the controllers and the protocol core.
#[derive(Debug, Clone)]
pub struct WakeLatch {
    state: LatchState,
    trip_count: u64,
    rearm_stamp: u64,
    /// The last command handed to the core (the core keeps using it
    /// through a controller's silence).
    last: Command,
    /// Whether `last` has a stiffness that is not 0.
    last_stiff: bool,
}

fn is_stiff(c: &Command) -> bool {
    // NaN counts as stiff here: any value that is not exactly 0.
    c.stiffness.iter().any(|&s| s != 0.0)
}

impl WakeLatch {
    /// The latch for a runtime that found the switch `tripped` (or armed)
    /// with `trip_count` and `rearm_stamp` when it started. Armed at start
    /// counts as awake:
    /// starting the runtime on an armed switch is a person's action; a
    /// fresh page starts tripped (`boot`), so a fresh boot needs a re-arm
    /// and a wake.
    pub fn new(tripped: bool, trip_count: u64, rearm_stamp: u64) -> Self {
        WakeLatch {
            state: if tripped {
                LatchState::Tripped
            } else {
                LatchState::Awake
            },
            trip_count,
            rearm_stamp,
            last: Command::default(),
            last_stiff: false,
        }
    }

    /// The state.
    pub fn state(&self) -> LatchState {
        self.state
    }

    /// True while every stiffness is held at 0.
    pub fn is_limp(&self) -> bool {
        self.state != LatchState::Awake
    }

    /// One cycle's observation, before its command is taken.
    pub fn observe(&mut self, o: &LatchInput) -> Change {
        let changed = o.trip_count != self.trip_count || o.rearm_stamp != self.rearm_stamp;
        self.trip_count = o.trip_count;
        self.rearm_stamp = o.rearm_stamp;
        let was = self.state;
        if o.tripped || o.answer_trip || changed {
            self.state = LatchState::Tripped;
        }
        if o.tripped || o.answer_trip {
            // Tripped now: a wake is used up.
            return if was != LatchState::Tripped {
                Change::Tripped
            } else if o.wake_ns.is_some() {
                Change::WakeWhileTripped
            } else {
                Change::Unchanged
            };
        }
        if self.state == LatchState::Awake {
            return Change::Unchanged;
        }
        // Armed now, after a trip (perhaps one seen only now, through the
        // count or the re-arm stamp). A wake counts when it was stamped at or
        // after the page's last re-arm; an older one came while tripped and
        // is used up.
        let since_ns = o.rearm_stamp;
        self.state = LatchState::AwaitingWake { since_ns };
        match o.wake_ns {
            Some(w) if w >= since_ns => {
                self.state = LatchState::Awake;
                Change::Woken
            }
            Some(_) => Change::WakeBeforeRearm,
            None if was == LatchState::Awake => Change::Tripped,
            None if was == LatchState::Tripped => Change::Rearmed,
            None => Change::Unchanged,
        }
    }

    /// The command to hand to the core for this cycle. While limp: the
    /// controller's command with every stiffness 0; and when the controller
    /// is silent but the command the core holds from before is stiff, a
    /// limp copy of it (once), so the held command is never a stiff one.
    /// While awake: unchanged.
    pub fn apply(&mut self, command: &mut Option<Command>) {
        if self.is_limp() {
            match command {
                Some(c) => c.stiffness = [0.0; JOINTS],
                None if self.last_stiff => {
                    let mut c = self.last;
                    c.stiffness = [0.0; JOINTS];
                    *command = Some(c);
                }
                None => {}
            }
        }
        if let Some(c) = command {
            self.last = *c;
            self.last_stiff = is_stiff(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000_000_000;

    fn stiff() -> Command {
        Command {
            stiffness: [0.6; JOINTS],
            position: [0.2; JOINTS],
            chest_led: [0, 0, 255],
            ..Command::default()
        }
    }

    /// One row: the observation, then what comes out.
    struct Row {
        tripped: bool,
        count: u64,
        stamp: u64,
        answer_trip: bool,
        wake: Option<u64>,
        change: Change,
        limp: bool,
    }

    const fn row(
        tripped: bool,
        count: u64,
        answer_trip: bool,
        wake: Option<u64>,
        change: Change,
        limp: bool,
    ) -> Row {
        Row {
            tripped,
            count,
            stamp: 0,
            answer_trip,
            wake,
            change,
            limp,
        }
    }

    /// Runs `rows` one cycle (12 ms) apart from t = 1 s, starting awake with
    /// trip count 1; checks each change and that a stiff command comes out
    /// limp exactly while limp.
    fn table(rows: &[Row]) {
        let mut l = WakeLatch::new(false, 1, 0);
        for (i, r) in rows.iter().enumerate() {
            let o = LatchInput {
                trip_count: r.count,
                rearm_stamp: r.stamp,
                tripped: r.tripped,
                answer_trip: r.answer_trip,
                wake_ns: r.wake,
            };
            assert_eq!(l.observe(&o), r.change, "row {i}");
            let mut c = Some(stiff());
            l.apply(&mut c);
            let c = c.unwrap();
            assert_eq!(l.is_limp(), r.limp, "row {i}");
            let want = if r.limp { 0.0 } else { 0.6 };
            assert_eq!(c.stiffness, [want; JOINTS], "row {i}");
            assert_eq!(c.position, [0.2; JOINTS], "row {i}: positions pass");
            assert_eq!(c.chest_led, [0, 0, 255], "row {i}: LEDs pass");
        }
    }

    /// Time of the wake relative to row `i`'s cycle.
    const fn at(i: u64, plus_ns: u64) -> Option<u64> {
        Some(T + i * 12_000_000 + plus_ns)
    }

    /// A row whose page was last re-armed at `stamp`.
    const fn re(stamp: Option<u64>, r: Row) -> Row {
        Row {
            stamp: match stamp {
                Some(t) => t,
                None => 0,
            },
            ..r
        }
    }

    #[test]
    fn trip_rearm_wake_table() {
        use Change::*;
        let armed = at(3, 0).map(|t| t - 1);
        table(&[
            row(false, 1, false, None, Unchanged, false),
            // A trip seen on the page.
            row(true, 2, false, None, Tripped, true),
            // A wake while tripped is used up.
            row(true, 2, false, at(2, 0), WakeWhileTripped, true),
            // Re-armed (just before this read): still limp.
            re(armed, row(false, 2, false, None, Rearmed, true)),
            re(armed, row(false, 2, false, None, Unchanged, true)),
            // A wake after the re-arm.
            re(armed, row(false, 2, false, at(5, 0), Woken, false)),
            re(armed, row(false, 2, false, None, Unchanged, false)),
        ]);
    }

    #[test]
    fn trip_re_armed_before_the_cycle_read_the_page_still_latches() {
        use Change::*;
        let armed = at(1, 0).map(|t| t - 1);
        table(&[
            row(false, 1, false, None, Unchanged, false),
            // Tripped and re-armed between two reads: the count moved.
            re(armed, row(false, 2, false, None, Tripped, true)),
            re(armed, row(false, 2, false, None, Unchanged, true)),
            re(armed, row(false, 2, false, at(3, 1), Woken, false)),
        ]);
    }

    #[test]
    fn a_repaired_page_resetting_the_count_to_1_counts_as_a_trip() {
        use Change::*;
        let first = at(2, 0).map(|t| t - 1);
        table(&[
            row(false, 1, false, None, Unchanged, false),
            row(true, 2, false, None, Tripped, true),
            re(first, row(false, 2, false, None, Rearmed, true)),
            re(first, row(false, 2, false, at(3, 1), Woken, false)),
            // The page was repaired (count back to 1; the repair keeps no
            // re-arm time) and seen armed: a trip all the same.
            row(false, 1, false, None, Tripped, true),
            row(false, 1, false, None, Unchanged, true),
        ]);
    }

    #[test]
    fn a_page_repaired_and_re_armed_unseen_with_the_same_count_counts_by_its_rearm_stamp() {
        use Change::*;
        let armed = at(1, 0).map(|t| t - 1);
        table(&[
            row(false, 1, false, None, Unchanged, false),
            // Repaired by another process (count 1 again, as before) and
            // re-armed between two reads: only the re-arm stamp moved.
            re(armed, row(false, 1, false, None, Tripped, true)),
            re(armed, row(false, 1, false, None, Unchanged, true)),
            re(armed, row(false, 1, false, at(3, 1), Woken, false)),
        ]);
    }

    #[test]
    fn an_answer_trip_latches_even_if_the_page_is_re_armed_at_once() {
        use Change::*;
        table(&[
            row(false, 1, false, None, Unchanged, false),
            row(false, 1, true, None, Tripped, true),
            row(false, 1, false, None, Rearmed, true),
            row(false, 1, false, at(3, 1), Woken, false),
        ]);
    }

    #[test]
    fn a_wake_before_the_re_arm_is_used_up() {
        use Change::*;
        let armed = at(1, 0).map(|t| t - 1_000);
        table(&[
            row(true, 2, false, None, Tripped, true),
            // Re-armed and a wake in the same period, the wake stamped
            // before the re-arm (it came while tripped): used up.
            re(
                armed,
                row(
                    false,
                    2,
                    false,
                    at(1, 0).map(|t| t - 2_000),
                    WakeBeforeRearm,
                    true,
                ),
            ),
            re(armed, row(false, 2, false, None, Unchanged, true)),
            // The next wake counts.
            re(armed, row(false, 2, false, at(3, 0), Woken, false)),
        ]);
    }

    #[test]
    fn a_wake_after_the_re_arm_counts_even_before_a_cycle_saw_the_re_arm() {
        use Change::*;
        let armed = at(1, 0).map(|t| t - 2_000);
        table(&[
            row(true, 2, false, None, Tripped, true),
            // `naoctl rearm; nao-rs wake` within one period.
            re(
                armed,
                row(false, 2, false, at(1, 0).map(|t| t - 1_000), Woken, false),
            ),
        ]);
    }

    #[test]
    fn a_new_trip_while_awaiting_the_wake_needs_a_new_re_arm() {
        use Change::*;
        let first = at(1, 0).map(|t| t - 1);
        let second = at(4, 0).map(|t| t - 1);
        table(&[
            row(true, 2, false, None, Tripped, true),
            re(first, row(false, 2, false, None, Rearmed, true)),
            re(first, row(true, 3, false, None, Tripped, true)),
            re(first, row(true, 3, false, at(3, 1), WakeWhileTripped, true)),
            re(second, row(false, 3, false, None, Rearmed, true)),
            re(second, row(false, 3, false, at(5, 1), Woken, false)),
        ]);
    }

    #[test]
    fn tripped_at_start_needs_a_re_arm_and_a_wake_armed_at_start_does_not() {
        let mut l = WakeLatch::new(true, 1, 0);
        assert!(l.is_limp());
        let o = |wake_ns| LatchInput {
            trip_count: 1,
            rearm_stamp: 0,
            tripped: false,
            answer_trip: false,
            wake_ns,
        };
        assert_eq!(l.observe(&o(None)), Change::Rearmed);
        assert_eq!(l.observe(&o(Some(T + 1))), Change::Woken);
        assert!(!WakeLatch::new(false, 7, 9).is_limp());
    }

    #[test]
    fn a_silent_controller_never_leaves_a_stiff_command_held() {
        let mut l = WakeLatch::new(false, 1, 0);
        let mut c = Some(stiff());
        l.apply(&mut c);
        assert_eq!(c.unwrap().stiffness, [0.6; JOINTS]);
        l.observe(&LatchInput {
            trip_count: 2,
            rearm_stamp: 0,
            tripped: false,
            answer_trip: false,
            wake_ns: None,
        });
        // Silent while limp: a limp copy of the held command, once.
        let mut c = None;
        l.apply(&mut c);
        let c = c.expect("the held stiff command is replaced");
        assert_eq!(c.stiffness, [0.0; JOINTS]);
        assert_eq!(c.position, [0.2; JOINTS]);
        let mut c = None;
        l.apply(&mut c);
        assert!(c.is_none(), "then silence passes (the held one is limp)");
    }

    #[test]
    fn non_finite_stiffness_counts_as_stiff_for_the_held_command() {
        let mut l = WakeLatch::new(false, 1, 0);
        let mut c = Some(Command {
            stiffness: [f32::NAN; JOINTS],
            ..Command::default()
        });
        l.apply(&mut c);
        l.observe(&LatchInput {
            trip_count: 1,
            rearm_stamp: 0,
            tripped: true,
            answer_trip: false,
            wake_ns: None,
        });
        let mut c = None;
        l.apply(&mut c);
        assert_eq!(c.unwrap().stiffness, [0.0; JOINTS]);
    }

    #[test]
    fn awake_commands_and_silence_pass_unchanged() {
        let mut l = WakeLatch::new(false, 1, 0);
        let mut c = Some(stiff());
        l.apply(&mut c);
        assert_eq!(c, Some(stiff()));
        let mut c = None;
        l.apply(&mut c);
        assert_eq!(c, None);
    }
}
