//! One poll of the guard, every 2 ms or at once when the runtime's pidfd
//! turns readable: check the page's integrity, take a snapshot, judge it
//! with what the guard remembers ([`GuardCore::judged`]), ask
//! `deathswitch::rules::decide`, step the [`GuardCore`] with the pidfd's
//! news and do what it says, in the order of [`crate::core::Actions`]. Allocates nothing in the
//! steady state (a counting-allocator test holds it); logs only through
//! the ring.

use std::os::fd::BorrowedFd;

use deathswitch::rules::{decide, Settings};
use deathswitch::{Integrity, Page, Switch};
use nao_kit::ticker::Schedule;

use crate::board::Board;
use crate::core::{
    connection_binds, connection_kept, exit_state, kill_route, kill_target_ok, started_after,
    Candidate, ExitState, GuardCore, KillRoute, Observation, Transition,
};
use crate::fds::FdReserve;
use deathswitch::exit_watch::{Conn, Heard, Listener};
use nao_kit::log::EventSink;

use crate::log::{emit, GuardEvent, KillOutcome, LinkFault};
use crate::process::{self, Check, Pidfd};
use deathswitch::process::ProcessIdentity;

/// The page's driver as last verified: its pid and start time as the page
/// gave them, the verdict, and the pidfd opened for it (until adopted).
#[derive(Debug)]
struct Checked {
    pid: u32,
    start: u64,
    candidate: Candidate,
    fd: Option<Pidfd>,
    /// When it was verified (monotonic ns).
    at_ns: u64,
}

/// How often a process the page names that is not a runtime (it does not
/// map the page) is looked at again.
const RECHECK_NS: u64 = 100_000_000;

/// The runtime's cycle, which the guard's all-off frames keep: 12 ms. The
/// bounds of guard rules 5 and 6 cover the runtime's busy retry of the
/// board, checked where they are set (`deathswitch::rules`): a runtime
/// still retrying the board is never taken for a hung one.
pub const FRAME_PERIOD_NS: u64 = deathswitch::rules::FRAME_PERIOD_NS;
/// The guard's poll period: 2 ms.
pub const POLL_PERIOD_NS: u64 = 2_000_000;

/// How many connections from the held runtime's pid the guard keeps
/// while it waits for an answer to its prompt (a reconnect, or a
/// stranger's end handed on from a reused pid): the oldest goes first.
pub const PENDING: usize = 2;
/// How many connections one poll accepts at most (the rest wait for the
/// next poll, 2 ms): a flood of strangers' connects costs bounded work.
pub const ACCEPT_PER_POLL: usize = 16;

/// How long a take-over waits for the killed runtime to exit before it
/// opens the board (one poll period; the open is retried every poll anyway).
pub const KILL_WAIT_MS: i32 = 2;

/// The guard's loop body, with everything it needs preallocated.
pub struct Poller<B: Board> {
    core: GuardCore,
    /// The all-off frames' absolute deadlines (the kit's schedule); `None`:
    /// the next frame goes at once (a freshly opened board).
    frames: Option<Schedule>,
    /// The runtime's pidfd (None: the kernel has no pidfds, or none could
    /// be opened).
    runtime: Option<Pidfd>,
    /// The held runtime's verified identity (pid and start time), with or
    /// without a pidfd: checked again right before a kill by pid and when
    /// its exit-watch connection answers.
    held: Option<ProcessIdentity>,
    /// The exit watch's listening socket (`deathswitch::exit_watch`).
    exits: Option<Listener>,
    /// Connections from the held runtime's pid, prompted, not yet answered.
    pending: [Option<Conn>; PENDING],
    /// The connection bound to the held runtime: closed when it exits.
    bound: Option<Conn>,
    /// The exit watch's accept fails with this errno (logged once).
    accept_failing: Option<nix::errno::Errno>,
    /// The page's driver as last verified (not the held runtime).
    checked: Option<Checked>,
    /// The guard's last take-over, in clock ticks since boot (the unit of a
    /// process's start time): only a runtime started since is handed the
    /// board.
    took_over_ticks: Option<u64>,
    /// Descriptors kept for opening the board and pidfds.
    reserve: Option<FdReserve>,
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
            held: None,
            exits: None,
            pending: Default::default(),
            bound: None,
            accept_failing: None,
            checked: None,
            took_over_ticks: None,
            reserve: None,
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

