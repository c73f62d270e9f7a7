//! The UDP stop (`docs/page.md`, "Fixed points"): a datagram whose payload starts
//! with the 11 ASCII bytes `NAO-RS STOP` trips the switch (reason `udp`);
//! anything else is ignored; there is never a reply. The ONE listener of
//! both processes: the runtime and the guard run this same code.
//!
//! ## One socket, read by both processes
//!
//! A unicast datagram is queued on exactly one socket. If each process had
//! its own socket (SO_REUSEPORT), the kernel would hash each sender to one
//! of them, and a stop hashed to a hung (SIGSTOPped) process's socket would
//! sit unread in its queue. So there is one socket, and both processes hold
//! it; both wait on its one receive queue and any live process drains it.
//!
//! ## Where the socket comes from, in this order
//!
//! 1. **systemd** (the robot): the socket unit `nao-rs-stop.socket`
//!    (`ListenDatagram=7701`) is bound at boot, before either service, and
//!    both services name it in `Sockets=`: each process finds it at fd 3..
//!    (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`, [`inherit_from_systemd`]).
//!    systemd keeps it open while no service runs, so datagrams sent then
//!    queue in it and are read when either process starts.
//! 2. **The hand-over socket file** (no systemd: tests, the demo, a
//!    developer's machine): a process that holds the socket serves its fd
//!    (SCM_RIGHTS) on the unix socket FILE [`handover_path`] next to the
//!    page (`stop-PORT.sock`, mode 0660, the page directory's group; made
//!    in a private directory and renamed into place, so it is never
//!    reachable with a wider mode). Only who can enter the page's
//!    directory can connect.
//! 3. **Its own bind** of `0.0.0.0:PORT` (the first process, without
//!    systemd).
//!
//! Every socket this process is given (by systemd or the hand-over) is
//! CHECKED before it is used ([`check`], a pure rule over [`SocketFacts`]):
//! a UDP datagram socket of AF_INET/AF_INET6, bound to the wildcard address
//! on the configured port, not connected, not IPv6-only, without
//! SO_REUSEPORT, in this process's network namespace, and the only socket
//! on the port there. A failing socket is refused and logged with what was
//! wrong ([`UdpEvent::Refused`]). Each process clears SO_REUSEADDR on the
//! socket it holds (systemd sets it): with it set, any local user could
//! bind the port too with SO_REUSEADDR and take every unicast stop.
//!
//! ## A port no process of ours reads trips
//!
//! A listener that holds no checked socket [`UNREAD_DEADLINE_NS`] after its
//! start trips the switch `stop-port-unread`, and again on every retry
//! ([`RETRY_MS`]) while it still holds none, so a re-arm does not stick
//! ([`UnreadRule`]). It raises `udp-port-not-owned` meanwhile. Once held,
//! the socket is never let go.
//!
//! Each wake drains the socket (reads with MSG_DONTWAIT until EAGAIN); the
//! receive buffer is raised to [`RCVBUF`] bytes (never lowered). An error
//! on the socket or on the hand-over's accept backs off ([`Backoff`]: 10 ms
//! doubling to 1 s) and is logged once: no loop at real-time priority spins
//! on an error (at a low fd limit `accept` fails with EMFILE while the
//! connection stays queued).

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use deathswitch::Reason;

use nao_kit::log::{EventSink, Level};
use nao_kit::monotonic_ns;

/// The stop datagram's prefix and port: one place, with the death switch.
pub use deathswitch::stop::{is_stop, PORT as DEFAULT_PORT, PREFIX as STOP_PREFIX};

/// How long the listener waits at most between two looks at its stop flag,
/// its hand-over socket and its ownership, ms.
pub const WAKE_MS: u64 = 50;
/// How often a listener without the socket retries, ms.
pub const RETRY_MS: u64 = WAKE_MS;
/// The receive buffer asked for: 8 MiB (a flood is drained, not buffered,
/// but a burst while the reader is off the CPU must not overflow). The
/// socket unit asks for the same (`ReceiveBuffer=8M`).
pub const RCVBUF: usize = 8 << 20;
/// At most this many datagrams are read per wake before the loop looks at
/// its stop flag and its hand-over socket again (a flood is drained in turns).
pub const DRAIN_MAX: usize = 4096;
/// How long a process waits for a holder to hand the socket over.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a holder waits when it asks who serves the hand-over file.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(20);
/// How often a holder looks whether the hand-over file is served (by
/// itself, or by another holder of the same socket), ns.
pub const SERVE_CHECK_NS: u64 = 200_000_000;
/// A listener that holds no checked socket this long after its start trips
/// `stop-port-unread`, ns: systemd's socket is there at once, a hand-over
/// within one [`SERVE_CHECK_NS`] of a holder's start, and a free port binds
/// at once, so 1 s is five times what a live holder needs.
pub const UNREAD_DEADLINE_NS: u64 = 1_000_000_000;
/// The first back-off after an error, ns.
pub const BACKOFF_MIN_NS: u64 = 10_000_000;
/// The longest back-off, ns.
pub const BACKOFF_MAX_NS: u64 = 1_000_000_000;
/// The name systemd gives the stop socket (`FileDescriptorName=` of
/// `config/systemd/nao-rs-stop.socket`).
pub const SYSTEMD_FD_NAME: &str = "nao-rs-stop";

