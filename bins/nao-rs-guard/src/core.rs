//! The guard's logic as a pure state machine: no I/O, no clock, no
//! allocation. The process shell (`crate::poller`) reads the page, asks
//! `deathswitch::rules::decide` for the verdict, verifies the identity of
//! the runtime the page names and feeds the result in as an
//! [`Observation`]; the [`Actions`] that come back say what to do, and the
//! shell does it in this order: trip, kill, clear the heartbeat, clear the
//! driver fields, take or let go of the board, send the all-off frame and
//! write the guard's heartbeat.
//!
//! See `docs/guard.md`, and "The guard's rules" in `docs/page.md`.

use deathswitch::rules::{first_beat_overdue, FirstBeat, GuardVerdict, Judge};
use deathswitch::{Reason, Snapshot};

pub use deathswitch::rules::CONFIRMATION_LEAD_CYCLES;

/// What the guard's exit watch says of the held runtime in this poll,
/// from either source the shell holds since the registration: its pidfd
/// (Linux 5.3), or its exit-watch connection
/// (`deathswitch::exit_watch`: any kernel), whichever says it first
/// ([`exit_state`]). Both are the guard's own record of who the runtime
/// is: page damage, repair or replacement cannot take them away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExitState {
    /// No runtime held (none registered).
    #[default]
    Unknown,
    /// The runtime with this pid runs: no source says it exited (or the
    /// guard holds it by its verified identity alone, no source yet).
    Alive(u32),
    /// The runtime with this pid exited, for any reason: its pidfd turned
    /// readable, `pidfd_open` found it gone, or its end of the bound
    /// connection closed.
    Exited(u32),
}

/// The exit watch's verdict (pure): the held runtime `held` (None: none
/// held), what its pidfd says (`Some(true)`: readable, it exited; None:
/// no pidfd: a kernel older than 5.3) and what its bound connection says
/// (`Some(true)`: the runtime's end closed; None: not bound yet). Either
/// source saying "exited" is an exit; neither held is the identity alone,
/// alive (the beat rules still judge it).
pub fn exit_state(
    held: Option<u32>,
    pidfd_exited: Option<bool>,
    conn_closed: Option<bool>,
) -> ExitState {
    match held {
        None => ExitState::Unknown,
        Some(pid) if pidfd_exited == Some(true) || conn_closed == Some(true) => {
            ExitState::Exited(pid)
        }
        Some(pid) => ExitState::Alive(pid),
    }
}

/// Whether an accepted exit-watch connection is kept (pure): only while a
/// runtime is held and no connection is bound to it yet, and only when
/// the pid that connected (`SO_PEERCRED`) is the held runtime's. Any
/// other (a stranger's, a second runtime's) is closed at once: a stranger
/// can neither fill the guard's descriptors nor stand in for the runtime.
pub fn connection_kept(peer_pid: u32, held: Option<u32>, bound: bool) -> bool {
    !bound && peer_pid != 0 && held == Some(peer_pid)
}

/// Whether a kept connection is bound to the held runtime (pure): the
/// guard emptied it and prompted after it verified the runtime, and the
/// answer came stamped by the kernel with the sender's pid
/// (`answer_pid`, `SCM_CREDENTIALS`): it must be the held runtime's, and
/// that pid must still have the verified start time after the answer
/// arrived (`start_now`, read then; `verified_start` from the
/// registration). Then the sender was the runtime all along since the
/// verification, and it holds the other end: its death closes it. The
/// pid that connected alone never binds: a process can connect, hand
/// its end to a child and exit, and its pid be reused by the runtime.
pub fn connection_binds(
    answer_pid: u32,
    held: Option<u32>,
    start_now: Option<u64>,
    verified_start: u64,
) -> bool {
    held == Some(answer_pid)
        && answer_pid != 0
        && verified_start != 0
        && start_now == Some(verified_start)
}

/// The runtime the page names (`driver_pid`, `driver_start`), other than
/// the one the guard holds by its pidfd, as the shell verified it
/// ([`identity_verified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Candidate {
    /// The page names no other process (or the shell could not look this
    /// poll; it looks again next poll).
    #[default]
    None,
    /// `driver_pid` is the process that registered: its start time equals
    /// `driver_start`, before and after the shell opened a pidfd of it.
    /// `restart`: it started after the guard's last take-over
    /// ([`started_after`]), as a restarted runtime does.
    Verified {
        /// The pid.
        pid: u32,
        /// Started after the guard's last take-over.
        restart: bool,
    },
    /// `driver_pid` names no such process: gone, a reused pid (another
    /// start time), no start time stored, or 0, 1 or the guard itself.
    /// Never signalled, never handed the board; cleared from the page.
    Refused(u32),
}

/// The identity check (pure): may the process `pid`, whose start time the
/// page gives as `page_start`, be taken for the runtime that registered?
/// `before` and `after` are its start time now as read right before and
/// right after the shell opened a pidfd of it (`None`: no such process).
/// Both must equal a known `page_start`: then the pid belonged to that
/// process all along, and the pidfd names it, not a process that took the
/// pid later. Never 0, 1 or the guard (`own_pid`).
pub fn identity_verified(
    pid: u32,
    own_pid: u32,
    page_start: u64,
    before: Option<u64>,
    after: Option<u64>,
) -> bool {
    kill_target_ok(pid, own_pid)
        && page_start != 0
        && before == Some(page_start)
        && after == Some(page_start)
}

/// Whether a process that started at `start` (clock ticks since boot,
/// `/proc/PID/stat` field 22) started at or after `since` (the same clock:
/// the guard's take-over). Both are whole ticks (10 ms), so a process
/// started in the take-over's own tick counts as after it; one started a
/// tick or more before does not. Unknown (`since` None): no.
pub fn started_after(start: u64, since: Option<u64>) -> bool {
    since.is_some_and(|t| start >= t)
}

/// What the guard sees in one poll: the page's fields it needs, the verdict
/// of `deathswitch::rules::decide` on the snapshot as judged
/// ([`GuardCore::judged`]), the runtime's pidfd, the verified candidate and
/// the time.
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
    pub verdict: GuardVerdict,
    /// The runtime's pidfd.
    pub runtime: ExitState,
    /// The page's driver as verified, when it is not the held runtime.
    pub candidate: Candidate,
    /// While the guard is to hold the chest board: its last attempt to
    /// open it found it held by another process (and it is not open).
    pub board_busy: bool,
    /// This poll's time, monotonic ns.
    pub now_ns: u64,
}

