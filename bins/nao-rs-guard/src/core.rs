//! The guard's logic as a pure state machine: no I/O, no clock, no
//! allocation. The process shell (`crate::poller`) reads the page, asks
//! `deathswitch::rules::decide` for the verdict, probes the driver's pid and
//! feeds the result in as an [`Observation`]; the [`Actions`] that come back
//! say what to do, and the shell does it in the seed's order:
//! trip, kill, clear the heartbeat, clear the driver fields, take or let go
//! of the board, send the all-off frame and write the guard's heartbeat.
//!
//! See `docs/guard.md` and "The guard's rules" in
//! `seeds/death-switch-in-detail.txt`.

use deathswitch::rules::Verdict;
use deathswitch::Reason;

/// What the guard sees in one poll: the page's fields it needs, the verdict
/// of `deathswitch::rules::decide` on the same snapshot, and whether the
/// registered driver's process is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The switch is armed (a person re-armed it).
    pub armed: bool,
    /// `driver_pid` in the page: the runtime that registered last.
    pub driver_pid: Option<u32>,
    /// The page holds a heartbeat (`last_cycle` is some): a runtime beat
    /// since the page or its heartbeat fields were last cleared.
    pub beaten: bool,
    /// `rules::decide(snapshot, now, settings)` for this poll.
    pub verdict: Verdict,
    /// `kill(driver_pid, 0)` succeeded or failed with EPERM (a process of
    /// another user counts as alive). False when there is no driver_pid.
    pub driver_alive: bool,
}

/// Where the guard stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No runtime has beaten since boot, since the last release or since
    /// the last hand-over: nothing sends frames, nothing to watch.
    Idle,
    /// A runtime beats; every poll is judged by `rules::decide`.
    Watching,
    /// The guard took the board over and sends all-off frames. `killed` is
    /// the `driver_pid` it found (and sent SIGKILL) at the take-over.
    Holding {
        /// The process the guard killed at the take-over, if any.
        killed: Option<u32>,
    },
}

/// What the shell must do after one poll: trip, kill, clear the heartbeat,
/// clear the driver, then the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Actions {
    /// 1. Trip the switch with this reason (take-over).
    pub trip: Option<Reason>,
    /// 2. Send SIGKILL to this process (take-over). Never 0, 1 or the guard.
    pub kill: Option<u32>,
    /// 3. Clear the heartbeat fields, keeping `driver_pid` (hand-over).
    pub clear_heartbeat: bool,
    /// 5. Hold the chest board (level: open it if closed, send all-off
    ///    frames every cycle); false: let it go (close it if open).
    pub hold_board: bool,
    /// 4. Clear `driver_pid` and the heartbeat fields (release), before the
    ///    board is let go.
    pub clear_driver: bool,
}

/// What changed in one poll, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    None,
    /// A runtime beat for the first time: the guard watches it.
    Watch,
    /// Take-over with this reason (of the driver that was registered).
    TakeOver(Reason, Option<u32>),
    /// A new runtime registered: the board is handed over to it.
    HandOver(u32),
    /// A re-arm with no runtime running: the board is released.
    Release,
    /// The heartbeat disappeared while watching (page cleared or replaced).
    Unwatch,
}

/// The guard's state machine. `step` is the only way in.
#[derive(Debug, Clone)]
pub struct GuardCore {
    state: State,
    own_pid: u32,
}

/// Whether `pid` may be sent SIGKILL by the guard `own_pid`: never 0 (the
/// process group), 1 (init) or the guard itself. `kill(-1, ..)` cannot be
/// asked for: pids are unsigned here and `u32` values above `i32::MAX`
/// are refused as well.
pub fn kill_target_ok(pid: u32, own_pid: u32) -> bool {
    pid > 1 && pid != own_pid && pid <= i32::MAX as u32
}

