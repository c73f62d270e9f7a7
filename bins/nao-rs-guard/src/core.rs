//! The guard's logic as a pure state machine: no I/O, no clock, no
//! allocation. The process shell (`crate::poller`) reads the page, asks
//! `deathswitch::rules::decide` for the verdict, probes the driver's pid and
//! feeds the result in as an [`Observation`]; the [`Actions`] that come back
//! say what to do, and the shell does it in this order:
//! trip, kill, clear the heartbeat, clear the driver fields, take or let go
//! of the board, send the all-off frame and write the guard's heartbeat.
//!
//! See `docs/guard.md`, and "The guard's rules" in `docs/page.md`.

use deathswitch::rules::Verdict;
use deathswitch::{Reason, Snapshot};

/// What the runtime's pidfd (held by the shell since the registration)
/// says in this poll. The pidfd is the guard's own record of who the
/// runtime is: page damage, repair or replacement cannot take it away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PidfdState {
    /// No pidfd held (no runtime registered, or the kernel has no pidfds).
    #[default]
    Unknown,
    /// The runtime with this pid runs (its pidfd is not readable).
    Alive(u32),
    /// The runtime with this pid exited, for any reason (its pidfd turned
    /// readable, or `pidfd_open` found it gone).
    Exited(u32),
}

/// What the guard sees in one poll: the page's fields it needs, the verdict
/// of `deathswitch::rules::decide` on the snapshot as judged
/// ([`GuardCore::judged`]), the page driver's liveness and the runtime's
/// pidfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The switch is armed (a person re-armed it).
    pub armed: bool,
    /// `driver_pid` in the page: the runtime that registered last.
    pub driver_pid: Option<u32>,
    /// The judged snapshot holds a heartbeat: a runtime beat since the page
    /// or its heartbeat fields were last cleared (or, the page having lost
    /// it, the guard remembers the held runtime's last beat).
    pub beaten: bool,
    /// `rules::decide(judged snapshot, now, settings)` for this poll.
    pub verdict: Verdict,
    /// `kill(driver_pid, 0)` succeeded or failed with EPERM (a process of
    /// another user counts as alive). Probed only while holding; false
    /// when there is no driver_pid.
    pub driver_alive: bool,
    /// The runtime's pidfd.
    pub runtime: PidfdState,
}

/// Where the guard stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No runtime has beaten since boot, since the last release or since
    /// the last hand-over: nothing sends frames, nothing to watch.
    Idle,
    /// A runtime beats; every poll is judged by `rules::decide` and its pidfd.
    Watching,
    /// The guard took the board over and sends all-off frames. `killed` is
    /// the runtime it took over from (killed, or found exited).
    Holding {
        /// The runtime the guard took over from, if known.
        killed: Option<u32>,
    },
}

/// What the shell must do after one poll: trip, kill, clear the heartbeat,
/// clear the driver, then the board; and open or close the runtime's pidfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Actions {
    /// 1. Trip the switch with this reason (take-over).
    pub trip: Option<Reason>,
    /// 2. Send SIGKILL to this process (take-over): through its pidfd when
    ///    it is the held runtime. Never 0, 1 or the guard.
    pub kill: Option<u32>,
    /// 3. Clear the heartbeat fields, keeping `driver_pid` (hand-over).
    pub clear_heartbeat: bool,
    /// 5. Hold the chest board (level: open it if closed, send all-off
    ///    frames every cycle); false: let it go (close it if open).
    pub hold_board: bool,
    /// 4. Clear `driver_pid` and the heartbeat fields (release), before the
    ///    board is let go.
    pub clear_driver: bool,
    /// Close the held pidfd (the runtime exited, or was released).
    pub forget: bool,
    /// Open a pidfd of this pid: the runtime registered (after `forget`).
    pub adopt: Option<u32>,
}

/// What changed in one poll, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    None,
    /// A runtime beat for the first time: the guard watches it.
    Watch,
    /// Take-over with this reason (of the runtime that was watched).
    TakeOver(Reason, Option<u32>),
    /// A new runtime registered: the board is handed over to it.
    HandOver(u32),
    /// A re-arm with no runtime running: the board is released.
    Release,
    /// The heartbeat disappeared while watching, and no runtime is held
    /// by its pidfd (page cleared or replaced).
    Unwatch,
}

