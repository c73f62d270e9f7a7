//! Shared helpers of the guard's integration tests: child processes that are
//! killed on drop, waiting with a deadline.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL, after SIGCONT) and reaped on drop, even
/// when the test fails.
pub struct Proc {
    pub child: Option<Child>,
    pub name: &'static str,
}

impl Proc {
    pub fn spawn(name: &'static str, cmd: &mut Command) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            child: Some(child),
            name,
        }
    }
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig);
    }
    /// Wait for the exit (up to `timeout`); the signal that ended it, if any.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + timeout;
        let c = self.child.as_mut()?;
        while Instant::now() < until {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }
    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait until `f` gives Some, up to `timeout`; panics with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until `f` gives Some, up to `timeout`; None after it.
pub fn wait_for_opt<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