impl GuardCore {
    /// A guard that has seen nothing yet (idle), running as `own_pid`.
    pub fn new(own_pid: u32) -> GuardCore {
        GuardCore {
            state: State::Idle,
            own_pid,
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// True while the guard holds (or tries to hold) the chest board.
    pub fn holding(&self) -> bool {
        matches!(self.state, State::Holding { .. })
    }

    /// One poll: what to do, and what changed.
    pub fn step(&mut self, obs: &Observation) -> (Actions, Transition) {
        match self.state {
            State::Idle | State::Watching => self.step_watching(obs),
            State::Holding { killed } => self.step_holding(obs, killed),
        }
    }

    fn step_watching(&mut self, obs: &Observation) -> (Actions, Transition) {
        let was = self.state;
        if let Verdict::TakeOver(reason) = obs.verdict {
            self.state = State::Holding {
                killed: obs.driver_pid,
            };
            let kill = obs.driver_pid.filter(|&p| kill_target_ok(p, self.own_pid));
            let actions = Actions {
                trip: Some(reason),
                kill,
                hold_board: true,
                ..Actions::default()
            };
            return (actions, Transition::TakeOver(reason, obs.driver_pid));
        }
        self.state = if obs.beaten {
            State::Watching
        } else {
            State::Idle
        };
        let t = match (was, self.state) {
            (State::Idle, State::Watching) => Transition::Watch,
            (State::Watching, State::Idle) => Transition::Unwatch,
            _ => Transition::None,
        };
        (Actions::default(), t)
    }

    fn step_holding(&mut self, obs: &Observation, killed: Option<u32>) -> (Actions, Transition) {
        // Hand-over: a new, live process registered as the driver.
        if let Some(pid) = obs.driver_pid {
            if Some(pid) != killed && pid != self.own_pid && obs.driver_alive {
                self.state = State::Idle;
                let actions = Actions {
                    clear_heartbeat: true,
                    ..Actions::default()
                };
                return (actions, Transition::HandOver(pid));
            }
        }
        // Release: re-armed, and no new runtime registered.
        if obs.armed {
            self.state = State::Idle;
            let actions = Actions {
                clear_driver: true,
                ..Actions::default()
            };
            return (actions, Transition::Release);
        }
        (
            Actions {
                hold_board: true,
                ..Actions::default()
            },
            Transition::None,
        )
    }
}

/// The guard's frame clock while it holds the board: one all-off frame at
/// once when the board is opened, then every `period_ns` on absolute
/// deadlines. A late poll never makes the next frame early: the next
/// deadline is the previous one plus the period, skipping missed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePacer {
    period_ns: u64,
    next_ns: Option<u64>,
}

impl FramePacer {
    /// A pacer for frames every `period_ns` (12 ms: the runtime's cycle).
    pub fn new(period_ns: u64) -> FramePacer {
        FramePacer {
            period_ns: period_ns.max(1),
            next_ns: None,
        }
    }

    /// Forget the schedule: the next `due` is at once (a freshly opened board).
    pub fn reset(&mut self) {
        self.next_ns = None;
    }

    /// True when a frame is due at `now_ns`; advances the schedule.
    pub fn due(&mut self, now_ns: u64) -> bool {
        match self.next_ns {
            None => {
                self.next_ns = Some(now_ns.saturating_add(self.period_ns));
                true
            }
            Some(next) if now_ns >= next => {
                let missed = (now_ns - next) / self.period_ns;
                self.next_ns =
                    Some(next.saturating_add((missed + 1).saturating_mul(self.period_ns)));
                true
            }
            Some(_) => false,
        }
    }
}

/// The UDP stop's prefix: the 11 ASCII bytes of `spec/death-switch.md`.
pub const STOP_PREFIX: &[u8; 11] = b"NAO-RS STOP";

/// True when a datagram's payload starts with [`STOP_PREFIX`]; anything
/// after the prefix is ignored.
pub fn is_stop_datagram(payload: &[u8]) -> bool {
    payload.starts_with(STOP_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARD: u32 = 900;
    const RT: u32 = 1000;
    const NEW_RT: u32 = 1001;

    fn obs(
        armed: bool,
        pid: Option<u32>,
        beaten: bool,
        verdict: Verdict,
        alive: bool,
    ) -> Observation {
        Observation {
            armed,
            driver_pid: pid,
            beaten,
            verdict,
            driver_alive: alive,
        }
    }
    fn fine(pid: Option<u32>, beaten: bool) -> Observation {
        obs(true, pid, beaten, Verdict::Fine, pid.is_some())
    }
    fn holding_after(reason: Reason) -> GuardCore {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(Some(RT), true));
        g.step(&obs(
            false,
            Some(RT),
            true,
            Verdict::TakeOver(reason),
            false,
        ));
        assert_eq!(g.state(), State::Holding { killed: Some(RT) });
        g
    }
    const HOLD: Actions = Actions {
        trip: None,
        kill: None,
        clear_heartbeat: false,
        hold_board: true,
        clear_driver: false,
    };

    #[test]
    fn idle_while_no_runtime_has_beaten() {
        let mut g = GuardCore::new(GUARD);
        for o in [
            fine(None, false),
            fine(Some(RT), false),
            obs(false, Some(RT), false, Verdict::Fine, true),
        ] {
            assert_eq!(g.step(&o), (Actions::default(), Transition::None));
            assert_eq!(g.state(), State::Idle);
        }
    }

    #[test]
    fn first_beat_starts_watching() {
        let mut g = GuardCore::new(GUARD);
        assert_eq!(
            g.step(&fine(Some(RT), true)),
            (Actions::default(), Transition::Watch)
        );
        assert_eq!(g.state(), State::Watching);
        assert_eq!(
            g.step(&fine(Some(RT), true)),
            (Actions::default(), Transition::None)
        );
    }

    #[test]
    fn heartbeat_lost_takes_over_trip_kill_open_in_order() {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(Some(RT), true));
        let (a, t) = g.step(&obs(
            true,
            Some(RT),
            true,
            Verdict::TakeOver(Reason::GuardHeartbeatLost),
            true,
        ));
        assert_eq!(
            a,
            Actions {
                trip: Some(Reason::GuardHeartbeatLost),
                kill: Some(RT),
                clear_heartbeat: false,
                hold_board: true,
                clear_driver: false
            }
        );
        assert_eq!(
            t,
            Transition::TakeOver(Reason::GuardHeartbeatLost, Some(RT))
        );
        assert!(g.holding());
    }

