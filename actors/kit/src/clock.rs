//! The one clock reader of the house: `CLOCK_MONOTONIC` in nanoseconds
//! ([`monotonic_ns`], async-signal-safe; the death switch's `now_ns` is
//! this function) and the wall clock for display ([`unix_ns`]); the first
//! behind a small [`Clock`] trait so code that reads time can be handed a
//! [`MockClock`] in tests.
//!
//! The rules of the kit take time passed in ([`crate::Schedule`], the log's
//! coalescer); the I/O around them (the ticker's sleeps, the log's stamps)
//! reads [`monotonic_ns`]. The ticker sleeps on the same clock
//! (`clock_nanosleep(CLOCK_MONOTONIC)`), so only [`Monotonic`] can drive
//! a real sleep.

use std::sync::atomic::{AtomicU64, Ordering};

/// `clock_gettime(id)` in nanoseconds (0 if the clock could not be read,
/// which Linux never does for the two clocks read here).
fn read(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of every rule, heartbeat
/// and tick in the house (0 if the clock could not be read, which Linux
/// never does).
///
/// Async-signal-safe: one `clock_gettime` system call on the stack, no
/// lock and no allocation, so the page's SIGBUS handler may call it.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch, for showing when
/// something happened only (never for a rule). Async-signal-safe as
/// [`monotonic_ns`].
pub fn unix_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// A source of monotonic nanoseconds.
pub trait Clock: Send + Sync {
    /// Now, ns; never goes back.
    fn now_ns(&self) -> u64;
}

/// The real clock: [`monotonic_ns`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Monotonic;

impl Clock for Monotonic {
    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }
}

/// A clock for tests: stands still until set or advanced (from any
/// thread).
#[derive(Debug, Default)]
pub struct MockClock {
    now_ns: AtomicU64,
}

impl MockClock {
    /// A clock standing at `now_ns`.
    pub fn new(now_ns: u64) -> Self {
        MockClock {
            now_ns: AtomicU64::new(now_ns),
        }
    }

    /// Moves the clock forward by `by_ns` (saturating).
    pub fn advance(&self, by_ns: u64) {
        // Relaxed: the number itself is the whole message.
        let _ = self
            .now_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by_ns))
            });
    }

    /// Sets the clock to `now_ns`; an earlier time is ignored (a clock
    /// that goes back is not monotonic).
    pub fn set(&self, now_ns: u64) {
        // Relaxed: as in `advance`.
        self.now_ns.fetch_max(now_ns, Ordering::Relaxed);
    }
}

impl Clock for MockClock {
    fn now_ns(&self) -> u64 {
        // Relaxed: as in `advance`.
        self.now_ns.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_never_goes_back() {
        let a = Monotonic.now_ns();
        let b = Monotonic.now_ns();
        assert!(a > 0);
        assert!(b >= a);
    }

    #[test]
    fn mock_clock_moves_only_forward_and_only_when_told() {
        let c = MockClock::new(100);
        assert_eq!(c.now_ns(), 100);
        c.advance(50);
        assert_eq!(c.now_ns(), 150);
        c.set(120);
        assert_eq!(c.now_ns(), 150, "never back");
        c.set(1_000);
        assert_eq!(c.now_ns(), 1_000);
        c.advance(u64::MAX);
        assert_eq!(c.now_ns(), u64::MAX, "saturates");
    }

    #[test]
    fn a_schedule_driven_by_a_mock_clock_keeps_its_grid() {
        let c = MockClock::new(1_000);
        let mut s = crate::Schedule::new(c.now_ns(), 10, 1);
        for k in 0..3u64 {
            let d = s.plan(c.now_ns());
            assert_eq!(d, 1_000 + k * 10);
            c.set(d + 2);
            assert_eq!(s.start(c.now_ns()).lateness_ns, 2);
        }
        assert_eq!(s.stats().late, 3);
    }
}
