//! The "limp until woken" latch: one rule, below every controller.
//!
//! Every start is limp, and after any trip every joint's stiffness is 0,
//! until a person wakes the robot (`nao-rs wake`, [`super::Handle::wake`])
//! in the armed epoch it is in now, whatever any controller (`stand`, the
//! LoLA socket, a program using the library API) sends and whatever the
//! page said when the runtime started (a systemd restart, a hand-over from
//! the guard and a fresh boot are not a person's wake).
//!
//! **Generations, not clocks.** The page's wake generation is its trip
//! count while armed (`deathswitch::Snapshot::wake_generation`): every
//! trip and every repair increments the count, a re-arm does not, so each
//! armed epoch has its own number. A wake carries the generation its
//! sender read from the page (a tripped page has none: `nao-rs wake`
//! refuses). A wake counts only if, when the cycle reads the page:
//!
//! - the page is armed, not lost, and no trip came from the last answer;
//! - its trip count is exactly the wake's generation (a wake read before a
//!   trip carries an older number, whatever happened to the clocks);
//! - the latch has seen no trip in that generation (a trip it saw while
//!   the count still read the same, for instance a trip whose count
//!   increment was still on its way when the page was re-armed).
//!
//! Wall-clock times are never compared: a clock stepped by hours changes
//! nothing. Every other wake is used up and does nothing (logged). A trip
//! is seen when, before a frame, the switch is tripped or the page lost,
//! the trip count changed since the last cycle (any change, also a
//! decrease: a replaced page starts again at 1), or the last answer
//! tripped (chest button, heat, fault). Commands are not a way out: a
//! controller cannot wake the robot.
//!
//! The latch sits between the controllers' command and the protocol core
//! (`nao_wire::protocol::cycle`), which stays HAL's model plus its safety
//! deviations (`docs/protocol.md`); the command it hands on is the one the
//! core uses and the one a recording records. Pure: the observations are
//! passed in; it allocates nothing.

use nao_wire::{Command, JOINTS};

/// What the cycle saw before building a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatchInput {
    /// The page's trip count as read for this frame.
    pub trip_count: u64,
    /// The switch is tripped or the page is lost (or the trip count moved
    /// while the cycle read the switch: a trip on its way).
    pub tripped: bool,
    /// The last answer tripped the switch (chest button, heat, fault).
    pub answer_trip: bool,
    /// The newest wake since the last cycle: the wake generation it
    /// carries.
    pub wake: Option<u64>,
}

impl LatchInput {
    /// The page's wake generation in this observation: its trip count
    /// while armed and no trip seen now.
    pub fn generation(&self) -> Option<u64> {
        (!self.tripped && !self.answer_trip).then_some(self.trip_count)
    }
}

/// Where the latch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatchState {
    /// Commands pass unchanged.
    Awake,
    /// A trip was seen; the switch has not been seen armed since.
    Tripped,
    /// Limp, the switch armed in wake generation `generation`: a wake that
    /// carries it ends the latch.
    AwaitingWake {
        /// The page's wake generation (its trip count while armed).
        generation: u64,
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
    /// A wake in the page's generation: commands pass again.
    Woken,
    /// A wake came while the switch is tripped: used up, no effect.
    WakeWhileTripped,
    /// A wake whose generation is not the page's armed generation now (it
    /// was read before a trip, or from another page), or one in a
    /// generation the latch saw a trip in: used up, no effect.
    WakeStale,
}

