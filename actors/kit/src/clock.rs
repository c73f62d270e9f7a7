//! The one clock reader of the house: `CLOCK_MONOTONIC` in nanoseconds
//! ([`monotonic_ns`], async-signal-safe; the death switch's `now_ns` is
//! this function) and the wall clock for display ([`unix_ns`]).
//!
//! The rules take time passed in ([`crate::ticker::Schedule`], the log's
//! coalescer, the page's and the guard's rules), so their tests need no
//! clock; the I/O around them (the ticker's sleeps, the log's stamps)
//! reads [`monotonic_ns`]. The ticker sleeps on the same clock
//! (`clock_nanosleep(CLOCK_MONOTONIC)`).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clocks_never_go_back_and_the_wall_clock_is_past_2020() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0);
        assert!(b >= a);
        assert!(unix_ns() > 1_577_836_800_000_000_000);
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