/// The hand-over socket file for a page at `page` and `port`:
/// `stop-PORT.sock` in the page's directory.
pub fn handover_path(page: &Path, port: u16) -> PathBuf {
    page.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(format!("stop-{port}.sock"))
}

// ---------------------------------------------------------------------------
// systemd's sockets (sd_listen_fds, without libsystemd)

/// What the environment says about sockets systemd passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenFds {
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
    /// No fd is named [`SYSTEMD_FD_NAME`] (or `nao-rs-stop.socket`).
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
pub fn parse_listen_fds(
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
/// `LISTEN_FDNAMES` ([`parse_listen_fds`]), marks every passed fd CLOEXEC
/// (no child inherits them) and removes the three variables from the
/// environment (no child believes they are for it). Call it at the start
/// of `main`, before other threads run (`nao-rs run` and the guard do;
/// [`UdpListener::start_named`] calls it too, for a program that hosts the
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

// ---------------------------------------------------------------------------
// The check of a socket this process is given

/// Where a socket came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// systemd's socket unit (LISTEN_FDS).
    Systemd,
    /// The hand-over socket file (another process of ours).
    Handover,
    /// This process bound the port itself.
    Bind,
}

impl Source {
    fn index(self) -> usize {
        match self {
            Source::Systemd => 0,
            Source::Handover => 1,
            Source::Bind => 2,
        }
    }
    /// For the log.
    pub fn name(self) -> &'static str {
        match self {
            Source::Systemd => "systemd",
            Source::Handover => "the hand-over socket",
            Source::Bind => "its own bind",
        }
    }
}

/// The kind of a socket: SO_TYPE, SO_DOMAIN, SO_PROTOCOL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockKind {
    /// SO_TYPE (SOCK_DGRAM).
    pub sock_type: i32,
    /// SO_DOMAIN (AF_INET, AF_INET6).
    pub domain: i32,
    /// SO_PROTOCOL (IPPROTO_UDP).
    pub protocol: i32,
}

/// Whether a socket is in this process's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Netns {
    /// The same namespace (SIOCGSKNS's inode is /proc/self/ns/net's, or,
    /// without CAP_NET_ADMIN, its inode is listed in /proc/self/net/udp{,6}).
    Same,
    /// Another namespace.
    Other,
    /// Neither way worked.
    Unknown,
}

/// What is known of a socket, gathered by the shell ([`facts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketFacts {
    /// Its kind, or the errno of SO_TYPE (ENOTSOCK: not a socket).
    pub kind: Result<SockKind, i32>,
    /// getsockname.
    pub local: Option<SocketAddr>,
    /// getpeername succeeded.
    pub connected: bool,
    /// IPV6_V6ONLY (AF_INET6 only).
    pub v6only: bool,
    /// SO_REUSEPORT.
    pub reuse_port: bool,
    /// Its network namespace.
    pub netns: Netns,
    /// Other sockets bound to the same port in this namespace, and the uid
    /// of one of them (from /proc/self/net/udp{,6}).
    pub others_on_port: (u32, u32),
}

/// What is wrong with a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Not a socket (the errno of SO_TYPE).
    NotASocket(i32),
    /// Not a datagram socket (SO_TYPE).
    NotDatagram(i32),
    /// Not AF_INET / AF_INET6 (SO_DOMAIN).
    NotInternet(i32),
    /// Not UDP (SO_PROTOCOL).
    NotUdp(i32),
    /// Not bound (getsockname failed or gave no internet address).
    NotBound,
    /// Bound to an address other than the wildcard.
    NotWildcard(IpAddr),
    /// Bound to another port.
    WrongPort(u16),
    /// Connected: it would read one peer only.
    Connected,
    /// IPv6-only: IPv4 stops would not reach it.
    V6Only,
    /// SO_REUSEPORT: another socket can share the port and take stops.
    ReusePort,
    /// In another network namespace.
    OtherNetns,
    /// Its network namespace could not be told.
    NetnsUnknown,
    /// Other sockets are bound to the port (how many, one's uid): they
    /// take stops.
    Shared(u32, u32),
}

