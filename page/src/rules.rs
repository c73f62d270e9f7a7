//! The guard's rules (`docs/page.md`): how the guard judges a snapshot
//! against what it saw before ([`Judge`]), and what it must do about it, as
//! one pure function of the judged snapshot, the time and the settings
//! ([`decide`]). The guard's state machine (`bins/nao-rs-guard/src/core.rs`)
//! calls both once a poll and adds only its own bookkeeping.

use crate::{Reason, Snapshot};

/// The guard's times (`docs/page.md`, "Fixed points").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Rule 2: a last beat older than this is a lost heartbeat (60 ms).
    pub beat_timeout_ns: u64,
    /// Rule 3: how long a trip may stay unconfirmed (40 ms).
    pub confirmation_window_ns: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            beat_timeout_ns: 60_000_000,
            confirmation_window_ns: 40_000_000,
        }
    }
}

/// What the guard must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardVerdict {
    /// Nothing.
    Fine,
    /// Take over with this reason (trip, kill, hold the board).
    TakeOver(Reason),
}

/// The guard's rules, in order:
/// 1. no heartbeat since the page was cleared: fine;
/// 2. last beat older than `beat_timeout_ns`: take over (`guard-heartbeat-lost`);
/// 3. tripped, and the confirmation doesn't cover the latest cycle or the
///    last beat is older than the trip, for longer than
///    `confirmation_window_ns` since the trip: take over
///    (`guard-no-confirmation`); a confirmation from before the trip doesn't
///    count;
/// 4. otherwise fine.
///
/// A trip whose time is still pending ([`crate::TRIP_TIME_PENDING`]) has
/// not yet outlived the window. Times are monotonic ns; a beat stamped
/// after `now_ns` counts as fresh.
pub fn decide(s: &Snapshot, now_ns: u64, settings: &Settings) -> GuardVerdict {
    let (Some(cycle), Some(beat)) = (s.last_cycle, s.last_beat_ns) else {
        return GuardVerdict::Fine;
    };
    if now_ns.saturating_sub(beat) > settings.beat_timeout_ns {
        return GuardVerdict::TakeOver(Reason::GuardHeartbeatLost);
    }
    if !s.armed {
        let covers_latest = s.all_off_confirmed_cycle.is_some_and(|c| c >= cycle);
        let beat_after_trip = beat >= s.tripped_at_ns;
        // Mutation (the world's, `docs/world.md`): a confirmation from
        // before the trip counts.
        #[cfg(all(feature = "mutations", not(loom)))]
        let beat_after_trip = beat_after_trip
            || nao_kit::mutation::on(nao_kit::mutation::Mutation::StaleConfirmation);
        let unconfirmed = !(covers_latest && beat_after_trip);
        if unconfirmed && now_ns.saturating_sub(s.tripped_at_ns) > settings.confirmation_window_ns {
            return GuardVerdict::TakeOver(Reason::GuardNoConfirmation);
        }
    }
    GuardVerdict::Fine
}

/// Guard rule 5, the start-up bound: a registered runtime (its identity
/// verified by the guard) that has not beaten within this long of the
/// guard first seeing its registration is taken over
/// (`guard-start-up-timeout`): its pidfd is sent SIGKILL and the guard
/// sends all-off frames. 6 s: the runtime's busy retry gives up after 5 s
/// ([`RUNTIME_OPEN_TIMEOUT_NS`]: when the board stays busy it exits, and
/// its pidfd says so at once) plus 1 s for the rest of
/// its start-up (the chest board's handshake, its threads), so a runtime
/// that is slow but alive is never killed in its start-up, and one that
/// froze is killed within 6 s.
pub const START_UP_BOUND_NS: u64 = 6_000_000_000;

/// Guard rule 6, the hand-over bound: after the guard let the chest board
/// go to a restarted runtime (the hand-over), the board goes without frames
/// for at most this long. A runtime handed the board that has not beaten
/// within it is taken over (`guard-start-up-timeout`; the switch is
/// usually tripped already, and the first reason stays): SIGKILL through
/// its pidfd and the guard's all-off frames again. 1 s: the runtime retries
/// the busy board every 50 ms ([`RUNTIME_OPEN_RETRY_NS`]), so it has the
/// free board within 50 ms of the hand-over, plus its link start and
/// handshake.
pub const HAND_OVER_BOUND_NS: u64 = 1_000_000_000;

// The runtime's contract with the guard: the runtime keeps these (it uses
// the constants), and the guard's bounds above are made to cover them.

/// The runtime's cycle period, 12 ms: one frame to the chest board per
/// cycle. The guard's all-off frames keep the same period.
pub const FRAME_PERIOD_NS: u64 = 12_000_000;
/// The runtime retries a busy chest board this often, 50 ms: the
/// hand-over bound (`HAND_OVER_BOUND_NS`) covers ten retries.
pub const RUNTIME_OPEN_RETRY_NS: u64 = 50_000_000;
/// The runtime gives a busy chest board up after this long, 5 s, and
/// exits: the start-up bound ([`START_UP_BOUND_NS`]) covers it and 1 s
/// more, so a runtime still retrying is never taken for a hung one.
pub const RUNTIME_OPEN_TIMEOUT_NS: u64 = 5_000_000_000;

