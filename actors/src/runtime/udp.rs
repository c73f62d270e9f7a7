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
//! it: whoever binds the port first also serves the socket's fd
//! (SCM_RIGHTS) on the abstract unix socket `@nao-rs-udp-stop-PORT`; the
//! other process asks for it there. Both then wait on the same receive
//! queue, and any live process drains it: a hung, stopped or dead process
//! holds no datagram, because there is no queue of its own. The socket
//! lives while either process holds it, so no start, exit, crash or hang of
//! one process leaves the port unread while the other lives. The name is
//! abstract: it vanishes with its last holder (no stale file), and the
//! surviving holder binds it again within one wake ([`WAKE_MS`]). The fd is
//! given only to a process of the same user or to root (SO_PEERCRED).
//!
//! Each wake drains the socket (non-blocking reads until EAGAIN); the
//! receive buffer is [`RCVBUF`] bytes (SO_RCVBUFFORCE where permitted).

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The stop datagram's prefix and port: one place, with the death switch.
pub use deathswitch::stop::{is_stop, PORT as DEFAULT_PORT, PREFIX as STOP_PREFIX};

/// How long the listener waits at most between two looks at its stop flag,
/// its unix socket and its ownership, ms.
pub const WAKE_MS: u64 = 50;
/// How often a listener without the socket retries, ms.
pub const RETRY_MS: u64 = WAKE_MS;
/// The receive buffer asked for: 8 MiB (a flood is drained, not buffered,
/// but a burst while the reader is off the CPU must not overflow).
pub const RCVBUF: usize = 8 << 20;
/// At most this many datagrams are read per wake before the loop looks at
/// its stop flag and its unix socket again (a flood is drained in turns).
pub const DRAIN_MAX: usize = 4096;
/// How long a process waits for the holder to hand the socket over.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_millis(100);

/// The abstract unix socket name on which the holder serves the socket.
pub fn rendezvous_name(port: u16) -> String {
    format!("nao-rs-udp-stop-{port}")
}

/// What the listener shares with the rest of the process.
#[derive(Debug, Default)]
pub struct UdpShared {
    /// True while this process holds no socket for the port: no process of
    /// ours reads it (the other one, if any, would have shared it). The
    /// safety flag "UDP port not owned".
    pub not_owned: AtomicBool,
    /// True while this process holds the port's socket (bound itself or
    /// shared by the other process).
    pub bound: AtomicBool,
    /// Datagrams this process read, any payload, counted once each is
    /// handled (its `trip` called when it was a stop).
    pub datagrams: AtomicU64,
}

/// A change of the listener's ownership of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpEvent {
    /// This process holds the port's socket (bound, or shared by the other).
    Bound,
    /// Neither bind nor hand-over worked; errno of the bind (once per errno).
    BindFailed(i32),
}

fn abstract_addr(port: u16) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(rendezvous_name(port).as_bytes())
}

/// Binds `0.0.0.0:port` with the large receive buffer, non-blocking.
pub fn bind(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    tune(&s);
    Ok(s)
}

fn tune(s: &UdpSocket) {
    let _ = s.set_nonblocking(true);
    let size = RCVBUF as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with a valid fd and a c_int of the right size.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
}

/// Asks the holder of `port`'s socket for it (the abstract unix socket).
/// Only a holder of the same user or root is believed, and only a UDP
/// socket bound to `port` is taken: anything else is refused (EPERM,
/// EINVAL) and the caller binds or asks again.
pub fn ask_holder(port: u16) -> io::Result<UdpSocket> {
    let c = UnixStream::connect_addr(&abstract_addr(port)?)?;
    if !peer_trusted(&c) {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    c.set_read_timeout(Some(HANDOVER_TIMEOUT))?;
    let fd = recv_fd(c.as_raw_fd())?;
    let s = UdpSocket::from(fd);
    if s.local_addr().map(|a| a.port()).ok() != Some(port) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    tune(&s);
    Ok(s)
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

fn send_fd(conn: &UnixStream, fd: RawFd) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(b"S")];
    sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
        .map(|_| ())
        .map_err(io::Error::from)
}

/// True when the peer of `conn` may have the socket: same user, or root.
fn peer_trusted(conn: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let me = nix::unistd::geteuid().as_raw();
    getsockopt(conn, PeerCredentials).is_ok_and(|c| c.uid() == me || c.uid() == 0)
}

