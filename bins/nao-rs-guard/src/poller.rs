//! One poll of the guard, every 2 ms: check the page's integrity, take a
//! snapshot, ask `deathswitch::rules::decide`, step the [`GuardCore`] and do
//! what it says, in the seed's order. Allocates nothing (a counting-allocator
//! test holds it); logs only through the ring.

use deathswitch::rules::{decide, Settings};
use deathswitch::{Integrity, Page};

use crate::board::Board;
use crate::core::{FramePacer, GuardCore, Observation, Transition};
use crate::log::{Event, KillOutcome, LinkFault, LogSender};
use crate::process;

/// The runtime's cycle, which the guard's all-off frames keep: 12 ms.
pub const FRAME_PERIOD_NS: u64 = 12_000_000;
/// The guard's poll period: 2 ms.
pub const POLL_PERIOD_NS: u64 = 2_000_000;

/// How long a take-over waits for the killed runtime to exit before it
/// opens the board (one poll period; the open is retried every poll anyway).
pub const KILL_WAIT_MS: i32 = 2;

/// The guard's loop body, with everything it needs preallocated.
pub struct Poller<B: Board> {
    core: GuardCore,
    pacer: FramePacer,
    board: B,
    settings: Settings,
    own_pid: u32,
    guard_cycle: u64,
    published_holding: Option<bool>,
    open_failing: Option<LinkFault>,
    frame_failing: Option<LinkFault>,
    log: LogSender,
    /// Frames sent since start.
    pub frames_sent: u64,
}

impl<B: Board> Poller<B> {
    /// A poller for the guard `own_pid` over `board`.
    pub fn new(board: B, settings: Settings, own_pid: u32, log: LogSender) -> Poller<B> {
        Poller {
            core: GuardCore::new(own_pid),
            pacer: FramePacer::new(FRAME_PERIOD_NS),
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

    /// One poll at `now_ns` (`deathswitch::now_ns()`, CLOCK_MONOTONIC).
    pub fn poll(&mut self, page: &Page, now_ns: u64) {
        match page.check() {
            Integrity::Intact => {}
            Integrity::Repaired => self.log.send(Event::PageRepaired),
            Integrity::Replaced => self.log.send(Event::PageReplaced),
        }
        let snap = page.snapshot();
        let verdict = decide(&snap, now_ns, &self.settings);
        // The liveness probe is a syscall: only while holding (hand-over).
        let driver_alive = self.core.holding() && snap.driver_pid.is_some_and(process::alive);
        let obs = Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: snap.last_cycle.is_some(),
            verdict,
            driver_alive,
        };
        let (actions, transition) = self.core.step(&obs);
        if let Transition::TakeOver(..) = transition {
            // Continue the heartbeat's cycle numbers where the runtime left.
            self.guard_cycle = snap.last_cycle.unwrap_or(0);
        }

        // 1. trip, 2. kill.
        if let Some(reason) = actions.trip {
            page.trip(reason);
        }
        let kill = actions.kill.map(process::kill9);
        if let (Some(pid), Some(KillOutcome::Sent)) = (actions.kill, kill) {
            // At most one poll's time, once per take-over: open the board
            // the moment the kernel has released it.
            process::wait_exit(pid, KILL_WAIT_MS);
        }
        if let Transition::TakeOver(reason, pid) = transition {
            let beat_age_ms = snap
                .last_beat_ns
                .map(|t| now_ns.saturating_sub(t) / 1_000_000);
            self.log.send(Event::TookOver {
                reason,
                pid,
                kill,
                beat_age_ms,
            });
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
                        self.pacer.reset();
                        self.open_failing = None;
                        self.log.send(Event::BoardOpened);
                    }
                    Err(e) => {
                        let f = LinkFault::from(&e);
                        if self.open_failing != Some(f) {
                            self.log.send(Event::BoardOpenFailed(f));
                            self.open_failing = Some(f);
                        }
                    }
                }
            }
            if self.board.is_open() && self.pacer.due(now_ns) {
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
                            self.log.send(Event::FrameFailed(f));
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
            Transition::Watch => self.log.send(Event::Watching {
                pid: snap.driver_pid,
            }),
            Transition::Unwatch => self.log.send(Event::Unwatched),
            Transition::TakeOver(..) => {} // logged at the kill
            Transition::HandOver(pid) => self.log.send(Event::HandedOver { pid }),
            Transition::Release => self.log.send(Event::Released),
        }
    }

    /// Log an event through the loop's ring.
    pub fn log_event(&mut self, e: Event) {
        self.log.send(e);
    }

    /// Let the board go (the guard stops) and withdraw from the page.
    pub fn shutdown(&mut self, page: &Page) {
        if self.board.is_open() {
            self.board.close();
        }
        page.set_guard(0, false);
    }
}