/// The latch between the controllers and the protocol core.
#[derive(Debug, Clone)]
pub struct WakeLatch {
    state: LatchState,
    trip_count: u64,
    /// The generation the page was armed in at the last observation.
    last_armed: Option<u64>,
    /// A generation in which a trip was seen (it counts no wake any more
    /// while the trip count reads it).
    dead: Option<u64>,
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
    /// The latch of a runtime that found the switch `tripped` (or armed)
    /// with `trip_count` when it started. Limp either way: every start
    /// waits for a person's wake that comes after it (an armed page at
    /// start is a restart's or a hand-over's, not a person's wake).
    pub fn new(tripped: bool, trip_count: u64) -> Self {
        WakeLatch {
            state: if tripped {
                LatchState::Tripped
            } else {
                LatchState::AwaitingWake {
                    generation: trip_count,
                }
            },
            trip_count,
            last_armed: (!tripped).then_some(trip_count),
            dead: None,
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
        let trip_now = o.tripped || o.answer_trip;
        let count_moved = o.trip_count != self.trip_count;
        // A trip seen while the count still reads the generation last seen
        // armed: that generation counts no wake any more.
        if trip_now && self.last_armed == Some(o.trip_count) {
            self.dead = Some(o.trip_count);
        }
        if self.dead.is_some_and(|d| d != o.trip_count) {
            self.dead = None;
        }
        self.trip_count = o.trip_count;
        self.last_armed = (!o.tripped).then_some(o.trip_count);
        let was = self.state;
        if trip_now {
            self.state = LatchState::Tripped;
            // Tripped now: a wake is used up.
            return if was != LatchState::Tripped {
                Change::Tripped
            } else if o.wake.is_some() {
                Change::WakeWhileTripped
            } else {
                Change::Unchanged
            };
        }
        // Armed now.
        let mut change = Change::Unchanged;
        if count_moved || was == LatchState::Tripped {
            change = if was == LatchState::Awake {
                // A trip and a re-arm between two reads.
                Change::Tripped
            } else if was == LatchState::Tripped {
                Change::Rearmed
            } else {
                Change::Unchanged
            };
            self.state = LatchState::AwaitingWake {
                generation: o.trip_count,
            };
        }
        if self.state == LatchState::Awake {
            return change;
        }
        match o.wake {
            Some(g) if g == o.trip_count && self.dead != Some(g) => {
                self.state = LatchState::Awake;
                Change::Woken
            }
            Some(_) => Change::WakeStale,
            None => change,
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

    fn stiff() -> Command {
        Command {
            stiffness: [0.6; JOINTS],
            position: [0.2; JOINTS],
            chest_led: [0, 0, 255],
            ..Command::default()
        }
    }

    /// One row: the observation, then what comes out.
    #[derive(Clone, Copy)]
    struct Row {
        tripped: bool,
        count: u64,
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
            answer_trip,
            wake,
            change,
            limp,
        }
    }

    /// Armed in generation `count`, nothing else.
    const fn armed(count: u64, wake: Option<u64>, change: Change, limp: bool) -> Row {
        row(false, count, false, wake, change, limp)
    }

    /// Tripped with trip count `count`.
    const fn tripped(count: u64, wake: Option<u64>, change: Change) -> Row {
        row(true, count, false, wake, change, true)
    }

    /// Runs `rows` from a latch started on a page found `start_tripped`
    /// with trip count `start_count`; checks each change and that a stiff
    /// command comes out limp exactly while limp.
    fn table_from(start_tripped: bool, start_count: u64, rows: &[Row]) {
        let mut l = WakeLatch::new(start_tripped, start_count);
        assert!(l.is_limp(), "every start is limp");
        for (i, r) in rows.iter().enumerate() {
            let o = LatchInput {
                trip_count: r.count,
                tripped: r.tripped,
                answer_trip: r.answer_trip,
                wake: r.wake,
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

    /// Runs `rows` from a latch that started armed in generation 1 and was
    /// woken in it.
    fn table(rows: &[Row]) {
        let mut all = vec![armed(1, Some(1), Change::Woken, false)];
        all.extend_from_slice(rows);
        table_from(false, 1, &all);
    }

    #[test]
    fn every_start_is_limp_until_a_wake_in_the_generation_armed_now() {
        use Change::*;
        // Armed at start (a restart, a hand-over): limp, waiting.
        table_from(
            false,
            4,
            &[
                armed(4, None, Unchanged, true),
                armed(4, None, Unchanged, true),
                // A wake read before the last trip: stale.
                armed(4, Some(3), WakeStale, true),
                armed(4, Some(4), Woken, false),
                armed(4, None, Unchanged, false),
            ],
        );
        // Tripped at start (a fresh boot): a re-arm, then a wake.
        table_from(
            true,
            1,
            &[
                tripped(1, None, Unchanged),
                tripped(1, Some(1), WakeWhileTripped),
                armed(1, None, Rearmed, true),
                armed(1, Some(1), Woken, false),
            ],
        );
    }

    #[test]
    fn trip_rearm_wake_table() {
        use Change::*;
        table(&[
            armed(1, None, Unchanged, false),
            // A trip seen on the page.
            tripped(2, None, Tripped),
            // A wake while tripped is used up.
            tripped(2, Some(1), WakeWhileTripped),
            // Re-armed: still limp.
            armed(2, None, Rearmed, true),
            armed(2, None, Unchanged, true),
            // A wake from before the trip (generation 1): used up.
            armed(2, Some(1), WakeStale, true),
            // A wake in generation 2.
            armed(2, Some(2), Woken, false),
            armed(2, None, Unchanged, false),
            // A wake while awake changes nothing.
            armed(2, Some(2), Unchanged, false),
        ]);
    }

    #[test]
    fn trip_re_armed_before_the_cycle_read_the_page_still_latches() {
        use Change::*;
        table(&[
            // Tripped and re-armed between two reads: the count moved.
            armed(2, None, Tripped, true),
            armed(2, None, Unchanged, true),
            armed(2, Some(2), Woken, false),
        ]);
    }

    #[test]
    fn rearm_and_wake_within_one_period_wake() {
        use Change::*;
        // `naoctl stop; naoctl rearm; nao-rs wake` between two reads: the
        // wake carries generation 2, which exists only after the re-arm.
        table(&[armed(2, Some(2), Woken, false)]);
        // ... and tripped, then re-armed and woken before the next read.
        table(&[tripped(2, None, Tripped), armed(2, Some(2), Woken, false)]);
    }

    #[test]
    fn a_wake_sent_before_a_trip_and_read_after_the_re_arm_is_used_up() {
        use Change::*;
        // The sender read generation 1 while armed; a trip and a re-arm
        // came before the runtime read the wake (a stalled runtime).
        table(&[
            armed(2, Some(1), WakeStale, true),
            armed(2, None, Unchanged, true),
            armed(2, Some(2), Woken, false),
        ]);
    }

    #[test]
    fn a_repaired_page_resetting_the_count_to_1_counts_as_a_trip() {
        use Change::*;
        table(&[
            tripped(2, None, Tripped),
            armed(2, None, Rearmed, true),
            armed(2, Some(2), Woken, false),
            // The page was replaced (count back to 1) and seen armed: a
            // trip all the same.
            armed(1, None, Tripped, true),
            // The old page's generation 2 is not this page's.
            armed(1, Some(2), WakeStale, true),
            armed(1, Some(1), Woken, false),
        ]);
    }

    #[test]
    fn an_answer_trip_latches_even_if_the_page_is_re_armed_at_once() {
        use Change::*;
        table(&[
            // The answer tripped, the page's trip did not count (someone
            // tripped it first) and was re-armed before the read: the
            // count reads 1 still. A wake in the same look is used up.
            row(false, 1, true, Some(1), Tripped, true),
            // Generation 1 saw a trip: no wake counts in it.
            armed(1, None, Rearmed, true),
            armed(1, Some(1), WakeStale, true),
            // The next trip and re-arm make generation 2.
            tripped(2, None, Tripped),
            armed(2, Some(2), Woken, false),
        ]);
    }

    #[test]
    fn a_trip_seen_before_its_count_moved_kills_that_generation() {
        use Change::*;
        // The trip's reason was stored, its count increment not yet, and
        // the page was re-armed: generation 1 again on the page, but a
        // wake sent in it before the trip must not count.
        table(&[
            tripped(1, None, Tripped),
            armed(1, None, Rearmed, true),
            armed(1, Some(1), WakeStale, true),
            // The increment lands: generation 2 counts.
            armed(2, None, Unchanged, true),
            armed(2, Some(2), Woken, false),
        ]);
    }

    #[test]
    fn a_new_trip_while_awaiting_the_wake_needs_a_new_re_arm() {
        use Change::*;
        table(&[
            tripped(2, None, Tripped),
            armed(2, None, Rearmed, true),
            tripped(3, None, Tripped),
            tripped(3, Some(2), WakeWhileTripped),
            armed(3, None, Rearmed, true),
            armed(3, Some(2), WakeStale, true),
            armed(3, Some(3), Woken, false),
        ]);
    }

    #[test]
    fn the_generation_of_an_observation() {
        let o = |tripped, answer_trip| LatchInput {
            trip_count: 5,
            tripped,
            answer_trip,
            wake: None,
        };
        assert_eq!(o(false, false).generation(), Some(5));
        assert_eq!(o(true, false).generation(), None);
        assert_eq!(o(false, true).generation(), None);
    }

    #[test]
    fn a_silent_controller_never_leaves_a_stiff_command_held() {
        let mut l = WakeLatch::new(false, 1);
        let w = |wake| LatchInput {
            trip_count: 1,
            tripped: false,
            answer_trip: false,
            wake,
        };
        assert_eq!(l.observe(&w(Some(1))), Change::Woken);
        let mut c = Some(stiff());
        l.apply(&mut c);
        assert_eq!(c.unwrap().stiffness, [0.6; JOINTS]);
        l.observe(&LatchInput {
            trip_count: 2,
            tripped: false,
            answer_trip: false,
            wake: None,
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
        let mut l = WakeLatch::new(false, 1);
        l.observe(&LatchInput {
            trip_count: 1,
            tripped: false,
            answer_trip: false,
            wake: Some(1),
        });
        let mut c = Some(Command {
            stiffness: [f32::NAN; JOINTS],
            ..Command::default()
        });
        l.apply(&mut c);
        l.observe(&LatchInput {
            trip_count: 1,
            tripped: true,
            answer_trip: false,
            wake: None,
        });
        let mut c = None;
        l.apply(&mut c);
        assert_eq!(c.unwrap().stiffness, [0.0; JOINTS]);
    }

    #[test]
    fn awake_commands_and_silence_pass_unchanged() {
        let mut l = WakeLatch::new(false, 1);
        l.observe(&LatchInput {
            trip_count: 1,
            tripped: false,
            answer_trip: false,
            wake: Some(1),
        });
        let mut c = Some(stiff());
        l.apply(&mut c);
        assert_eq!(c, Some(stiff()));
        let mut c = None;
        l.apply(&mut c);
        assert_eq!(c, None);
    }
}
