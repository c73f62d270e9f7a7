//! The UDP stop's listener (`docs/page.md`, "Fixed points"): a datagram
//! whose payload starts with the 11 ASCII bytes `NAO-RS STOP` trips the
//! switch (reason `udp`); anything else is ignored; there is never a reply.
//! The ONE listener of both processes: the runtime and the guard run this
//! same code, each on a thread of its own ([`UdpListener::start`] takes the
//! caller's spawn, so this crate needs no actor kit).
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
//!    (SCM_RIGHTS, `send_fd`) on the unix socket FILE [`handover_path`]
//!    next to the page (`stop-PORT.sock`, mode 0660, the page directory's
//!    group; made in a private directory and renamed into place by
//!    [`crate::socket_file::bind_private`], so it is never reachable with a
//!    wider mode). Only who can enter the page's directory can connect.
//! 3. **Its own bind** of `0.0.0.0:PORT` (the first process, without
//!    systemd).
//!
//! Every socket this process is given (by systemd or the hand-over) is
//! CHECKED before it is used (`check`, a pure rule over `SocketFacts`):
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
//! A listener that holds no checked socket `UNREAD_DEADLINE_NS` after its
//! start trips the switch `stop-port-unread`, and again on every retry
//! (every 50 ms) while it still holds none, so a re-arm does not stick
//! (`UnreadRule`). It raises `udp-port-not-owned` meanwhile. Once held,
//! the socket is never let go.
//!
//! Each wake drains the socket (reads with MSG_DONTWAIT until EAGAIN); the
//! receive buffer is raised to `RCVBUF` bytes (never lowered). An error
//! on the socket or on the hand-over's accept backs off (`Backoff`: 10 ms
//! doubling to 1 s) and is logged once: no loop at real-time priority spins
//! on an error (at a low fd limit `accept` fails with EMFILE while the
//! connection stays queued).
//!
//! The parts: `systemd` (sd_listen_fds without libsystemd), `check` (the
//! socket check and the facts it judges), `handover` (the hand-over file),
//! `rules` (the unread rule and the back-off), and here the loop and its
//! start.

use std::collections::HashSet;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nao_kit::clock::{Clock, MonotonicClock};
use nao_kit::log::Level;

use crate::process::ProcessIdentity;
use crate::{monotonic_ns, Reason, Switch};

use super::is_stop;

mod check;
mod handover;
mod rules;
mod systemd;

pub(crate) use check::{SocketFault, Source};
pub use systemd::{inherit_from_systemd, Inherited, ListenFdsError};

pub use handover::PeerRefusal;

use check::{adopt, bind, check, disconnect, facts, inode_of};
use handover::{ask, fetch, send_fd, serve, verify_peer, AskError, Server};
use rules::{Backoff, Canary, Probe, Unread, UnreadRule};

#[cfg(test)]
use check::{netns_from_proc, parse_proc_udp};
#[cfg(test)]
use check::{set_sockopt_int, sockopt_int, Filter, Netns, SockKind, SocketFacts};
#[cfg(test)]
use handover::{may_receive, Peer};
#[cfg(test)]
use systemd::{parse_listen_fds, ListenFds};

/// How long the listener waits at most between two looks at its stop flag,
/// its hand-over socket and its ownership, ms.
const WAKE_MS: u64 = 50;
/// How often a listener without the socket retries, ms.
const RETRY_MS: u64 = WAKE_MS;
/// The receive buffer asked for: 8 MiB (a flood is drained, not buffered,
/// but a burst while the reader is off the CPU must not overflow). The
/// socket unit asks for the same (`ReceiveBuffer=8M`).
pub(crate) const RCVBUF: usize = 8 << 20;
/// At most this many datagrams are read per wake before the loop looks at
/// its stop flag and its hand-over socket again (a flood is drained in turns).
const DRAIN_MAX: usize = 4096;
/// How long a process waits for a holder to hand the socket over.
const HANDOVER_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a holder waits when it asks who serves the hand-over file.
const PROBE_TIMEOUT: Duration = Duration::from_millis(20);
/// How often a holder looks whether the hand-over file is served (by
/// itself, or by another holder of the same socket), ns.
const SERVE_CHECK_NS: u64 = 200_000_000;
/// How often the held socket is checked again (connected, shut down, a
/// filter not ours, another socket on the port), ns.
const WATCH_NS: u64 = 200_000_000;
/// How often a holder sends itself a probe on the port, ns.
pub(crate) const PROBE_PERIOD_NS: u64 = 200_000_000;
/// How long a probe may take to come back before `stop-port-unread`
/// trips, ns: a probe is read and sent back within a wake of a live
/// holder's listener (50 ms); 400 ms leaves room for a loaded machine and
/// keeps the finding within 1 s (at most a period, the bound and a wake).
pub(crate) const PROBE_BOUND_NS: u64 = 400_000_000;
/// A listener that holds no checked socket this long after its start trips
/// `stop-port-unread`, ns: systemd's socket is there at once, a hand-over
/// within one look at the hand-over file (every 200 ms) of a holder's
/// start, and a free port binds at once, so 1 s is five times what a live
/// holder needs.
pub(crate) const UNREAD_DEADLINE_NS: u64 = 1_000_000_000;
/// The first back-off after an error, ns.
const BACKOFF_MIN_NS: u64 = 10_000_000;
/// The longest back-off, ns.
const BACKOFF_MAX_NS: u64 = 1_000_000_000;
/// The name systemd gives the stop socket (`FileDescriptorName=` of
/// `config/systemd/nao-rs-stop.socket`).
pub(crate) const SYSTEMD_FD_NAME: &str = "nao-rs-stop";

