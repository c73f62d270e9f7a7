//! The listener loop's pure rules: the port no process of ours reads
//! ([`UnreadRule`]) and the back-off after an error ([`Backoff`]).

use super::{BACKOFF_MAX_NS, BACKOFF_MIN_NS};

/// The rule of a port no process of ours reads: from the listener's start,
/// a listener that holds no socket at [`super::UNREAD_DEADLINE_NS`] trips
/// `stop-port-unread`, and again at every later look while it holds none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnreadRule {
    started_ns: u64,
    deadline_ns: u64,
    reported: bool,
}

/// What [`UnreadRule::step`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Nothing (the socket is held, or the deadline is not reached).
    Nothing,
    /// Trip `stop-port-unread`; `first`: log it (once).
    Trip {
        /// The first trip of this listener.
        first: bool,
    },
}

impl UnreadRule {
    /// Started at `started_ns` with `deadline_ns`.
    pub(crate) fn new(started_ns: u64, deadline_ns: u64) -> UnreadRule {
        UnreadRule {
            started_ns,
            deadline_ns,
            reported: false,
        }
    }

    /// One look at `now_ns`: `holding` a checked socket or not.
    pub(crate) fn step(&mut self, now_ns: u64, holding: bool) -> Unread {
        if holding || now_ns.saturating_sub(self.started_ns) < self.deadline_ns {
            return Unread::Nothing;
        }
        let first = !self.reported;
        self.reported = true;
        Unread::Trip { first }
    }
}

/// Back-off after an error: no retry before `until`; the delay doubles
/// from [`BACKOFF_MIN_NS`] to [`BACKOFF_MAX_NS`]; a success resets it.
/// Says when an error is new (to log once per errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Backoff {
    delay_ns: u64,
    until_ns: u64,
    last_errno: Option<i32>,
}

impl Backoff {
    /// May the operation be tried at `now_ns`?
    pub(crate) fn ready(&self, now_ns: u64) -> bool {
        now_ns >= self.until_ns
    }

    /// How long until it may, ns (0: now).
    pub(crate) fn wait_ns(&self, now_ns: u64) -> u64 {
        self.until_ns.saturating_sub(now_ns)
    }

    /// The operation failed at `now_ns` with `errno`: returns true when
    /// this errno is new (log it).
    pub(crate) fn failed(&mut self, now_ns: u64, errno: i32) -> bool {
        self.delay_ns = if self.delay_ns == 0 {
            BACKOFF_MIN_NS
        } else {
            (self.delay_ns * 2).min(BACKOFF_MAX_NS)
        };
        self.until_ns = now_ns + self.delay_ns;
        let new = self.last_errno != Some(errno);
        self.last_errno = Some(errno);
        new
    }

    /// The operation worked.
    pub(crate) fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

/// The canary's rule: a holder sends itself a probe (a fresh nonce) on the
/// port over loopback every [`super::PROBE_PERIOD_NS`]; whichever holder
/// reads it sends it back. A probe not back within `bound_ns` means
/// something else takes or blocks what is sent to the port (a reader that
/// steals datagrams, a filter, a closed port): trip `stop-port-unread`,
/// and probe again at once (so a re-arm does not stick while it lasts).
/// One probe is out at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Canary {
    period_ns: u64,
    bound_ns: u64,
    /// The probe out: its nonce and when it was sent.
    out: Option<(u128, u64)>,
    next_ns: u64,
    /// A probe was missed and none came back since (log once).
    missing: bool,
}

/// What [`Canary::step`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing now.
    Nothing,
    /// Send a probe (then [`Canary::sent`]).
    Send,
    /// The probe out was not back in time: trip; `first`: log it.
    Missed {
        /// The first miss since a probe last came back.
        first: bool,
    },
}

impl Canary {
    /// A canary that probes first at `now_ns`.
    pub(crate) fn new(now_ns: u64, period_ns: u64, bound_ns: u64) -> Canary {
        Canary {
            period_ns,
            bound_ns,
            out: None,
            next_ns: now_ns,
            missing: false,
        }
    }

    /// One look at `now_ns` (after every echo that came was given to
    /// [`Canary::echoed`]).
    pub(crate) fn step(&mut self, now_ns: u64) -> Probe {
        match self.out {
            Some((_, sent)) if now_ns.saturating_sub(sent) >= self.bound_ns => {
                self.out = None;
                self.next_ns = now_ns;
                let first = !self.missing;
                self.missing = true;
                Probe::Missed { first }
            }
            Some(_) => Probe::Nothing,
            None if now_ns >= self.next_ns => Probe::Send,
            None => Probe::Nothing,
        }
    }

    /// The probe with `nonce` was sent at `now_ns`.
    pub(crate) fn sent(&mut self, nonce: u128, now_ns: u64) {
        self.out = Some((nonce, now_ns));
    }

    /// A probe came back with `nonce`: true when it is the one out (any
    /// other, forged or late, is ignored).
    pub(crate) fn echoed(&mut self, nonce: u128) -> bool {
        match self.out {
            Some((n, sent)) if n == nonce => {
                self.out = None;
                self.next_ns = sent + self.period_ns;
                self.missing = false;
                true
            }
            _ => false,
        }
    }
}