/// Where the guard stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardState {
    /// No runtime has beaten since boot, since the last release or since
    /// the last hand-over: nothing sends frames. A registered runtime is
    /// held by its pidfd and must beat within its bound
    /// (`deathswitch::rules::first_beat_overdue`).
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
    /// 2. Send SIGKILL to this process (take-over): only the runtime held
    ///    by its pidfd (or, without pidfds, by its verified identity).
    ///    Never 0, 1 or the guard.
    pub kill: Option<u32>,
    /// 3. Clear the heartbeat fields, keeping `driver_pid` (hand-over).
    pub clear_heartbeat: bool,
    /// 5. Hold the chest board (level: open it if closed, send all-off
    ///    frames every cycle); false: let it go (close it if open).
    pub hold_board: bool,
    /// 4. Clear `driver_pid` and the heartbeat fields while `driver_pid`
    ///    still is this pid (compare-and-swap; release, an exited runtime, a
    ///    refused candidate), before the board is let go.
    pub clear_driver: Option<u32>,
    /// Close the held pidfd (the runtime exited, or was released).
    pub forget: bool,
    /// Hold this verified candidate by its pidfd: the runtime registered
    /// (after `forget`).
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
    /// A restarted runtime registered: the board is handed over to it.
    HandOver(u32),
    /// The guard took over from the runtime it held (the first pid, gone
    /// now) but cannot open the board: another process holds it, and the
    /// page names a verified runtime (the second) that started before the
    /// take-over, so it is no restart. It registered before the guard saw
    /// the exit (a guard stalled across systemd's restart) and took the
    /// free board: the board is handed over to it, the switch stays
    /// tripped.
    Succeeded(Option<u32>, u32),
    /// A re-arm with no runtime running: the board is released.
    Release,
    /// The heartbeat disappeared while watching, and no runtime is held
    /// by its pidfd (page cleared or replaced).
    Unwatch,
    /// The page named a process that is not the runtime that registered
    /// (gone, a reused pid, or not restarted while the guard holds the
    /// board): cleared, never signalled.
    Refused(u32),
}

/// A held runtime that has not beaten yet: since when, and which bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Awaiting {
    pid: u32,
    since_ns: u64,
    kind: FirstBeat,
}

/// The guard's state machine. `judged` then `step`, once a poll.
#[derive(Debug, Clone)]
pub struct GuardCore {
    state: GuardState,
    own_pid: u32,
    /// What the guard remembers to judge the page ([`Judge`]).
    judge: Judge,
    /// The held runtime's first beat is awaited (rules 5 and 6).
    awaiting: Option<Awaiting>,
}

/// How the guard's SIGKILL reaches `pid` ([`kill_route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillRoute {
    /// Through the held runtime's pidfd, which names `pid`.
    Pidfd,
    /// By pid (no pidfd: a kernel older than 5.3), and only while the
    /// held runtime's verified start time still holds, read right before.
    ByPidIfSame,
    /// By pid with no check (the world's mutation only).
    #[cfg(feature = "mutations")]
    ByPidUnchecked,
    /// Not at all: `pid` is not the runtime the guard holds.
    Refuse,
}

