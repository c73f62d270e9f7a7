//! The hand-over socket file: a holder of the stop socket serves its fd
//! (SCM_RIGHTS) on `stop-PORT.sock` next to the page ([`serve`], [`send_fd`]);
//! a process without it asks there ([`ask`]) and checks what it gets.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{adopt, SocketFault};
use super::HANDOVER_TIMEOUT;
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
