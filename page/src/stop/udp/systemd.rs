//! systemd's sockets: sd_listen_fds, without libsystemd. The pure rule
//! ([`parse_listen_fds`]) and the one take of the socket per process
//! ([`inherit_from_systemd`]).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use super::SYSTEMD_FD_NAME;

/// What the environment says about sockets systemd passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenFds {
    /// `LISTEN_FDS` is not set: not started by systemd with sockets.
    Absent,
    /// The stop socket is `fd`; systemd passed `count` fds from 3 on.
    Found {
        /// The stop socket's fd.
        fd: RawFd,
        /// How many fds systemd passed (3 .. 3 + count).
        count: u32,
    },
}

/// Why the environment's sockets are not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenFdsError {
    /// `LISTEN_PID` is missing or names another process (0: missing or not
    /// a number): the variables were inherited from a parent.
    NotForUs {
        /// `LISTEN_PID`.
        listen_pid: u32,
    },
    /// A variable is not a number (`LISTEN_FDS`) or empty.
    Malformed(&'static str),
    /// `LISTEN_FDNAMES` has another count of names than `LISTEN_FDS`.
    NamesCount {
        /// `LISTEN_FDS`.
        fds: u32,
        /// The names in `LISTEN_FDNAMES`.
        names: u32,
    },
    /// No fd is named `SYSTEMD_FD_NAME` (or `nao-rs-stop.socket`).
    NotNamed {
        /// `LISTEN_FDS`.
        fds: u32,
    },
    /// Several fds and no names: which one is the stop's is unknown.
    Ambiguous {
        /// `LISTEN_FDS`.
        fds: u32,
    },
}

impl std::fmt::Display for ListenFdsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenFdsError::NotForUs { listen_pid } => write!(
                f,
                "LISTEN_PID={listen_pid} is not this process: the sockets are not for it (inherited from a parent)"
            ),
            ListenFdsError::Malformed(var) => write!(f, "{var} is not a number"),
            ListenFdsError::NamesCount { fds, names } => write!(
                f,
                "LISTEN_FDNAMES has {names} names for LISTEN_FDS={fds}"
            ),
            ListenFdsError::NotNamed { fds } => write!(
                f,
                "none of the {fds} sockets is named {SYSTEMD_FD_NAME} (FileDescriptorName= of nao-rs-stop.socket)"
            ),
            ListenFdsError::Ambiguous { fds } => write!(
                f,
                "{fds} sockets and no LISTEN_FDNAMES: cannot tell the stop's"
            ),
        }
    }
}

/// sd_listen_fds, pure: which fd (if any) is the stop socket, given this
/// process's `pid` and the values of `LISTEN_PID`, `LISTEN_FDS` and
/// `LISTEN_FDNAMES`. The fds start at 3 (SD_LISTEN_FDS_START).
pub(crate) fn parse_listen_fds(
    pid: u32,
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    names: Option<&str>,
) -> Result<ListenFds, ListenFdsError> {
    let Some(fds) = listen_fds else {
        return Ok(ListenFds::Absent);
    };
    let lpid = listen_pid.and_then(|p| p.trim().parse::<u32>().ok());
    if lpid != Some(pid) {
        return Err(ListenFdsError::NotForUs {
            listen_pid: lpid.unwrap_or(0),
        });
    }
    let count: u32 = fds
        .trim()
        .parse()
        .map_err(|_| ListenFdsError::Malformed("LISTEN_FDS"))?;
    if count == 0 {
        return Ok(ListenFds::Absent);
    }
    let index = match names {
        Some(n) => {
            let list: Vec<&str> = n.split(':').collect();
            if list.len() as u32 != count {
                return Err(ListenFdsError::NamesCount {
                    fds: count,
                    names: list.len() as u32,
                });
            }
            list.iter()
                .position(|&x| x == SYSTEMD_FD_NAME || x == "nao-rs-stop.socket")
                .ok_or(ListenFdsError::NotNamed { fds: count })?
        }
        None if count == 1 => 0,
        None => return Err(ListenFdsError::Ambiguous { fds: count }),
    };
    Ok(ListenFds::Found {
        fd: 3 + index as RawFd,
        count,
    })
}

/// What this process got from systemd, once per process.
#[derive(Debug)]
pub enum Inherited {
    /// No socket from systemd.
    Absent,
    /// The stop socket (CLOEXEC).
    Socket(OwnedFd),
    /// The environment named sockets that are not taken (why).
    Error(ListenFdsError),
}

static INHERITED: OnceLock<Inherited> = OnceLock::new();

/// Takes the stop socket systemd passed, once per process (later calls
/// return the first answer): parses `LISTEN_PID`, `LISTEN_FDS`,
/// `LISTEN_FDNAMES` (`parse_listen_fds`), marks every passed fd CLOEXEC
/// (no child inherits them) and removes the three variables from the
/// environment (no child believes they are for it). Call it at the start
/// of `main`, before other threads run (`nao-rs run` and the guard do;
/// [`super::UdpListener::start`] calls it too, for a program that hosts the
/// runtime itself).
pub fn inherit_from_systemd() -> &'static Inherited {
    INHERITED.get_or_init(|| {
        let get = |k: &str| std::env::var(k).ok();
        let (p, n, names) = (get("LISTEN_PID"), get("LISTEN_FDS"), get("LISTEN_FDNAMES"));
        let parsed = parse_listen_fds(
            std::process::id(),
            p.as_deref(),
            n.as_deref(),
            names.as_deref(),
        );
        for k in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            if std::env::var_os(k).is_some() {
                std::env::remove_var(k);
            }
        }
        match parsed {
            Ok(ListenFds::Absent) => Inherited::Absent,
            Ok(ListenFds::Found { fd, count }) => {
                for f in 3..3 + count as RawFd {
                    // SAFETY: fcntl on an fd number; a closed one fails (EBADF).
                    unsafe { libc::fcntl(f, libc::F_SETFD, libc::FD_CLOEXEC) };
                }
                // SAFETY: F_GETFD only reads the fd's flags.
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                    return Inherited::Error(ListenFdsError::Malformed("LISTEN_FDS (fd not open)"));
                }
                // SAFETY: systemd passed this fd to this process
                // (LISTEN_PID is ours) and nothing else owns it.
                Inherited::Socket(unsafe { OwnedFd::from_raw_fd(fd) })
            }
            Err(e) => Inherited::Error(e),
        }
    })
}