/// The guard's state machine. `judged` then `step`, once a poll.
#[derive(Debug, Clone)]
pub struct GuardCore {
    state: State,
    own_pid: u32,
    /// The last heartbeat (cycle, monotonic ns) the guard saw in the page,
    /// kept for the held runtime when the page loses it.
    seen_beat: Option<(u64, u64)>,
    /// When the guard first found the page without the heartbeat it had
    /// seen (monotonic ns).
    beat_lost_ns: Option<u64>,
    /// When the guard first saw the switch tripped (monotonic ns); `None`
    /// while armed.
    seen_trip_ns: Option<u64>,
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
            seen_beat: None,
            beat_lost_ns: None,
            seen_trip_ns: None,
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

    /// The page as the guard judges it: the page's own heartbeat when it
    /// has one (remembered); when the page has lost it (damage, repair,
    /// replacement) while the runtime held by its pidfd still runs, a beat
    /// at the moment the guard found it lost (the runtime may have beaten
    /// until then, also while the guard itself was not looking): the
    /// runtime must beat again within the beat timeout of the loss. A
    /// runtime that stops beating after page damage is still a lost
    /// heartbeat. A trip time that lies after
    /// `now_ns` (damage: garbage, or a trip time stuck pending) is judged
    /// from when the guard first saw the switch tripped, and a confirmation
    /// of a cycle after the last beat's counts as none, so rule 3 still
    /// runs out.
    pub fn judged(&mut self, snap: &Snapshot, runtime: PidfdState, now_ns: u64) -> Snapshot {
        let mut s = *snap;
        if snap.armed {
            self.seen_trip_ns = None;
        } else {
            let first = *self.seen_trip_ns.get_or_insert(now_ns);
            s.tripped_at_ns = if snap.tripped_at_ns > now_ns {
                first
            } else {
                snap.tripped_at_ns.max(first)
            };
        }
        // A confirmation of a cycle not yet beaten is impossible (damage):
        // it confirms nothing.
        if let (Some(conf), Some(c)) = (s.all_off_confirmed_cycle, s.last_cycle) {
            if conf > c {
                s.all_off_confirmed_cycle = None;
            }
        }
        if let (Some(c), Some(t)) = (snap.last_cycle, snap.last_beat_ns) {
            self.seen_beat = Some((c, t));
            self.beat_lost_ns = None;
            return s;
        }
        if let (PidfdState::Alive(_), Some((c, t)), false) =
            (runtime, self.seen_beat, self.holding())
        {
            let lost = *self.beat_lost_ns.get_or_insert(now_ns);
            s.last_cycle = Some(c);
            s.last_beat_ns = Some(t.max(lost));
        }
        s
    }

    /// One poll: what to do, and what changed.
    pub fn step(&mut self, obs: &Observation) -> (Actions, Transition) {
        match self.state {
            State::Idle | State::Watching => self.step_watching(obs),
            State::Holding { killed } => self.step_holding(obs, killed),
        }
    }

    fn take_over(
        &mut self,
        reason: Reason,
        from: Option<u32>,
        kill: Option<u32>,
    ) -> (Actions, Transition) {
        self.state = State::Holding { killed: from };
        self.seen_beat = None;
        self.beat_lost_ns = None;
        let actions = Actions {
            trip: Some(reason),
            kill: kill.filter(|&p| kill_target_ok(p, self.own_pid)),
            hold_board: true,
            ..Actions::default()
        };
        (actions, Transition::TakeOver(reason, from))
    }