impl Fault {
    /// A fixed text for the real-time log (the number is [`Fault::value`]).
    pub fn what(&self) -> &'static str {
        match self {
            Fault::NotASocket(_) => "not a socket (errno)",
            Fault::NotDatagram(_) => "not a datagram socket (SO_TYPE)",
            Fault::NotInternet(_) => "not an AF_INET/AF_INET6 socket (SO_DOMAIN)",
            Fault::NotUdp(_) => "not UDP (SO_PROTOCOL)",
            Fault::NotBound => "not bound",
            Fault::NotWildcard(_) => "bound to an address other than the wildcard",
            Fault::WrongPort(_) => "bound to another port (port)",
            Fault::Connected => "connected: it reads one peer only",
            Fault::V6Only => "IPv6-only: IPv4 stops would not reach it",
            Fault::ReusePort => "SO_REUSEPORT set: another socket can take stops",
            Fault::OtherNetns => "in another network namespace",
            Fault::NetnsUnknown => "its network namespace cannot be told",
            Fault::Shared(..) => "other sockets are bound to the port (uid of one)",
        }
    }
    /// The number that goes with [`Fault::what`].
    pub fn value(&self) -> i64 {
        match *self {
            Fault::NotASocket(v)
            | Fault::NotDatagram(v)
            | Fault::NotInternet(v)
            | Fault::NotUdp(v) => i64::from(v),
            Fault::WrongPort(p) => i64::from(p),
            Fault::Shared(_, uid) => i64::from(uid),
            _ => 0,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::NotASocket(e) => write!(f, "not a socket (errno {e})"),
            Fault::NotDatagram(t) => write!(f, "a socket of type {t}, not a datagram socket"),
            Fault::NotInternet(d) => write!(f, "a socket of domain {d}, not AF_INET/AF_INET6"),
            Fault::NotUdp(p) => write!(f, "protocol {p}, not UDP"),
            Fault::NotBound => write!(f, "not bound to an internet address"),
            Fault::NotWildcard(a) => write!(f, "bound to {a}, not the wildcard address"),
            Fault::WrongPort(p) => write!(f, "bound to port {p}, not the stop's"),
            Fault::Connected => write!(f, "connected: it reads one peer only"),
            Fault::V6Only => write!(f, "IPv6-only: IPv4 stops would not reach it (BindIPv6Only=both)"),
            Fault::ReusePort => write!(f, "SO_REUSEPORT set: another socket can share the port (ReusePort=no)"),
            Fault::OtherNetns => write!(f, "in another network namespace"),
            Fault::NetnsUnknown => write!(
                f,
                "its network namespace cannot be told (SIOCGSKNS refused and /proc/self/net/udp unreadable)"
            ),
            Fault::Shared(n, uid) => write!(
                f,
                "{n} other socket(s) bound to the port too (uid {uid} among them): they take stops"
            ),
        }
    }
}

/// The check, pure: may this socket be read as the stop port `port`?
pub fn check(facts: &SocketFacts, port: u16) -> Result<(), Fault> {
    let kind = facts.kind.map_err(Fault::NotASocket)?;
    if kind.sock_type != libc::SOCK_DGRAM {
        return Err(Fault::NotDatagram(kind.sock_type));
    }
    if kind.domain != libc::AF_INET && kind.domain != libc::AF_INET6 {
        return Err(Fault::NotInternet(kind.domain));
    }
    if kind.protocol != libc::IPPROTO_UDP {
        return Err(Fault::NotUdp(kind.protocol));
    }
    let local = facts.local.ok_or(Fault::NotBound)?;
    if !local.ip().is_unspecified() {
        return Err(Fault::NotWildcard(local.ip()));
    }
    if local.port() != port {
        return Err(Fault::WrongPort(local.port()));
    }
    if facts.connected {
        return Err(Fault::Connected);
    }
    if kind.domain == libc::AF_INET6 && facts.v6only {
        return Err(Fault::V6Only);
    }
    if facts.reuse_port {
        return Err(Fault::ReusePort);
    }
    match facts.netns {
        Netns::Same => {}
        Netns::Other => return Err(Fault::OtherNetns),
        Netns::Unknown => return Err(Fault::NetnsUnknown),
    }
    if facts.others_on_port.0 > 0 {
        return Err(Fault::Shared(
            facts.others_on_port.0,
            facts.others_on_port.1,
        ));
    }
    Ok(())
}

/// One line of /proc/net/udp{,6}: the local port, the uid, the inode.
pub fn parse_proc_udp(text: &str) -> Vec<(u16, u32, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let uid = f.get(7)?.parse().ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((port, uid, inode))
        })
        .collect()
}

