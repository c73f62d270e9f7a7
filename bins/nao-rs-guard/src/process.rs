//! The runtime's identity as the guard holds it: a pidfd (`pidfd_open`,
//! Linux 5.3) opened when the runtime registers. It turns readable the
//! moment the runtime exits, for any reason, and the kill goes through it
//! (`pidfd_send_signal`), so a reused pid is never signalled. The page may
//! be damaged, repaired or replaced; the pidfd is not in the page.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::log::KillOutcome;

/// `kill(pid, 0)`: true when the process exists, also when it belongs to
/// another user (EPERM counts as alive). The runtime's, one place.
pub use nao_actors::runtime::switch::pid_alive as alive;

fn positive(pid: u32) -> Option<i32> {
    i32::try_from(pid).ok().filter(|&p| p > 1)
}

/// A process held by its pidfd.
#[derive(Debug)]
pub struct Pidfd {
    pid: u32,
    fd: OwnedFd,
}

impl Pidfd {
    /// `pidfd_open(pid, 0)`. ESRCH: the process is gone already; ENOSYS: a
    /// kernel older than 5.3. Pids 0 and 1 are refused (EINVAL).
    pub fn open(pid: u32) -> Result<Pidfd, Errno> {
        let p = positive(pid).ok_or(Errno::EINVAL)?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or
        // -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: the fd was just returned to us by the kernel and is owned
        // by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(Pidfd { pid, fd })
    }

    /// The pid it was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The fd, to wait on (readable: the process exited).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// True when the process has exited (the pidfd is readable). No wait.
    pub fn exited(&self) -> bool {
        wait_readable(Some(self.fd()), 0)
    }

    /// Waits up to `timeout_ms` for the process to exit. True when it did:
    /// the kernel has closed its files (its chest board handle, its
    /// sockets) by then.
    pub fn wait_exit(&self, timeout_ms: i32) -> bool {
        wait_readable(Some(self.fd()), timeout_ms.max(0) as u64 * 1_000_000)
    }

    /// SIGKILL through the pidfd (`pidfd_send_signal`): never a reused pid.
    pub fn kill(&self) -> KillOutcome {
        // SAFETY: a valid pidfd, a signal number, a null siginfo (the kernel
        // fills it as for kill(2)) and flags 0; no memory is written.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r == 0 {
            return KillOutcome::Sent;
        }
        match Errno::last() {
            Errno::ESRCH => KillOutcome::Gone,
            Errno::EPERM => KillOutcome::NotPermitted,
            e => KillOutcome::Failed(e as i32),
        }
    }
}

/// Waits up to `timeout_ns` for `fd` to turn readable (the kit's
/// `sleep_until_readable`). True when it is.
pub fn wait_readable(fd: Option<BorrowedFd<'_>>, timeout_ns: u64) -> bool {
    let deadline = nao_actors::kit::monotonic_ns().saturating_add(timeout_ns);
    nao_actors::kit::ticker::sleep_until_readable(deadline, fd)
}

/// SIGKILL by pid: only for a runtime the guard could not open a pidfd of
/// (a kernel without pidfds). Refuses pids 0 and 1.
pub fn kill9(pid: u32) -> KillOutcome {
    let Some(p) = positive(pid) else {
        return KillOutcome::Failed(Errno::EINVAL as i32);
    };
    match kill(Pid::from_raw(p), Signal::SIGKILL) {
        Ok(()) => KillOutcome::Sent,
        Err(Errno::ESRCH) => KillOutcome::Gone,
        Err(Errno::EPERM) => KillOutcome::NotPermitted,
        Err(e) => KillOutcome::Failed(e as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

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
    fn pidfd_sees_a_kill_through_it_and_times_out_on_a_live_process() {
        let mut child = sleeper();
        let fd = Pidfd::open(child.id()).unwrap();
        assert!(!fd.exited());
        assert!(!fd.wait_exit(5), "a live process does not exit");
        assert_eq!(fd.kill(), KillOutcome::Sent);
        assert!(fd.wait_exit(1000));
        assert!(fd.exited());
        child.wait().unwrap();
        // Reaped: the pidfd still names the dead process, never a new one.
        assert_eq!(fd.kill(), KillOutcome::Gone);
    }

    #[test]
    fn pidfd_turns_readable_on_an_exit_of_any_cause() {
        for sig in [libc::SIGTERM, libc::SIGSEGV, libc::SIGABRT] {
            let mut child = sleeper();
            let fd = Pidfd::open(child.id()).unwrap();
            // SAFETY: a plain kill(2) of our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
            assert!(fd.wait_exit(2000), "signal {sig}");
            child.wait().unwrap();
        }
    }

    #[test]
    fn pidfd_open_refuses_0_1_and_a_dead_pid() {
        assert_eq!(Pidfd::open(0).err(), Some(Errno::EINVAL));
        assert_eq!(Pidfd::open(1).err(), Some(Errno::EINVAL));
        assert_eq!(Pidfd::open(u32::MAX).err(), Some(Errno::EINVAL));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(Pidfd::open(pid).err(), Some(Errno::ESRCH));
    }

    #[test]
    fn kill9_kills_and_reports_gone() {
        let mut child = sleeper();
        let pid = child.id();
        assert_eq!(kill9(pid), KillOutcome::Sent);
        child.wait().unwrap();
        assert_eq!(kill9(pid), KillOutcome::Gone);
        assert!(matches!(kill9(0), KillOutcome::Failed(_)));
        assert!(matches!(kill9(1), KillOutcome::Failed(_)));
    }
}