    fn step_watching(&mut self, obs: &Observation) -> (Actions, Transition) {
        let was = self.state;
        // The runtime exited (any cause): take over at once, nothing to kill.
        if let PidfdState::Exited(pid) = obs.runtime {
            let (mut a, t) = self.take_over(Reason::GuardRuntimeExited, Some(pid), None);
            a.forget = true;
            return (a, t);
        }
        if let Verdict::TakeOver(reason) = obs.verdict {
            // The runtime as the pidfd knows it; the page's driver_pid only
            // when the guard holds no pidfd (a kernel without pidfds).
            let target = match obs.runtime {
                PidfdState::Alive(pid) => Some(pid),
                _ => obs.driver_pid,
            };
            return self.take_over(reason, target, target);
        }
        self.state = if obs.beaten {
            State::Watching
        } else {
            State::Idle
        };
        let mut actions = Actions::default();
        // Registration: a runtime beats under a pid the guard holds no
        // pidfd of yet. A held runtime keeps its identity whatever the page
        // says later (the page may be damaged; the pidfd is not).
        if obs.runtime == PidfdState::Unknown && obs.beaten {
            actions.adopt = obs.driver_pid.filter(|&p| kill_target_ok(p, self.own_pid));
        }
        let t = match (was, self.state) {
            (State::Idle, State::Watching) => Transition::Watch,
            (State::Watching, State::Idle) => Transition::Unwatch,
            _ => Transition::None,
        };
        (actions, t)
    }

