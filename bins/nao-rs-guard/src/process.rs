//! The two process calls the guard makes: is the runtime alive, and SIGKILL.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::log::KillOutcome;

/// `kill(pid, 0)`: true when the process exists, also when it belongs to
/// another user and cannot be signalled (EPERM counts as alive).
pub fn alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    match kill(Pid::from_raw(p), None) {
        Ok(()) => true,
        Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Send SIGKILL to `pid`. The core never asks for pid 0, 1 or the guard
/// (`core::kill_target_ok`); this refuses non-positive pids as well.
pub fn kill9(pid: u32) -> KillOutcome {
    let Ok(p) = i32::try_from(pid) else {
        return KillOutcome::Failed(Errno::EINVAL as i32);
    };
    if p <= 1 {
        return KillOutcome::Failed(Errno::EINVAL as i32);
    }
    match kill(Pid::from_raw(p), Signal::SIGKILL) {
        Ok(()) => KillOutcome::Sent,
        Err(Errno::ESRCH) => KillOutcome::Gone,
        Err(Errno::EPERM) => KillOutcome::NotPermitted,
        Err(e) => KillOutcome::Failed(e as i32),
    }
}

/// Wait up to `timeout_ms` for `pid` to exit, on its pidfd (`pidfd_open`,
/// Linux 5.3): the kernel has closed the process's files (its chest board
/// handle, its socket) by the time the pidfd turns readable. True when it
/// exited (or is already gone); false on timeout or when pidfds are not
/// available. Allocates nothing; used once per take-over, right after the
/// SIGKILL, so the board is opened the moment the kernel releases it.
pub fn wait_exit(pid: u32, timeout_ms: i32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 1 {
        return false;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
    if fd < 0 {
        return Errno::last() == Errno::ESRCH;
    }
    let fd = fd as libc::c_int;
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    // SAFETY: fd is ours, opened above, closed once.
    unsafe { libc::close(fd) };
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_sees_itself_and_not_a_dead_child() {
        assert!(alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn wait_exit_sees_a_killed_process_exit_and_times_out_on_a_live_one() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!wait_exit(pid, 5), "a live process does not exit");
        assert_eq!(kill9(pid), KillOutcome::Sent);
        assert!(wait_exit(pid, 1000));
        child.wait().unwrap();
        assert!(!wait_exit(0, 1));
    }

    #[test]
    fn kill9_kills_and_reports_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(kill9(pid), KillOutcome::Sent);
        child.wait().unwrap();
        assert_eq!(kill9(pid), KillOutcome::Gone);
        assert!(matches!(kill9(0), KillOutcome::Failed(_)));
        assert!(matches!(kill9(1), KillOutcome::Failed(_)));
    }
}