/// The hand-over socket file for a page at `page` and `port`:
/// `stop-PORT.sock` in the page's directory.
pub fn handover_path(page: &Path, port: u16) -> PathBuf {
    page.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(format!("stop-{port}.sock"))
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
    Refused(Source, SocketFault),
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
    /// The held socket was found tampered with (connected, shut down, a
    /// filter not ours, another socket on the port): `stop-port-unread`
    /// tripped (once per fault; tripped again on every look while it lasts).
    Tampered(SocketFault),
    /// A probe did not come back in time: something else takes or blocks
    /// the port's datagrams; `stop-port-unread` tripped (once per episode).
    ProbeMissed,
    /// A process that is no verified holder asked for the socket and got
    /// nothing (once per refusal).
    PeerRefused(PeerRefusal),
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

/// The log line of `e`: the kit's log level, a fixed text, one number
/// (for a real-time event ring: the texts are `'static`; both processes
/// use it).
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
        UdpEvent::Tampered(f) => (
            Level::Error,
            intern(format!(
                "UDP stop socket tampered with: {f}; tripped stop-port-unread"
            )),
            f.value(),
        ),
        UdpEvent::ProbeMissed => (
            Level::Error,
            "UDP stop probe not back within 400 ms: another process takes or blocks the stops; tripped stop-port-unread (port)",
            i64::from(port),
        ),
        UdpEvent::PeerRefused(r) => (
            Level::Warning,
            intern(format!(
                "UDP stop hand-over refused to a process that is no holder: {r}"
            )),
            r.value(),
        ),
    }
}

/// Who may be handed the socket: the processes the page registers (the
/// runtime, the guard) that map the page (and run as this process's user).
#[derive(Clone)]
pub struct Holders {
    /// The page's file (a holder maps it).
    pub page: PathBuf,
    /// The identities the page stores now: the runtime's and the guard's
    /// (pid 0: none).
    pub registered: Arc<dyn Fn() -> [ProcessIdentity; 2] + Send + Sync>,
}

impl Holders {
    /// The holders `switch` registers (its `peek`), `None` for a switch
    /// without a page file.
    pub fn of(switch: Arc<dyn Switch>) -> Option<Holders> {
        let page = switch.path()?.to_path_buf();
        Some(Holders {
            page,
            registered: Arc::new(move || {
                let s = switch.peek();
                [
                    ProcessIdentity {
                        pid: s.driver_pid.unwrap_or(0),
                        start: s.driver_start,
                    },
                    ProcessIdentity {
                        pid: s.guard_pid.unwrap_or(0),
                        start: s.guard_start,
                    },
                ]
            }),
        })
    }
}

impl std::fmt::Debug for Holders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Holders({})", self.page.display())
    }
}

/// Where the listener finds its socket, and the clock of its timers.
#[derive(Clone)]
pub struct ListenConfig {
    /// The stop port.
    pub port: u16,
    /// The hand-over socket file ([`handover_path`]).
    pub handover: PathBuf,
    /// How long the listener may hold no socket before it trips
    /// `stop-port-unread`, ns (`UNREAD_DEADLINE_NS`).
    pub unread_deadline_ns: u64,
    /// Who may be handed the socket besides this process (`None`: no other
    /// process).
    pub holders: Option<Holders>,
    /// The clock its timers are judged on (the unread deadline, the
    /// watch's 200 ms, the canary's period and 400 ms bound, the
    /// back-offs): the real one ([`MonotonicClock`]) unless
    /// [`ListenConfig::with_clock`]. Its waits stay real: `poll` on its
    /// sockets, at most [`WAKE_MS`] at a time.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenConfig")
            .field("port", &self.port)
            .field("handover", &self.handover)
            .field("unread_deadline_ns", &self.unread_deadline_ns)
            .field("holders", &self.holders)
            .finish_non_exhaustive()
    }
}

