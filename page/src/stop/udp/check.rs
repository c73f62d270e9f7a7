//! The check of a socket this process is given: the pure rule ([`check`]
//! over [`SocketFacts`]), the shell that gathers the facts ([`facts`]), and
//! the taking of a socket that passes ([`adopt`]) or of the port itself
//! ([`bind`]).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use super::RCVBUF;

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
    pub(crate) fn index(self) -> usize {
        match self {
            Source::Systemd => 0,
            Source::Handover => 1,
            Source::Bind => 2,
        }
    }
    /// For the log.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Systemd => "systemd",
            Source::Handover => "the hand-over socket",
            Source::Bind => "its own bind",
        }
    }
}

/// The kind of a socket: SO_TYPE, SO_DOMAIN, SO_PROTOCOL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SockKind {
    /// SO_TYPE (SOCK_DGRAM).
    pub sock_type: i32,
    /// SO_DOMAIN (AF_INET, AF_INET6).
    pub domain: i32,
    /// SO_PROTOCOL (IPPROTO_UDP).
    pub protocol: i32,
}

/// Whether a socket is in this process's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Netns {
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
pub(crate) struct SocketFacts {
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
pub enum SocketFault {
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

impl SocketFault {
    /// The number that goes with the fault (an errno, a port, a count).
    pub(crate) fn value(&self) -> i64 {
        match *self {
            SocketFault::NotASocket(v)
            | SocketFault::NotDatagram(v)
            | SocketFault::NotInternet(v)
            | SocketFault::NotUdp(v) => i64::from(v),
            SocketFault::WrongPort(p) => i64::from(p),
            SocketFault::Shared(_, uid) => i64::from(uid),
            _ => 0,
        }
    }
}

impl std::fmt::Display for SocketFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketFault::NotASocket(e) => write!(f, "not a socket (errno {e})"),
            SocketFault::NotDatagram(t) => write!(f, "a socket of type {t}, not a datagram socket"),
            SocketFault::NotInternet(d) => write!(f, "a socket of domain {d}, not AF_INET/AF_INET6"),
            SocketFault::NotUdp(p) => write!(f, "protocol {p}, not UDP"),
            SocketFault::NotBound => write!(f, "not bound to an internet address"),
            SocketFault::NotWildcard(a) => write!(f, "bound to {a}, not the wildcard address"),
            SocketFault::WrongPort(p) => write!(f, "bound to port {p}, not the stop's"),
            SocketFault::Connected => write!(f, "connected: it reads one peer only"),
            SocketFault::V6Only => write!(f, "IPv6-only: IPv4 stops would not reach it (BindIPv6Only=both)"),
            SocketFault::ReusePort => write!(f, "SO_REUSEPORT set: another socket can share the port (ReusePort=no)"),
            SocketFault::OtherNetns => write!(f, "in another network namespace"),
            SocketFault::NetnsUnknown => write!(
                f,
                "its network namespace cannot be told (SIOCGSKNS refused and /proc/self/net/udp unreadable)"
            ),
            SocketFault::Shared(n, uid) => write!(
                f,
                "{n} other socket(s) bound to the port too (uid {uid} among them): they take stops"
            ),
        }
    }
}

/// The check, pure: may this socket be read as the stop port `port`?
pub(crate) fn check(facts: &SocketFacts, port: u16) -> Result<(), SocketFault> {
    let kind = facts.kind.map_err(SocketFault::NotASocket)?;
    if kind.sock_type != libc::SOCK_DGRAM {
        return Err(SocketFault::NotDatagram(kind.sock_type));
    }
    if kind.domain != libc::AF_INET && kind.domain != libc::AF_INET6 {
        return Err(SocketFault::NotInternet(kind.domain));
    }
    if kind.protocol != libc::IPPROTO_UDP {
        return Err(SocketFault::NotUdp(kind.protocol));
    }
    let local = facts.local.ok_or(SocketFault::NotBound)?;
    if !local.ip().is_unspecified() {
        return Err(SocketFault::NotWildcard(local.ip()));
    }
    if local.port() != port {
        return Err(SocketFault::WrongPort(local.port()));
    }
    if facts.connected {
        return Err(SocketFault::Connected);
    }
    if kind.domain == libc::AF_INET6 && facts.v6only {
        return Err(SocketFault::V6Only);
    }
    if facts.reuse_port {
        return Err(SocketFault::ReusePort);
    }
    match facts.netns {
        Netns::Same => {}
        Netns::Other => return Err(SocketFault::OtherNetns),
        Netns::Unknown => return Err(SocketFault::NetnsUnknown),
    }
    if facts.others_on_port.0 > 0 {
        return Err(SocketFault::Shared(
            facts.others_on_port.0,
            facts.others_on_port.1,
        ));
    }
    Ok(())
}

/// One line of /proc/net/udp{,6}: the local port, the uid, the inode.
pub(crate) fn parse_proc_udp(text: &str) -> Vec<(u16, u32, u64)> {
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

pub(crate) fn sockopt_int(fd: RawFd, level: i32, opt: i32) -> io::Result<i32> {
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

pub(crate) fn set_sockopt_int(fd: RawFd, level: i32, opt: i32, v: i32) -> io::Result<()> {
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

pub(crate) fn inode_of(fd: RawFd) -> Option<(u64, u64)> {
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
pub(crate) fn netns_from_proc(lines: &[(u16, u32, u64)], readable: bool, ino: u64) -> Netns {
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
pub(crate) fn facts(fd: BorrowedFd<'_>, port: u16) -> SocketFacts {
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
pub(crate) fn adopt(fd: OwnedFd, port: u16) -> Result<UdpSocket, SocketFault> {
    // Clear SO_REUSEADDR before the facts: a squatter that got in before
    // is counted, none can come after.
    let _ = set_sockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 0);
    check(&facts(fd.as_fd(), port), port)?;
    let s = UdpSocket::from(fd);
    prepare(&s);
    Ok(s)
}

/// Binds `0.0.0.0:port` with the large receive buffer.
pub(crate) fn bind(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    prepare(&s);
    Ok(s)
}
