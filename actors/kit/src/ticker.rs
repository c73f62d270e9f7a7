//! The ticker: absolute deadlines on `CLOCK_MONOTONIC`.
//!
//! [`Schedule`] is the rule, a pure state machine with time passed in;
//! [`Ticker`] is the thin I/O around it (`clock_nanosleep` with
//! `TIMER_ABSTIME`).
//!
//! The rule: deadlines lie on a fixed grid `start + k * period`. A cycle that
//! wakes late runs at once, late; the next deadline is still the previous one
//! plus the period, so a late cycle never makes the next one early. When the
//! clock has passed a whole grid point beyond the due deadline, the missed
//! deadlines are skipped (counted as overruns) and the cycle runs for the
//! latest grid point already passed.

use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};

use crate::clock::monotonic_ns;

/// One cycle's timing, as the schedule saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// The cycle number, 0 for the first.
    pub cycle: u64,
    /// This cycle's deadline (its grid point), monotonic ns.
    pub deadline_ns: u64,
    /// When the cycle actually started, monotonic ns.
    pub start_ns: u64,
    /// `start_ns - deadline_ns` (0 when on time).
    pub lateness_ns: u64,
    /// Grid points skipped right before this cycle (missed deadlines).
    pub skipped: u64,
}

/// Counters of the schedule since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickStats {
    /// Cycles started.
    pub cycles: u64,
    /// Cycles that started later than the late threshold.
    pub late: u64,
    /// Deadlines missed entirely (skipped).
    pub overruns: u64,
    /// The largest lateness seen, ns.
    pub max_lateness_ns: u64,
    /// The last cycle's lateness, ns.
    pub last_lateness_ns: u64,
}

/// The absolute-deadline rule (pure; time passed in).
#[derive(Debug, Clone)]
pub struct Schedule {
    period_ns: u64,
    late_threshold_ns: u64,
    next_deadline_ns: u64,
    pending_skipped: u64,
    stats: TickStats,
}

impl Schedule {
    /// A schedule whose first deadline is `start_ns`. A cycle counts as late
    /// when it starts more than `late_threshold_ns` after its deadline.
    ///
    /// A `period_ns` of 0 is taken as 1 ns.
    pub fn new(start_ns: u64, period_ns: u64, late_threshold_ns: u64) -> Self {
        Schedule {
            period_ns: period_ns.max(1),
            late_threshold_ns,
            next_deadline_ns: start_ns,
            pending_skipped: 0,
            stats: TickStats::default(),
        }
    }

    /// The deadline the next cycle is due at, ns.
    pub fn next_deadline_ns(&self) -> u64 {
        self.next_deadline_ns
    }

    /// The counters so far.
    pub fn stats(&self) -> TickStats {
        self.stats
    }

    /// The deadline to sleep until when it is `now_ns`: skips (and counts)
    /// the grid points that are missed entirely, that is every deadline
    /// followed by another one that is also already due.
    pub fn plan(&mut self, now_ns: u64) -> u64 {
        if now_ns >= self.next_deadline_ns.saturating_add(self.period_ns) {
            let missed = (now_ns - self.next_deadline_ns) / self.period_ns;
            self.next_deadline_ns += missed * self.period_ns;
            self.stats.overruns += missed;
            self.pending_skipped += missed;
        }
        self.next_deadline_ns
    }

    /// Starts the cycle due at the planned deadline, at `now_ns` (after the
    /// sleep). Returns the cycle's timing; the next deadline becomes this
    /// one plus the period.
    pub fn start(&mut self, now_ns: u64) -> Tick {
        let deadline = self.next_deadline_ns;
        let lateness = now_ns.saturating_sub(deadline);
        let tick = Tick {
            cycle: self.stats.cycles,
            deadline_ns: deadline,
            start_ns: now_ns,
            lateness_ns: lateness,
            skipped: std::mem::take(&mut self.pending_skipped),
        };
        self.stats.cycles += 1;
        self.stats.last_lateness_ns = lateness;
        self.stats.max_lateness_ns = self.stats.max_lateness_ns.max(lateness);
        if lateness > self.late_threshold_ns {
            self.stats.late += 1;
        }
        self.next_deadline_ns = deadline.saturating_add(self.period_ns);
        tick
    }
}

/// The I/O around [`Schedule`]: sleeps with `clock_nanosleep(CLOCK_MONOTONIC,
/// TIMER_ABSTIME)` to each deadline. Allocates nothing.
#[derive(Debug, Clone)]
pub struct Ticker {
    schedule: Schedule,
}

impl Ticker {
    /// A ticker whose first deadline is now, with a late threshold of a
    /// tenth of the period.
    pub fn new(period_ns: u64) -> Self {
        Ticker::starting_at(monotonic_ns(), period_ns)
    }

    /// A ticker whose first deadline is `start_ns` (monotonic).
    pub(crate) fn starting_at(start_ns: u64, period_ns: u64) -> Self {
        Ticker {
            schedule: Schedule::new(start_ns, period_ns, period_ns / 10),
        }
    }

    /// The schedule (deadlines and counters).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Sleeps until the next deadline (at once if it has passed, skipping
    /// missed deadlines) and starts that cycle.
    pub fn wait(&mut self) -> Tick {
        let deadline = self.schedule.plan(monotonic_ns());
        sleep_until(deadline);
        self.schedule.start(monotonic_ns())
    }
}

