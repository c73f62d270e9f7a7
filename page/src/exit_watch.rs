//! The runtime's exit, seen by the guard at once on any kernel: a Unix
//! stream connection from the runtime to the guard, whose runtime end the
//! kernel closes when the runtime dies (any cause), so the guard's end
//! turns readable with end-of-file (POLLIN | POLLHUP) at that moment. It
//! works where `pidfd_open` (Linux 5.3) does not: the robot's 4.4 kernel.
//!
//! - **The socket file** [`path`]: `PAGE.exit.sock` next to the page (the
//!   guard's lock is `PAGE.guard.lock`), mode 0660 with the page
//!   directory's group, bound in a private directory and renamed into
//!   place ([`crate::socket_file::bind_private`]), replacing what is there:
//!   only the guard that holds the page's lock binds it. [`Listener`].
//! - **The runtime** connects when it registers and keeps the connection
//!   from a thread of its own at normal priority ([`keep_connected`]):
//!   CLOEXEC, never written to but to answer the guard's prompt; when no
//!   guard listens or the guard went away, it connects again every
//!   [`RECONNECT_NS`] (50 ms).
//! - **Bound to the verified identity.** The connect-time credentials
//!   (`SO_PEERCRED`) name the pid that connected, and that pid may have
//!   died and been reused since (a process can connect, hand the socket to
//!   a child and exit). So the guard binds a connection to the runtime only
//!   on a *fresh* answer: it empties the connection, sets `SO_PASSCRED`
//!   and sends [`PROMPT`]; the kernel stamps the answer ([`ANSWER`]) with
//!   the pid of the process that sent it, at the time it sent it
//!   (`SCM_CREDENTIALS`; only `CAP_SYS_ADMIN` may stamp another pid). An
//!   answer stamped with the verified runtime's pid, sent after the guard
//!   verified it, with the pid still of the verified start time after the
//!   answer arrived, was sent by the runtime through this connection: the
//!   runtime holds its other end. The rule is the guard's
//!   (`nao_rs_guard::core::connection_binds`); this module moves bytes.
//!
//! A stranger (any process that may enter the page's directory) can
//! connect, but its connection names its own pid and is closed; it cannot
//! close or hold the runtime's end (the runtime neither forks nor passes
//! descriptors). Allocation-free on the guard's side, after
//! [`Listener::bind`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nao_kit::clock::{Clock, MonotonicClock};
use nix::errno::Errno;

use crate::socket_file::{bind_private, directory_group, Replace};

/// The byte the guard sends to ask "who holds this end?".
pub const PROMPT: u8 = b'?';
/// The runtime's answer to [`PROMPT`] (the kernel stamps it with the
/// sender's pid).
pub const ANSWER: u8 = b'!';
/// How often the runtime tries to connect while no guard listens.
pub const RECONNECT_NS: u64 = 50_000_000;

/// The socket file for the page at `page`: `PAGE.exit.sock` beside it.
pub fn path(page: &Path) -> PathBuf {
    let mut p = page.as_os_str().to_owned();
    p.push(".exit.sock");
    PathBuf::from(p)
}

/// The guard's listening socket (non-blocking). The file is removed on
/// drop while it is still this socket's.
#[derive(Debug)]
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
    id: (u64, u64),
}

impl Listener {
    /// Binds [`path`]`(page)`, mode 0660, the directory's group, replacing
    /// a stale file (the caller holds the guard's lock of the page).
    ///
    /// # Errors
    /// The bind's error, with the path named.
    pub fn bind(page: &Path) -> io::Result<Listener> {
        let path = path(page);
        let (listener, id) =
            bind_private(&path, 0o660, directory_group(&path), Replace::Always, |p| {
                UnixListener::bind(p)
            })
            .map_err(|(step, e)| {
                io::Error::new(
                    e.kind(),
                    format!("{}: {}: {e}", path.display(), step.what()),
                )
            })?;
        listener.set_nonblocking(true)?;
        Ok(Listener { listener, path, id })
    }