    /// Keeps `reserve` for the board and pidfds: let go right before each
    /// is opened, taken back right after.
    pub fn with_reserve(mut self, reserve: FdReserve) -> Poller<B> {
        self.reserve = Some(reserve);
        self
    }

    /// Watches the held runtime's exit through connections on `listener`
    /// as well (`deathswitch::exit_watch`): the way on kernels without
    /// pidfds.
    pub fn with_exit_watch(mut self, listener: Listener) -> Poller<B> {
        self.exits = Some(listener);
        self
    }

    /// True while a connection is bound to the held runtime (for tests).
    pub fn exit_watch_bound(&self) -> bool {
        self.bound.is_some()
    }

    fn release_reserve(&mut self) -> usize {
        self.reserve.as_mut().map_or(0, FdReserve::release)
    }

    /// Takes the reserve back.
    fn refill_reserve(&mut self) {
        if let Some(r) = self.reserve.as_mut() {
            r.refill();
        }
    }

    /// Why opening the board fails now, when it does: the link's fault, or
    /// `NoFds` when the guard is out of descriptors (for tests and logs).
    pub fn open_failing(&self) -> Option<LinkFault> {
        self.open_failing
    }

    /// The state machine (for tests and the status line).
    pub fn core(&self) -> &GuardCore {
        &self.core
    }

    /// The board (for tests).
    pub fn board(&self) -> &B {
        &self.board
    }

