//! Waiting with a deadline: a condition looked at every few milliseconds
//! until it gives a value or the time is up.

use std::time::{Duration, Instant};

/// How often [`wait_for`] and [`poll_for`] look.
pub const POLL: Duration = Duration::from_millis(2);

/// Looks at `f` every `every` until it gives `Some`, for up to `timeout`;
/// `None` after it (one last look at the deadline).
pub fn poll_every<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// [`poll_every`] looking every [`POLL`].
pub fn poll_for<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    poll_every(timeout, POLL, f)
}

/// Waits up to `timeout` until `f` gives `Some`, looking every [`POLL`];
/// panics naming `what` when it does not.
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    wait_every(what, timeout, POLL, f)
}

/// [`wait_for`] looking every `every` (for a look that costs, such as
/// parsing a whole trace).
pub fn wait_every<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    f: impl FnMut() -> Option<T>,
) -> T {
    poll_every(timeout, every, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}
