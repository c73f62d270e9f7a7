//! The hand-over socket file: a holder of the stop socket serves its fd
//! (SCM_RIGHTS) on `stop-PORT.sock` next to the page ([`serve`], [`send_fd`]);
//! a process without it asks there ([`ask`]) and checks what it gets.
//!
//! The fd goes only to a verified holder ([`may_receive`], pure, over the
//! [`Peer`] the shell gathers): the connecting process's credentials
//! (SO_PEERCRED) name this process's user (or root), and its pid is this
//! process or one the page registers (the runtime's `driver_pid`, the
//! guard's `guard_pid`) with the start time the page stores for it, and it
//! maps the page. Anyone else (another member of the page directory's
//! group) gets the connection closed, no fd.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{adopt, SocketFault};
use super::{Holders, HANDOVER_TIMEOUT};
use crate::process::{maps_file, start_time, ProcessIdentity};
use crate::socket_file::{bind_private, directory_group, Replace};

/// Why a hand-over gave no socket.
#[derive(Debug)]
pub(crate) enum AskError {
    /// No one answered (no file, a stale file, a timeout, no fd sent).
    Unreachable,
    /// The socket handed over failed the check.
    Refused(SocketFault),
}

/// Asks whoever serves `path` for the stop socket and checks it.
pub(crate) fn ask(path: &Path, port: u16) -> Result<UdpSocket, AskError> {
    let fd = fetch(path, HANDOVER_TIMEOUT).map_err(|_| AskError::Unreachable)?;
    adopt(fd, port).map_err(AskError::Refused)
}

pub(crate) fn fetch(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let c = UnixStream::connect(path)?;
    c.set_read_timeout(Some(timeout))?;
    recv_fd(c.as_raw_fd())
}

fn recv_fd(conn: RawFd) -> io::Result<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(conn, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            let mut owned = fds.into_iter().map(|fd| {
                // SAFETY: the kernel just installed this fd for us.
                unsafe { OwnedFd::from_raw_fd(fd) }
            });
            if let Some(first) = owned.next() {
                return Ok(first);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "no fd in the hand-over",
    ))
}

/// Sends `fd` on `conn` (SCM_RIGHTS), without SIGPIPE.
///
/// # Errors
///
/// The `sendmsg` error (the peer gone, a full socket buffer) as an
/// [`io::Error`].
pub(crate) fn send_fd(conn: &UnixStream, fd: RawFd) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(b"S")];
    sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(io::Error::from)
}

/// This process's hand-over socket, served at `path`.
pub(crate) struct Server {
    pub(crate) listener: UnixListener,
    path: PathBuf,
    /// (st_dev, st_ino) of the file this process bound.
    id: (u64, u64),
}

impl Server {
    /// True while the file at the path is the one this process bound.
    pub(crate) fn is_at_path(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.is_at_path() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Serves at `path`: bound in a private directory beside it with mode
/// 0660 and the directory's group, then renamed into place
/// ([`bind_private`]), so the file is never reachable with another mode
/// (whatever the umask) and a stale or squatted file is replaced in one
/// step.
pub(crate) fn serve(path: &Path) -> io::Result<Server> {
    let (listener, id) = bind_private(path, 0o660, directory_group(path), Replace::Always, |p| {
        UnixListener::bind(p)
    })
    .map_err(|(_, e)| e)?;
    let server = Server {
        listener,
        path: path.to_path_buf(),
        id,
    };
    server.listener.set_nonblocking(true)?;
    Ok(server)
}

/// Who connected to the hand-over file, as the shell found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    /// SO_PEERCRED's pid (the process that connected).
    pub pid: u32,
    /// SO_PEERCRED's uid.
    pub uid: u32,
    /// The start time that pid has now (`/proc/PID/stat` field 22).
    pub start_now: Option<u64>,
    /// Whether it maps the page (`/proc/PID/maps`; `None`: not readable,
    /// or no page to look for).
    pub maps_page: Option<bool>,
}

/// Why a peer gets no fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRefusal {
    /// SO_PEERCRED could not be read.
    NoCredentials,
    /// Another user than this process's (and not root): the uid.
    OtherUser(u32),
    /// Neither this process nor a runtime or guard the page registers: the pid.
    NotRegistered(u32),
    /// The pid is registered, but its process has another start time now
    /// (a reused pid): the pid.
    Reused(u32),
    /// The registered process does not map the page: not a holder (the pid).
    NotAHolder(u32),
}

