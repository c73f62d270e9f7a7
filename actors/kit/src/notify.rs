//! Waking a waiting thread from a real-time thread without a lock.
//!
//! [`Notify`] is a counter on a Linux futex: the producer bumps it and wakes
//! the waiters (one `futex(FUTEX_WAKE)` syscall, no allocation, never
//! blocks); a consumer reads the counter, checks its ring and sleeps on the
//! futex only while the counter is unchanged, so no wake-up is lost.

use std::sync::atomic::{AtomicU32, Ordering};

/// A wake-up counter on a futex.
#[derive(Debug, Default)]
pub struct Notify {
    seq: AtomicU32,
}

impl Notify {
    /// A new counter at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter now. Read it before checking for work, then pass it to
    /// [`Notify::wait`].
    pub fn current(&self) -> u32 {
        // Acquire: pairs with the Release in `notify`, so work published
        // before a notify is visible after reading its count.
        self.seq.load(Ordering::Acquire)
    }

    /// Bumps the counter and wakes every waiter.
    pub fn notify(&self) {
        // Release: pairs with the Acquire in `current`.
        self.seq.fetch_add(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on a valid, aligned u32 that lives as long as
        // self; the kernel only reads the address.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.seq.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            );
        }
    }

    /// Sleeps while the counter equals `seen`, at most `timeout_ns`.
    /// Returns at once when it has changed already. May return early
    /// (signals, spurious wake-ups): callers re-check their condition.
    pub fn wait(&self, seen: u32, timeout_ns: u64) {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a valid, aligned u32 that lives as long as
        // self, with a pointer to a live timespec (a relative timeout).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.seq.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                &ts as *const libc::timespec,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn notify_wakes_a_waiter() {
        let n = Arc::new(Notify::new());
        let seen = n.current();
        let m = n.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            m.notify();
        });
        while n.current() == seen {
            n.wait(seen, 5_000_000_000);
        }
        t.join().unwrap();
        assert_eq!(n.current(), seen + 1);
    }

    #[test]
    fn wait_returns_at_once_when_counter_moved() {
        let n = Notify::new();
        let seen = n.current();
        n.notify();
        // Would sleep 60 s if the counter check were missing.
        n.wait(seen, 60_000_000_000);
        assert_ne!(n.current(), seen);
    }
}
