//! The one clock of the house: the [`Clock`] trait, its real clock
//! [`MonotonicClock`] (`CLOCK_MONOTONIC`, async-signal-safe) and its
//! virtual clock [`VirtualClock`] (advanced explicitly, for tests and the
//! virtual-time world), plus the wall clock for display ([`unix_ns`]).
//!
//! The rules take time passed in ([`crate::ticker::Schedule`], the log's
//! coalescer, the page's and the guard's rules, the step), so their tests
//! need no clock. The I/O around them (the ticker's sleeps, the guard's
//! poll, the UDP listener's timers, the beacon's timers, the switch's trip
//! stamps) reads the [`Clock`] it was given, the real one by default: a
//! generic parameter `C: Clock = MonotonicClock`, so the real clock costs
//! nothing (zero-sized, inlined) and a test swaps in a [`VirtualClock`].
//!
//! [`monotonic_ns`] is [`MonotonicClock`]'s reading as a function, for the
//! process-level code that is never run in virtual time (a signal handler,
//! the benches, the virtual robot's process, display stamps).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::notify::Notify;

/// A monotonic clock in nanoseconds, and sleeping on it.
///
/// Every time a rule judges is one clock's: never compare two clocks'
/// readings. `Send + Sync`; implemented for `&C`, `Arc<C>` and `Box<C>`
/// too, so `Arc<dyn Clock>` is a clock.
pub trait Clock: Send + Sync {
    /// Now, ns. Never goes back.
    fn now_ns(&self) -> u64;

    /// Sleeps until [`Clock::now_ns`] reaches `deadline_ns` (returns at
    /// once when it has).
    fn sleep_until_ns(&self, deadline_ns: u64);

    /// Sleeps until `deadline_ns` or until `fd` turns readable, whichever
    /// comes first: true when the fd is readable. May return false before
    /// the deadline (a signal); callers plan again.
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        (**self).sleep_until_ns(deadline_ns)
    }
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool {
        (**self).wait_readable_until_ns(deadline_ns, fd)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        (**self).sleep_until_ns(deadline_ns)
    }
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool {
        (**self).wait_readable_until_ns(deadline_ns, fd)
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        (**self).sleep_until_ns(deadline_ns)
    }
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool {
        (**self).wait_readable_until_ns(deadline_ns, fd)
    }
}