/// Runs the listener until one of `stop` is set: holds the port's socket
/// (bound itself or shared by the other process), serves it to the other
/// process, drains it on each wake and calls `trip` for each stop
/// datagram; ignores everything else; never replies.
///
/// `on_event` receives one call per ownership change (not per datagram).
pub fn listen(
    port: u16,
    stop: &[&AtomicBool],
    shared: &UdpShared,
    mut trip: impl FnMut(),
    mut on_event: impl FnMut(UdpEvent),
) {
    let mut socket: Option<UdpSocket> = None;
    let mut server: Option<UnixListener> = None;
    let mut buf = [0u8; 64];
    let mut last_bind_error: Option<i32> = None;
    // Acquire: pairs with the Release that sets a `stop` flag.
    while !stop.iter().any(|f| f.load(Ordering::Acquire)) {
        if socket.is_none() {
            // The other process's socket first (one queue for both), else
            // bind. A bind that fails while the other holds the port is
            // retried on the next wake, by asking again.
            let got = ask_holder(port).or_else(|_| bind(port));
            match got {
                Ok(s) => {
                    socket = Some(s);
                    last_bind_error = None;
                    on_event(UdpEvent::Bound);
                }
                Err(e) => {
                    let code = e.raw_os_error().unwrap_or(0);
                    if last_bind_error != Some(code) {
                        on_event(UdpEvent::BindFailed(code));
                    }
                    last_bind_error = Some(code);
                }
            }
        }
        if socket.is_some() && server.is_none() {
            // Serve the socket unless someone does (fails with EADDRINUSE).
            server = abstract_addr(port)
                .and_then(|a| UnixListener::bind_addr(&a))
                .ok();
            if let Some(l) = &server {
                let _ = l.set_nonblocking(true);
            }
        }
        // Relaxed: status flags, read by the cycle to build its safety status.
        shared.not_owned.store(socket.is_none(), Ordering::Relaxed);
        shared.bound.store(socket.is_some(), Ordering::Relaxed);

        let Some(s) = &socket else {
            std::thread::sleep(Duration::from_millis(RETRY_MS));
            continue;
        };
        let mut fds = [
            libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: server.as_ref().map_or(-1, |l| l.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds (a negative fd is ignored) for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, WAKE_MS as libc::c_int) };
        // Drain: every datagram queued now, on every wake (also on a
        // timeout: the other process may have been woken for a datagram
        // and stopped before it read it). Bounded, so that a flood still
        // lets the loop look at its stop flag and serve the other process.
        for _ in 0..DRAIN_MAX {
            match s.recv_from(&mut buf) {
                Ok((n, _from)) => {
                    if is_stop(&buf[..n]) {
                        trip();
                    }
                    // Relaxed: a statistic.
                    shared.datagrams.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP error or a truncated datagram: go on draining.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if let Some(l) = &server {
            while let Ok((conn, _)) = l.accept() {
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_write_timeout(Some(Duration::from_millis(20)));
                if peer_trusted(&conn) {
                    let _ = send_fd(&conn, s.as_fd().as_raw_fd());
                }
            }
        }
    }
}

/// The listener as a thread: starts it and returns the handle that stops it.
pub struct UdpListener {
    stop: Arc<AtomicBool>,
    shared: Arc<UdpShared>,
    handle: Option<crate::kit::Actor<Option<()>>>,
}

impl UdpListener {
    /// The flags the listener publishes.
    pub fn shared(&self) -> &Arc<UdpShared> {
        &self.shared
    }

    /// Starts the listener as a panic-guarded actor `name` (the runtime's
    /// is `nao-rs-udp`, the guard's `guard-udp`) at `priority`
    /// (SCHED_FIFO). It also ends when `runtime_stop` is set (the process's
    /// stop request). `on_panic` runs if the listener panics.
    pub fn start_named(
        name: &str,
        port: u16,
        runtime_stop: Arc<AtomicBool>,
        priority: Option<u8>,
        trip: impl FnMut() + Send + 'static,
        on_event: impl FnMut(UdpEvent) + Send + 'static,
        on_panic: impl FnOnce() + Send + 'static,
    ) -> io::Result<UdpListener> {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(UdpShared::default());
        // Not owned until the first bind or hand-over.
        shared.not_owned.store(true, Ordering::Relaxed);
        let (s, sh) = (stop.clone(), shared.clone());
        let mut spec = crate::kit::ActorSpec::new(name);
        spec.priority = priority;
        let actor = crate::kit::actor::spawn_guarded(
            spec,
            move || listen(port, &[&s, &runtime_stop], &sh, trip, on_event),
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn free_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn udp_stop_trips_and_anything_else_is_ignored_without_reply() {
        let port = free_port();
        let trips = Arc::new(AtomicU32::new(0));
        let l = counting(port, &trips);
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        wait("bound", || l.shared().bound.load(Ordering::Relaxed));
        let read = || l.shared().datagrams.load(Ordering::Relaxed);
        // Anything else, in batches that the receive buffer always holds:
        // each batch is read, and handled, before the next is sent.
        for batch in 1..=10u64 {
            for _ in 0..100 {
                sender.send_to(b"hello", ("127.0.0.1", port)).unwrap();
            }
            wait("a batch read", || read() == batch * 100);
        }
        sender.send_to(b"NAO-RS STO", ("127.0.0.1", port)).unwrap();
        wait("the short prefix read", || read() == 1001);
        assert_eq!(trips.load(Ordering::SeqCst), 0);
        sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
        wait("the stop read", || read() == 1002);
        assert_eq!(trips.load(Ordering::SeqCst), 1);
        let mut b = [0u8; 16];
        assert!(
            sender.recv_from(&mut b).is_err(),
            "the listener never replies"
        );
        l.stop();
    }

    #[test]
    fn udp_port_not_owned_when_bind_fails_and_no_guard() {
        let holder = UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let (tx, events) = std::sync::mpsc::channel();
        let l = UdpListener::start_named(
            "test-udp",
            port,
            Default::default(),
            None,
            || {},
            move |ev| {
                let _ = tx.send(ev);
            },
            || {},
        )
        .unwrap();
        // The first look at the port: the bind fails, no one serves it.
        let first = events.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(matches!(first, UdpEvent::BindFailed(_)), "{first:?}");
        assert!(l.shared().not_owned.load(Ordering::Relaxed));
        assert!(!l.shared().bound.load(Ordering::Relaxed));
        l.stop();
        // Once per errno: no second event, and never `Bound`.
        let rest: Vec<UdpEvent> = events.try_iter().collect();
        assert!(rest.is_empty(), "{rest:?}");
    }

    fn wait(what: &str, mut f: impl FnMut() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    /// A listener on `port` that counts its trips in `trips`.
    fn counting(port: u16, trips: &Arc<AtomicU32>) -> UdpListener {
        let t = trips.clone();
        UdpListener::start_named(
            "test-udp",
            port,
            Default::default(),
            None,
            move || {
                t.fetch_add(1, Ordering::SeqCst);
            },
            |_| {},
            || {},
        )
        .unwrap()
    }

    /// Two holders (as the runtime and the guard) read one socket: the
    /// second gets the first's socket through the abstract unix socket, and
    /// a stop is read by whichever lives; the survivor serves the socket
    /// to the next one.
    #[test]
    fn udp_both_processes_read_one_socket_and_the_survivor_serves_it() {
        let port = free_port();
        let (ta, tb, tc) = Default::default();
        let (ta, tb, tc): (Arc<AtomicU32>, Arc<AtomicU32>, Arc<AtomicU32>) = (ta, tb, tc);
        let a = counting(port, &ta);
        wait("a bound", || a.shared().bound.load(Ordering::Relaxed));
        let b = counting(port, &tb);
        wait("b shares", || b.shared().bound.load(Ordering::Relaxed));
        assert!(!b.shared().not_owned.load(Ordering::Relaxed));
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.stop();
        // The other holder gone: B still reads the port, no alarm.
        assert!(!b.shared().not_owned.load(Ordering::Relaxed));
        sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
        wait("b trips", || tb.load(Ordering::SeqCst) == 1);
        assert_eq!(ta.load(Ordering::SeqCst), 0);
        // B serves the socket now (it rebinds the name): C shares it.
        let c = counting(port, &tc);
        wait("c shares", || c.shared().bound.load(Ordering::Relaxed));
        b.stop();
        sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
        wait("c trips", || tc.load(Ordering::SeqCst) == 1);
        c.stop();
    }

    /// A holder that hands over something other than a UDP socket bound
    /// to the port is refused: the listener binds or asks again, and never
    /// believes it reads the port when it does not.
    #[test]
    fn udp_a_bogus_holder_is_refused() {
        let port = free_port();
        let name = abstract_addr(port).unwrap();
        let server = UnixListener::bind_addr(&name).unwrap();
        let (done, asked) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let (conn, _) = server.accept().unwrap();
            // Another port's socket.
            let other = UdpSocket::bind("127.0.0.1:0").unwrap();
            send_fd(&conn, other.as_raw_fd()).unwrap();
            // Keeps the connection until the asker has its answer.
            let _ = asked.recv();
        });
        let e = ask_holder(port).unwrap_err();
        done.send(()).unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        t.join().unwrap();
    }
}
