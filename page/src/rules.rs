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
