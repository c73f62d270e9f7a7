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
    /// Shut down for reading (`shutdown(SHUT_RD)`: POLLRDHUP).
    pub read_shut: bool,
    /// Its socket filter (SO_GET_FILTER, SO_LOCK_FILTER).
    pub filter: Filter,
}

/// The socket filter on a socket, as SO_GET_FILTER and SO_LOCK_FILTER tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filter {
    /// None (or one SO_GET_FILTER cannot show, an eBPF program: told by
    /// `locked`, and replaced by ours when not locked).
    None {
        /// SO_LOCK_FILTER is set.
        locked: bool,
    },
    /// Ours: one instruction that keeps every datagram ([`KEEP_ALL`]).
    Ours {
        /// SO_LOCK_FILTER is set.
        locked: bool,
    },
    /// Another filter (it may drop stops): its length in instructions
    /// (0: longer than can be read), or the errno of SO_GET_FILTER.
    Other(i64),
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
    /// Shut down for reading (`shutdown(SHUT_RD)`): no datagram is read.
    ShutDown,
    /// A socket filter that is not ours (its length): it may drop stops.
    Filtered(i64),
    /// A filter SO_GET_FILTER cannot show (an eBPF program), locked so that
    /// ours cannot replace it.
    FilterLocked,
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
            SocketFault::Filtered(n) => n,
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
            SocketFault::ShutDown => write!(f, "shut down for reading (shutdown SHUT_RD): no stop is read"),
            SocketFault::Filtered(n) => write!(
                f,
                "a socket filter that is not ours ({n} instructions, or errno): it may drop stops"
            ),
            SocketFault::FilterLocked => write!(
                f,
                "a locked filter that cannot be read or replaced (SO_ATTACH_BPF): it may drop stops"
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
    if facts.read_shut {
        return Err(SocketFault::ShutDown);
    }
    match facts.filter {
        Filter::Other(n) => return Err(SocketFault::Filtered(n)),
        Filter::None { locked: true } => return Err(SocketFault::FilterLocked),
        Filter::None { locked: false } | Filter::Ours { .. } => {}
    }
    if facts.others_on_port.0 > 0 {
        return Err(SocketFault::Shared(
            facts.others_on_port.0,
            facts.others_on_port.1,
        ));
    }
    Ok(())
}

/// SO_ATTACH_FILTER, and SO_GET_FILTER (the same number), asm-generic.
const SO_ATTACH_FILTER: i32 = 26;
/// SO_LOCK_FILTER, asm-generic.
const SO_LOCK_FILTER: i32 = 44;
/// The classic BPF `ret #k` (BPF_RET | BPF_K).
const BPF_RET_K: u16 = 0x06;
/// Our filter: `ret #0xffffffff`, keep every datagram whole. Attached and
/// locked (SO_LOCK_FILTER) on the socket a holder takes, so no other holder
/// of the fd can attach one that drops stops (or detach ours).
pub(crate) const KEEP_ALL: libc::sock_filter = libc::sock_filter {
    code: BPF_RET_K,
    jt: 0,
    jf: 0,
    k: u32::MAX,
};

/// The filter on `fd` (SO_GET_FILTER counts in instructions, not bytes).
fn filter_of(fd: RawFd) -> Filter {
    let locked = sockopt_int(fd, libc::SOL_SOCKET, SO_LOCK_FILTER).unwrap_or(0) != 0;
    let mut prog = [KEEP_ALL; 4];
    let mut len = prog.len() as libc::socklen_t;
    // SAFETY: SO_GET_FILTER writes at most `len` instructions into `prog`
    // and the count into `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_FILTER,
            prog.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // EINVAL: longer than the buffer.
        return Filter::Other(if e == libc::EINVAL { 0 } else { -i64::from(e) });
    }
    let ours = |f: &libc::sock_filter| {
        (f.code, f.jt, f.jf, f.k) == (KEEP_ALL.code, KEEP_ALL.jt, KEEP_ALL.jf, KEEP_ALL.k)
    };
    match len {
        0 => Filter::None { locked },
        1 if ours(&prog[0]) => Filter::Ours { locked },
        n => Filter::Other(i64::from(n)),
    }
}

/// Attaches [`KEEP_ALL`] (unless it is there) and locks the filter.
pub(crate) fn lock_filter(fd: RawFd) -> io::Result<()> {
    if !matches!(filter_of(fd), Filter::Ours { .. }) {
        let mut prog = [KEEP_ALL];
        let fprog = libc::sock_fprog {
            len: 1,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: a sock_fprog pointing at one instruction, of its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_ATTACH_FILTER,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    set_sockopt_int(fd, libc::SOL_SOCKET, SO_LOCK_FILTER, 1)
}

/// Shut down for reading: POLLRDHUP, without waiting.
fn read_shut(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & libc::POLLRDHUP != 0
}

/// Disconnects a connected datagram socket (connect to AF_UNSPEC).
pub(crate) fn disconnect(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zeroed sockaddr with family AF_UNSPEC, of its size.
    let mut a: libc::sockaddr = unsafe { std::mem::zeroed() };
    a.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    // SAFETY: as above; connect only reads the address.
    let r = unsafe {
        libc::connect(
            fd,
            &a,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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
        read_shut: is_inet && read_shut(raw),
        filter: if is_inet {
            filter_of(raw)
        } else {
            Filter::None { locked: false }
        },
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
    lock_filter(s.as_raw_fd()).map_err(|_| SocketFault::FilterLocked)?;
    Ok(s)
}

/// Binds the port on both families with the large receive buffer: the
/// IPv6 wildcard `[::]:port` with IPV6_V6ONLY cleared (dual-stack: an IPv4
/// stop arrives v4-mapped on the same socket, and no other socket can bind
/// `0.0.0.0:port` or `[::]:port` beside it, as the socket unit's
/// `BindIPv6Only=both`); `0.0.0.0:port` only where the kernel has no IPv6
/// (EAFNOSUPPORT), where no IPv6 stop can come.
pub(crate) fn bind(port: u16) -> io::Result<UdpSocket> {
    let s = match bind_dual_stack(port) {
        Ok(s) => s,
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            UdpSocket::bind(("0.0.0.0", port))?
        }
        Err(e) => return Err(e),
    };
    prepare(&s);
    lock_filter(s.as_raw_fd())?;
    Ok(s)
}

/// `[::]:port`, IPV6_V6ONLY = 0 (whatever `net.ipv6.bindv6only` says),
/// close-on-exec.
fn bind_dual_stack(port: u16) -> io::Result<UdpSocket> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, SockaddrIn6};
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)?;
    set_sockopt_int(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    let addr = SockaddrIn6::from(std::net::SocketAddrV6::new(
        std::net::Ipv6Addr::UNSPECIFIED,
        port,
        0,
        0,
    ));
    nix::sys::socket::bind(fd.as_raw_fd(), &addr).map_err(io::Error::from)?;
    Ok(UdpSocket::from(fd))
}
