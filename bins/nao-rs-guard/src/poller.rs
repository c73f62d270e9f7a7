//! One poll of the guard, every 2 ms or at once when the runtime's pidfd
//! turns readable: check the page's integrity, take a snapshot, judge it
//! with what the guard remembers ([`GuardCore::judged`]), ask
//! `deathswitch::rules::decide`, step the [`GuardCore`] with the pidfd's
//! news and do what it says, in the order of [`crate::core::Actions`]. Allocates nothing in the
//! steady state (a counting-allocator test holds it); logs only through
//! the ring.

use std::os::fd::BorrowedFd;

use deathswitch::rules::{decide, Settings};
use deathswitch::{Integrity, Page};
use nao_actors::kit::Schedule;

use crate::board::Board;
use crate::core::{GuardCore, Observation, PidfdState, Transition};
use nao_actors::kit::log::EventSink;

use crate::log::{emit, GuardEvent, KillOutcome, LinkFault};
use crate::process::{self, Pidfd};

/// The runtime's cycle, which the guard's all-off frames keep: 12 ms.
pub const FRAME_PERIOD_NS: u64 = nao_actors::runtime::PERIOD_NS;
/// The guard's poll period: 2 ms.
pub const POLL_PERIOD_NS: u64 = 2_000_000;

/// How long a take-over waits for the killed runtime to exit before it
/// opens the board (one poll period; the open is retried every poll anyway).
pub const KILL_WAIT_MS: i32 = 2;

/// The guard's loop body, with everything it needs preallocated.
pub struct Poller<B: Board> {
    core: GuardCore,
    /// The all-off frames' absolute deadlines (the kit's schedule); `None`:
    /// the next frame goes at once (a freshly opened board).
    frames: Option<Schedule>,
    /// The runtime as registered: its pidfd, or its pid alone when the
    /// kernel has no pidfds.
    runtime: Option<Pidfd>,
    /// A registered runtime the guard could not open a pidfd of (ENOSYS).
    runtime_pid_only: Option<u32>,
    /// The pidfd found the registered pid gone at `pidfd_open`.
    exited_at_open: Option<u32>,
    board: B,
    settings: Settings,
    own_pid: u32,
    guard_cycle: u64,
    published_holding: Option<bool>,
    open_failing: Option<LinkFault>,
    frame_failing: Option<LinkFault>,
    log: EventSink,
    /// Frames sent since start.
    pub frames_sent: u64,
}

impl<B: Board> Poller<B> {
    /// A poller for the guard `own_pid` over `board`.
    pub fn new(board: B, settings: Settings, own_pid: u32, log: EventSink) -> Poller<B> {
        Poller {
            core: GuardCore::new(own_pid),
            frames: None,
            runtime: None,
            runtime_pid_only: None,
            exited_at_open: None,
            board,
            settings,
            own_pid,
            guard_cycle: 0,
            published_holding: None,
            open_failing: None,
            frame_failing: None,
            log,
            frames_sent: 0,
        }
    }

    /// The state machine (for tests and the status line).
    pub fn core(&self) -> &GuardCore {
        &self.core
    }

    /// The board (for tests).
    pub fn board(&self) -> &B {
        &self.board
    }