    /// The socket file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One waiting connection (`accept4`, non-blocking, CLOEXEC) with the
    /// pid that connected (`SO_PEERCRED`; 0 when the kernel gives none,
    /// e.g. a process of another pid namespace). `Ok(None)`: nobody waits.
    ///
    /// # Errors
    /// The errno of `accept4` (EMFILE: out of descriptors; the connection
    /// stays queued).
    pub fn accept(&self) -> Result<Option<Conn>, Errno> {
        // SAFETY: accept4 with null address pointers returns a new fd or
        // -1; no memory is written.
        let fd = unsafe {
            libc::accept4(
                self.listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return match Errno::last() {
                Errno::EAGAIN | Errno::ECONNABORTED | Errno::EINTR => Ok(None),
                e => Err(e),
            };
        }
        // SAFETY: a new fd from accept4, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let peer = peer_pid(fd.as_fd()).unwrap_or(0);
        Ok(Some(Conn { fd, peer }))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let ours = std::fs::symlink_metadata(&self.path)
            .map(|m| (m.dev(), m.ino()) == self.id)
            .unwrap_or(false);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn peer_pid(fd: BorrowedFd<'_>) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the ucred we own.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// What a connection said when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// Nothing yet.
    Nothing,
    /// An answer, stamped by the kernel with the pid that sent it.
    Answer {
        /// The sender's pid (`SCM_CREDENTIALS`).
        pid: u32,
    },
    /// Bytes that are no answer, or an answer without credentials.
    Noise,
    /// End of file or an error: the other end is closed.
    Closed,
}

/// One accepted connection, guard side.
#[derive(Debug)]
pub struct Conn {
    fd: OwnedFd,
    peer: u32,
}

impl Conn {
    /// The pid that connected (`SO_PEERCRED`, as of the connect; 0:
    /// unknown). Only a filter: that pid may have been reused since.
    pub fn peer_pid(&self) -> u32 {
        self.peer
    }

    /// The fd, to wait on: it turns readable when the other end closes.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Empties what was sent so far, asks for credentials on every byte
    /// from now on (`SO_PASSCRED`) and sends [`PROMPT`]. False when the
    /// connection is closed or cannot be prompted.
    pub fn prompt(&self) -> bool {
        if self.drain() == Heard::Closed {
            return false;
        }
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads one c_int we own.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return false;
        }
        // SAFETY: send reads one byte we own; MSG_NOSIGNAL: no SIGPIPE.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                (&PROMPT as *const u8).cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        n == 1
    }

    /// Reads what is there (no wait): the first answer with its sender's
    /// pid, or whether the other end closed. Reads at most 64 bytes a
    /// call. Allocation-free.
    pub fn hear(&self) -> Heard {
        let mut buf = [0u8; 64];
        // u64 elements: aligned for cmsghdr.
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is valid (null name, no iov yet).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: recvmsg writes into buf and control, both ours and as
        // long as msg says; MSG_CMSG_CLOEXEC: a passed fd is not leaked
        // into a child (and is closed below: we take no fds).
        let n = unsafe {
            libc::recvmsg(
                self.fd.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n == 0 {
            return Heard::Closed;
        }
        if n < 0 {
            return match Errno::last() {
                Errno::EAGAIN | Errno::EINTR => Heard::Nothing,
                _ => Heard::Closed,
            };
        }
        let mut pid = None;
        // SAFETY: the CMSG_* macros walk the control buffer recvmsg filled,
        // within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_CREDENTIALS {
                    let cred: libc::ucred =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>());
                    pid = u32::try_from(cred.pid).ok();
                } else if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_RIGHTS {
                    // A bogus fd sent along: close it.
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    let count = (h.cmsg_len as usize - (libc::CMSG_DATA(c) as usize - c as usize))
                        / std::mem::size_of::<libc::c_int>();
                    for i in 0..count {
                        libc::close(std::ptr::read_unaligned(data.add(i)));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        match (buf[..n as usize].contains(&ANSWER), pid) {
            (true, Some(pid)) if pid > 0 => Heard::Answer { pid },
            _ => Heard::Noise,
        }
    }

    /// Reads until nothing is left (at most 16 reads): [`Heard::Closed`]
    /// when the other end closed, else the last thing heard.
    fn drain(&self) -> Heard {
        let mut last = Heard::Nothing;
        for _ in 0..16 {
            match self.hear() {
                Heard::Nothing => return last,
                Heard::Closed => return Heard::Closed,
                h => last = h,
            }
        }
        last
    }

    /// True when the other end is closed: the holder exited (or closed
    /// it). No wait; bytes sent meanwhile are read and dropped, so a
    /// readable connection that is not closed does not stay readable.
    pub fn closed(&self) -> bool {
        self.drain() == Heard::Closed
    }

    /// Waits up to `timeout_ms` for the other end to close. True when it
    /// did: the holder's files are closed by then.
    pub fn wait_closed(&self, timeout_ms: i32) -> bool {
        let deadline = crate::monotonic_ns().saturating_add(timeout_ms.max(0) as u64 * 1_000_000);
        loop {
            if self.closed() {
                return true;
            }
            if crate::monotonic_ns() >= deadline
                || !MonotonicClock.wait_readable_until_ns(deadline, self.fd())
            {
                return self.closed();
            }
        }
    }
}

/// The runtime's side: connects to [`path`]`(page)` and keeps the
/// connection until `stop` is set (checked at least every 100 ms),
/// answering the guard's prompts; connects again every [`RECONNECT_NS`]
/// while no guard listens or after the guard went away (a restart).
/// Blocks; run it on a thread of its own at normal priority. The socket is
/// CLOEXEC (std), so a program the runtime starts holds no end of it.
pub fn keep_connected(page: &Path, stop: &AtomicBool) {
    let path = path(page);
    // Acquire: pairs with the Release store of whoever stops the runtime.
    while !stop.load(Ordering::Acquire) {
        if let Ok(s) = UnixStream::connect(&path) {
            serve(&s, stop);
        }
        MonotonicClock.sleep_until_ns(crate::monotonic_ns() + RECONNECT_NS);
    }
}

/// Answers every prompt on `s` until the guard's end closes or `stop`.
fn serve(s: &UnixStream, stop: &AtomicBool) {
    use std::io::Read;
    let mut buf = [0u8; 16];
    let mut reader = s;
    // Acquire: as in keep_connected.
    while !stop.load(Ordering::Acquire) {
        let deadline = crate::monotonic_ns() + 100_000_000;
        if !MonotonicClock.wait_readable_until_ns(deadline, s.as_fd()) {
            continue;
        }
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if buf[..n].contains(&PROMPT) && !send_answer(s.as_fd()) {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Sends [`ANSWER`] (MSG_NOSIGNAL: a closed guard end is an error, not
/// SIGPIPE). True when sent.
fn send_answer(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: send reads one byte we own.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            (&ANSWER as *const u8).cast(),
            1,
            libc::MSG_NOSIGNAL,
        )
    };
    n == 1
}

#[cfg(test)]
mod tests;