fn sockopt_int(fd: RawFd, level: i32, opt: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a c_int of the size given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_sockopt_int(fd: RawFd, level: i32, opt: i32, v: i32) -> io::Result<()> {
    // SAFETY: setsockopt with a c_int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn inode_of(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is valid for writes.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// SIOCGSKNS: the socket's network namespace as an fd (linux/sockios.h).
const SIOCGSKNS: libc::c_ulong = 0x894C;

fn netns_of(fd: RawFd, port_lines: &[(u16, u32, u64)], ino: u64) -> Netns {
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd or -1.
    let ns = unsafe { libc::ioctl(fd, SIOCGSKNS as _) };
    if ns >= 0 {
        // SAFETY: the kernel just gave us this fd.
        let ns = unsafe { OwnedFd::from_raw_fd(ns) };
        let theirs = inode_of(ns.as_raw_fd());
        let mine = std::fs::metadata("/proc/self/ns/net")
            .ok()
            .map(|m| (m.dev(), m.ino()));
        return match (theirs, mine) {
            (Some(a), Some(b)) if a == b => Netns::Same,
            (Some(_), Some(_)) => Netns::Other,
            _ => Netns::Unknown,
        };
    }
    // No CAP_NET_ADMIN (the services run as a user): /proc/self/net/udp
    // lists exactly the UDP sockets of this process's namespace.
    netns_from_proc(
        port_lines,
        !port_lines.is_empty() || proc_udp_readable(),
        ino,
    )
}

/// The namespace rule without SIOCGSKNS, pure: a socket is in this
/// process's namespace exactly when its inode is among the UDP sockets
/// /proc/self/net/udp{,6} list (`readable`: they could be read).
pub fn netns_from_proc(lines: &[(u16, u32, u64)], readable: bool, ino: u64) -> Netns {
    if !readable {
        Netns::Unknown
    } else if ino != 0 && lines.iter().any(|&(_, _, i)| i == ino) {
        Netns::Same
    } else {
        Netns::Other
    }
}

fn proc_udp_readable() -> bool {
    std::fs::read_to_string("/proc/self/net/udp").is_ok()
}

fn proc_udp_lines() -> Vec<(u16, u32, u64)> {
    let mut v = Vec::new();
    for f in ["/proc/self/net/udp", "/proc/self/net/udp6"] {
        if let Ok(t) = std::fs::read_to_string(f) {
            v.extend(parse_proc_udp(&t));
        }
    }
    v
}

/// Gathers the facts of `fd` for port `port` (the shell of [`check`]).
pub fn facts(fd: BorrowedFd<'_>, port: u16) -> SocketFacts {
    let raw = fd.as_raw_fd();
    let kind = match sockopt_int(raw, libc::SOL_SOCKET, libc::SO_TYPE) {
        Err(e) => Err(e.raw_os_error().unwrap_or(0)),
        Ok(t) => Ok(SockKind {
            sock_type: t,
            domain: sockopt_int(raw, libc::SOL_SOCKET, libc::SO_DOMAIN).unwrap_or(-1),
            protocol: sockopt_int(raw, libc::SOL_SOCKET, libc::SO_PROTOCOL).unwrap_or(-1),
        }),
    };
    let is_inet = matches!(kind, Ok(k) if k.domain == libc::AF_INET || k.domain == libc::AF_INET6);
    let addr = |peer: bool| -> Option<SocketAddr> {
        use nix::sys::socket::{getpeername, getsockname, SockaddrLike, SockaddrStorage};
        let s: SockaddrStorage = if peer {
            getpeername(raw).ok()?
        } else {
            getsockname(raw).ok()?
        };
        if let Some(a) = s.as_sockaddr_in() {
            return Some(SocketAddr::from((a.ip(), a.port())));
        }
        if let Some(a) = s.as_sockaddr_in6() {
            return Some(SocketAddr::from((a.ip(), a.port())));
        }
        let _ = s.family();
        None
    };
    let local = if is_inet { addr(false) } else { None };
    let connected = is_inet && addr(true).is_some();
    let v6only = matches!(kind, Ok(k) if k.domain == libc::AF_INET6)
        && sockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY).unwrap_or(0) != 0;
    let reuse_port = sockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT).unwrap_or(0) != 0;
    let ino = inode_of(raw).map_or(0, |(_, i)| i);
    let lines = if is_inet {
        proc_udp_lines()
    } else {
        Vec::new()
    };
    let netns = if is_inet {
        netns_of(raw, &lines, ino)
    } else {
        Netns::Unknown
    };
    let others: Vec<&(u16, u32, u64)> = lines
        .iter()
        .filter(|&&(p, _, i)| p == port && i != ino && i != 0)
        .collect();
    SocketFacts {
        kind,
        local,
        connected,
        v6only,
        reuse_port,
        netns,
        others_on_port: (others.len() as u32, others.first().map_or(0, |o| o.1)),
    }
}

/// Makes a socket this process holds ready: SO_REUSEADDR cleared (systemd
/// sets it; with it, any user could bind the port too and take stops),
/// the receive buffer raised to [`RCVBUF`] (never lowered: systemd may
/// have set more than this user may).
fn prepare(s: &UdpSocket) {
    let fd = s.as_raw_fd();
    let _ = set_sockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 0);
    // The kernel reports twice what was set.
    if sockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0) as usize >= RCVBUF {
        return;
    }
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        if set_sockopt_int(fd, libc::SOL_SOCKET, opt, RCVBUF as i32).is_ok() {
            break;
        }
    }
}