impl ListenConfig {
    /// The stop on `port`, its hand-over file `handover` ([`handover_path`]
    /// of the page), the deadline `UNREAD_DEADLINE_NS`, handed over to no
    /// other process ([`ListenConfig::with_holders`]), on the real clock
    /// ([`ListenConfig::with_clock`]).
    pub fn new(port: u16, handover: PathBuf) -> ListenConfig {
        ListenConfig {
            port,
            handover,
            unread_deadline_ns: UNREAD_DEADLINE_NS,
            holders: None,
            clock: Arc::new(MonotonicClock),
        }
    }

    /// Its timers judged on `clock` (a [`nao_kit::clock::VirtualClock`]
    /// in tests and the virtual-time world).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ListenConfig {
        self.clock = clock;
        self
    }

    /// Handed over to `holders` too.
    pub fn with_holders(mut self, holders: Option<Holders>) -> ListenConfig {
        self.holders = holders;
        self
    }
}

/// Errors of `e` as an errno (0 when it has none).
fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Tries the sources in order: systemd's socket, the hand-over, its own bind.
fn acquire(
    cfg: &ListenConfig,
    refused: &mut [Option<SocketFault>; 3],
    on_event: &mut impl FnMut(UdpEvent),
) -> Result<(UdpSocket, Source), i32> {
    let mut refuse = |s: Source, f: SocketFault, on_event: &mut dyn FnMut(UdpEvent)| {
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
        Err(AskError::Unreachable) => {}
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

/// The probe's prefix (12 bytes; never a stop: [`is_stop`] is false),
/// then its 16-byte nonce.
const PROBE_PREFIX: &[u8; 12] = b"NAO-RS PROBE";
/// A probe's length.
const PROBE_LEN: usize = PROBE_PREFIX.len() + 16;

/// The nonce of a probe datagram `d`, if it is one.
fn probe_nonce(d: &[u8]) -> Option<u128> {
    if d.len() != PROBE_LEN || !d.starts_with(PROBE_PREFIX) {
        return None;
    }
    let mut n = [0u8; 16];
    n.copy_from_slice(&d[PROBE_PREFIX.len()..]);
    Some(u128::from_le_bytes(n))
}

/// A fresh nonce nobody can predict (getrandom; no other process sees it
/// before the probe is read).
fn fresh_nonce() -> u128 {
    let mut n = [0u8; 16];
    // SAFETY: getrandom writes at most 16 bytes into the buffer.
    let got = unsafe { libc::getrandom(n.as_mut_ptr().cast(), n.len(), libc::GRND_NONBLOCK) };
    if got != n.len() as isize {
        // Early at boot the pool may not be ready: the time and the pid
        // mixed (guessable in principle; a miss still trips).
        let t = u128::from(monotonic_ns()) ^ (u128::from(std::process::id()) << 64);
        return t.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    }
    u128::from_le_bytes(n)
}

/// The canary's own socket: bound to loopback, connected to the port on
/// loopback, so only a datagram from the port itself (a holder's echo) is
/// read on it.
fn prober(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("127.0.0.1", 0))?;
    s.connect(("127.0.0.1", port))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// The held socket's state the loop keeps.
struct Held {
    socket: UdpSocket,
    ino: u64,
    prober: Option<UdpSocket>,
    /// The port the socket holds (what the watch checks).
    port: u16,
    canary: Canary,
}

/// What the watch found wrong with the held socket.
enum Watch {
    /// Nothing.
    Fine,
    /// A fault that was undone (a connect): trip once.
    Repaired(SocketFault),
    /// A fault that lasts while the socket is held (another socket on the
    /// port): trip on every look.
    Lasting(SocketFault),
    /// The socket cannot read stops any more (shut down, a filter that is
    /// not ours): trip, let it go, find the port again.
    Lost(SocketFault),
}

/// The held socket checked again (every [`WATCH_NS`]): the facts and the
/// check of a socket given, plus its filter locked.
fn watch(s: &UdpSocket, port: u16) -> Watch {
    let f = facts(s.as_fd(), port);
    // A connect also binds the wildcard socket to one local address; the
    // disconnect gives the wildcard back. Undone first, then judged.
    let repaired = f.connected && disconnect(s.as_raw_fd()).is_ok();
    let f = if repaired { facts(s.as_fd(), port) } else { f };
    match check(&f, port) {
        Ok(()) if repaired => Watch::Repaired(SocketFault::Connected),
        Ok(()) => Watch::Fine,
        Err(f @ SocketFault::Shared(..)) => Watch::Lasting(f),
        Err(f) => Watch::Lost(f),
    }
}

/// Runs the listener until one of `stop` is set: holds the port's socket
/// (systemd's, handed over, or bound itself: [`acquire`]), serves it on the
/// hand-over file to verified holders only, drains it on each wake and
/// calls `trip(Reason::Udp)` for each stop datagram, and
/// `trip(Reason::StopPortUnread)` while it holds no socket past the
/// deadline ([`UnreadRule`]), while the held socket is found tampered with
/// ([`watch`]) and when a probe does not come back ([`Canary`]); ignores
/// everything else; never replies (but to a probe from loopback).
///
/// `on_event` receives one call per change (not per datagram).
fn listen(
    cfg: &ListenConfig,
    stop: &[&AtomicBool],
    shared: &UdpShared,
    mut trip: impl FnMut(Reason),
    mut on_event: impl FnMut(UdpEvent),
) {
    let mut held: Option<Held> = None;
    let mut server: Option<Server> = None;
    let mut next_serve_check = 0u64;
    let mut next_watch = 0u64;
    let mut serve_errno: Option<i32> = None;
    let mut refused: [Option<SocketFault>; 3] = [None; 3];
    let mut last_bind_error: Option<i32> = None;
    let mut last_tamper: Option<SocketFault> = None;
    let mut last_peer: Option<PeerRefusal> = None;
    let clock = &*cfg.clock;
    let mut unread = UnreadRule::new(clock.now_ns(), cfg.unread_deadline_ns);
    let mut read_backoff = Backoff::default();
    let mut accept_backoff = Backoff::default();
    let mut buf = [0u8; 64];
    if let Inherited::Error(e) = inherit_from_systemd() {
        on_event(UdpEvent::ListenFds(*e));
    }
    // Acquire: pairs with the Release that sets a `stop` flag.
    while !stop.iter().any(|f| f.load(Ordering::Acquire)) {
        if held.is_none() {
            match acquire(cfg, &mut refused, &mut on_event) {
                Ok((s, source)) => {
                    let now = clock.now_ns();
                    // The port the socket holds: `cfg.port`, or with
                    // `cfg.port` 0 (tests) the one the kernel chose. The
                    // watch judges it and the probes go to it.
                    let port = match cfg.port {
                        0 => s.local_addr().map_or(0, |a| a.port()),
                        p => p,
                    };
                    held = Some(Held {
                        ino: inode_of(s.as_raw_fd()).map_or(0, |(_, i)| i),
                        prober: prober(port).ok(),
                        port,
                        socket: s,
                        canary: Canary::new(now, PROBE_PERIOD_NS, PROBE_BOUND_NS),
                    });
                    next_watch = now + WATCH_NS;
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
        shared.not_owned.store(held.is_none(), Ordering::Relaxed);
        shared.bound.store(held.is_some(), Ordering::Relaxed);
        let now = clock.now_ns();
        if let Unread::Trip { first } = unread.step(now, held.is_some()) {
            trip(Reason::StopPortUnread);
            if first {
                on_event(UdpEvent::Unread);
            }
        }

        let Some(h) = &mut held else {
            std::thread::sleep(Duration::from_millis(RETRY_MS));
            continue;
        };
        if now >= next_watch {
            next_watch = now + WATCH_NS;
            let fault = match watch(&h.socket, h.port) {
                Watch::Fine => None,
                Watch::Repaired(f) | Watch::Lasting(f) => Some((f, false)),
                Watch::Lost(f) => Some((f, true)),
            };
            match fault {
                None => last_tamper = None,
                Some((f, lost)) => {
                    trip(Reason::StopPortUnread);
                    if last_tamper != Some(f) {
                        on_event(UdpEvent::Tampered(f));
                    }
                    last_tamper = Some(f);
                    if lost {
                        held = None;
                        server = None;
                        continue;
                    }
                }
            }
        }
        if now >= next_serve_check {
            maintain(&mut server, cfg, h.ino, &mut serve_errno, &mut on_event);
            next_serve_check = now + SERVE_CHECK_NS;
        }
        let s = &h.socket;
        let read_ready = read_backoff.ready(now);
        let accept_ready = accept_backoff.ready(now);
        let mut fds = [
            libc::pollfd {
                fd: if read_ready { s.as_raw_fd() } else { -1 },
                events: libc::POLLIN | libc::POLLRDHUP,
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
            libc::pollfd {
                fd: h.prober.as_ref().map_or(-1, |p| p.as_raw_fd()),
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
        // SAFETY: three valid pollfds (a negative fd is ignored) for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout_ms as libc::c_int) };
        if fds[0].revents & libc::POLLRDHUP != 0 {
            // shutdown(SHUT_RD): poll would wake at once, for ever, and no
            // datagram is read again. Let it go (never polled again).
            trip(Reason::StopPortUnread);
            if last_tamper != Some(SocketFault::ShutDown) {
                on_event(UdpEvent::Tampered(SocketFault::ShutDown));
            }
            last_tamper = Some(SocketFault::ShutDown);
            held = None;
            server = None;
            continue;
        }
        // Drain: every datagram queued now, on every wake (also on a
        // timeout: the other process may have been woken for a datagram
        // and stopped before it read it). Bounded, so that a flood still
        // lets the loop look at its stop flag and serve the other process.
        if read_backoff.ready(clock.now_ns()) {
            for _ in 0..DRAIN_MAX {
                // SAFETY: zeroed storage for the sender's address.
                let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                let mut from_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                // SAFETY: recvfrom into a buffer of the length given and an
                // address storage of its size; MSG_DONTWAIT leaves the shared
                // file description's flags alone.
                let n = unsafe {
                    libc::recvfrom(
                        s.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                        (&mut from as *mut libc::sockaddr_storage).cast(),
                        &mut from_len,
                    )
                };
                if n >= 0 {
                    read_backoff.succeeded();
                    let d = &buf[..(n as usize).min(buf.len())];
                    if let Some(nonce) = probe_nonce(d) {
                        // Ours: back. Another holder's (the other process):
                        // sent back to its prober, on loopback only.
                        if !h.canary.echoed(nonce) && from_loopback(&from) {
                            // SAFETY: sendto of the bytes read, to the
                            // address the kernel gave, of its length.
                            unsafe {
                                libc::sendto(
                                    s.as_raw_fd(),
                                    d.as_ptr().cast(),
                                    d.len(),
                                    libc::MSG_DONTWAIT,
                                    (&from as *const libc::sockaddr_storage).cast(),
                                    from_len,
                                )
                            };
                        }
                        continue;
                    }
                    if is_stop(d) {
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
                        if read_backoff.failed(clock.now_ns(), errno(&e)) {
                            on_event(UdpEvent::Backoff(errno(&e)));
                        }
                        break;
                    }
                }
            }
        }
        // Echoes on the prober: only from the port (it is connected), and
        // only the nonce out counts.
        if let Some(p) = &h.prober {
            let mut e = [0u8; PROBE_LEN + 1];
            for _ in 0..16 {
                match p.recv(&mut e) {
                    Ok(n) => {
                        if let Some(nonce) = probe_nonce(&e[..n]) {
                            h.canary.echoed(nonce);
                        }
                    }
                    // Empty, or an ICMP error (the port was closed): the
                    // probe is missed in its time.
                    Err(_) => break,
                }
            }
        }
        // The canary, judged after every echo that came was read (a
        // process stopped for a while finds its echo queued): a probe due
        // is sent, a probe missed trips.
        let now = clock.now_ns();
        match h.canary.step(now) {
            Probe::Nothing => {}
            Probe::Send => {
                let nonce = fresh_nonce();
                if let Some(p) = &h.prober {
                    let mut d = [0u8; PROBE_LEN];
                    d[..PROBE_PREFIX.len()].copy_from_slice(PROBE_PREFIX);
                    d[PROBE_PREFIX.len()..].copy_from_slice(&nonce.to_le_bytes());
                    let _ = p.send(&d);
                }
                // Counted as sent either way: a probe that cannot be sent
                // is a probe that does not come back.
                h.canary.sent(nonce, now);
            }
            Probe::Missed { first } => {
                trip(Reason::StopPortUnread);
                if first {
                    on_event(UdpEvent::ProbeMissed);
                }
            }
        }
        if let (Some(l), true) = (&server, accept_backoff.ready(clock.now_ns())) {
            loop {
                match l.listener.accept() {
                    Ok((conn, _)) => {
                        accept_backoff.succeeded();
                        // Only a verified holder gets the fd; anyone else
                        // gets the connection closed.
                        match verify_peer(&conn, cfg.holders.as_ref()) {
                            Ok(()) => {
                                let _ = conn.set_nonblocking(false);
                                let _ = conn.set_write_timeout(Some(Duration::from_millis(20)));
                                let _ = send_fd(&conn, s.as_fd().as_raw_fd());
                            }
                            Err(r) => {
                                if last_peer != Some(r) {
                                    on_event(UdpEvent::PeerRefused(r));
                                }
                                last_peer = Some(r);
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE at a low fd limit: the connection stays
                        // queued and poll would wake at once, forever.
                        if accept_backoff.failed(clock.now_ns(), errno(&e)) {
                            on_event(UdpEvent::Backoff(errno(&e)));
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// Whether the address `a` (from recvfrom) is a loopback one: 127/8, ::1,
/// or 127/8 mapped into IPv6.
fn from_loopback(a: &libc::sockaddr_storage) -> bool {
    match i32::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let v4 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)).is_loopback()
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let v6 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr)
                .to_canonical()
                .is_loopback()
        }
        _ => false,
    }
}

/// The listener's body, handed to the caller's spawn by
/// [`UdpListener::start`]: [`Listening::run`] on the thread the caller made
/// (the runtime's and the guard's are real-time actors of their kit).
pub struct Listening<T, E> {
    cfg: ListenConfig,
    stop: Arc<AtomicBool>,
    also_stop: Arc<AtomicBool>,
    shared: Arc<UdpShared>,
    trip: T,
    on_event: E,
}

impl<T: FnMut(Reason), E: FnMut(UdpEvent)> Listening<T, E> {
    /// Runs the listener on this thread until it is stopped
    /// ([`UdpListener::stop`], or the process's stop flag given to
    /// [`UdpListener::start`]).
    pub fn run(self) {
        let Listening {
            cfg,
            stop,
            also_stop,
            shared,
            trip,
            on_event,
        } = self;
        listen(&cfg, &[&stop, &also_stop], &shared, trip, on_event);
    }
}

/// The listener on a thread: the handle that reads its flags and stops it.
pub struct UdpListener {
    stop: Arc<AtomicBool>,
    shared: Arc<UdpShared>,
    join: Option<Box<dyn FnOnce() + Send>>,
}

impl UdpListener {
    /// Starts the listener of `cfg` on a thread the caller makes: `spawn`
    /// is given the [`Listening`] to run there and returns the function
    /// that waits for that thread to end (a panic in it is the caller's to
    /// catch and report: the runtime and the guard trip `fault`). Takes
    /// systemd's socket first ([`inherit_from_systemd`]), on the caller's
    /// thread. The listener also ends when `also_stop` is set (the
    /// process's stop request). `trip` is called with `Reason::Udp` for
    /// each stop datagram and `Reason::StopPortUnread` while the port is
    /// unread; `on_event` once per change ([`UdpEvent`], [`describe`]).
    ///
    /// # Errors
    ///
    /// What `spawn` returns (no thread).
    pub fn start<T, E, S, J>(
        cfg: ListenConfig,
        also_stop: Arc<AtomicBool>,
        trip: T,
        on_event: E,
        spawn: S,
    ) -> io::Result<UdpListener>
    where
        T: FnMut(Reason) + Send + 'static,
        E: FnMut(UdpEvent) + Send + 'static,
        S: FnOnce(Listening<T, E>) -> io::Result<J>,
        J: FnOnce() + Send + 'static,
    {
        // Here, on the caller's thread, not in the listener's.
        inherit_from_systemd();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(UdpShared::default());
        // Relaxed: a status flag. Not owned until the first socket is held.
        shared.not_owned.store(true, Ordering::Relaxed);
        let join = spawn(Listening {
            cfg,
            stop: stop.clone(),
            also_stop,
            shared: shared.clone(),
            trip,
            on_event,
        })?;
        Ok(UdpListener {
            stop,
            shared,
            join: Some(Box::new(join)),
        })
    }

    /// The flags the listener publishes.
    pub fn shared(&self) -> &Arc<UdpShared> {
        &self.shared
    }

    /// Stops the listener (within 50 ms) and waits for it.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        // Release: pairs with the Acquire in `listen`.
        self.stop.store(true, Ordering::Release);
        if let Some(join) = self.join.take() {
            join();
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