    /// The registered runtime's pidfd, to wait on between polls: it turns
    /// readable the moment the runtime exits.
    pub fn runtime_fd(&self) -> Option<BorrowedFd<'_>> {
        self.runtime.as_ref().map(Pidfd::fd)
    }

    /// What the pidfd says now.
    fn runtime_status(&self) -> PidfdState {
        if let Some(pid) = self.exited_at_open {
            return PidfdState::Exited(pid);
        }
        match (&self.runtime, self.runtime_pid_only) {
            (Some(fd), _) if fd.exited() => PidfdState::Exited(fd.pid()),
            (Some(fd), _) => PidfdState::Alive(fd.pid()),
            (None, Some(pid)) => PidfdState::Alive(pid),
            (None, None) => PidfdState::Unknown,
        }
    }

    /// One poll at `now_ns` (`deathswitch::now_ns()`, CLOCK_MONOTONIC).
    pub fn poll(&mut self, page: &Page, now_ns: u64) {
        match page.check() {
            Integrity::Intact => {}
            Integrity::Repaired => emit(&mut self.log, GuardEvent::PageRepaired),
            Integrity::Replaced => emit(&mut self.log, GuardEvent::PageReplaced),
        }
        let snap = page.snapshot();
        let runtime = self.runtime_status();
        let judged = self.core.judged(&snap, runtime, now_ns);
        let verdict = decide(&judged, now_ns, &self.settings);
        // The liveness probe is a syscall: only while holding (hand-over).
        let driver_alive = self.core.holding() && snap.driver_pid.is_some_and(process::alive);
        let obs = Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: judged.last_cycle.is_some(),
            verdict,
            driver_alive,
            runtime,
        };
        let (actions, transition) = self.core.step(&obs);
        if let Transition::TakeOver(..) = transition {
            // Continue the heartbeat's cycle numbers where the runtime left.
            self.guard_cycle = judged.last_cycle.unwrap_or(0);
        }

        // 1. trip, 2. kill: through the pidfd when it is the registered
        //    runtime (never a reused pid), by pid only without pidfds.
        if let Some(reason) = actions.trip {
            page.trip(reason);
        }
        let kill = actions.kill.map(|pid| match &self.runtime {
            Some(fd) if fd.pid() == pid => fd.kill(),
            _ => process::kill9(pid),
        });
        if let (Some(fd), Some(KillOutcome::Sent)) = (&self.runtime, kill) {
            // At most one poll's time, once per take-over: open the board
            // the moment the kernel has released it.
            fd.wait_exit(KILL_WAIT_MS);
        }
        if actions.forget {
            self.runtime = None;
            self.runtime_pid_only = None;
            self.exited_at_open = None;
        }
        if let Some(pid) = actions.adopt {
            self.adopt(pid);
        }
        if let Transition::TakeOver(reason, pid) = transition {
            let beat_age_ms = snap
                .last_beat_ns
                .map(|t| now_ns.saturating_sub(t) / 1_000_000);
            emit(
                &mut self.log,
                GuardEvent::TookOver {
                    reason,
                    pid,
                    kill,
                    beat_age_ms,
                },
            );
        }
        // 3. hand-over: clear the heartbeat (driver_pid kept) before the
        //    board is let go, so the new runtime's first beat is its own.
        if actions.clear_heartbeat {
            page.clear_heartbeat();
        }
        // Release: clear the driver fields, before the board is let go (no
        // runtime can beat before that). A compare-and-swap on driver_pid:
        // a runtime that registered since this poll's snapshot keeps its
        // registration (the next poll hands the board over to it).
        if actions.clear_driver {
            page.clear_driver_if(snap.driver_pid.unwrap_or(0));
        }
        // The board.
        if actions.hold_board {
            if !self.board.is_open() {
                match self.board.open() {
                    Ok(()) => {
                        self.frames = None;
                        self.open_failing = None;
                        emit(&mut self.log, GuardEvent::BoardOpened);
                    }
                    Err(e) => {
                        let f = LinkFault::from(&e);
                        if self.open_failing != Some(f) {
                            emit(&mut self.log, GuardEvent::BoardOpenFailed(f));
                            self.open_failing = Some(f);
                        }
                    }
                }
            }
            if self.board.is_open() && self.frame_due(now_ns) {
                match self.board.send_all_off(now_ns) {
                    Ok(()) => {
                        self.guard_cycle += 1;
                        self.frames_sent += 1;
                        self.frame_failing = None;
                        page.write_heartbeat(self.guard_cycle, deathswitch::now_ns(), true);
                    }
                    Err(e) => {
                        let f = LinkFault::from(&e);
                        if self.frame_failing != Some(f) {
                            emit(&mut self.log, GuardEvent::FrameFailed(f));
                            self.frame_failing = Some(f);
                        }
                    }
                }
            }
        } else if self.board.is_open() {
            self.board.close();
        }
        // Publish the guard (and whether it holds the board) on change.
        let holding = self.core.holding();
        if self.published_holding != Some(holding) {
            page.set_guard(self.own_pid, holding);
            self.published_holding = Some(holding);
        }

        match transition {
            Transition::None => {}
            Transition::Watch => emit(
                &mut self.log,
                GuardEvent::Watching {
                    pid: snap.driver_pid,
                },
            ),
            Transition::Unwatch => emit(&mut self.log, GuardEvent::Unwatched),
            Transition::TakeOver(..) => {} // logged at the kill
            Transition::HandOver(pid) => emit(&mut self.log, GuardEvent::HandedOver { pid }),
            Transition::Release => emit(&mut self.log, GuardEvent::Released),
        }
    }

    /// The registration: open the runtime's pidfd (once, not per poll).
    fn adopt(&mut self, pid: u32) {
        self.runtime = None;
        self.runtime_pid_only = None;
        self.exited_at_open = None;
        match Pidfd::open(pid) {
            Ok(fd) => {
                self.runtime = Some(fd);
                emit(&mut self.log, GuardEvent::Registered { pid });
            }
            // Gone already: it exited; the next poll takes over.
            Err(nix::errno::Errno::ESRCH) => self.exited_at_open = Some(pid),
            Err(e) => {
                self.runtime_pid_only = Some(pid);
                emit(
                    &mut self.log,
                    GuardEvent::PidfdFailed {
                        pid,
                        errno: e as i32,
                    },
                );
            }
        }
    }

    /// True when an all-off frame is due at `now_ns`: at once after the
    /// board opened, then every 12 ms on absolute deadlines (a late poll
    /// never makes the next frame early).
    fn frame_due(&mut self, now_ns: u64) -> bool {
        let s = self
            .frames
            .get_or_insert_with(|| Schedule::new(now_ns, FRAME_PERIOD_NS, FRAME_PERIOD_NS / 10));
        if now_ns >= s.plan(now_ns) {
            s.start(now_ns);
            true
        } else {
            false
        }
    }

    /// Log an event through the loop's ring.
    pub fn log_event(&mut self, e: GuardEvent) {
        emit(&mut self.log, e);
    }

    /// Let the board go (the guard stops) and withdraw from the page.
    pub fn shutdown(&mut self, page: &Page) {
        if self.board.is_open() {
            self.board.close();
        }
        page.set_guard(0, false);
    }
}