    #[test]
    fn no_confirmation_takes_over_with_its_reason() {
        let g = holding_after(Reason::GuardNoConfirmation);
        assert!(g.holding());
    }

    #[test]
    fn holding_ignores_its_own_rules_and_keeps_the_board() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        // The guard's own heartbeat, or any verdict: no second take-over.
        for v in [
            Verdict::Fine,
            Verdict::TakeOver(Reason::GuardNoConfirmation),
        ] {
            assert_eq!(
                g.step(&obs(false, Some(RT), true, v, false)),
                (HOLD, Transition::None)
            );
        }
        // The killed runtime still registered and (EPERM) alive: no hand-over.
        assert_eq!(
            g.step(&obs(false, Some(RT), true, Verdict::Fine, true)),
            (HOLD, Transition::None)
        );
    }

    #[test]
    fn hand_over_to_a_new_runtime_clears_the_heartbeat_and_keeps_it_tripped() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, t) = g.step(&obs(false, Some(NEW_RT), true, Verdict::Fine, true));
        assert_eq!(
            a,
            Actions {
                clear_heartbeat: true,
                ..Actions::default()
            }
        );
        assert!(
            a.trip.is_none() && !a.hold_board && !a.clear_driver,
            "the switch stays tripped, no re-arm"
        );
        assert_eq!(t, Transition::HandOver(NEW_RT));
        // Judged from its first beat: idle until it beats.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, Verdict::Fine, true))
                .1,
            Transition::None
        );
        assert_eq!(g.state(), State::Idle);
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), true, Verdict::Fine, true))
                .1,
            Transition::Watch
        );
        // And taken over again when it stops confirming.
        let (a, _) = g.step(&obs(
            false,
            Some(NEW_RT),
            true,
            Verdict::TakeOver(Reason::GuardNoConfirmation),
            true,
        ));
        assert_eq!(a.kill, Some(NEW_RT));
    }

    #[test]
    fn hand_over_needs_a_live_process_eperm_counts_as_alive() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        // New pid, but dead (ESRCH): keep the board.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, Verdict::Fine, false)),
            (HOLD, Transition::None)
        );
        // The shell reports EPERM as alive: hand over.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, Verdict::Fine, true))
                .1,
            Transition::HandOver(NEW_RT)
        );
    }

    #[test]
    fn rearm_with_no_runtime_releases_the_board_and_clears_the_driver() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, t) = g.step(&obs(true, Some(RT), true, Verdict::Fine, false));
        assert_eq!(
            a,
            Actions {
                clear_driver: true,
                ..Actions::default()
            }
        );
        assert_eq!(t, Transition::Release);
        assert_eq!(g.state(), State::Idle);
        // After the release: idle, nothing sent, until a runtime beats.
        assert_eq!(
            g.step(&fine(None, false)),
            (Actions::default(), Transition::None)
        );
    }

    #[test]
    fn rearm_with_a_new_runtime_hands_over_first() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        assert_eq!(
            g.step(&obs(true, Some(NEW_RT), false, Verdict::Fine, true))
                .1,
            Transition::HandOver(NEW_RT)
        );
    }

    #[test]
    fn take_over_without_a_driver_kills_nobody() {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(None, true));
        let (a, _) = g.step(&obs(
            true,
            None,
            true,
            Verdict::TakeOver(Reason::GuardHeartbeatLost),
            false,
        ));
        assert_eq!(a.kill, None);
        assert!(a.hold_board);
    }

    #[test]
    fn never_kills_pid_0_1_or_itself() {
        for pid in [0, 1, GUARD, u32::MAX, i32::MAX as u32 + 1] {
            assert!(!kill_target_ok(pid, GUARD), "{pid}");
            let mut g = GuardCore::new(GUARD);
            g.step(&fine(Some(pid), true));
            let (a, _) = g.step(&obs(
                true,
                Some(pid),
                true,
                Verdict::TakeOver(Reason::GuardHeartbeatLost),
                true,
            ));
            assert_eq!(a.kill, None, "{pid}");
        }
        assert!(kill_target_ok(2, GUARD));
    }

    #[test]
    fn heartbeat_cleared_while_watching_goes_idle() {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(Some(RT), true));
        assert_eq!(g.step(&fine(Some(RT), false)).1, Transition::Unwatch);
        assert_eq!(g.state(), State::Idle);
    }

    /// The whole story as a table with time passed in: (ms, observation,
    /// expected state after the step).
    #[test]
    fn guard_story_table() {
        let hb = Verdict::TakeOver(Reason::GuardHeartbeatLost);
        let rows: &[(u64, Observation, State)] = &[
            (0, fine(None, false), State::Idle),
            (2, fine(Some(RT), false), State::Idle),
            (14, fine(Some(RT), true), State::Watching),
            (74, fine(Some(RT), true), State::Watching),
            (
                76,
                obs(true, Some(RT), true, hb, true),
                State::Holding { killed: Some(RT) },
            ),
            (
                78,
                obs(false, Some(RT), true, Verdict::Fine, false),
                State::Holding { killed: Some(RT) },
            ),
            (
                1078,
                obs(false, Some(NEW_RT), false, Verdict::Fine, true),
                State::Idle,
            ),
            (
                1200,
                obs(false, Some(NEW_RT), true, Verdict::Fine, true),
                State::Watching,
            ),
            (
                1300,
                obs(false, Some(NEW_RT), true, hb, true),
                State::Holding {
                    killed: Some(NEW_RT),
                },
            ),
            (
                1302,
                obs(true, Some(NEW_RT), true, Verdict::Fine, false),
                State::Idle,
            ),
            (1304, fine(None, false), State::Idle),
        ];
        let mut g = GuardCore::new(GUARD);
        for (ms, o, want) in rows {
            g.step(o);
            assert_eq!(g.state(), *want, "at {ms} ms");
        }
    }

    #[test]
    fn pacer_sends_at_once_then_every_12_ms() {
        let ms = 1_000_000;
        let mut p = FramePacer::new(12 * ms);
        assert!(p.due(100 * ms));
        let sent: Vec<u64> = (101..=140).filter(|&t| p.due(t * ms)).collect();
        assert_eq!(sent, vec![112, 124, 136]);
        p.reset();
        assert!(p.due(141 * ms));
    }

    #[test]
    fn pacer_late_poll_never_makes_the_next_frame_early() {
        let ms = 1_000_000;
        let mut p = FramePacer::new(12 * ms);
        assert!(p.due(0));
        assert!(p.due(40 * ms)); // missed 12, 24, 36
        assert!(!p.due(47 * ms));
        assert!(p.due(48 * ms));
    }

    #[test]
    fn udp_stop_prefix_is_the_11_bytes() {
        assert!(is_stop_datagram(b"NAO-RS STOP"));
        assert!(is_stop_datagram(b"NAO-RS STOP\n please"));
        assert!(!is_stop_datagram(b"NAO-RS STO"));
        assert!(!is_stop_datagram(b"nao-rs stop"));
        assert!(!is_stop_datagram(b""));
        assert!(!is_stop_datagram(b" NAO-RS STOP"));
    }
}