/// The real clock: `CLOCK_MONOTONIC`, one clock for every process on the
/// robot. Zero-sized; [`Clock::now_ns`] is one `clock_gettime` on the
/// stack (async-signal-safe: the page's SIGBUS handler may call it), the
/// sleeps are `clock_nanosleep(TIMER_ABSTIME)` and `ppoll`. Allocates
/// nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        read(libc::CLOCK_MONOTONIC)
    }

    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`, resumed after
    /// signals.
    fn sleep_until_ns(&self, deadline_ns: u64) {
        let ts = timespec(deadline_ns);
        loop {
            // SAFETY: a valid timespec that lives for the call; no
            // remaining-time buffer is needed for an absolute sleep.
            let rc = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if rc != libc::EINTR {
                return;
            }
        }
    }

    /// `ppoll` with the time left to the deadline; a signal ends the wait
    /// early (false).
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool {
        poll_readable(fd, deadline_ns.saturating_sub(self.now_ns()))
    }
}

/// [`MonotonicClock`]'s reading: `CLOCK_MONOTONIC` in nanoseconds (0 if
/// the clock could not be read, which Linux never does). Async-signal-safe.
#[inline]
pub fn monotonic_ns() -> u64 {
    MonotonicClock.now_ns()
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch, for showing when
/// something happened only (never for a rule, never virtual).
/// Async-signal-safe as [`monotonic_ns`].
pub fn unix_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// A clock that moves only when told: [`VirtualClock::advance_ns`] and
/// [`VirtualClock::advance_to_ns`]. A cheap handle (`Clone` shares the time):
/// give one clone to each part of a test or of the virtual-time world and
/// keep one to drive them.
///
/// Its sleeps wait (in real time, in steps of at most 1 ms) until another
/// holder has moved the clock to the deadline; a sleep on a clock nobody
/// advances never ends, so a one-thread world moves the clock itself
/// before it calls anything that sleeps. [`Clock::now_ns`] is one atomic
/// load.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    ns: AtomicU64,
    moved: Notify,
    /// Threads in `sleep_until_ns` now: a move wakes them (a futex call)
    /// only when there are any, so a one-thread world that moves the
    /// clock at every event makes no system call for it.
    sleepers: AtomicU32,
}

/// How long a virtual sleep waits in real time before it looks again.
const VIRTUAL_POLL_NS: u64 = 1_000_000;

impl VirtualClock {
    /// A clock reading `start_ns`.
    pub fn new(start_ns: u64) -> VirtualClock {
        let c = VirtualClock::default();
        c.advance_to_ns(start_ns);
        c
    }

    /// Moves the clock forward by `d_ns`; returns the new reading.
    pub fn advance_ns(&self, d_ns: u64) -> u64 {
        // AcqRel: pairs with the Acquire in `now_ns` (what the driver did
        // before advancing is seen by a sleeper that wakes on the time).
        let now = self
            .shared
            .ns
            .fetch_add(d_ns, Ordering::SeqCst)
            .saturating_add(d_ns);
        self.wake_sleepers();
        now
    }

    /// Moves the clock to `ns` if that is later (a clock never goes back);
    /// returns the reading after.
    pub fn advance_to_ns(&self, ns: u64) -> u64 {
        // SeqCst: as in `advance_ns`.
        let now = self.shared.ns.fetch_max(ns, Ordering::SeqCst).max(ns);
        self.wake_sleepers();
        now
    }

    /// Wakes the sleepers, if any. SeqCst with the move above and with the
    /// sleeper's count and its look at the time (`sleep_until_ns`): either
    /// this load sees the sleeper, or the sleeper's look sees the new time
    /// (and a missed wake would cost one `VIRTUAL_POLL_NS` anyway).
    fn wake_sleepers(&self) {
        if self.shared.sleepers.load(Ordering::SeqCst) > 0 {
            self.shared.moved.notify();
        }
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        // Acquire: pairs with the AcqRel in `advance_ns` and `advance_to_ns`.
        self.shared.ns.load(Ordering::Acquire)
    }

    fn sleep_until_ns(&self, deadline_ns: u64) {
        // SeqCst: pairs with `wake_sleepers`.
        self.shared.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let seen = self.shared.moved.current();
            if self.shared.ns.load(Ordering::SeqCst) >= deadline_ns {
                break;
            }
            self.shared.moved.wait(seen, VIRTUAL_POLL_NS);
        }
        // SeqCst: as above.
        self.shared.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: BorrowedFd<'_>) -> bool {
        loop {
            if self.now_ns() >= deadline_ns {
                return poll_readable(fd, 0);
            }
            if poll_readable(fd, VIRTUAL_POLL_NS) {
                return true;
            }
        }
    }
}

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

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// `ppoll` on `fd` for at most `timeout_ns` (real time): true when it is
/// readable. Allocates nothing.
fn poll_readable(fd: BorrowedFd<'_>, timeout_ns: u64) -> bool {
    let ts = timespec(timeout_ns);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_clocks_never_go_back_and_the_wall_clock_is_past_2020() {
        let a = monotonic_ns();
        let b = MonotonicClock.now_ns();
        assert!(a > 0);
        assert!(b >= a);
        assert!(unix_ns() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn a_virtual_clock_moves_only_when_told_and_never_back() {
        let c = VirtualClock::new(1_000);
        let shared = c.clone();
        assert_eq!(shared.now_ns(), 1_000);
        assert_eq!(c.advance_ns(500), 1_500);
        assert_eq!(shared.now_ns(), 1_500, "clones share the time");
        assert_eq!(c.advance_to_ns(1_200), 1_500, "set never moves it back");
        assert_eq!(c.advance_to_ns(9_000), 9_000);
        // A sleep to a passed deadline returns at once; so does a wait on
        // an fd with nothing to read.
        shared.sleep_until_ns(9_000);
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        assert!(!shared.wait_readable_until_ns(8_000, a.as_fd()));
    }

    #[test]
    fn a_virtual_sleep_ends_when_another_holder_advances_the_clock() {
        let c = VirtualClock::new(0);
        let sleeper = c.clone();
        let t = std::thread::spawn(move || {
            sleeper.sleep_until_ns(5_000);
            sleeper.now_ns()
        });
        c.advance_ns(2_000);
        c.advance_ns(3_000);
        assert_eq!(t.join().unwrap(), 5_000);
    }

    #[test]
    fn a_virtual_wait_sees_a_readable_fd_before_its_deadline() {
        let c = VirtualClock::new(0);
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        b.send(b"x").unwrap();
        assert!(c.wait_readable_until_ns(u64::MAX, a.as_fd()));
        assert!(MonotonicClock.wait_readable_until_ns(u64::MAX, a.as_fd()));
    }

    #[test]
    fn a_dyn_clock_is_a_clock() {
        let v = VirtualClock::new(7);
        let d: Arc<dyn Clock> = Arc::new(v.clone());
        v.advance_ns(3);
        assert_eq!(d.now_ns(), 10);
        let by_ref: &dyn Clock = &&v;
        assert_eq!(by_ref.now_ns(), 10);
    }

    #[test]
    fn a_schedule_driven_by_the_time_passed_in_keeps_its_grid() {
        let mut now = 1_000;
        let mut s = crate::ticker::Schedule::new(now, 10, 1);
        for k in 0..3u64 {
            let d = s.plan(now);
            assert_eq!(d, 1_000 + k * 10);
            now = d + 2;
            assert_eq!(s.start(now).lateness_ns, 2);
        }
        assert_eq!(s.stats().late, 3);
    }
}
