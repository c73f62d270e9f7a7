//! The clocks: monotonic nanoseconds for every rule, Unix nanoseconds only
//! for showing when a trip happened. Both are async-signal-safe
//! (`clock_gettime`).

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC in nanoseconds (the clock of every rule and heartbeat).
pub fn now_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (display only).
pub fn unix_now_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}