impl PeerRefusal {
    /// The number that goes with it (a uid or a pid).
    pub(crate) fn value(&self) -> i64 {
        match *self {
            PeerRefusal::NoCredentials => 0,
            PeerRefusal::OtherUser(v)
            | PeerRefusal::NotRegistered(v)
            | PeerRefusal::Reused(v)
            | PeerRefusal::NotAHolder(v) => i64::from(v),
        }
    }
}

impl std::fmt::Display for PeerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerRefusal::NoCredentials => write!(f, "its credentials (SO_PEERCRED) cannot be read"),
            PeerRefusal::OtherUser(uid) => write!(
                f,
                "uid {uid} is another user than this process's: only the services' user (or root) gets the stop socket"
            ),
            PeerRefusal::NotRegistered(pid) => write!(
                f,
                "pid {pid} is neither the runtime nor the guard the page registers"
            ),
            PeerRefusal::Reused(pid) => write!(
                f,
                "pid {pid} has another start time than the page stores for it (a reused pid)"
            ),
            PeerRefusal::NotAHolder(pid) => write!(f, "pid {pid} does not map the page"),
        }
    }
}

/// The rule, pure: may `peer` receive the stop socket from this process
/// (`own`, running as `own_uid`), with `registered` the identities the
/// page stores now (the runtime's and the guard's; pid 0: none)?
pub(crate) fn may_receive(
    peer: &Peer,
    own: ProcessIdentity,
    own_uid: u32,
    registered: [ProcessIdentity; 2],
) -> Result<(), PeerRefusal> {
    if peer.uid != own_uid && peer.uid != 0 {
        return Err(PeerRefusal::OtherUser(peer.uid));
    }
    if peer.pid == own.pid {
        // This very process (two listeners in one program): it holds the
        // socket already.
        return Ok(());
    }
    let id = registered
        .iter()
        .find(|r| r.pid != 0 && r.pid == peer.pid)
        .ok_or(PeerRefusal::NotRegistered(peer.pid))?;
    if id.start == 0 || peer.start_now != Some(id.start) {
        return Err(PeerRefusal::Reused(peer.pid));
    }
    if peer.maps_page == Some(false) {
        return Err(PeerRefusal::NotAHolder(peer.pid));
    }
    Ok(())
}

/// The shell of [`may_receive`] for a connection: SO_PEERCRED, the peer's
/// start time and whether it maps the page. Reads two small `/proc` files;
/// never waits on the peer.
pub(crate) fn verify_peer(conn: &UnixStream, holders: Option<&Holders>) -> Result<(), PeerRefusal> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(conn, PeerCredentials).map_err(|_| PeerRefusal::NoCredentials)?;
    let pid = u32::try_from(cred.pid()).map_err(|_| PeerRefusal::NoCredentials)?;
    let own_pid = std::process::id();
    let own = ProcessIdentity {
        pid: own_pid,
        start: 0,
    };
    let registered = holders.map_or([ProcessIdentity { pid: 0, start: 0 }; 2], |h| {
        (h.registered)()
    });
    let maps_page = if pid == own_pid {
        None
    } else {
        holders
            .and_then(|h| std::fs::metadata(&h.page).ok())
            .and_then(|m| maps_file(pid, m.dev(), m.ino()))
    };
    let peer = Peer {
        pid,
        uid: cred.uid(),
        start_now: start_time(pid),
        maps_page,
    };
    may_receive(&peer, own, nix::unistd::geteuid().as_raw(), registered)
}