/// Takes `fd` as the stop socket if it passes the check.
fn adopt(fd: OwnedFd, port: u16) -> Result<UdpSocket, Fault> {
    // Clear SO_REUSEADDR before the facts: a squatter that got in before
    // is counted, none can come after.
    let _ = set_sockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 0);
    check(&facts(fd.as_fd(), port), port)?;
    let s = UdpSocket::from(fd);
    prepare(&s);
    Ok(s)
}

/// Binds `0.0.0.0:port` with the large receive buffer.
pub fn bind(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    prepare(&s);
    Ok(s)
}

// ---------------------------------------------------------------------------
// The hand-over socket file

/// Why a hand-over gave no socket.
#[derive(Debug)]
pub enum AskError {
    /// No one answered (no file, a stale file, a timeout, no fd sent).
    Unreachable(io::Error),
    /// The socket handed over failed the check.
    Refused(Fault),
}

/// Asks whoever serves `path` for the stop socket and checks it.
pub fn ask(path: &Path, port: u16) -> Result<UdpSocket, AskError> {
    let fd = fetch(path, HANDOVER_TIMEOUT).map_err(AskError::Unreachable)?;
    adopt(fd, port).map_err(AskError::Refused)
}

fn fetch(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
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
pub fn send_fd(conn: &UnixStream, fd: RawFd) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(b"S")];
    sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(io::Error::from)
}

/// This process's hand-over socket, served at `path`.
struct Server {
    listener: UnixListener,
    path: PathBuf,
    /// (st_dev, st_ino) of the file this process bound.
    id: (u64, u64),
}

impl Server {
    /// True while the file at the path is the one this process bound.
    fn is_at_path(&self) -> bool {
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

/// Serves at `path`: binds in a private directory (mode 0700) beside it,
/// sets mode 0660 and the directory's group, then renames it into place,
/// so the file is never reachable with another mode (whatever the umask)
/// and a stale or squatted file is replaced in one step.
fn serve(path: &Path) -> io::Result<Server> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("stop.sock");
    // Relaxed: a counter for unique names.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    let inner = tmp.join("s");
    let made = (|| {
        let l = UnixListener::bind(&inner)?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o660))?;
        if let Ok(d) = std::fs::metadata(dir) {
            let _ = nix::unistd::chown(&inner, None, Some(nix::unistd::Gid::from_raw(d.gid())));
        }
        let m = std::fs::symlink_metadata(&inner)?;
        std::fs::rename(&inner, path)?;
        l.set_nonblocking(true)?;
        Ok(Server {
            listener: l,
            path: path.to_path_buf(),
            id: (m.dev(), m.ino()),
        })
    })();
    let _ = std::fs::remove_file(&inner);
    let _ = std::fs::remove_dir(&tmp);
    made
}

// ---------------------------------------------------------------------------
// Pure rules of the loop

/// The rule of a port no process of ours reads: from the listener's start,
/// a listener that holds no socket at [`UNREAD_DEADLINE_NS`] trips
/// `stop-port-unread`, and again at every later look while it holds none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadRule {
    started_ns: u64,
    deadline_ns: u64,
    reported: bool,
}

/// What [`UnreadRule::step`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// Nothing (the socket is held, or the deadline is not reached).
    Nothing,
    /// Trip `stop-port-unread`; `first`: log it (once).
    Trip {
        /// The first trip of this listener.
        first: bool,
    },
}

impl UnreadRule {
    /// Started at `started_ns` with `deadline_ns`.
    pub fn new(started_ns: u64, deadline_ns: u64) -> UnreadRule {
        UnreadRule {
            started_ns,
            deadline_ns,
            reported: false,
        }
    }

    /// One look at `now_ns`: `holding` a checked socket or not.
    pub fn step(&mut self, now_ns: u64, holding: bool) -> Unread {
        if holding || now_ns.saturating_sub(self.started_ns) < self.deadline_ns {
            return Unread::Nothing;
        }
        let first = !self.reported;
        self.reported = true;
        Unread::Trip { first }
    }
}

/// Back-off after an error: no retry before `until`; the delay doubles
/// from [`BACKOFF_MIN_NS`] to [`BACKOFF_MAX_NS`]; a success resets it.
/// Says when an error is new (to log once per errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backoff {
    delay_ns: u64,
    until_ns: u64,
    last_errno: Option<i32>,
}

impl Backoff {
    /// May the operation be tried at `now_ns`?
    pub fn ready(&self, now_ns: u64) -> bool {
        now_ns >= self.until_ns
    }

    /// How long until it may, ns (0: now).
    pub fn wait_ns(&self, now_ns: u64) -> u64 {
        self.until_ns.saturating_sub(now_ns)
    }

