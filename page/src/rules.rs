//! The guard's rules (`docs/page.md`) as one pure function of a page
//! snapshot, the time and the settings.

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
pub enum Verdict {
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
pub fn decide(s: &Snapshot, now_ns: u64, settings: &Settings) -> Verdict {
    let (Some(cycle), Some(beat)) = (s.last_cycle, s.last_beat_ns) else {
        return Verdict::Fine;
    };
    if now_ns.saturating_sub(beat) > settings.beat_timeout_ns {
        return Verdict::TakeOver(Reason::GuardHeartbeatLost);
    }
    if !s.armed {
        let covers_latest = s.all_off_confirmed_cycle.is_some_and(|c| c >= cycle);
        let beat_after_trip = beat >= s.tripped_at_ns;
        let unconfirmed = !(covers_latest && beat_after_trip);
        if unconfirmed && now_ns.saturating_sub(s.tripped_at_ns) > settings.confirmation_window_ns {
            return Verdict::TakeOver(Reason::GuardNoConfirmation);
        }
    }
    Verdict::Fine
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
/// hand-over bound ([`HAND_OVER_BOUND_NS`]) covers ten retries.
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
    /// The guard handed it the chest board: [`HAND_OVER_BOUND_NS`].
    HandOver,
}

impl FirstBeat {
    /// The bound, ns.
    pub(crate) fn bound_ns(self) -> u64 {
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