    /// The fd to wait on between polls: the registered runtime's pidfd,
    /// else its bound exit-watch connection; either turns readable the
    /// moment the runtime exits.
    pub fn runtime_fd(&self) -> Option<BorrowedFd<'_>> {
        self.runtime
            .as_ref()
            .map(Pidfd::fd)
            .or_else(|| self.bound.as_ref().map(Conn::fd))
    }

    /// What the exit watch says now: the pidfd and the bound connection
    /// (`core::exit_state`).
    fn runtime_status(&self) -> ExitState {
        exit_state(
            self.held.map(|id| id.pid),
            self.runtime.as_ref().map(Pidfd::exited),
            self.bound.as_ref().map(Conn::closed),
        )
    }

    /// SIGKILL to the held runtime `pid`: through its pidfd; without
    /// pidfds by pid, only while the pid still has the verified start
    /// time (read right before, with the reserve let go: at the
    /// descriptor limit the `/proc` read needs one of its descriptors).
    fn kill_held(&mut self, pid: u32) -> KillOutcome {
        let pidfd = self.runtime.as_ref().map(Pidfd::pid);
        match (
            kill_route(pid, pidfd, self.held.map(|id| id.pid)),
            &self.runtime,
            self.held,
        ) {
            (KillRoute::Pidfd, Some(fd), _) => fd.kill(),
            (KillRoute::ByPidIfSame, _, Some(id)) => {
                self.release_reserve();
                let same = id.is_alive();
                self.refill_reserve();
                if same {
                    process::kill9(pid)
                } else {
                    KillOutcome::NotVerified
                }
            }
            #[cfg(feature = "mutations")]
            (KillRoute::ByPidUnchecked, _, _) => process::kill9(pid),
            _ => KillOutcome::NotVerified,
        }
    }

    /// Forgets the held runtime: its pidfd, identity and connections.
    fn forget(&mut self) {
        self.runtime = None;
        self.held = None;
        self.bound = None;
        self.pending = Default::default();
    }

    /// The exit watch's connections, while a runtime is held and none is
    /// bound to it (else nothing: no syscall in the steady state). Accepts
    /// (at most [`ACCEPT_PER_POLL`], the reserve let go for each), closes
    /// every connection not from the held runtime's pid at once, empties
    /// and prompts the others, and binds the first whose answer the
    /// kernel stamped with the held runtime's pid while its verified start
    /// time still holds (`core::connection_binds`: one `/proc` read).
    fn serve_exit_watch(&mut self) {
        let Some(held) = self.held else { return };
        if self.bound.is_some() {
            return;
        }
        if let Some(listener) = self.exits.take() {
            for _ in 0..ACCEPT_PER_POLL {
                self.release_reserve();
                let accepted = listener.accept();
                self.refill_reserve();
                match accepted {
                    Ok(None) => break,
                    Ok(Some(c)) => {
                        self.accept_failing = None;
                        if connection_kept(c.peer_pid(), Some(held.pid), false) && c.prompt() {
                            if self.pending.iter().all(Option::is_some) {
                                self.pending.rotate_left(1);
                                self.pending[PENDING - 1] = None;
                            }
                            if let Some(slot) = self.pending.iter_mut().find(|s| s.is_none()) {
                                *slot = Some(c);
                            }
                        }
                        // Anything else is closed here (dropped).
                    }
                    Err(e) => {
                        if self.accept_failing != Some(e) {
                            emit(
                                &mut self.log,
                                GuardEvent::ExitWatchAcceptFailed { errno: e as i32 },
                            );
                            self.accept_failing = Some(e);
                        }
                        break;
                    }
                }
            }
            self.exits = Some(listener);
        }
        for i in 0..PENDING {
            let heard = match &self.pending[i] {
                Some(c) => c.hear(),
                None => continue,
            };
            match heard {
                Heard::Nothing | Heard::Noise => {}
                Heard::Closed => self.pending[i] = None,
                Heard::Answer { pid } => {
                    // The /proc read needs a descriptor: the reserve's.
                    self.release_reserve();
                    let start_now = deathswitch::process::start_time(held.pid);
                    self.refill_reserve();
                    if connection_binds(pid, Some(held.pid), start_now, held.start) {
                        self.bound = self.pending[i].take();
                        self.pending = Default::default();
                        emit(&mut self.log, GuardEvent::ExitWatchBound { pid });
                        return;
                    }
                    self.pending[i] = None;
                }
            }
        }
    }

    /// One poll at `now_ns` (the poll loop's clock, read once a poll after
    /// the ticker's wait: the real clock, the page's): its rules judge it.
    /// The guard's own heartbeat, while it holds the board, is stamped on
    /// the page's clock when it is written, after the frame.
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
        let candidate = self.candidate(page, &snap, runtime, now_ns);
        let obs = Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: judged.last_cycle.is_some(),
            verdict,
            runtime,
            candidate,
            now_ns,
            board_busy: !self.board.is_open() && self.open_failing == Some(LinkFault::Busy),
        };
        let (actions, transition) = self.core.step(&obs);
        if let (Candidate::Refused(pid), Transition::TakeOver(..)) = (candidate, transition) {
            emit(&mut self.log, GuardEvent::Refused { pid });
        }

        // 1. trip; the pidfds: forget the old, hold the new.
        if let Some(reason) = actions.trip {
            page.trip(reason);
        }
        if actions.forget {
            self.forget();
            self.refill_reserve();
        }
        if let Some(pid) = actions.adopt {
            self.adopt(pid);
        }
        if let Transition::TakeOver(..) = transition {
            // Continue the heartbeat's cycle numbers where the runtime left.
            self.guard_cycle = judged.last_cycle.unwrap_or(0);
            // Only a runtime started from now on is handed the board.
            self.took_over_ticks = Some(process::boot_ticks_now());
            self.checked = None;
            // The board is judged busy or not from this take-over's own
            // attempts (and its failure logged once more).
            self.open_failing = None;
        }
        // 2. kill: through the pidfd of the runtime verified at its
        //    registration (never a reused pid); without pidfds by pid,
        //    only while its identity still matches.
        let kill = actions.kill.map(|pid| self.kill_held(pid));
        if kill == Some(KillOutcome::Sent) {
            // At most one poll's time, once per take-over: open the board
            // the moment the kernel has released it (the pidfd readable,
            // or without pidfds the runtime's end of its connection
            // closed: its files are closed either way).
            match (&self.runtime, &self.bound) {
                (Some(fd), _) => {
                    fd.wait_exit(KILL_WAIT_MS);
                }
                (None, Some(c)) => {
                    c.wait_closed(KILL_WAIT_MS);
                }
                (None, None) => {}
            }
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
        // Release, an exited runtime, a refused pid: clear the driver
        // fields, before the board is let go (no runtime can beat before
        // that). A compare-and-swap on driver_pid: a runtime that
        // registered since this poll's snapshot keeps its registration
        // (the next poll verifies it).
        if let Some(pid) = actions.clear_driver {
            page.clear_driver_if(pid);
        }
        // The board.
        if actions.hold_board {
            if !self.board.is_open() {
                // The reserve makes room for the link's descriptors.
                self.release_reserve();
                let opened = self.board.open();
                self.refill_reserve();
                match opened {
                    Ok(()) => {
                        self.frames = None;
                        self.open_failing = None;
                        emit(&mut self.log, GuardEvent::BoardOpened);
                    }
                    Err(e) => {
                        // The reserve could not be taken back, or not one
                        // descriptor more opened: the process is out of
                        // descriptors (EMFILE), whatever the link made of it.
                        let out = !matches!(e, nao_wire::LinkError::Busy)
                            && self.reserve.as_ref().is_some_and(FdReserve::exhausted);
                        let f = if out {
                            LinkFault::NoFds
                        } else {
                            LinkFault::from(&e)
                        };
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
                        // Stamped on the page's clock as it is written
                        // (the frame went out after the poll's time).
                        page.write_heartbeat(self.guard_cycle, Switch::now_ns(page), true);
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
            self.refill_reserve();
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
            Transition::HandOver(pid) | Transition::Succeeded(_, pid) => {
                emit(&mut self.log, GuardEvent::HandedOver { pid })
            }
            Transition::Release => emit(&mut self.log, GuardEvent::Released),
            Transition::Refused(pid) => emit(&mut self.log, GuardEvent::Refused { pid }),
        }
        // The held runtime's exit-watch connection, until one is bound.
        self.serve_exit_watch();
    }

    /// The page's driver, verified once per (pid, start time) it shows,
    /// when the guard may act on it: while it holds no running runtime,
    /// and while it holds the board (hand-over). A held runtime is never
    /// replaced from the page (the page may be damaged; the pidfd is not),
    /// so then nothing is read.
    fn candidate(
        &mut self,
        page: &Page,
        snap: &deathswitch::Snapshot,
        runtime: ExitState,
        now_ns: u64,
    ) -> Candidate {
        let held = match runtime {
            ExitState::Alive(p) | ExitState::Exited(p) => Some(p),
            ExitState::Unknown => None,
        };
        let pid = match snap.driver_pid {
            Some(p) if Some(p) != held => p,
            _ => {
                self.checked = None;
                return Candidate::None;
            }
        };
        if matches!(runtime, ExitState::Alive(_)) && !self.core.holding() {
            return Candidate::None;
        }
        // No start time stored: nothing can be verified, nothing is read
        // (raw bytes, or a runtime that could not read its own /proc).
        if snap.driver_start == 0 && kill_target_ok(pid, self.own_pid) {
            return Candidate::None;
        }
        if let Some(c) = &self.checked {
            // A process that is not a runtime is looked at again every
            // 100 ms (it may map the page by then); anything else once.
            let fresh =
                c.candidate != Candidate::None || now_ns.saturating_sub(c.at_ns) < RECHECK_NS;
            if c.pid == pid && c.start == snap.driver_start && fresh {
                return c.candidate;
            }
        }
        self.checked = None;
        self.release_reserve();
        let page_file = process::file_id(page.path());
        let check = process::verify(pid, self.own_pid, snap.driver_start, page_file);
        self.refill_reserve();
        let (candidate, fd) = match check {
            Check::Verified(fd) => (
                Candidate::Verified {
                    pid,
                    restart: started_after(snap.driver_start, self.took_over_ticks),
                },
                fd,
            ),
            Check::Refused => (Candidate::Refused(pid), None),
            Check::NotRuntime => (Candidate::None, None),
            // Asked again next poll.
            Check::Unknown => return Candidate::None,
        };
        self.checked = Some(Checked {
            pid,
            start: snap.driver_start,
            candidate,
            fd,
            at_ns: now_ns,
        });
        candidate
    }

    /// The registration: hold the verified runtime by the pidfd opened
    /// when it was verified (once, not per poll).
    fn adopt(&mut self, pid: u32) {
        self.forget();
        let Some(c) = self.checked.take().filter(|c| c.pid == pid) else {
            return;
        };
        self.held = Some(ProcessIdentity {
            pid,
            start: c.start,
        });
        match c.fd {
            Some(fd) => {
                // Gone already? Then the next poll sees its pidfd readable
                // and takes over.
                self.runtime = Some(fd);
                emit(&mut self.log, GuardEvent::Registered { pid });
            }
            None => {
                // Its exit is seen through its connection once bound.
                emit(&mut self.log, GuardEvent::PidfdFailed { pid, errno: 0 });
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
