//! File descriptors kept in reserve for a take-over. Opening the chest
//! board (a socket for the virtual robot; libusb's context and the device
//! file on the robot) and the runtime's pidfd each need a free descriptor
//! at the moment of the take-over, when the UDP listener or a low
//! `RLIMIT_NOFILE` may have used every other one. The guard opens
//! [`RESERVE`] descriptors of `/dev/null` at start (and refuses to start
//! when it cannot: [`FdReserve::take`]), lets them go right before it
//! opens the board or a pidfd and takes them back right after.
//! Allocation-free.

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;

/// How many descriptors the guard keeps in reserve: the chest board over
/// USB (libusb's context: its event and timer descriptors; the USB device
/// list; the device file), the runtime's pidfd and a candidate's pidfd at a
/// hand-over, with room to spare. Also let go for each accept of the exit
/// watch and the `/proc` read that binds its connection.
pub const RESERVE: usize = 8;

/// The lowest `RLIMIT_NOFILE` a guard is advised to run at (`LimitNOFILE=`
/// in its unit): the reserve, the page and its lock, the UDP stop's
/// sockets, stdio and the pidfds, with room for the UDP listener's
/// hand-over connections.
pub const ADVISED_NOFILE: u64 = 64;

/// Descriptors of `/dev/null` held for the next take-over.
#[derive(Debug)]
pub struct FdReserve {
    fds: [Option<OwnedFd>; RESERVE],
    want: usize,
}

fn open_dev_null() -> Result<OwnedFd, Errno> {
    // SAFETY: a NUL-terminated literal path and flags; returns a new fd or -1.
    let fd = unsafe {
        libc::open(
            c"/dev/null".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the fd was just returned by open(2) and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The soft and hard `RLIMIT_NOFILE`.
pub fn nofile_limits() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    (r.rlim_cur, r.rlim_max)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one (any process may), up to
/// [`ADVISED_NOFILE`]: more is never needed. Returns the soft limit after.
pub fn raise_nofile() -> u64 {
    let (soft, hard) = nofile_limits();
    let want = hard.min(ADVISED_NOFILE.max(soft));
    if want > soft {
        let r = libc::rlimit {
            rlim_cur: want,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit from the struct we own.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
    nofile_limits().0
}

impl FdReserve {
    /// Opens `want` (at most [`RESERVE`]) descriptors of `/dev/null`.
    /// EMFILE (or ENFILE) when they cannot all be had: the guard must not
    /// start ([`too_low`]).
    pub fn take(want: usize) -> Result<FdReserve, Errno> {
        let mut r = FdReserve {
            fds: Default::default(),
            want: want.min(RESERVE),
        };
        for slot in r.fds.iter_mut().take(r.want) {
            *slot = Some(open_dev_null()?);
        }
        Ok(r)
    }

    /// How many descriptors are held now.
    pub fn held(&self) -> usize {
        self.fds.iter().filter(|f| f.is_some()).count()
    }

    /// Lets every held descriptor go, right before opening the board or a
    /// pidfd. Returns how many were let go.
    pub fn release(&mut self) -> usize {
        let mut n = 0;
        for slot in &mut self.fds {
            if slot.take().is_some() {
                n += 1;
            }
        }
        n
    }

    /// Takes descriptors back until `want` are held or none is free.
    /// Returns how many are held.
    pub fn refill(&mut self) -> usize {
        for slot in self.fds.iter_mut().take(self.want) {
            if slot.is_none() {
                match open_dev_null() {
                    Ok(fd) => *slot = Some(fd),
                    Err(_) => break,
                }
            }
        }
        self.held()
    }

    /// After a failed open and [`FdReserve::refill`]: true when the process
    /// is out of descriptors (the reserve is short, or not one more can be
    /// opened: EMFILE or ENFILE), so the failure is the limit's, whatever
    /// the link made of it. Opens and closes one descriptor.
    pub fn exhausted(&self) -> bool {
        !self.full() || matches!(open_dev_null(), Err(Errno::EMFILE | Errno::ENFILE))
    }

    /// True when every descriptor wanted is held.
    pub fn full(&self) -> bool {
        self.held() >= self.want
    }
}

/// The error text for a guard that cannot hold its reserve at start: the
/// limit, why, and the fix.
pub fn too_low(errno: Errno) -> String {
    let (soft, hard) = nofile_limits();
    format!(
        "cannot keep {RESERVE} file descriptors in reserve for a take-over (the chest board and the runtime's pidfd): {errno} \
         at the open-file limit RLIMIT_NOFILE {soft} (hard {hard}); a guard that cannot open the board cannot take it over. \
         Raise the limit: `LimitNOFILE={ADVISED_NOFILE}` in the guard's systemd unit, or `ulimit -n {ADVISED_NOFILE}` before starting it by hand"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_released_and_refilled() {
        let mut r = FdReserve::take(3).unwrap();
        assert_eq!(r.held(), 3);
        assert!(r.full());
        assert_eq!(r.release(), 3);
        assert_eq!(r.held(), 0);
        assert_eq!(r.refill(), 3);
        assert!(r.full());
        let r = FdReserve::take(RESERVE + 5).unwrap();
        assert_eq!(r.held(), RESERVE, "never more than RESERVE");
    }

    #[test]
    fn the_error_names_the_limit_and_the_fix() {
        let e = too_low(Errno::EMFILE);
        let (soft, _) = nofile_limits();
        assert!(e.contains(&format!("RLIMIT_NOFILE {soft}")), "{e}");
        assert!(
            e.contains("LimitNOFILE=64") && e.contains("ulimit -n 64"),
            "{e}"
        );
    }
}