    /// The operation failed at `now_ns` with `errno`: returns true when
    /// this errno is new (log it).
    pub fn failed(&mut self, now_ns: u64, errno: i32) -> bool {
        self.delay_ns = if self.delay_ns == 0 {
            BACKOFF_MIN_NS
        } else {
            (self.delay_ns * 2).min(BACKOFF_MAX_NS)
        };
        self.until_ns = now_ns + self.delay_ns;
        let new = self.last_errno != Some(errno);
        self.last_errno = Some(errno);
        new
    }

    /// The operation worked.
    pub fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

// ---------------------------------------------------------------------------
// The listener

/// What the listener shares with the rest of the process.
#[derive(Debug, Default)]
pub struct UdpShared {
    /// True while this process holds no socket for the port: no process of
    /// ours reads it (the other one, if any, would have shared it). The
    /// safety flag "UDP port not owned".
    pub not_owned: AtomicBool,
    /// True while this process holds the port's socket.
    pub bound: AtomicBool,
    /// Datagrams this process read, any payload, counted once each is
    /// handled (its `trip` called when it was a stop).
    pub datagrams: AtomicU64,
}

/// A change of the listener's state (one call per change, not per datagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpEvent {
    /// This process holds the port's socket, from this source.
    Bound(Source),
    /// No socket: the errno of this process's own bind (once per errno).
    BindFailed(i32),
    /// A socket from this source failed the check (once per fault).
    Refused(Source, Fault),
    /// The environment named systemd sockets that are not taken.
    ListenFds(ListenFdsError),
    /// No socket past the deadline: `stop-port-unread` tripped (once;
    /// tripped again on every retry while it lasts).
    Unread,
    /// The hand-over socket cannot be served (errno, once per errno).
    ServeFailed(i32),
    /// An error reading the socket or accepting on the hand-over socket:
    /// backing off (errno, once per errno).
    Backoff(i32),
}

/// Texts made once for the log (at most [`TEXTS_MAX`]; an event is rare).
static TEXTS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
const TEXTS_MAX: usize = 64;

fn intern(s: String) -> &'static str {
    let mut g = TEXTS.lock().unwrap_or_else(|e| e.into_inner());
    let set = g.get_or_insert_with(HashSet::new);
    if let Some(&t) = set.get(s.as_str()) {
        return t;
    }
    if set.len() >= TEXTS_MAX {
        return "UDP stop: a socket was refused (see docs/runtime.md, the UDP stop)";
    }
    let t: &'static str = Box::leak(s.into_boxed_str());
    set.insert(t);
    t
}

/// The log line of `e`: level, text, number (for the kit's event rings;
/// both processes use it).
pub fn describe(e: UdpEvent, port: u16) -> (Level, &'static str, i64) {
    match e {
        UdpEvent::Bound(s) => (
            Level::Info,
            match s {
                Source::Systemd => "UDP stop listening on systemd's socket (port)",
                Source::Handover => "UDP stop listening on the socket handed over (port)",
                Source::Bind => "UDP stop listening, bound by this process (port)",
            },
            i64::from(port),
        ),
        UdpEvent::BindFailed(errno) => (
            Level::Warning,
            "cannot bind or share the UDP stop port, retrying every 50 ms (errno)",
            i64::from(errno),
        ),
        UdpEvent::Refused(s, f) => (
            Level::Error,
            intern(format!("UDP stop: the socket from {} is refused: {f}", s.name())),
            f.value(),
        ),
        UdpEvent::ListenFds(e) => (
            Level::Warning,
            intern(format!("UDP stop: systemd's sockets not taken: {e}")),
            0,
        ),
        UdpEvent::Unread => (
            Level::Error,
            "UDP stop port unread: no socket within 1 s; tripped stop-port-unread (again on every retry until a socket is held) (port)",
            i64::from(port),
        ),
        UdpEvent::ServeFailed(errno) => (
            Level::Warning,
            "cannot serve the UDP stop's hand-over socket next to the page (errno)",
            i64::from(errno),
        ),
        UdpEvent::Backoff(errno) => (
            Level::Warning,
            "UDP stop socket error: backing off, 10 ms to 1 s (errno)",
            i64::from(errno),
        ),
    }
}

/// Queues the log line of `e` on `sink` ([`describe`]).
pub fn log_event(sink: &mut EventSink, e: UdpEvent, port: u16) {
    let (level, what, value) = describe(e, port);
    sink.emit(level, what, value);
}

/// Where the listener finds its socket.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// The stop port.
    pub port: u16,
    /// The hand-over socket file ([`handover_path`]).
    pub handover: PathBuf,
    /// The deadline of [`UnreadRule`], ns ([`UNREAD_DEADLINE_NS`]).
    pub unread_deadline_ns: u64,
}