const _: () = assert!(START_UP_BOUND_NS >= RUNTIME_OPEN_TIMEOUT_NS + 1_000_000_000);
const _: () = assert!(HAND_OVER_BOUND_NS >= 10 * RUNTIME_OPEN_RETRY_NS);

/// How a registered runtime came to the guard's watch, which fixes how long
/// it may go from then to its first beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstBeat {
    /// The guard found it registered (its start-up, or the guard's own
    /// start): [`START_UP_BOUND_NS`].
    StartUp,
    /// The guard handed it the chest board: `HAND_OVER_BOUND_NS`.
    HandOver,
}

impl FirstBeat {
    /// The bound, ns.
    pub fn bound_ns(self) -> u64 {
        match self {
            FirstBeat::StartUp => START_UP_BOUND_NS,
            FirstBeat::HandOver => HAND_OVER_BOUND_NS,
        }
    }
}

/// Guard rules 5 and 6: a runtime the guard has watched since `since_ns`
/// (monotonic ns: when it saw the registration, or handed the board over)
/// without a beat is overdue at `now_ns` once more than the bound has
/// passed. A `since_ns` after `now_ns` is not overdue.
pub fn first_beat_overdue(kind: FirstBeat, since_ns: u64, now_ns: u64) -> bool {
    now_ns.saturating_sub(since_ns) > kind.bound_ns()
}

/// How far a confirmation may lead the cycle read in one snapshot and still
/// count ([`Judge::judged`]): the heartbeat writer stores the confirmation
/// first and the cycle last, the reader loads the cycle first, so
/// heartbeats landing between the reader's loads show it ahead. 16 cycles
/// (192 ms) covers a reader preempted between its loads for longer than the
/// beat timeout; a value further ahead is damage.
pub const CONFIRMATION_LEAD_CYCLES: u64 = 16;

/// What the guard remembers between polls to judge a snapshot before
/// [`decide`] sees it. Pure: time passed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Judge {
    /// The last heartbeat the page showed: (cycle, time).
    seen_beat: Option<(u64, u64)>,
    /// When the guard found the page's heartbeat lost while the runtime
    /// still runs.
    beat_lost_ns: Option<u64>,
    /// When the guard first saw the switch tripped.
    seen_trip_ns: Option<u64>,
}

impl Judge {
    /// The page as the guard judges it: the page's own heartbeat when it
    /// has one (remembered); when the page has lost it (damage, repair,
    /// replacement) while the runtime held by its pidfd still runs
    /// (`runtime_alive`) and the guard does not hold the board (`holding`),
    /// a beat at the moment the guard found it lost (the runtime may have
    /// beaten until then, also while the guard itself was not looking): the
    /// runtime must beat again within the beat timeout of the loss. A
    /// runtime that stops beating after page damage is still a lost
    /// heartbeat. A trip time that lies after `now_ns` (damage: garbage, or
    /// a trip time stuck pending) is judged from when the guard first saw
    /// the switch tripped, and a confirmation of a cycle after the last
    /// beat's counts as none, so rule 3 still runs out.
    pub fn judged(
        &mut self,
        snap: &Snapshot,
        runtime_alive: bool,
        holding: bool,
        now_ns: u64,
    ) -> Snapshot {
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
        // A confirmation ahead of the cycle read: the snapshot loads the
        // cycle before the confirmation, so a heartbeat (or a few, if this
        // reader was preempted between its loads) that landed in between
        // shows a confirmation up to CONFIRMATION_LEAD_CYCLES ahead; it
        // confirms the cycle read. Further ahead is impossible (damage): it
        // confirms nothing.
        if let (Some(conf), Some(c)) = (s.all_off_confirmed_cycle, s.last_cycle) {
            if conf > c {
                s.all_off_confirmed_cycle = (conf - c <= CONFIRMATION_LEAD_CYCLES).then_some(c);
            }
        }
        if let (Some(c), Some(t)) = (snap.last_cycle, snap.last_beat_ns) {
            self.seen_beat = Some((c, t));
            self.beat_lost_ns = None;
            return s;
        }
        if let (true, Some((c, t)), false) = (runtime_alive, self.seen_beat, holding) {
            let lost = *self.beat_lost_ns.get_or_insert(now_ns);
            s.last_cycle = Some(c);
            s.last_beat_ns = Some(t.max(lost));
        }
        s
    }

    /// Forgets the remembered heartbeat (a new runtime is held, or the
    /// guard took the board over).
    pub fn forget_beat(&mut self) {
        self.seen_beat = None;
        self.beat_lost_ns = None;
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