impl Ticker {
    /// Like [`Ticker::wait`], but returns early when `fd` turns readable
    /// before the deadline: `None`, the schedule not advanced (the caller
    /// handles the event and calls again). With no fd it is `wait`.
    /// Allocates nothing. The guard waits so on the runtime's pidfd.
    pub fn wait_or_readable(&mut self, fd: Option<std::os::fd::BorrowedFd<'_>>) -> Option<Tick> {
        let deadline = self.schedule.plan(monotonic_ns());
        if fd.is_some() && sleep_until_readable(deadline, fd) {
            return None;
        }
        if fd.is_none() {
            sleep_until(deadline);
        }
        Some(self.schedule.start(monotonic_ns()))
    }
}

/// Sleeps until `deadline_ns` (monotonic) or until `fd` turns readable,
/// whichever comes first (`ppoll`); true when the fd is readable. A signal
/// ends the wait early (returns false; the caller's schedule absorbs it).
/// With no fd it sleeps to the deadline. Allocates nothing.
pub fn sleep_until_readable(deadline_ns: u64, fd: Option<std::os::fd::BorrowedFd<'_>>) -> bool {
    use std::os::fd::AsRawFd;
    let Some(fd) = fd else {
        sleep_until(deadline_ns);
        return false;
    };
    let left = deadline_ns.saturating_sub(monotonic_ns());
    let ts = libc::timespec {
        tv_sec: (left / 1_000_000_000) as libc::time_t,
        tv_nsec: (left % 1_000_000_000) as libc::c_long,
    };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd and a timespec, both live for the call; no
    // signal mask is passed.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

/// Sleeps until `deadline_ns` on `CLOCK_MONOTONIC` (absolute), resuming after
/// signals. Returns at once when the deadline has passed.
pub(crate) fn sleep_until(deadline_ns: u64) {
    let ts = nix::sys::time::TimeSpec::new(
        (deadline_ns / 1_000_000_000) as libc::time_t,
        (deadline_ns % 1_000_000_000) as libc::c_long,
    );
    loop {
        match clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 12_000_000;

    /// A schedule starting at 0 whose cycle 0 ran on time.
    fn started() -> Schedule {
        let mut s = Schedule::new(0, P, P / 10);
        s.plan(0);
        s.start(0);
        s
    }

    #[test]
    fn ticker_deadlines_are_absolute_on_a_fixed_grid() {
        let mut s = Schedule::new(1_000, P, P / 10);
        for k in 0..5u64 {
            let d = s.plan(1_000 + k * P - 500);
            assert_eq!(d, 1_000 + k * P);
            let t = s.start(d + 100);
            assert_eq!(t.cycle, k);
            assert_eq!(t.deadline_ns, d);
            assert_eq!(t.lateness_ns, 100);
        }
        assert_eq!(s.stats().overruns, 0);
        assert_eq!(s.stats().late, 0);
    }

    #[test]
    fn late_cycle_never_makes_the_next_one_early() {
        let mut s = started();
        // Cycle 1 wakes 5 ms late.
        assert_eq!(s.plan(P + 5_000_000), P);
        let t = s.start(P + 5_000_000);
        assert_eq!(t.lateness_ns, 5_000_000);
        // The next deadline is still 2P, not (P + 5 ms) + P and not earlier.
        assert_eq!(s.plan(P + 6_000_000), 2 * P);
        assert_eq!(s.stats().late, 1);
        assert_eq!(s.stats().overruns, 0);
    }

    #[test]
    fn overrun_skips_missed_deadlines_and_counts_them() {
        let mut s = started();
        // The work of cycle 0 took 3.5 periods: deadlines P and 2P are missed.
        let now = 3 * P + P / 2;
        assert_eq!(s.plan(now), 3 * P);
        let t = s.start(now);
        assert_eq!(t.skipped, 2);
        assert_eq!(t.deadline_ns, 3 * P);
        assert_eq!(t.lateness_ns, P / 2);
        assert_eq!(s.stats().overruns, 2);
        // Back on the grid, never early.
        assert_eq!(s.plan(now + 1), 4 * P);
        assert_eq!(s.start(4 * P).skipped, 0);
    }

    #[test]
    fn ticker_counts_max_lateness() {
        let mut s = Schedule::new(0, P, P / 10);
        for (k, late) in [10u64, 3_000_000, 20].into_iter().enumerate() {
            let d = s.plan(k as u64 * P);
            s.start(d + late);
        }
        assert_eq!(s.stats().max_lateness_ns, 3_000_000);
        assert_eq!(s.stats().last_lateness_ns, 20);
        assert_eq!(s.stats().cycles, 3);
    }

    #[test]
    fn ticker_sleeps_to_absolute_deadlines() {
        // 1 ms period, 20 cycles: every start is at or after its deadline.
        let mut t = Ticker::new(1_000_000);
        let mut last = 0;
        for _ in 0..20 {
            let tick = t.wait();
            assert!(tick.start_ns >= tick.deadline_ns);
            assert!(tick.deadline_ns > last || last == 0);
            last = tick.deadline_ns;
        }
        assert_eq!(t.schedule().stats().cycles, 20);
    }
}