/// Errors of `e` as an errno (0 when it has none).
fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Tries the sources in order: systemd's socket, the hand-over, its own bind.
fn acquire(
    cfg: &ListenConfig,
    refused: &mut [Option<Fault>; 3],
    on_event: &mut impl FnMut(UdpEvent),
) -> Result<(UdpSocket, Source), i32> {
    let mut refuse = |s: Source, f: Fault, on_event: &mut dyn FnMut(UdpEvent)| {
        if refused[s.index()] != Some(f) {
            on_event(UdpEvent::Refused(s, f));
        }
        refused[s.index()] = Some(f);
    };
    if let Inherited::Socket(fd) = inherit_from_systemd() {
        match fd.try_clone() {
            Ok(dup) => match adopt(dup, cfg.port) {
                Ok(s) => return Ok((s, Source::Systemd)),
                Err(f) => refuse(Source::Systemd, f, on_event),
            },
            Err(e) => return Err(errno(&e)),
        }
    }
    match ask(&cfg.handover, cfg.port) {
        Ok(s) => return Ok((s, Source::Handover)),
        Err(AskError::Refused(f)) => refuse(Source::Handover, f, on_event),
        Err(AskError::Unreachable(_)) => {}
    }
    bind(cfg.port)
        .map(|s| (s, Source::Bind))
        .map_err(|e| errno(&e))
}

/// Keeps the hand-over file served: by this process, or by another holder
/// of the same socket (same inode). A missing, stale, squatted or hung
/// file is replaced.
fn maintain(
    server: &mut Option<Server>,
    cfg: &ListenConfig,
    socket_ino: u64,
    serve_errno: &mut Option<i32>,
    on_event: &mut impl FnMut(UdpEvent),
) {
    if server.as_ref().is_some_and(Server::is_at_path) {
        return;
    }
    if let Ok(fd) = fetch(&cfg.handover, PROBE_TIMEOUT) {
        if inode_of(fd.as_raw_fd()).map(|(_, i)| i) == Some(socket_ino) {
            // Another holder of this very socket serves it.
            *server = None;
            return;
        }
    }
    match serve(&cfg.handover) {
        Ok(s) => {
            *server = Some(s);
            *serve_errno = None;
        }
        Err(e) => {
            let n = errno(&e);
            if *serve_errno != Some(n) {
                on_event(UdpEvent::ServeFailed(n));
            }
            *serve_errno = Some(n);
        }
    }
}

