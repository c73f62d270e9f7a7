//! The ticker: absolute deadlines on a [`Clock`] (`CLOCK_MONOTONIC` unless
//! given another).
//!
//! [`Schedule`] is the rule, a pure state machine with time passed in;
//! [`Ticker`] is the thin I/O around it (the clock's absolute sleep:
//! `clock_nanosleep` with `TIMER_ABSTIME` on the real clock).
//!
//! The rule: deadlines lie on a fixed grid `start + k * period`. A cycle that
//! wakes late runs at once, late; the next deadline is still the previous one
//! plus the period, so a late cycle never makes the next one early. When the
//! clock has passed a whole grid point beyond the due deadline, the missed
//! deadlines are skipped (counted as overruns) and the cycle runs for the
//! latest grid point already passed.

use std::os::fd::BorrowedFd;

use crate::clock::{Clock, MonotonicClock};

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

/// The I/O around [`Schedule`]: sleeps to each deadline on its clock
/// (the real one by default: `clock_nanosleep(CLOCK_MONOTONIC,
/// TIMER_ABSTIME)`; a [`crate::clock::VirtualClock`] in tests and the
/// virtual-time world). Allocates nothing.
#[derive(Debug, Clone)]
pub struct Ticker<C: Clock = MonotonicClock> {
    schedule: Schedule,
    clock: C,
}

impl Ticker {
    /// A ticker on the real clock whose first deadline is now, with a late
    /// threshold of a tenth of the period.
    pub fn new(period_ns: u64) -> Self {
        Ticker::with_clock(MonotonicClock, period_ns)
    }
}

impl<C: Clock> Ticker<C> {
    /// A ticker on `clock` whose first deadline is the clock's now, with a
    /// late threshold of a tenth of the period.
    pub fn with_clock(clock: C, period_ns: u64) -> Self {
        let start_ns = clock.now_ns();
        Ticker {
            schedule: Schedule::new(start_ns, period_ns, period_ns / 10),
            clock,
        }
    }

    /// The schedule (deadlines and counters).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The clock it sleeps on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Sleeps until the next deadline (at once if it has passed, skipping
    /// missed deadlines) and starts that cycle: one clock read before the
    /// sleep, one after it (the tick's `start_ns`).
    pub fn wait(&mut self) -> Tick {
        let deadline = self.schedule.plan(self.clock.now_ns());
        self.clock.sleep_until_ns(deadline);
        self.schedule.start(self.clock.now_ns())
    }

    /// Like [`Ticker::wait`], but returns early when `fd` turns readable
    /// before the deadline: `None`, the schedule not advanced (the caller
    /// handles the event and calls again). With no fd it is `wait`.
    /// Allocates nothing. The guard waits so on the runtime's pidfd.
    pub fn wait_or_readable(&mut self, fd: Option<BorrowedFd<'_>>) -> Option<Tick> {
        let deadline = self.schedule.plan(self.clock.now_ns());
        match fd {
            // A wait ended early by a signal starts the cycle early; the
            // schedule absorbs it (the next deadline stays on the grid).
            Some(fd) => {
                if self.clock.wait_readable_until_ns(deadline, fd) {
                    return None;
                }
            }
            None => self.clock.sleep_until_ns(deadline),
        }
        Some(self.schedule.start(self.clock.now_ns()))
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
    fn ticker_on_a_virtual_clock_keeps_its_grid_and_skips_missed_deadlines() {
        use crate::clock::VirtualClock;
        let clock = VirtualClock::new(5_000);
        let mut t = Ticker::with_clock(clock.clone(), P);
        let first = t.wait();
        assert_eq!(
            (first.cycle, first.deadline_ns, first.lateness_ns),
            (0, 5_000, 0)
        );
        // The cycle starts 100 ns late: late but on the grid.
        clock.advance_to_ns(5_000 + P + 100);
        let tick = t.wait();
        assert_eq!(
            (tick.deadline_ns, tick.lateness_ns, tick.skipped),
            (5_000 + P, 100, 0)
        );
        // Its work took 2.5 periods: the deadline 2P is skipped, the cycle
        // runs for 3P, and the next one is due at 4P, never early.
        clock.advance_to_ns(5_000 + 3 * P + P / 2);
        let tick = t.wait();
        assert_eq!(
            (tick.cycle, tick.deadline_ns, tick.skipped),
            (2, 5_000 + 3 * P, 1)
        );
        assert_eq!(t.schedule().next_deadline_ns(), 5_000 + 4 * P);
        assert_eq!(t.schedule().stats().overruns, 1);
        // A sleep to a deadline ahead ends when the clock gets there.
        let driver = clock.clone();
        let h = std::thread::spawn(move || t.wait());
        driver.advance_ns(P / 2);
        let tick = h.join().unwrap();
        assert_eq!(
            (tick.cycle, tick.deadline_ns, tick.lateness_ns),
            (3, 5_000 + 4 * P, 0)
        );
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