/// The kill rule (pure): the guard signals only the runtime it holds by
/// its verified identity: `pidfd` is the pid the held pidfd names (None:
/// no pidfd), `held` the held runtime's verified pid (None: none).
pub fn kill_route(pid: u32, pidfd: Option<u32>, held: Option<u32>) -> KillRoute {
    // Mutation (the world's, `docs/world.md`): any pid, unchecked.
    #[cfg(feature = "mutations")]
    if nao_kit::mutation::on(nao_kit::mutation::Mutation::UnverifiedKill) && pidfd != Some(pid) {
        return KillRoute::ByPidUnchecked;
    }
    match (pidfd, held) {
        (Some(p), _) if p == pid => KillRoute::Pidfd,
        (None, Some(h)) if h == pid => KillRoute::ByPidIfSame,
        _ => KillRoute::Refuse,
    }
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
            state: GuardState::Idle,
            own_pid,
            judge: Judge::default(),
            awaiting: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> GuardState {
        self.state
    }

    /// True while the guard holds (or tries to hold) the chest board.
    pub fn holding(&self) -> bool {
        matches!(self.state, GuardState::Holding { .. })
    }

    /// The held runtime whose first beat is awaited, the bound it has and
    /// since when (monotonic ns).
    pub fn awaiting(&self) -> Option<(u32, FirstBeat, u64)> {
        self.awaiting.map(|a| (a.pid, a.kind, a.since_ns))
    }

    /// The page as the guard judges it ([`deathswitch::rules::Judge`]):
    /// the page's heartbeat, or the one remembered across a page loss while
    /// the runtime held by its pidfd still runs; trip times and
    /// confirmations that cannot be, judged from what the guard saw.
    pub fn judged(&mut self, snap: &Snapshot, runtime: ExitState, now_ns: u64) -> Snapshot {
        let alive = matches!(runtime, ExitState::Alive(_));
        let holding = self.holding();
        self.judge.judged(snap, alive, holding, now_ns)
    }

    /// One poll: what to do, and what changed.
    pub fn step(&mut self, obs: &Observation) -> (Actions, Transition) {
        // Never 0, 1 or the guard itself, whatever the shell said.
        let mut obs = *obs;
        if let Candidate::Verified { pid, .. } = obs.candidate {
            if !kill_target_ok(pid, self.own_pid) {
                obs.candidate = Candidate::Refused(pid);
            }
        }
        match self.state {
            GuardState::Idle | GuardState::Watching => self.step_watching(&obs),
            GuardState::Holding { killed } => self.step_holding(&obs, killed),
        }
    }

    fn take_over(
        &mut self,
        reason: Reason,
        from: Option<u32>,
        kill: Option<u32>,
    ) -> (Actions, Transition) {
        self.state = GuardState::Holding { killed: from };
        self.judge.forget_beat();
        self.awaiting = None;
        let actions = Actions {
            trip: Some(reason),
            kill: kill.filter(|&p| kill_target_ok(p, self.own_pid)),
            hold_board: true,
            ..Actions::default()
        };
        (actions, Transition::TakeOver(reason, from))
    }

    /// The board goes to the verified runtime `pid`: the heartbeat is
    /// cleared (its first beat is its own), it is held by its pidfd (the
    /// old one closed when `forget`), and it must beat within the
    /// hand-over bound from `now_ns`. The switch stays as it is.
    fn hand_over(&mut self, pid: u32, now_ns: u64, forget: bool) -> (Actions, Transition) {
        self.state = GuardState::Idle;
        self.judge.forget_beat();
        self.awaiting = Some(Awaiting {
            pid,
            since_ns: now_ns,
            kind: FirstBeat::HandOver,
        });
        let actions = Actions {
            clear_heartbeat: true,
            forget,
            adopt: Some(pid),
            ..Actions::default()
        };
        (actions, Transition::HandOver(pid))
    }

    fn step_watching(&mut self, obs: &Observation) -> (Actions, Transition) {
        let was = self.state;
        // A page that names a process that is not the runtime (while no
        // runtime is held): cleared, whatever else this poll does.
        let refused = match obs.candidate {
            Candidate::Refused(pid) if obs.runtime == ExitState::Unknown => Some(pid),
            _ => None,
        };
        // The runtime exited (any cause): take over at once, nothing to
        // kill; its pid is cleared from the page.
        if let ExitState::Exited(pid) = obs.runtime {
            let (mut a, t) = self.take_over(Reason::GuardRuntimeExited, Some(pid), None);
            a.forget = true;
            a.clear_driver = Some(pid);
            return (a, t);
        }
        // The page holds the beat of a runtime that is gone (its pid is
        // dead or another process's now; no guard saw it end): the same,
        // found later. Nobody is signalled.
        if let (Some(pid), true) = (refused, obs.beaten) {
            let (mut a, t) = self.take_over(Reason::GuardRuntimeExited, None, None);
            a.clear_driver = Some(pid);
            return (a, t);
        }
        if let GuardVerdict::TakeOver(reason) = obs.verdict {
            // Only the runtime the guard holds by its pidfd, or the one
            // the shell verified this poll (a guard that starts beside a
            // hung runtime), is signalled; never a pid read from the page.
            let (target, adopt) = match (obs.runtime, obs.candidate) {
                (ExitState::Alive(pid), _) => (Some(pid), None),
                (ExitState::Unknown, Candidate::Verified { pid, .. }) => (Some(pid), Some(pid)),
                _ => (None, None),
            };
            // Mutation (the world's, `docs/world.md`): the pid the page
            // names is signalled, verified or not.
            #[cfg(feature = "mutations")]
            let target = if nao_kit::mutation::on(nao_kit::mutation::Mutation::UnverifiedKill) {
                obs.driver_pid.or(target)
            } else {
                target
            };
            let (mut a, t) = self.take_over(reason, target, target);
            a.clear_driver = refused;
            a.adopt = adopt;
            return (a, t);
        }
        // Rules 5 and 6: the held runtime's first beat is overdue.
        if let (Some(w), ExitState::Alive(pid), false) = (self.awaiting, obs.runtime, obs.beaten) {
            if w.pid == pid && first_beat_overdue(w.kind, w.since_ns, obs.now_ns) {
                return self.take_over(Reason::GuardStartUpTimeout, Some(pid), Some(pid));
            }
        }
        self.state = if obs.beaten {
            self.awaiting = None;
            GuardState::Watching
        } else {
            GuardState::Idle
        };
        let mut actions = Actions {
            clear_driver: refused,
            ..Actions::default()
        };
        // Registration: the page names a verified runtime and the guard
        // holds none. A held runtime keeps its identity whatever the page
        // says later (the page may be damaged; the pidfd is not).
        if let (ExitState::Unknown, Candidate::Verified { pid, .. }) = (obs.runtime, obs.candidate)
        {
            actions.adopt = Some(pid);
            self.awaiting = (!obs.beaten).then_some(Awaiting {
                pid,
                since_ns: obs.now_ns,
                kind: FirstBeat::StartUp,
            });
        }
        let t = match (was, self.state, refused) {
            (_, _, Some(pid)) => Transition::Refused(pid),
            (GuardState::Idle, GuardState::Watching, _) => Transition::Watch,
            (GuardState::Watching, GuardState::Idle, _) => Transition::Unwatch,
            _ => Transition::None,
        };
        (actions, t)
    }

    fn step_holding(&mut self, obs: &Observation, killed: Option<u32>) -> (Actions, Transition) {
        // The killed runtime's pidfd has done its work; its pid goes from
        // the page.
        let exited = match obs.runtime {
            ExitState::Exited(pid) => Some(pid),
            _ => None,
        };
        // Hand-over: a verified runtime that started after the take-over
        // (a restart) registered. Any other process the page names never
        // takes the board from the guard: a gone or reused pid is cleared,
        // a live process that was running before the take-over (init, the
        // simulator) or is no runtime (the shell says `None`) is ignored.
        match obs.candidate {
            Candidate::Verified { pid, restart: true }
                if Some(pid) != killed && pid != self.own_pid =>
            {
                return self.hand_over(pid, obs.now_ns, obs.runtime != ExitState::Unknown);
            }
            Candidate::Refused(pid) if Some(pid) != killed => {
                return (
                    Actions {
                        hold_board: true,
                        forget: exited.is_some(),
                        clear_driver: Some(pid),
                        ..Actions::default()
                    },
                    Transition::Refused(pid),
                );
            }
            _ => {}
        }
        // Succession: the runtime taken over from is gone, the board is
        // busy, and the page names a verified runtime that is no restart:
        // it registered and took the free board before the guard saw the
        // exit (a guard stalled across a restart). Holding nothing, the
        // guard would never hand over; it hands the board to it now, and
        // it must beat within the hand-over bound.
        if let Candidate::Verified {
            pid,
            restart: false,
        } = obs.candidate
        {
            let gone = !matches!(obs.runtime, ExitState::Alive(_));
            if obs.board_busy && gone && Some(pid) != killed && pid != self.own_pid {
                let (actions, _) =
                    self.hand_over(pid, obs.now_ns, obs.runtime != ExitState::Unknown);
                return (actions, Transition::Succeeded(killed, pid));
            }
        }
        // Release: re-armed, and no new runtime registered. A verified
        // runtime the page names keeps its registration (the next poll
        // holds it by its pidfd and awaits its beat); anything else the
        // page names is cleared.
        if obs.armed {
            self.state = GuardState::Idle;
            self.judge.forget_beat();
            self.awaiting = None;
            let live =
                matches!(obs.candidate, Candidate::Verified { pid, .. } if Some(pid) != killed);
            let actions = Actions {
                clear_driver: (!live).then_some(obs.driver_pid.unwrap_or(0)),
                forget: obs.runtime != ExitState::Unknown,
                ..Actions::default()
            };
            return (actions, Transition::Release);
        }
        (
            Actions {
                hold_board: true,
                forget: exited.is_some(),
                clear_driver: exited,
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
        verdict: GuardVerdict,
        alive: bool,
    ) -> Observation {
        Observation {
            armed,
            driver_pid: pid,
            beaten,
            verdict,
            runtime: ExitState::Unknown,
            candidate: match (alive, pid) {
                (true, Some(pid)) => Candidate::Verified { pid, restart: true },
                _ => Candidate::None,
            },
            now_ns: 0,
            board_busy: false,
        }
    }
    fn with_pidfd(o: Observation, runtime: ExitState) -> Observation {
        Observation { runtime, ..o }
    }
    fn alive(o: Observation, pid: u32) -> Observation {
        with_pidfd(o, ExitState::Alive(pid))
    }
    /// An armed, beaten page whose verdict is rule 2 (`guard-heartbeat-lost`).
    fn beat_lost(pid: Option<u32>, alive: bool) -> Observation {
        obs(
            true,
            pid,
            true,
            GuardVerdict::TakeOver(Reason::GuardHeartbeatLost),
            alive,
        )
    }
    fn fine(pid: Option<u32>, beaten: bool) -> Observation {
        obs(true, pid, beaten, GuardVerdict::Fine, pid.is_some())
    }
    fn holding_after(reason: Reason) -> GuardCore {
        let mut g = GuardCore::new(GUARD);
        g.step(&fine(Some(RT), true));
        g.step(&alive(
            obs(false, Some(RT), true, GuardVerdict::TakeOver(reason), false),
            RT,
        ));
        assert_eq!(g.state(), GuardState::Holding { killed: Some(RT) });
        g
    }
    const HOLD: Actions = Actions {
        trip: None,
        kill: None,
        clear_heartbeat: false,
        hold_board: true,
        clear_driver: None,
        forget: false,
        adopt: None,
    };

    #[test]
    fn idle_while_no_runtime_has_beaten() {
        let mut g = GuardCore::new(GUARD);
        assert_eq!(
            g.step(&fine(None, false)),
            (Actions::default(), Transition::None)
        );
        // A verified registration is held by its pidfd before its first
        // beat (the start-up bound runs), still idle.
        let adopt = Actions {
            adopt: Some(RT),
            ..Actions::default()
        };
        assert_eq!(g.step(&fine(Some(RT), false)), (adopt, Transition::None));
        let o = alive(obs(false, Some(RT), false, GuardVerdict::Fine, false), RT);
        assert_eq!(g.step(&o), (Actions::default(), Transition::None));
        assert_eq!(g.state(), GuardState::Idle);
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
        assert_eq!(g.state(), GuardState::Watching);
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
        let (a, t) = g.step(&alive(beat_lost(Some(RT), true), RT));
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
            GuardVerdict::Fine,
            GuardVerdict::TakeOver(Reason::GuardNoConfirmation),
        ] {
            assert_eq!(
                g.step(&obs(false, Some(RT), true, v, false)),
                (HOLD, Transition::None)
            );
        }
        // The killed runtime still registered and (EPERM) alive: no hand-over.
        assert_eq!(
            g.step(&obs(false, Some(RT), true, GuardVerdict::Fine, true)),
            (HOLD, Transition::None)
        );
    }

    #[test]
    fn hand_over_to_a_new_runtime_clears_the_heartbeat_and_keeps_it_tripped() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, t) = g.step(&obs(false, Some(NEW_RT), true, GuardVerdict::Fine, true));
        assert_eq!(
            a,
            Actions {
                clear_heartbeat: true,
                adopt: Some(NEW_RT),
                ..Actions::default()
            }
        );
        assert!(
            a.trip.is_none() && !a.hold_board && a.clear_driver.is_none(),
            "the switch stays tripped, no re-arm"
        );
        assert_eq!(t, Transition::HandOver(NEW_RT));
        // Judged from its first beat: idle until it beats.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, GuardVerdict::Fine, true))
                .1,
            Transition::None
        );
        assert_eq!(g.state(), GuardState::Idle);
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), true, GuardVerdict::Fine, true))
                .1,
            Transition::Watch
        );
        // And taken over again when it stops confirming.
        let (a, _) = g.step(&obs(
            false,
            Some(NEW_RT),
            true,
            GuardVerdict::TakeOver(Reason::GuardNoConfirmation),
            true,
        ));
        assert_eq!(a.kill, Some(NEW_RT));
    }

    #[test]
    fn hand_over_needs_a_verified_runtime() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        // New pid the shell could not verify (yet): keep the board.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, GuardVerdict::Fine, false)),
            (HOLD, Transition::None)
        );
        // Verified (its start time, the page mapped, a restart; its pidfd
        // open, also for another user's process): hand over.
        assert_eq!(
            g.step(&obs(false, Some(NEW_RT), false, GuardVerdict::Fine, true))
                .1,
            Transition::HandOver(NEW_RT)
        );
    }

    #[test]
    fn rearm_with_no_runtime_releases_the_board_and_clears_the_driver() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, t) = g.step(&obs(true, Some(RT), true, GuardVerdict::Fine, false));
        assert_eq!(
            a,
            Actions {
                clear_driver: Some(RT),
                ..Actions::default()
            }
        );
        assert_eq!(t, Transition::Release);
        assert_eq!(g.state(), GuardState::Idle);
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
            g.step(&obs(true, Some(NEW_RT), false, GuardVerdict::Fine, true))
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
    fn the_kill_goes_only_to_the_held_runtime_by_its_pidfd_or_its_checked_identity() {
        assert_eq!(kill_route(RT, Some(RT), Some(RT)), KillRoute::Pidfd);
        assert_eq!(kill_route(RT, None, Some(RT)), KillRoute::ByPidIfSame);
        // A pid the guard does not hold: never, whatever the page says.
        assert_eq!(kill_route(NEW_RT, Some(RT), Some(RT)), KillRoute::Refuse);
        assert_eq!(kill_route(NEW_RT, None, Some(RT)), KillRoute::Refuse);
        assert_eq!(kill_route(RT, None, None), KillRoute::Refuse);
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
        assert_eq!(g.state(), GuardState::Idle);
    }

    /// The whole story as a table with time passed in: (ms, observation,
    /// expected state after the step).
    #[test]
    fn guard_story_table() {
        let hb = GuardVerdict::TakeOver(Reason::GuardHeartbeatLost);
        let rows: &[(u64, Observation, GuardState)] = &[
            (0, fine(None, false), GuardState::Idle),
            (2, fine(Some(RT), false), GuardState::Idle),
            (14, fine(Some(RT), true), GuardState::Watching),
            (74, fine(Some(RT), true), GuardState::Watching),
            (
                76,
                obs(true, Some(RT), true, hb, true),
                GuardState::Holding { killed: Some(RT) },
            ),
            (
                78,
                obs(false, Some(RT), true, GuardVerdict::Fine, false),
                GuardState::Holding { killed: Some(RT) },
            ),
            (
                1078,
                obs(false, Some(NEW_RT), false, GuardVerdict::Fine, true),
                GuardState::Idle,
            ),
            (
                1200,
                obs(false, Some(NEW_RT), true, GuardVerdict::Fine, true),
                GuardState::Watching,
            ),
            (
                1300,
                obs(false, Some(NEW_RT), true, hb, true),
                GuardState::Holding {
                    killed: Some(NEW_RT),
                },
            ),
            (
                1302,
                obs(true, Some(NEW_RT), true, GuardVerdict::Fine, false),
                GuardState::Idle,
            ),
            (1304, fine(None, false), GuardState::Idle),
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
            ExitState::Unknown,
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
        runtime: ExitState,
        verified: bool,
    ) -> (Actions, Transition) {
        let j = g.judged(snap, runtime, now_ns);
        let verdict =
            deathswitch::rules::decide(&j, now_ns, &deathswitch::rules::Settings::default());
        let candidate = match (verified, runtime, snap.driver_pid) {
            (true, ExitState::Unknown, Some(pid)) => Candidate::Verified {
                pid,
                restart: false,
            },
            _ => Candidate::None,
        };
        g.step(&Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: j.last_cycle.is_some(),
            verdict,
            runtime,
            candidate,
            now_ns,
            board_busy: false,
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
            o.runtime = ExitState::Exited(RT);
            let (a, t) = g.step(&o);
            assert_eq!(
                a,
                Actions {
                    trip: Some(Reason::GuardRuntimeExited),
                    hold_board: true,
                    forget: true,
                    clear_driver: Some(RT),
                    ..Actions::default()
                },
                "beaten {beaten}"
            );
            assert_eq!(
                t,
                Transition::TakeOver(Reason::GuardRuntimeExited, Some(RT))
            );
            assert_eq!(g.state(), GuardState::Holding { killed: Some(RT) });
        }
    }

    /// The guard stalled across a restart: its runtime exited and the
    /// restarted one registered before the guard saw the exit. The guard
    /// takes over as at any exit; while the board is free it holds it (the
    /// successor, no restart, waits); when the successor has taken the
    /// board (busy), the guard hands it over (held by its pidfd, its first
    /// beat due within the hand-over bound), instead of holding nothing and
    /// never handing over (`docs/world.md`, finding 1, seed 59704).
    #[test]
    fn an_exit_seen_after_the_successor_took_the_board_hands_it_over() {
        let mut g = GuardCore::new(GUARD);
        let mut o = alive(fine(Some(RT), true), RT);
        g.step(&o);
        assert_eq!(g.state(), GuardState::Watching);
        // The page names the successor, verified (it started before the
        // take-over: no `restart`).
        o.runtime = ExitState::Exited(RT);
        o.driver_pid = Some(NEW_RT);
        o.beaten = false;
        o.candidate = Candidate::Verified {
            pid: NEW_RT,
            restart: false,
        };
        let (a, t) = g.step(&o);
        assert_eq!(
            t,
            Transition::TakeOver(Reason::GuardRuntimeExited, Some(RT))
        );
        assert!(a.hold_board && a.forget && a.adopt.is_none());
        // The board free: the guard holds it, the successor waits.
        o.runtime = ExitState::Unknown;
        o.armed = false;
        assert_eq!(g.step(&o), (HOLD, Transition::None));
        // The board busy (the successor has it): handed over.
        o.board_busy = true;
        o.now_ns = 5_000;
        let (a, t) = g.step(&o);
        assert_eq!(
            a,
            Actions {
                clear_heartbeat: true,
                adopt: Some(NEW_RT),
                ..Actions::default()
            },
            "the switch stays tripped, the board left to the successor"
        );
        assert_eq!(t, Transition::Succeeded(Some(RT), NEW_RT));
        assert_eq!(
            g.awaiting(),
            Some((NEW_RT, FirstBeat::HandOver, 5_000)),
            "its first beat within the hand-over bound"
        );
        // It beats: watched; it hangs: taken over and killed by its pidfd.
        let mut w = alive(
            obs(false, Some(NEW_RT), true, GuardVerdict::Fine, false),
            NEW_RT,
        );
        assert_eq!(g.step(&w).1, Transition::Watch);
        w.verdict = GuardVerdict::TakeOver(Reason::GuardHeartbeatLost);
        let (a, _) = g.step(&w);
        assert_eq!(a.kill, Some(NEW_RT));
        // A busy board while the runtime taken over from still lives (its
        // kill not done yet) hands nothing over.
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let mut o = alive(
            obs(false, Some(NEW_RT), false, GuardVerdict::Fine, false),
            RT,
        );
        o.candidate = Candidate::Verified {
            pid: NEW_RT,
            restart: false,
        };
        o.board_busy = true;
        assert_eq!(g.step(&o), (HOLD, Transition::None));
    }

    /// A re-arm while holding never clears the registration of a verified
    /// runtime the page names (one that registered while the guard held
    /// the board without being a restart): it keeps it, and the next poll
    /// holds it by its pidfd; anything else the page names is cleared.
    #[test]
    fn a_release_keeps_a_verified_runtimes_registration() {
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let mut o = obs(true, Some(NEW_RT), true, GuardVerdict::Fine, false);
        o.candidate = Candidate::Verified {
            pid: NEW_RT,
            restart: false,
        };
        let (a, t) = g.step(&o);
        assert_eq!(t, Transition::Release);
        assert_eq!(a.clear_driver, None, "the live runtime's registration kept");
        // Next poll: registered, held by its pidfd.
        let (a, _) = g.step(&o);
        assert_eq!(a.adopt, Some(NEW_RT));
        // Unverified: cleared, as before.
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, _) = g.step(&obs(true, Some(NEW_RT), true, GuardVerdict::Fine, false));
        assert_eq!(a.clear_driver, Some(NEW_RT));
    }

    /// The exit watch's pure rules: either source saying "exited" is an
    /// exit; a connection is kept only from the held runtime's pid while
    /// none is bound, and bound only on a fresh answer stamped with the
    /// held runtime's pid while its verified start time holds.
    #[test]
    fn exit_watch_table() {
        use ExitState::{Alive, Exited, Unknown};
        /// (case, held, pidfd exited, connection closed, state)
        type StateRow = (
            &'static str,
            Option<u32>,
            Option<bool>,
            Option<bool>,
            ExitState,
        );
        let rows: &[StateRow] = &[
            ("nothing held", None, None, None, Unknown),
            (
                "a stray source with nothing held",
                None,
                Some(true),
                Some(true),
                Unknown,
            ),
            (
                "pidfd alive, connection open",
                Some(RT),
                Some(false),
                Some(false),
                Alive(RT),
            ),
            (
                "pidfd readable (5.3 and later)",
                Some(RT),
                Some(true),
                Some(false),
                Exited(RT),
            ),
            (
                "connection closed (any kernel)",
                Some(RT),
                Some(false),
                Some(true),
                Exited(RT),
            ),
            (
                "4.4: no pidfd, connection closed",
                Some(RT),
                None,
                Some(true),
                Exited(RT),
            ),
            (
                "4.4: no pidfd, connection open",
                Some(RT),
                None,
                Some(false),
                Alive(RT),
            ),
            (
                "no pidfd, not bound yet: identity alone",
                Some(RT),
                None,
                None,
                Alive(RT),
            ),
            (
                "pidfd readable, not bound yet",
                Some(RT),
                Some(true),
                None,
                Exited(RT),
            ),
        ];
        for &(case, held, pidfd, conn, want) in rows {
            assert_eq!(exit_state(held, pidfd, conn), want, "{case}");
        }
        /// (case, peer pid, held, bound already, kept)
        type KeptRow = (&'static str, u32, Option<u32>, bool, bool);
        let rows: &[KeptRow] = &[
            (
                "the held runtime's pid connected",
                RT,
                Some(RT),
                false,
                true,
            ),
            ("a stranger", 4242, Some(RT), false, false),
            ("nothing held", RT, None, false, false),
            (
                "bound already: a second connection",
                RT,
                Some(RT),
                true,
                false,
            ),
            (
                "no credentials (another pid namespace)",
                0,
                Some(RT),
                false,
                false,
            ),
        ];
        for &(case, peer, held, bound, want) in rows {
            assert_eq!(connection_kept(peer, held, bound), want, "{case}");
        }
        const START: u64 = 5000;
        /// (case, answer pid, held, start time after the answer, binds)
        type BindRow = (&'static str, u32, Option<u32>, Option<u64>, bool);
        let rows: &[BindRow] = &[
            (
                "the runtime answered, still itself",
                RT,
                Some(RT),
                Some(START),
                true,
            ),
            (
                "a child holding a stranger's end answered",
                4242,
                Some(RT),
                Some(START),
                false,
            ),
            (
                "the runtime died since: pid gone",
                RT,
                Some(RT),
                None,
                false,
            ),
            (
                "the pid was reused since",
                RT,
                Some(RT),
                Some(START + 3),
                false,
            ),
            ("nothing held", RT, None, Some(START), false),
            ("no credentials", 0, Some(0), Some(START), false),
        ];
        for &(case, answer, held, start_now, want) in rows {
            assert_eq!(
                connection_binds(answer, held, start_now, START),
                want,
                "{case}"
            );
        }
        assert!(
            !connection_binds(RT, Some(RT), Some(0), 0),
            "no verified start time"
        );
    }

    /// A runtime killed while the guard was stopped: at the guard's first
    /// poll after SIGCONT the heartbeat is stale (rule 2 would say
    /// heartbeat-lost and kill) and the exit watch says exited; the exit
    /// wins: `guard-runtime-exited`, nobody signalled.
    #[test]
    fn exit_watch_an_exit_seen_after_a_stop_wins_over_the_stale_heartbeat() {
        let mut g = GuardCore::new(GUARD);
        let mut o = alive(fine(Some(RT), true), RT);
        g.step(&o);
        o.verdict = GuardVerdict::TakeOver(Reason::GuardHeartbeatLost);
        o.runtime = ExitState::Exited(RT);
        o.now_ns = 10_000 * MS;
        let (a, t) = g.step(&o);
        assert_eq!(
            (a.trip, a.kill, a.forget),
            (Some(Reason::GuardRuntimeExited), None, true)
        );
        assert_eq!(
            t,
            Transition::TakeOver(Reason::GuardRuntimeExited, Some(RT))
        );
    }

    #[test]
    fn a_clean_exit_is_taken_over_the_same_way_the_board_keeps_all_off_frames() {
        // SIGTERM: the runtime tripped `shutdown`, sent its last all-off
        // frame and exited. The guard trips (the first reason stays) and
        // holds the board until a re-arm or a new runtime.
        let mut g = GuardCore::new(GUARD);
        let tripped = obs(false, Some(RT), true, GuardVerdict::Fine, false);
        g.step(&alive(tripped, RT));
        let (a, _) = g.step(&with_pidfd(tripped, ExitState::Exited(RT)));
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
        o.runtime = ExitState::Exited(RT);
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
        o.runtime = ExitState::Alive(RT);
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
        let o = obs(false, Some(RT), true, GuardVerdict::Fine, false);
        let (a, _) = g.step(&with_pidfd(o, ExitState::Exited(RT)));
        assert!(a.forget && a.hold_board);
        assert_eq!(g.step(&o), (HOLD, Transition::None));
    }

    #[test]
    fn hand_over_closes_the_old_pidfd_and_opens_the_new_runtimes() {
        let mut g = holding_after(Reason::GuardRuntimeExited);
        let o = obs(false, Some(NEW_RT), false, GuardVerdict::Fine, true);
        let (a, t) = g.step(&with_pidfd(o, ExitState::Alive(RT)));
        assert!(a.forget && a.clear_heartbeat);
        assert_eq!(a.adopt, Some(NEW_RT));
        assert_eq!(t, Transition::HandOver(NEW_RT));
        // The new runtime crashes before its first beat: taken over at once.
        let (a, _) = g.step(&with_pidfd(o, ExitState::Exited(NEW_RT)));
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
            tripped_at_ns: 30 * MS,
            ..Snapshot::default()
        };
        // Tripped page-lost and never confirmed: rule 3 after 40 ms.
        // Re-armed (`naoctl rearm`) after the damage: rule 2 after 60 ms.
        let rearmed = Snapshot {
            armed: true,
            reason: None,
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
                ExitState::Unknown,
                true,
            );
            assert_eq!(first.0.adopt, Some(RT));
            poll(
                &mut g,
                &beating(Some(RT), 2, 12 * MS),
                12 * MS,
                ExitState::Alive(RT),
                false,
            );
            poll(
                &mut g,
                &beating(Some(RT), 3, 24 * MS),
                24 * MS,
                ExitState::Alive(RT),
                false,
            );
            // The damage zeroed the page; the runtime hangs (SIGSTOP)
            // before it beats again.
            for ms in (30..at_ms).step_by(2) {
                let (a, _) = poll(&mut g, &page, ms * MS, ExitState::Alive(RT), false);
                assert_eq!(
                    (g.state(), a.kill),
                    (GuardState::Watching, None),
                    "{reason:?} at {ms} ms"
                );
            }
            let (a, t) = poll(&mut g, &page, at_ms * MS, ExitState::Alive(RT), false);
            assert_eq!(g.state(), GuardState::Holding { killed: Some(RT) });
            assert_eq!((a.trip, a.kill), (Some(reason), Some(RT)));
            assert_eq!(t, Transition::TakeOver(reason, Some(RT)));
        }
        // Without a pidfd (no registration), a zeroed page is idle: the
        // page alone cannot say who the runtime is.
        let mut g = watching_unregistered();
        let (_, t) = poll(&mut g, &zeroed, 100 * MS, ExitState::Unknown, false);
        assert_eq!((t, g.state()), (Transition::Unwatch, GuardState::Idle));
    }

    #[test]
    fn page_damage_then_a_runtime_that_never_confirms_is_taken_over() {
        // After the damage the runtime beats again (the page has its beat)
        // but never confirms the page-lost trip: rule 3, the pidfd's pid.
        let mut g = watching_unregistered();
        let mut s = page_lost(beating(None, 5, 50 * MS), 10 * MS);
        // Seen tripped first at 51 ms: the window runs from there.
        let (a, _) = poll(&mut g, &s, 51 * MS, ExitState::Alive(RT), false);
        assert_eq!(a.trip, None);
        s.last_beat_ns = Some(90 * MS);
        let (a, _) = poll(&mut g, &s, 92 * MS, ExitState::Alive(RT), false);
        assert_eq!(trip_kill(&a), (Some(Reason::GuardNoConfirmation), Some(RT)));
    }

    #[test]
    fn a_heartbeat_landing_between_the_guards_loads_is_no_missing_confirmation() {
        // Tripped, the runtime confirms every frame; one snapshot caught
        // the writer between its stores: the confirmation of cycle 6 (or a
        // few later, the reader preempted), the cycle still 5. Not rule 3.
        for lead in [1, 2, CONFIRMATION_LEAD_CYCLES] {
            let mut g = watching_unregistered();
            let mut s = page_lost(beating(Some(RT), 5, 10 * MS), 10 * MS);
            s.all_off_confirmed_cycle = Some(5);
            let (a, _) = poll(&mut g, &s, 11 * MS, ExitState::Alive(RT), false);
            assert_eq!(a.trip, None);
            s.all_off_confirmed_cycle = Some(5 + lead);
            s.last_beat_ns = Some(100 * MS);
            let (a, _) = poll(&mut g, &s, 100 * MS, ExitState::Alive(RT), false);
            assert_eq!(a.trip, None, "lead {lead}");
        }
        // Further ahead is damage: it confirms nothing.
        let mut g = watching_unregistered();
        let mut s = page_lost(beating(Some(RT), 5, 10 * MS), 10 * MS);
        poll(&mut g, &s, 11 * MS, ExitState::Alive(RT), false);
        s.all_off_confirmed_cycle = Some(5 + CONFIRMATION_LEAD_CYCLES + 1);
        s.last_beat_ns = Some(100 * MS);
        let (a, _) = poll(&mut g, &s, 100 * MS, ExitState::Alive(RT), false);
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
            let (a, _) = poll(&mut g, &s, 10 * MS, ExitState::Alive(RT), false);
            assert_eq!(a.trip, None);
            s.last_beat_ns = Some(50 * MS);
            assert_eq!(
                poll(&mut g, &s, 50 * MS, ExitState::Alive(RT), false)
                    .0
                    .trip,
                None
            );
            s.last_beat_ns = Some(52 * MS);
            let (a, _) = poll(&mut g, &s, 52 * MS, ExitState::Alive(RT), false);
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
            let (a, _) = poll(&mut g, &repaired, ms * MS, ExitState::Alive(RT), false);
            assert_eq!(a.trip, None, "at {ms} ms");
        }
        let (a, _) = poll(&mut g, &repaired, 362 * MS, ExitState::Alive(RT), false);
        assert_eq!(trip_kill(&a), (Some(Reason::GuardHeartbeatLost), Some(RT)));
        // A beat in the page again resets the loss.
        let mut g = watching_unregistered();
        poll(&mut g, &repaired, 10 * MS, ExitState::Alive(RT), false);
        poll(
            &mut g,
            &beating(Some(RT), 2, 20 * MS),
            20 * MS,
            ExitState::Alive(RT),
            false,
        );
        let (a, _) = poll(&mut g, &repaired, 75 * MS, ExitState::Alive(RT), false);
        assert_eq!(a.trip, None, "lost again at 75: 60 ms from there");
        let (a, _) = poll(&mut g, &repaired, 136 * MS, ExitState::Alive(RT), false);
        assert_eq!(a.trip, Some(Reason::GuardHeartbeatLost));
    }

    fn at(mut o: Observation, ms: u64) -> Observation {
        o.now_ns = ms * MS;
        o
    }
    fn cand(mut o: Observation, candidate: Candidate) -> Observation {
        o.candidate = candidate;
        o
    }

    /// Rule 5, the start-up bound, as a table with time passed in: a
    /// verified registration is held by its pidfd; without a first beat
    /// within 6 s it is taken over (`guard-start-up-timeout`, SIGKILL
    /// through the pidfd, all-off frames), armed or tripped.
    #[test]
    fn a_hang_before_the_first_beat_is_taken_over_after_the_start_up_bound() {
        for armed in [true, false] {
            let mut g = GuardCore::new(GUARD);
            let registered = obs(armed, Some(RT), false, GuardVerdict::Fine, true);
            let (a, _) = g.step(&at(registered, 1000));
            assert_eq!(a.adopt, Some(RT));
            assert_eq!(g.awaiting(), Some((RT, FirstBeat::StartUp, 1000 * MS)));
            let held = alive(obs(armed, Some(RT), false, GuardVerdict::Fine, false), RT);
            for ms in [1002, 3000, 6000, 7000] {
                assert_eq!(
                    g.step(&at(held, ms)),
                    (Actions::default(), Transition::None),
                    "armed {armed} at {ms} ms"
                );
                assert_eq!(g.state(), GuardState::Idle);
            }
            let (a, t) = g.step(&at(held, 7001));
            assert_eq!(
                (a.trip, a.kill, a.hold_board),
                (Some(Reason::GuardStartUpTimeout), Some(RT), true),
                "armed {armed}"
            );
            assert_eq!(
                t,
                Transition::TakeOver(Reason::GuardStartUpTimeout, Some(RT))
            );
            assert_eq!(g.awaiting(), None);
        }
        // A first beat within the bound: watched, the bound is over.
        let mut g = GuardCore::new(GUARD);
        g.step(&at(fine(Some(RT), false), 0));
        let beating = alive(fine(Some(RT), true), RT);
        assert_eq!(g.step(&at(beating, 5999)).1, Transition::Watch);
        assert_eq!(g.awaiting(), None);
        assert_eq!(g.step(&at(beating, 9000)).0, Actions::default());
    }

    /// Rule 6, the hand-over bound: a runtime handed the board that has
    /// not beaten within 1 s is taken over again; one that beats is not.
    #[test]
    fn a_runtime_handed_the_board_that_never_beats_is_taken_back_after_the_hand_over_bound() {
        let mut g = holding_after(Reason::GuardRuntimeExited);
        let registered = obs(false, Some(NEW_RT), false, GuardVerdict::Fine, true);
        let (a, t) = g.step(&at(registered, 10_000));
        assert_eq!(t, Transition::HandOver(NEW_RT));
        assert!(a.clear_heartbeat && !a.hold_board);
        assert_eq!(a.adopt, Some(NEW_RT));
        assert_eq!(
            g.awaiting(),
            Some((NEW_RT, FirstBeat::HandOver, 10_000 * MS))
        );
        let frozen = alive(
            obs(false, Some(NEW_RT), false, GuardVerdict::Fine, false),
            NEW_RT,
        );
        for ms in [10_002, 10_500, 11_000] {
            assert_eq!(g.step(&at(frozen, ms)).1, Transition::None, "{ms} ms");
            assert!(!g.holding());
        }
        let (a, t) = g.step(&at(frozen, 11_001));
        assert_eq!(
            (a.trip, a.kill, a.hold_board),
            (Some(Reason::GuardStartUpTimeout), Some(NEW_RT), true)
        );
        assert_eq!(
            t,
            Transition::TakeOver(Reason::GuardStartUpTimeout, Some(NEW_RT))
        );
        assert_eq!(
            g.state(),
            GuardState::Holding {
                killed: Some(NEW_RT)
            }
        );

        // One that beats within the bound is watched by the beat rules.
        let mut g = holding_after(Reason::GuardRuntimeExited);
        g.step(&at(registered, 0));
        let beating = alive(
            obs(false, Some(NEW_RT), true, GuardVerdict::Fine, true),
            NEW_RT,
        );
        assert_eq!(g.step(&at(beating, 300)).1, Transition::Watch);
        assert_eq!(g.step(&at(beating, 5000)).0, Actions::default());
    }

    /// Only a verified runtime started after the take-over is handed the
    /// board: a live pid stored in `driver_pid` (init, the simulator, any
    /// process that was running already, a reused pid) is cleared and the
    /// guard keeps the board.
    #[test]
    fn a_live_pid_stored_while_holding_is_refused_and_the_board_kept() {
        let held = |c: Candidate| {
            let mut o = obs(false, Some(4242), true, GuardVerdict::Fine, false);
            o.candidate = c;
            o
        };
        // Gone or reused: cleared.
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let (a, t) = g.step(&held(Candidate::Refused(4242)));
        assert_eq!(
            a,
            Actions {
                clear_driver: Some(4242),
                ..HOLD
            }
        );
        assert_eq!(t, Transition::Refused(4242));
        assert!(g.holding());
        // A live process that was running before the take-over: ignored.
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        let old = Candidate::Verified {
            pid: 4242,
            restart: false,
        };
        assert_eq!(g.step(&held(old)), (HOLD, Transition::None));
        // Pid 1 and the guard itself, even "verified" and "restarted".
        for pid in [1, GUARD] {
            let mut g = holding_after(Reason::GuardHeartbeatLost);
            let mut o = obs(false, Some(pid), true, GuardVerdict::Fine, false);
            o.candidate = Candidate::Verified { pid, restart: true };
            let (a, _) = g.step(&o);
            assert!(a.hold_board && a.adopt.is_none(), "{pid}");
            assert!(g.holding());
        }
        // Nothing the shell could verify (no start time in the page): kept.
        let mut g = holding_after(Reason::GuardHeartbeatLost);
        assert_eq!(g.step(&held(Candidate::None)), (HOLD, Transition::None));
    }

    /// A pid the guard finds in the page that is not the process that
    /// registered (a reused pid: another start time) is cleared and never
    /// signalled; a stale heartbeat it left is taken over without a kill.
    #[test]
    fn a_reused_pid_found_in_the_page_is_cleared_never_signalled() {
        let mut g = GuardCore::new(GUARD);
        let (a, t) = g.step(&cand(fine(Some(RT), false), Candidate::Refused(RT)));
        assert_eq!(
            a,
            Actions {
                clear_driver: Some(RT),
                ..Actions::default()
            }
        );
        assert_eq!(t, Transition::Refused(RT));
        assert_eq!(g.awaiting(), None);
        // With the gone runtime's beat in the page, fresh or stale: take
        // over as from an exited runtime, kill nobody.
        for o in [beat_lost(Some(RT), false), fine(Some(RT), true)] {
            let mut g = GuardCore::new(GUARD);
            let (a, t) = g.step(&cand(o, Candidate::Refused(RT)));
            assert_eq!(
                (a.trip, a.kill, a.clear_driver, a.adopt, a.hold_board),
                (Some(Reason::GuardRuntimeExited), None, Some(RT), None, true)
            );
            assert_eq!(t, Transition::TakeOver(Reason::GuardRuntimeExited, None));
        }
        // A verified runtime found hung at the guard's start: held and killed.
        let mut g = GuardCore::new(GUARD);
        let verified = Candidate::Verified {
            pid: RT,
            restart: false,
        };
        let (a, _) = g.step(&cand(beat_lost(Some(RT), false), verified));
        assert_eq!((a.kill, a.adopt), (Some(RT), Some(RT)));
    }

    #[test]
    fn identity_check_table() {
        const START: u64 = 5000;
        /// (case, pid, page start, start before, start after, verified)
        type Row = (&'static str, u32, u64, Option<u64>, Option<u64>, bool);
        let rows: &[Row] = &[
            (
                "the process that registered",
                RT,
                START,
                Some(START),
                Some(START),
                true,
            ),
            (
                "a reused pid: another start time",
                RT,
                START,
                Some(START + 7),
                Some(START + 7),
                false,
            ),
            (
                "reused between the two looks",
                RT,
                START,
                Some(START),
                Some(START + 7),
                false,
            ),
            ("gone", RT, START, None, None, false),
            ("gone after the pidfd", RT, START, Some(START), None, false),
            ("no start time in the page", RT, 0, Some(0), Some(0), false),
            ("init", 1, START, Some(START), Some(START), false),
            (
                "the guard itself",
                GUARD,
                START,
                Some(START),
                Some(START),
                false,
            ),
            ("pid 0", 0, START, Some(START), Some(START), false),
        ];
        for &(case, pid, page, before, after, want) in rows {
            assert_eq!(
                identity_verified(pid, GUARD, page, before, after),
                want,
                "{case}"
            );
        }
        // Restarted: started in or after the take-over's tick.
        assert!(started_after(100, Some(100)));
        assert!(started_after(101, Some(100)));
        assert!(!started_after(99, Some(100)));
        assert!(!started_after(u64::MAX, None), "no take-over yet");
    }
}