/// Runs the listener until one of `stop` is set: holds the port's socket
/// (systemd's, handed over, or bound itself: [`acquire`]), serves it on the
/// hand-over file, drains it on each wake and calls `trip(Reason::Udp)` for
/// each stop datagram, and `trip(Reason::StopPortUnread)` while it holds no
/// socket past the deadline ([`UnreadRule`]); ignores everything else;
/// never replies.
///
/// `on_event` receives one call per change (not per datagram).
pub fn listen(
    cfg: &ListenConfig,
    stop: &[&AtomicBool],
    shared: &UdpShared,
    mut trip: impl FnMut(Reason),
    mut on_event: impl FnMut(UdpEvent),
) {
    let mut socket: Option<UdpSocket> = None;
    let mut socket_ino = 0u64;
    let mut server: Option<Server> = None;
    let mut next_serve_check = 0u64;
    let mut serve_errno: Option<i32> = None;
    let mut refused: [Option<Fault>; 3] = [None; 3];
    let mut last_bind_error: Option<i32> = None;
    let mut unread = UnreadRule::new(monotonic_ns(), cfg.unread_deadline_ns);
    let mut read_backoff = Backoff::default();
    let mut accept_backoff = Backoff::default();
    let mut buf = [0u8; 64];
    if let Inherited::Error(e) = inherit_from_systemd() {
        on_event(UdpEvent::ListenFds(*e));
    }
    // Acquire: pairs with the Release that sets a `stop` flag.
    while !stop.iter().any(|f| f.load(Ordering::Acquire)) {
        if socket.is_none() {
            match acquire(cfg, &mut refused, &mut on_event) {
                Ok((s, source)) => {
                    socket_ino = inode_of(s.as_raw_fd()).map_or(0, |(_, i)| i);
                    socket = Some(s);
                    last_bind_error = None;
                    on_event(UdpEvent::Bound(source));
                }
                Err(code) => {
                    if last_bind_error != Some(code) {
                        on_event(UdpEvent::BindFailed(code));
                    }
                    last_bind_error = Some(code);
                }
            }
        }
        // Relaxed: status flags, read by the cycle to build its safety status.
        shared.not_owned.store(socket.is_none(), Ordering::Relaxed);
        shared.bound.store(socket.is_some(), Ordering::Relaxed);
        let now = monotonic_ns();
        if let Unread::Trip { first } = unread.step(now, socket.is_some()) {
            trip(Reason::StopPortUnread);
            if first {
                on_event(UdpEvent::Unread);
            }
        }

        let Some(s) = &socket else {
            std::thread::sleep(Duration::from_millis(RETRY_MS));
            continue;
        };
        if now >= next_serve_check {
            maintain(
                &mut server,
                cfg,
                socket_ino,
                &mut serve_errno,
                &mut on_event,
            );
            next_serve_check = now + SERVE_CHECK_NS;
        }
        let read_ready = read_backoff.ready(now);
        let accept_ready = accept_backoff.ready(now);
        let mut fds = [
            libc::pollfd {
                fd: if read_ready { s.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: match (&server, accept_ready) {
                    (Some(l), true) => l.listener.as_raw_fd(),
                    _ => -1,
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let mut timeout_ms = WAKE_MS;
        for b in [&read_backoff, &accept_backoff] {
            let w = b.wait_ns(now);
            if w > 0 {
                timeout_ms = timeout_ms.min(w.div_ceil(1_000_000));
            }
        }
        // SAFETY: two valid pollfds (a negative fd is ignored) for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms as libc::c_int) };
        // Drain: every datagram queued now, on every wake (also on a
        // timeout: the other process may have been woken for a datagram
        // and stopped before it read it). Bounded, so that a flood still
        // lets the loop look at its stop flag and serve the other process.
        if read_backoff.ready(monotonic_ns()) {
            for _ in 0..DRAIN_MAX {
                // SAFETY: recv into a buffer of the length given; MSG_DONTWAIT
                // leaves the shared file description's flags alone.
                let n = unsafe {
                    libc::recv(
                        s.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n >= 0 {
                    read_backoff.succeeded();
                    if is_stop(&buf[..(n as usize).min(buf.len())]) {
                        trip(Reason::Udp);
                    }
                    // Relaxed: a statistic.
                    shared.datagrams.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        // An ICMP error is reported once and the next read
                        // goes on; a lasting error backs off.
                        if read_backoff.failed(monotonic_ns(), errno(&e)) {
                            on_event(UdpEvent::Backoff(errno(&e)));
                        }
                        break;
                    }
                }
            }
        }
        if let (Some(l), true) = (&server, accept_backoff.ready(monotonic_ns())) {
            loop {
                match l.listener.accept() {
                    Ok((conn, _)) => {
                        accept_backoff.succeeded();
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_write_timeout(Some(Duration::from_millis(20)));
                        let _ = send_fd(&conn, s.as_fd().as_raw_fd());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE at a low fd limit: the connection stays
                        // queued and poll would wake at once, forever.
                        if accept_backoff.failed(monotonic_ns(), errno(&e)) {
                            on_event(UdpEvent::Backoff(errno(&e)));
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// The listener as a thread: starts it and returns the handle that stops it.
pub struct UdpListener {
    stop: Arc<AtomicBool>,
    shared: Arc<UdpShared>,
    handle: Option<nao_kit::Actor<Option<()>>>,
}

impl UdpListener {
    /// The flags the listener publishes.
    pub fn shared(&self) -> &Arc<UdpShared> {
        &self.shared
    }

    /// Starts the listener as a panic-guarded actor `name` (the runtime's
    /// is `nao-rs-udp`, the guard's `guard-udp`) at `priority`
    /// (SCHED_FIFO), on `port` with the hand-over file `handover`
    /// ([`handover_path`] of the page). It also ends when `runtime_stop` is
    /// set (the process's stop request). `trip` is called with
    /// `Reason::Udp` for each stop datagram and `Reason::StopPortUnread`
    /// while the port is unread; `on_panic` runs if the listener panics.
    #[allow(clippy::too_many_arguments)]
    pub fn start_named(
        name: &str,
        port: u16,
        handover: PathBuf,
        runtime_stop: Arc<AtomicBool>,
        priority: Option<u8>,
        trip: impl FnMut(Reason) + Send + 'static,
        on_event: impl FnMut(UdpEvent) + Send + 'static,
        on_panic: impl FnOnce() + Send + 'static,
    ) -> io::Result<UdpListener> {
        // Here, on the caller's thread, not in the listener's.
        inherit_from_systemd();
        let cfg = ListenConfig {
            port,
            handover,
            unread_deadline_ns: UNREAD_DEADLINE_NS,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(UdpShared::default());
        // Not owned until the first socket is held.
        shared.not_owned.store(true, Ordering::Relaxed);
        let (s, sh) = (stop.clone(), shared.clone());
        let mut spec = nao_kit::ActorSpec::new(name);
        spec.priority = priority;
        let actor = nao_kit::actor::spawn_guarded(
            spec,
            move || listen(&cfg, &[&s, &runtime_stop], &sh, trip, on_event),
            on_panic,
        )?;
        Ok(UdpListener {
            stop,
            shared,
            handle: Some(actor),
        })
    }

    /// Stops the listener (within [`WAKE_MS`]) and waits for it.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        // Release: pairs with the Acquire in `listen`.
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for UdpListener {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(test)]
mod tests;