    fn step_holding(&mut self, obs: &Observation, killed: Option<u32>) -> (Actions, Transition) {
        // The killed runtime's pidfd has done its work.
        let forget = matches!(obs.runtime, PidfdState::Exited(_));
        // Hand-over: a new, live process registered as the driver.
        if let Some(pid) = obs.driver_pid {
            if Some(pid) != killed && pid != self.own_pid && obs.driver_alive {
                self.state = State::Idle;
                self.seen_beat = None;
                self.beat_lost_ns = None;
                let actions = Actions {
                    clear_heartbeat: true,
                    forget: obs.runtime != PidfdState::Unknown,
                    adopt: kill_target_ok(pid, self.own_pid).then_some(pid),
                    ..Actions::default()
                };
                return (actions, Transition::HandOver(pid));
            }
        }
        // Release: re-armed, and no new runtime registered.
        if obs.armed {
            self.state = State::Idle;
            self.seen_beat = None;
            self.beat_lost_ns = None;
            let actions = Actions {
                clear_driver: true,
                forget: obs.runtime != PidfdState::Unknown,
                ..Actions::default()
            };
            return (actions, Transition::Release);
        }
        (
            Actions {
                hold_board: true,
                forget,
                ..Actions::default()
            },
            Transition::None,
        )
    }
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
            runtime: PidfdState::Unknown,
        }
    }
    fn with_pidfd(o: Observation, runtime: PidfdState) -> Observation {
        Observation { runtime, ..o }
    }
    fn alive(o: Observation, pid: u32) -> Observation {
        with_pidfd(o, PidfdState::Alive(pid))
    }
    /// An armed, beaten page whose verdict is rule 2 (`guard-heartbeat-lost`).
    fn beat_lost(pid: Option<u32>, alive: bool) -> Observation {
        obs(
            true,
            pid,
            true,
            Verdict::TakeOver(Reason::GuardHeartbeatLost),
            alive,
        )
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
        forget: false,
        adopt: None,
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
        // The first beat registers the runtime: open its pidfd.
        let adopt = Actions {
            adopt: Some(RT),
            ..Actions::default()
        };
        assert_eq!(g.step(&fine(Some(RT), true)), (adopt, Transition::Watch));
        assert_eq!(g.state(), State::Watching);
        // Held by its pidfd from now on: nothing more to do.
        assert_eq!(
            g.step(&alive(fine(Some(RT), true), RT)),
            (Actions::default(), Transition::None)
        );
    }

    #[test]
    fn heartbeat_lost_takes_over_trip_kill_open_in_order() {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(Some(RT), true));
        let (a, t) = g.step(&beat_lost(Some(RT), true));
        assert_eq!(
            a,
            Actions {
                trip: Some(Reason::GuardHeartbeatLost),
                kill: Some(RT),
                hold_board: true,
                ..Actions::default()
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
                adopt: Some(NEW_RT),
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
        let (a, _) = g.step(&beat_lost(None, false));
        assert_eq!(a.kill, None);
        assert!(a.hold_board);
    }

    #[test]
    fn never_kills_pid_0_1_or_itself() {
        for pid in [0, 1, GUARD, u32::MAX, i32::MAX as u32 + 1] {
            assert!(!kill_target_ok(pid, GUARD), "{pid}");
            let mut g = GuardCore::new(GUARD);
            g.step(&fine(Some(pid), true));
            let (a, _) = g.step(&beat_lost(Some(pid), true));
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

    const MS: u64 = 1_000_000;

    fn beating(pid: Option<u32>, cycle: u64, t_ns: u64) -> Snapshot {
        Snapshot {
            armed: true,
            magic_ok: true,
            driver_pid: pid,
            last_cycle: Some(cycle),
            last_beat_ns: Some(t_ns),
            all_off_confirmed_cycle: None,
            ..Snapshot::default()
        }
    }

    /// A guard that saw runtime `RT` beat (cycle 1 at 0 ns) without a
    /// pidfd (not registered).
    fn watching_unregistered() -> GuardCore {
        let mut g = GuardCore::new(GUARD);
        poll(
            &mut g,
            &beating(Some(RT), 1, 0),
            0,
            PidfdState::Unknown,
            false,
        );
        g
    }

    /// `s` tripped `page-lost`, the trip stamped `tripped_at_ns`.
    fn page_lost(mut s: Snapshot, tripped_at_ns: u64) -> Snapshot {
        s.armed = false;
        s.reason = Some(Reason::PageLost);
        s.tripped_at_ns = tripped_at_ns;
        s
    }

    /// What a poll trips and whom it kills.
    fn trip_kill(a: &Actions) -> (Option<Reason>, Option<u32>) {
        (a.trip, a.kill)
    }

    /// One poll as the shell does it: judged, decide, step.
    fn poll(
        g: &mut GuardCore,
        snap: &Snapshot,
        now_ns: u64,
        runtime: PidfdState,
        driver_alive: bool,
    ) -> (Actions, Transition) {
        let j = g.judged(snap, runtime, now_ns);
        let verdict =
            deathswitch::rules::decide(&j, now_ns, &deathswitch::rules::Settings::default());
        g.step(&Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: j.last_cycle.is_some(),
            verdict,
            driver_alive,
            runtime,
        })
    }

    #[test]
    fn runtime_exit_takes_over_at_once_with_guard_runtime_exited() {
        // From watching and from idle (registered, not yet beaten): trip,
        // hold the board, close the pidfd; nothing to kill.
        for beaten in [true, false] {
            let mut g = GuardCore::new(GUARD);
            let mut o = alive(fine(Some(RT), beaten), RT);
            g.step(&o);
            o.runtime = PidfdState::Exited(RT);
            let (a, t) = g.step(&o);
            assert_eq!(
                a,
                Actions {
                    trip: Some(Reason::GuardRuntimeExited),
                    hold_board: true,
                    forget: true,
                    ..Actions::default()
                },
                "beaten {beaten}"
            );
            assert_eq!(
                t,
                Transition::TakeOver(Reason::GuardRuntimeExited, Some(RT))
            );
            assert_eq!(g.state(), State::Holding { killed: Some(RT) });
        }
    }

    #[test]
    fn a_clean_exit_is_taken_over_the_same_way_the_board_keeps_all_off_frames() {
        // SIGTERM: the runtime tripped `shutdown`, sent its last all-off
        // frame and exited. The guard trips (the first reason stays) and
        // holds the board until a re-arm or a new runtime.
        let mut g = GuardCore::new(GUARD);
        let tripped = obs(false, Some(RT), true, Verdict::Fine, false);
        g.step(&alive(tripped, RT));
        let (a, _) = g.step(&with_pidfd(tripped, PidfdState::Exited(RT)));
        assert_eq!(a.trip, Some(Reason::GuardRuntimeExited));
        assert!(a.hold_board);
        for _ in 0..3 {
            assert_eq!(g.step(&tripped), (HOLD, Transition::None));
        }
    }

    #[test]
    fn exit_beats_a_verdict_in_the_same_poll() {
        let mut g = GuardCore::new(GUARD);
        g.step(&alive(fine(Some(RT), true), RT));
        let mut o = beat_lost(Some(RT), true);
        o.runtime = PidfdState::Exited(RT);
        let (a, _) = g.step(&o);
        assert_eq!((a.trip, a.kill), (Some(Reason::GuardRuntimeExited), None));
    }

    #[test]
    fn the_kill_targets_the_pidfd_runtime_not_the_page_driver_pid() {
        // The page's driver_pid is garbage (damage): the pidfd's runtime is
        // the one killed.
        let mut g = GuardCore::new(GUARD);
        g.step(&alive(fine(Some(RT), true), RT));
        let mut o = beat_lost(Some(4242), true);
        o.runtime = PidfdState::Alive(RT);
        let (a, t) = g.step(&o);
        assert_eq!(a.kill, Some(RT));
        assert_eq!(
            t,
            Transition::TakeOver(Reason::GuardHeartbeatLost, Some(RT))
        );
        // A held runtime is never re-registered from the page.
        let mut g = GuardCore::new(GUARD);
        g.step(&alive(fine(Some(RT), true), RT));
        let (a, _) = g.step(&alive(fine(Some(4242), true), RT));
        assert_eq!(a.adopt, None);
    }

    #[test]
    fn never_adopts_pid_0_1_or_itself() {
        for pid in [0, 1, GUARD] {
            let mut g = GuardCore::new(GUARD);
            assert_eq!(g.step(&fine(Some(pid), true)).0.adopt, None, "{pid}");
        }
    }

    #[test]
    fn holding_closes_the_pidfd_of_the_killed_runtime_once_it_exited() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let o = obs(false, Some(RT), true, Verdict::Fine, false);
        let (a, _) = g.step(&with_pidfd(o, PidfdState::Exited(RT)));
        assert!(a.forget && a.hold_board);
        assert_eq!(g.step(&o), (HOLD, Transition::None));
    }

    #[test]
    fn hand_over_closes_the_old_pidfd_and_opens_the_new_runtimes() {
        let mut g = holding_after(Reason::GuardRuntimeExited);
        let o = obs(false, Some(NEW_RT), false, Verdict::Fine, true);
        let (a, t) = g.step(&with_pidfd(o, PidfdState::Alive(RT)));
        assert!(a.forget && a.clear_heartbeat);
        assert_eq!(a.adopt, Some(NEW_RT));
        assert_eq!(t, Transition::HandOver(NEW_RT));
        // The new runtime crashes before its first beat: taken over at once.
        let (a, _) = g.step(&with_pidfd(o, PidfdState::Exited(NEW_RT)));
        assert_eq!(a.trip, Some(Reason::GuardRuntimeExited));
        assert!(a.hold_board);
    }

    /// Page damage, then a hang: the page loses the heartbeat and the
    /// driver (repair or replacement zeroed them); the guard holds the
    /// runtime by its pidfd and counts the beat timeout from the loss, and
    /// so still sees the hang and kills the right process.
    #[test]
    fn page_damage_then_a_hang_keeps_the_identity_and_the_last_beat() {
        let zeroed = Snapshot {
            magic_ok: true,
            reason: Some(Reason::PageLost),
            reason_code: Reason::PageLost.code(),
            tripped_at_ns: 30 * MS,
            ..Snapshot::default()
        };
        // Tripped page-lost and never confirmed: rule 3 after 40 ms.
        // Re-armed (`naoctl rearm`) after the damage: rule 2 after 60 ms.
        let rearmed = Snapshot {
            armed: true,
            reason: None,
            reason_code: 0,
            ..zeroed
        };
        for (page, reason, at_ms) in [
            (zeroed, Reason::GuardNoConfirmation, 72),
            (rearmed, Reason::GuardHeartbeatLost, 92),
        ] {
            let mut g = GuardCore::new(GUARD);
            let first = poll(
                &mut g,
                &beating(Some(RT), 1, 0),
                0,
                PidfdState::Unknown,
                false,
            );
            assert_eq!(first.0.adopt, Some(RT));
            poll(
                &mut g,
                &beating(Some(RT), 2, 12 * MS),
                12 * MS,
                PidfdState::Alive(RT),
                false,
            );
            poll(
                &mut g,
                &beating(Some(RT), 3, 24 * MS),
                24 * MS,
                PidfdState::Alive(RT),
                false,
            );
            // The damage zeroed the page; the runtime hangs (SIGSTOP)
            // before it beats again.
            for ms in (30..at_ms).step_by(2) {
                let (a, _) = poll(&mut g, &page, ms * MS, PidfdState::Alive(RT), false);
                assert_eq!(
                    (g.state(), a.kill),
                    (State::Watching, None),
                    "{reason:?} at {ms} ms"
                );
            }
            let (a, t) = poll(&mut g, &page, at_ms * MS, PidfdState::Alive(RT), false);
            assert_eq!(g.state(), State::Holding { killed: Some(RT) });
            assert_eq!((a.trip, a.kill), (Some(reason), Some(RT)));
            assert_eq!(t, Transition::TakeOver(reason, Some(RT)));
        }
        // Without a pidfd (no registration), a zeroed page is idle: the
        // page alone cannot say who the runtime is.
        let mut g = watching_unregistered();
        let (_, t) = poll(&mut g, &zeroed, 100 * MS, PidfdState::Unknown, false);
        assert_eq!((t, g.state()), (Transition::Unwatch, State::Idle));
    }

    #[test]
    fn page_damage_then_a_runtime_that_never_confirms_is_taken_over() {
        // After the damage the runtime beats again (the page has its beat)
        // but never confirms the page-lost trip: rule 3, the pidfd's pid.
        let mut g = watching_unregistered();
        let mut s = page_lost(beating(None, 5, 50 * MS), 10 * MS);
        // Seen tripped first at 51 ms: the window runs from there.
        let (a, _) = poll(&mut g, &s, 51 * MS, PidfdState::Alive(RT), false);
        assert_eq!(a.trip, None);
        s.last_beat_ns = Some(90 * MS);
        let (a, _) = poll(&mut g, &s, 92 * MS, PidfdState::Alive(RT), false);
        assert_eq!(trip_kill(&a), (Some(Reason::GuardNoConfirmation), Some(RT)));
    }

    #[test]
    fn a_trip_time_from_the_future_is_judged_from_when_the_guard_saw_the_trip() {
        // Garbage that keeps the magics: tripped, trip time far ahead (or
        // stuck pending), the runtime beats but never confirms.
        for garbage_trip in [u64::MAX, 1 << 62] {
            let mut g = watching_unregistered();
            let mut s = page_lost(beating(Some(RT), 2, 10 * MS), garbage_trip);
            // ... and a confirmation of a cycle not yet beaten.
            s.all_off_confirmed_cycle = Some(1 << 60);
            let (a, _) = poll(&mut g, &s, 10 * MS, PidfdState::Alive(RT), false);
            assert_eq!(a.trip, None);
            s.last_beat_ns = Some(50 * MS);
            assert_eq!(
                poll(&mut g, &s, 50 * MS, PidfdState::Alive(RT), false)
                    .0
                    .trip,
                None
            );
            s.last_beat_ns = Some(52 * MS);
            let (a, _) = poll(&mut g, &s, 52 * MS, PidfdState::Alive(RT), false);
            assert_eq!(trip_kill(&a), (Some(Reason::GuardNoConfirmation), Some(RT)));
        }
    }

    #[test]
    fn a_guard_that_was_not_looking_counts_the_beat_timeout_from_the_loss() {
        // The guard saw a beat at 0, then was stopped (SIGSTOP) until
        // 300 ms; the page lost its beat meanwhile (a repair): the runtime
        // is not blamed for the guard's blindness.
        let mut g = watching_unregistered();
        let repaired = Snapshot {
            armed: true,
            magic_ok: true,
            ..Snapshot::default()
        };
        for ms in [300, 330, 360] {
            let (a, _) = poll(&mut g, &repaired, ms * MS, PidfdState::Alive(RT), false);
            assert_eq!(a.trip, None, "at {ms} ms");
        }
        let (a, _) = poll(&mut g, &repaired, 362 * MS, PidfdState::Alive(RT), false);
        assert_eq!(trip_kill(&a), (Some(Reason::GuardHeartbeatLost), Some(RT)));
        // A beat in the page again resets the loss.
        let mut g = watching_unregistered();
        poll(&mut g, &repaired, 10 * MS, PidfdState::Alive(RT), false);
        poll(
            &mut g,
            &beating(Some(RT), 2, 20 * MS),
            20 * MS,
            PidfdState::Alive(RT),
            false,
        );
        let (a, _) = poll(&mut g, &repaired, 75 * MS, PidfdState::Alive(RT), false);
        assert_eq!(a.trip, None, "lost again at 75: 60 ms from there");
        let (a, _) = poll(&mut g, &repaired, 136 * MS, PidfdState::Alive(RT), false);
        assert_eq!(a.trip, Some(Reason::GuardHeartbeatLost));
    }
}
