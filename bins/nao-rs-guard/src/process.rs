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
/// another user (EPERM counts as alive). The page's, one place.
pub use deathswitch::process::pid_alive as alive;

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

/// Waits up to `timeout_ns` (real time) for `fd` to turn readable (the
/// real clock's `wait_readable_until_ns`); with no fd it sleeps. True when
/// it is readable.
pub fn wait_readable(fd: Option<BorrowedFd<'_>>, timeout_ns: u64) -> bool {
    use nao_kit::clock::{Clock, MonotonicClock};
    let deadline = MonotonicClock.now_ns().saturating_add(timeout_ns);
    match fd {
        Some(fd) => MonotonicClock.wait_readable_until_ns(deadline, fd),
        None => {
            MonotonicClock.sleep_until_ns(deadline);
            false
        }
    }
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

/// What the shell found out about the process the page names.
#[derive(Debug)]
pub enum Check {
    /// The process that registered (start time as in the page, before and
    /// after the pidfd was opened); its pidfd, `None` without pidfds.
    Verified(Option<Pidfd>),
    /// Not that process: gone, a reused pid, or a pid never to be signalled.
    Refused,
    /// That process, but not a runtime: it does not map the page (init,
    /// the simulator, any program whose pid someone stored). Never
    /// signalled, never handed the board; left in the page.
    NotRuntime,
    /// Cannot tell now (no start time in the page, or its `/proc` entry
    /// could not be read though the pid exists: out of descriptors); asked
    /// again next poll. Never signalled, never handed the board.
    Unknown,
}

/// Verifies that `pid` is the process whose start time the page gives as
/// `page_start` (the pure rule: [`crate::core::identity_verified`]) and a
/// runtime: it maps the page file `page_file` (device, inode; `None`: the
/// page's path cannot be read, not checked), as every holder of a
/// `deathswitch::Page` does. Opens its pidfd. Reads `/proc/PID/stat`
/// twice and `/proc/PID/maps` once and opens a pidfd: once per
/// registration, never per poll. Allocation-free.
pub fn verify(pid: u32, own_pid: u32, page_start: u64, page_file: Option<(u64, u64)>) -> Check {
    use crate::core::{identity_verified, kill_target_ok};
    if !kill_target_ok(pid, own_pid) {
        return Check::Refused;
    }
    if page_start == 0 {
        return Check::Unknown;
    }
    let unreadable = |start: Option<u64>| start.is_none() && alive(pid);
    let before = deathswitch::process::start_time(pid);
    if unreadable(before) {
        return Check::Unknown;
    }
    if before != Some(page_start) {
        return Check::Refused;
    }
    let fd = match Pidfd::open(pid) {
        Ok(fd) => Some(fd),
        Err(Errno::ESRCH) => return Check::Refused,
        // No pidfds (ENOSYS), or no descriptor: by its identity alone.
        Err(_) => None,
    };
    // A process whose maps this guard may not read (another user's,
    // without CAP_SYS_PTRACE) is taken on its identity alone.
    let maps = page_file.and_then(|(dev, ino)| maps_file(pid, dev, ino));
    let after = deathswitch::process::start_time(pid);
    if identity_verified(pid, own_pid, page_start, before, after) {
        if maps == Some(false) {
            return Check::NotRuntime;
        }
        Check::Verified(fd)
    } else if unreadable(after) {
        Check::Unknown
    } else {
        Check::Refused
    }
}

/// The device and inode of the file at `path` (the page), `None` when it
/// cannot be read.
pub fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a line of `/proc/PID/maps`, or a process, maps a file: the
/// page's (one place: the UDP stop's hand-over checks its peer the same way).
pub use deathswitch::process::{maps_file, maps_line_is};

/// CLOCK_BOOTTIME now in clock ticks (`sysconf(_SC_CLK_TCK)`, 100 a
/// second): the clock and the unit of a process's start time
/// (`/proc/PID/stat` field 22), rounded down like it.
pub fn boot_ticks_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: sysconf takes a name and returns a value; no memory.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    ns / (1_000_000_000 / hz)
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

    #[test]
    fn verify_takes_a_live_process_with_its_start_time_and_refuses_a_reused_pid() {
        let mut child = sleeper();
        let pid = child.id();
        let start = deathswitch::process::start_time(pid).unwrap();
        let me = std::process::id();
        assert!(matches!(
            verify(pid, me, start, None),
            Check::Verified(Some(_))
        ));
        // The pid with another start time: a reused pid.
        assert!(matches!(verify(pid, me, start + 1, None), Check::Refused));
        // No start time in the page: cannot tell, never signalled.
        assert!(matches!(verify(pid, me, 0, None), Check::Unknown));
        // Never 0, 1 or the guard itself.
        assert!(matches!(verify(1, me, 1, None), Check::Refused));
        let own = deathswitch::process::start_time(me).unwrap();
        assert!(matches!(verify(me, me, own, None), Check::Refused));
        // The right process, but it does not map the page: not a runtime.
        let dir = tempfile::tempdir().unwrap();
        let page = deathswitch::Page::open(&dir.path().join("deathswitch")).unwrap();
        let id = file_id(page.path());
        assert!(matches!(verify(pid, me, start, id), Check::NotRuntime));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            matches!(verify(pid, me, start, None), Check::Refused),
            "gone"
        );
    }

    #[test]
    fn a_process_started_now_started_after_a_take_over_a_moment_ago() {
        let before = boot_ticks_now();
        let mut child = sleeper();
        let start = deathswitch::process::start_time(child.id()).unwrap();
        assert!(crate::core::started_after(start, Some(before)));
        let me = deathswitch::process::start_time(std::process::id()).unwrap();
        assert!(me <= start);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_holder_of_the_page_maps_it_and_a_maps_line_names_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let page = deathswitch::Page::open(&dir.path().join("deathswitch")).unwrap();
        let (dev, ino) = file_id(page.path()).unwrap();
        assert_eq!(maps_file(std::process::id(), dev, ino), Some(true));
        assert_eq!(maps_file(std::process::id(), dev, ino + 1), Some(false));
        assert_eq!(maps_file(u32::MAX, dev, ino), None, "no such process");
        let rows: &[(&[u8], bool)] = &[
            (
                b"7f00-7f01 rw-s 00000000 00:1a 4242   /run/nao-rs/deathswitch",
                true,
            ),
            (
                b"7f00-7f01 rw-s 00000000 00:1a 4242   /run/nao-rs/deathswitch (deleted)",
                true,
            ),
            (b"7f00-7f01 rw-s 00000000 00:1b 4242   /other", false),
            (b"7f00-7f01 rw-s 00000000 00:1a 42420  /other", false),
            (b"7f00-7f01 r-xp 00000000 00:00 0      [vdso]", false),
            (b"garbage", false),
            (b"", false),
        ];
        for &(line, want) in rows {
            assert_eq!(
                maps_line_is(line, 0, 0x1a, 4242),
                want,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
