//! The stop port's pure rules, table-tested, and the listener in-process.

use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicU32;

// ---- sd_listen_fds ---------------------------------------------------------

#[test]
fn listen_fds_are_taken_only_for_this_pid_and_by_name() {
    use ListenFds::*;
    use ListenFdsError::*;
    let pid = 4242;
    type Row = (
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Result<ListenFds, ListenFdsError>,
    );
    let rows: &[Row] = &[
        // Not started by systemd.
        (None, None, None, Ok(Absent)),
        (Some("4242"), None, None, Ok(Absent)),
        // One socket, with or without its name.
        (Some("4242"), Some("1"), None, Ok(Found { fd: 3, count: 1 })),
        (
            Some("4242"),
            Some("1"),
            Some("nao-rs-stop"),
            Ok(Found { fd: 3, count: 1 }),
        ),
        (
            Some("4242"),
            Some("1"),
            Some("nao-rs-stop.socket"),
            Ok(Found { fd: 3, count: 1 }),
        ),
        // hulk's own unit: its sockets and ours, by name.
        (
            Some("4242"),
            Some("3"),
            Some("hulk:nao-rs-stop:other"),
            Ok(Found { fd: 4, count: 3 }),
        ),
        (Some("4242"), Some("0"), None, Ok(Absent)),
        // Another process's variables (inherited): not ours.
        (Some("1"), Some("1"), None, Err(NotForUs { listen_pid: 1 })),
        (None, Some("1"), None, Err(NotForUs { listen_pid: 0 })),
        (Some("x"), Some("1"), None, Err(NotForUs { listen_pid: 0 })),
        // Malformed.
        (
            Some("4242"),
            Some("one"),
            None,
            Err(Malformed("LISTEN_FDS")),
        ),
        (
            Some("4242"),
            Some("2"),
            Some("nao-rs-stop"),
            Err(NamesCount { fds: 2, names: 1 }),
        ),
        (
            Some("4242"),
            Some("1"),
            Some("web"),
            Err(NotNamed { fds: 1 }),
        ),
        (Some("4242"), Some("2"), None, Err(Ambiguous { fds: 2 })),
    ];
    for (i, (lp, lf, names, want)) in rows.iter().enumerate() {
        assert_eq!(
            parse_listen_fds(pid, *lp, *lf, *names),
            *want,
            "row {i}: LISTEN_PID={lp:?} LISTEN_FDS={lf:?} LISTEN_FDNAMES={names:?}"
        );
    }
}

// ---- the socket check ------------------------------------------------------

fn good_v4(port: u16) -> SocketFacts {
    SocketFacts {
        kind: Ok(SockKind {
            sock_type: libc::SOCK_DGRAM,
            domain: libc::AF_INET,
            protocol: libc::IPPROTO_UDP,
        }),
        local: Some(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))),
        connected: false,
        v6only: false,
        reuse_port: false,
        netns: Netns::Same,
        others_on_port: (0, 0),
        read_shut: false,
        filter: Filter::None { locked: false },
    }
}

#[test]
fn socket_check_takes_only_a_wildcard_udp_socket_on_the_port_in_this_namespace() {
    let p = 7701;
    let v6 = SocketFacts {
        kind: Ok(SockKind {
            domain: libc::AF_INET6,
            ..good_v4(p).kind.unwrap()
        }),
        local: Some(SocketAddr::from((Ipv6Addr::UNSPECIFIED, p))),
        ..good_v4(p)
    };
    let with = |f: &dyn Fn(&mut SocketFacts)| {
        let mut x = good_v4(p);
        f(&mut x);
        x
    };
    let of_kind = |sock_type, domain, protocol| {
        with(&|x| {
            x.kind = Ok(SockKind {
                sock_type,
                domain,
                protocol,
            })
        })
    };
    let rows: Vec<(&str, SocketFacts, Result<(), SocketFault>)> = vec![
        ("systemd's [::] dual-stack", v6, Ok(())),
        ("our own 0.0.0.0", good_v4(p), Ok(())),
        (
            "a pipe",
            with(&|x| x.kind = Err(libc::ENOTSOCK)),
            Err(SocketFault::NotASocket(libc::ENOTSOCK)),
        ),
        (
            "TCP",
            of_kind(libc::SOCK_STREAM, libc::AF_INET, libc::IPPROTO_TCP),
            Err(SocketFault::NotDatagram(libc::SOCK_STREAM)),
        ),
        (
            "a unix datagram socket",
            of_kind(libc::SOCK_DGRAM, libc::AF_UNIX, 0),
            Err(SocketFault::NotInternet(libc::AF_UNIX)),
        ),
        (
            "ICMP datagram",
            of_kind(libc::SOCK_DGRAM, libc::AF_INET, libc::IPPROTO_ICMP),
            Err(SocketFault::NotUdp(libc::IPPROTO_ICMP)),
        ),
        (
            "unbound",
            with(&|x| x.local = None),
            Err(SocketFault::NotBound),
        ),
        (
            "UDP on 127.0.0.2",
            with(&|x| x.local = Some(SocketAddr::from(([127, 0, 0, 2], p)))),
            Err(SocketFault::NotWildcard(IpAddr::from([127, 0, 0, 2]))),
        ),
        (
            "another port",
            with(&|x| x.local = Some(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 7702)))),
            Err(SocketFault::WrongPort(7702)),
        ),
        (
            "connected",
            with(&|x| x.connected = true),
            Err(SocketFault::Connected),
        ),
        (
            "v6only on AF_INET is no matter",
            with(&|x| x.v6only = true),
            Ok(()),
        ),
        (
            "IPv6-only",
            SocketFacts { v6only: true, ..v6 },
            Err(SocketFault::V6Only),
        ),
        (
            "SO_REUSEPORT",
            with(&|x| x.reuse_port = true),
            Err(SocketFault::ReusePort),
        ),
        (
            "another netns",
            with(&|x| x.netns = Netns::Other),
            Err(SocketFault::OtherNetns),
        ),
        (
            "netns unknown",
            with(&|x| x.netns = Netns::Unknown),
            Err(SocketFault::NetnsUnknown),
        ),
        (
            "nobody on the port too",
            with(&|x| x.others_on_port = (1, 65534)),
            Err(SocketFault::Shared(1, 65534)),
        ),
        (
            "our filter, locked",
            with(&|x| x.filter = Filter::Ours { locked: true }),
            Ok(()),
        ),
        (
            "shut down for reading",
            with(&|x| x.read_shut = true),
            Err(SocketFault::ShutDown),
        ),
        (
            "a drop-all filter",
            with(&|x| x.filter = Filter::Other(1)),
            Err(SocketFault::Filtered(1)),
        ),
        (
            "a locked filter that cannot be read (eBPF)",
            with(&|x| x.filter = Filter::None { locked: true }),
            Err(SocketFault::FilterLocked),
        ),
    ];
    for (what, facts, want) in rows {
        assert_eq!(check(&facts, p), want, "{what}: {facts:?}");
        if let Err(f) = want {
            // Every refusal says what was wrong, in words.
            assert!(!f.to_string().is_empty());
        }
    }
}

#[test]
fn proc_net_udp_lines_give_port_uid_and_inode() {
    let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  123: 00000000:1E15 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41234 2 0000000000000000 0\n\
  124: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 999 2 0000000000000000 0\n\
  125: 00000000000000000000000000000000:1E15 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000 65534 0 555 2 0000000000000000 0\n\
  garbage\n";
    assert_eq!(
        parse_proc_udp(text),
        vec![(7701, 0, 41234), (53, 101, 999), (7701, 65534, 555)]
    );
}

/// Without CAP_NET_ADMIN (the services run as a user) the namespace is
/// told by /proc/self/net/udp{,6}, which lists this namespace's sockets
/// only: a socket made in another namespace (e.g. by `unshare -rn`, which
/// needs no privilege) is not among them.
#[test]
fn netns_without_siocgskns_is_told_by_proc_net_udp() {
    type Lines<'a> = &'a [(u16, u32, u64)];
    let lines = [(7701, 0, 41234), (53, 101, 999)];
    let rows: &[(Lines, bool, u64, Netns)] = &[
        (&lines, true, 41234, Netns::Same),
        (&lines, true, 555, Netns::Other),
        (&[], true, 555, Netns::Other),
        (&lines, true, 0, Netns::Other),
        (&[], false, 41234, Netns::Unknown),
    ];
    for (i, &(l, readable, ino, want)) in rows.iter().enumerate() {
        assert_eq!(netns_from_proc(l, readable, ino), want, "row {i}");
    }
}

/// The socket unit asks systemd for the receive buffer the listener raises
/// a socket to (`ReceiveBuffer=` of `config/systemd/nao-rs-stop.socket`,
/// K/M/G in units of 1024): 8 MiB.
#[test]
fn the_socket_units_receive_buffer_is_the_listeners() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/systemd/nao-rs-stop.socket"
    );
    let unit = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let asked = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("ReceiveBuffer="))
        .unwrap_or_else(|| panic!("{path}: no ReceiveBuffer="));
    let (digits, unit_bytes) = match asked.char_indices().last() {
        Some((i, 'K')) => (&asked[..i], 1 << 10),
        Some((i, 'M')) => (&asked[..i], 1 << 20),
        Some((i, 'G')) => (&asked[..i], 1 << 30),
        _ => (asked, 1),
    };
    let bytes = digits.parse::<usize>().unwrap() * unit_bytes;
    assert_eq!(bytes, RCVBUF, "{path}: ReceiveBuffer={asked}");
    assert_eq!(RCVBUF, 8 << 20);
}

#[test]
fn facts_of_real_sockets_are_checked() {
    let own = UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = own.local_addr().unwrap().port();
    assert_eq!(check(&facts(own.as_fd(), port), port), Ok(()));
    assert_eq!(
        check(
            &facts(own.as_fd(), port.wrapping_add(1)),
            port.wrapping_add(1)
        ),
        Err(SocketFault::WrongPort(port))
    );
    let lo = UdpSocket::bind("127.0.0.2:0").unwrap();
    let lp = lo.local_addr().unwrap().port();
    assert_eq!(
        check(&facts(lo.as_fd(), lp), lp),
        Err(SocketFault::NotWildcard(IpAddr::from([127, 0, 0, 2])))
    );
    let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
    let tp = tcp.local_addr().unwrap().port();
    assert_eq!(
        check(&facts(tcp.as_fd(), tp), tp),
        Err(SocketFault::NotDatagram(libc::SOCK_STREAM))
    );
    let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
    assert_eq!(
        check(&facts(a.as_fd(), port), port),
        Err(SocketFault::NotInternet(libc::AF_UNIX))
    );
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    assert_eq!(
        check(&facts(f.as_fd(), port), port),
        Err(SocketFault::NotASocket(libc::ENOTSOCK))
    );
    // A second socket on the port (SO_REUSEADDR on both): shared.
    let a = reuse_addr_socket(0);
    if let Some(a) = a {
        let b = reuse_addr_socket(a.local_addr().unwrap().port()).unwrap();
        let p2 = b.local_addr().unwrap().port();
        assert!(matches!(
            check(&facts(a.as_fd(), p2), p2),
            Err(SocketFault::Shared(1, _))
        ));
    }
}

/// A UDP socket on 0.0.0.0:`port` (0: any) with SO_REUSEADDR set before the bind.
fn reuse_addr_socket(port: u16) -> Option<UdpSocket> {
    // SAFETY: plain socket calls on a new fd, owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: just made.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_sockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).ok()?;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    };
    // SAFETY: bind with a sockaddr_in of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    (r == 0).then(|| UdpSocket::from(fd))
}

#[test]
fn a_held_socket_has_so_reuseaddr_cleared_so_no_one_can_bind_beside_it() {
    let Some(s) = reuse_addr_socket(0) else {
        return;
    };
    let port = s.local_addr().unwrap().port();
    let s = adopt(OwnedFd::from(s), port).unwrap();
    assert_eq!(
        sockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR).unwrap(),
        0
    );
    assert!(
        reuse_addr_socket(port).is_none(),
        "a squatter with SO_REUSEADDR got in"
    );
}

// ---- the loop's rules ------------------------------------------------------

#[test]
fn unread_port_trips_from_the_deadline_on_and_again_until_held() {
    let d = 1_000;
    // (now, holding) -> what
    let rows: &[(u64, bool, Unread)] = &[
        (100, false, Unread::Nothing),
        (1_099, false, Unread::Nothing),
        (1_100, false, Unread::Trip { first: true }),
        (1_150, false, Unread::Trip { first: false }),
        (1_200, true, Unread::Nothing),
        (5_000, true, Unread::Nothing),
    ];
    let mut r = UnreadRule::new(100, d);
    for (i, &(now, holding, want)) in rows.iter().enumerate() {
        assert_eq!(r.step(now, holding), want, "row {i}");
    }
    // Held in time: never a trip.
    let mut r = UnreadRule::new(0, d);
    assert_eq!(r.step(10, true), Unread::Nothing);
    assert_eq!(r.step(2_000, true), Unread::Nothing);
}

#[test]
fn backoff_doubles_to_a_bound_logs_each_errno_once_and_resets() {
    let ms = 1_000_000;
    let mut b = Backoff::default();
    assert!(b.ready(0));
    // (now, errno) -> (log it, ready again at)
    let rows: &[(u64, i32, bool, u64)] = &[
        (0, libc::EMFILE, true, 10 * ms),
        (10 * ms, libc::EMFILE, false, 30 * ms),
        (30 * ms, libc::EMFILE, false, 70 * ms),
        (70 * ms, libc::ENFILE, true, 150 * ms),
    ];
    for (i, &(now, e, log, until)) in rows.iter().enumerate() {
        assert_eq!(b.failed(now, e), log, "row {i}");
        assert!(!b.ready(until - 1) && b.ready(until), "row {i}");
    }
    for _ in 0..20 {
        b.failed(0, libc::ENFILE);
    }
    assert_eq!(b.wait_ns(0), BACKOFF_MAX_NS, "bounded");
    b.succeeded();
    assert!(b.ready(0));
    assert!(b.failed(0, libc::ENFILE), "a new streak is logged again");
}

// ---- the listener, in-process ----------------------------------------------

fn free_port() -> u16 {
    UdpSocket::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

/// A listener on `port` with the hand-over file in `dir`, counting stops
/// in `trips` and unread trips in `unread`, its events in `events`.
struct Counted {
    l: UdpListener,
    stops: Arc<AtomicU32>,
    unread: Arc<AtomicU32>,
    events: Arc<Mutex<Vec<UdpEvent>>>,
}

fn counting(dir: &Path, port: u16) -> Counted {
    counting_with(
        ListenConfig::new(port, handover_path(&dir.join("deathswitch"), port)),
        || {},
    )
}

/// A listener with `cfg` as [`counting`]'s, calling `on_stop` on its own
/// thread before it counts a stop.
fn counting_with(cfg: ListenConfig, mut on_stop: impl FnMut() + Send + 'static) -> Counted {
    let stops = Arc::new(AtomicU32::new(0));
    let unread = Arc::new(AtomicU32::new(0));
    let events = Arc::new(Mutex::new(Vec::new()));
    let (s, u, e) = (stops.clone(), unread.clone(), events.clone());
    let l = UdpListener::start(
        cfg,
        Default::default(),
        move |r| {
            if r == Reason::Udp {
                on_stop();
            }
            let c = if r == Reason::Udp { &s } else { &u };
            c.fetch_add(1, Ordering::SeqCst);
        },
        move |ev| e.lock().unwrap().push(ev),
        |listening| {
            let t = std::thread::Builder::new()
                .name("test-udp".into())
                .spawn(move || listening.run())?;
            Ok(move || t.join().unwrap())
        },
    )
    .unwrap();
    Counted {
        l,
        stops,
        unread,
        events,
    }
}

#[test]
fn udp_stop_trips_and_anything_else_is_ignored_without_reply() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let c = counting(dir.path(), port);
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    wait("bound", || c.l.shared().bound.load(Ordering::Relaxed));
    let read = || c.l.shared().datagrams.load(Ordering::Relaxed);
    for batch in 1..=10u64 {
        for _ in 0..100 {
            sender.send_to(b"hello", ("127.0.0.1", port)).unwrap();
        }
        wait("a batch read", || read() == batch * 100);
    }
    sender.send_to(b"NAO-RS STO", ("127.0.0.1", port)).unwrap();
    wait("the short prefix read", || read() == 1001);
    assert_eq!(c.stops.load(Ordering::SeqCst), 0);
    sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
    wait("the stop read", || read() == 1002);
    assert_eq!(c.stops.load(Ordering::SeqCst), 1);
    let mut b = [0u8; 16];
    assert!(
        sender.recv_from(&mut b).is_err(),
        "the listener never replies"
    );
    assert_eq!(c.unread.load(Ordering::SeqCst), 0);
    c.l.stop();
}

/// The port held by a socket not ours: the bind fails, no one serves it,
/// the flag is up, and from the deadline on `stop-port-unread` is tripped
/// on every retry.
#[test]
fn udp_port_held_by_another_program_trips_stop_port_unread() {
    let dir = tempfile::tempdir().unwrap();
    let holder = UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let c = counting(dir.path(), port);
    wait("two unread trips", || c.unread.load(Ordering::SeqCst) >= 2);
    assert!(c.l.shared().not_owned.load(Ordering::Relaxed));
    assert!(!c.l.shared().bound.load(Ordering::Relaxed));
    let ev = c.events.lock().unwrap().clone();
    assert!(
        matches!(ev[0], UdpEvent::BindFailed(libc::EADDRINUSE)),
        "{ev:?}"
    );
    assert_eq!(
        ev.iter().filter(|e| **e == UdpEvent::Unread).count(),
        1,
        "logged once: {ev:?}"
    );
    // The port comes free: held within a retry, no more trips.
    drop(holder);
    wait("bound", || c.l.shared().bound.load(Ordering::Relaxed));
    let n = c.unread.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.unread.load(Ordering::SeqCst), n);
    c.l.stop();
}

/// Two holders (as the runtime and the guard) read one socket: the second
/// gets the first's socket through the hand-over file, a stop is read by
/// whichever lives, and the survivor serves the socket to the next one.
/// A listener started on `port` while another serves the socket: it holds
/// the socket handed over (within the wait named `what`).
fn sharing(what: &str, dir: &Path, port: u16) -> Counted {
    let x = counting(dir, port);
    wait(what, || x.l.shared().bound.load(Ordering::Relaxed));
    assert!(x
        .events
        .lock()
        .unwrap()
        .contains(&UdpEvent::Bound(Source::Handover)));
    x
}

#[test]
fn udp_both_processes_read_one_socket_and_the_survivor_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let a = counting(dir.path(), port);
    wait("a bound", || a.l.shared().bound.load(Ordering::Relaxed));
    let path = dir.path().join(format!("stop-{port}.sock"));
    wait("a serves", || path.exists());
    let mode = std::fs::symlink_metadata(&path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660, "the hand-over file's mode");
    let b = sharing("b shares", dir.path(), port);
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.l.stop();
    assert!(!b.l.shared().not_owned.load(Ordering::Relaxed));
    sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
    wait("b trips", || b.stops.load(Ordering::SeqCst) == 1);
    assert_eq!(a.stops.load(Ordering::SeqCst), 0);
    // B serves the socket now (A removed its file): C shares it.
    let c = sharing("c shares", dir.path(), port);
    b.l.stop();
    sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
    wait("c trips", || c.stops.load(Ordering::SeqCst) == 1);
    for x in [&a.unread, &b.unread, &c.unread] {
        assert_eq!(x.load(Ordering::SeqCst), 0);
    }
    c.l.stop();
}

/// Serves `fd` on `path` to every asker until `stop`.
fn bogus_server(path: &Path, fd: OwnedFd) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap();
    l.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            if let Ok((c, _)) = l.accept() {
                let _ = send_fd(&c, fd.as_raw_fd());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    (stop, t)
}

/// A hand-over file that serves something other than the port's socket
/// (a TCP socket, a UDP socket on 127.0.0.2, another port's): refused
/// with what was wrong; the listener binds the port itself and serves it
/// in place of the bogus file.
#[test]
fn udp_a_bogus_handover_is_refused_and_replaced() {
    let port = free_port();
    let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
    let lo2 = UdpSocket::bind("127.0.0.2:0").unwrap();
    let other = UdpSocket::bind("0.0.0.0:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let cases: Vec<(OwnedFd, SocketFault)> = vec![
        (
            OwnedFd::from(tcp),
            SocketFault::NotDatagram(libc::SOCK_STREAM),
        ),
        (
            OwnedFd::from(lo2),
            SocketFault::NotWildcard(IpAddr::from([127, 0, 0, 2])),
        ),
        (OwnedFd::from(other), SocketFault::WrongPort(other_port)),
    ];
    for (fd, fault) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("stop-{port}.sock"));
        let (stop, t) = bogus_server(&path, fd);
        match ask(&path, port) {
            Err(AskError::Refused(f)) => assert_eq!(f, fault),
            other => panic!("{other:?}"),
        }
        let c = counting(dir.path(), port);
        wait("bound", || c.l.shared().bound.load(Ordering::Relaxed));
        let ev = c.events.lock().unwrap().clone();
        assert_eq!(ev[0], UdpEvent::Refused(Source::Handover, fault), "{ev:?}");
        assert_eq!(ev[1], UdpEvent::Bound(Source::Bind), "{ev:?}");
        // The bogus file replaced: the next asker gets the real socket.
        wait("the file served by the listener", || {
            ask(&path, port).is_ok()
        });
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
        wait("the stop", || c.stops.load(Ordering::SeqCst) == 1);
        c.l.stop();
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap();
    }
}

// ---- who is handed the socket ---------------------------------------------

#[test]
fn stop_socket_is_handed_only_to_a_verified_holder() {
    use crate::process::ProcessIdentity as Id;
    let me = Id { pid: 10, start: 0 };
    let rt = Id {
        pid: 20,
        start: 500,
    };
    let guard = Id {
        pid: 30,
        start: 400,
    };
    let reg = [rt, guard];
    let nao = 1000;
    let peer = |pid, uid, start_now, maps_page| Peer {
        pid,
        uid,
        start_now,
        maps_page,
    };
    // One row: what it shows, the peer, the page's registered pair, the verdict.
    type Row<'a> = (&'a str, Peer, [Id; 2], Result<(), PeerRefusal>);
    let rows: Vec<Row> = vec![
        (
            "the runtime",
            peer(20, nao, Some(500), Some(true)),
            reg,
            Ok(()),
        ),
        (
            "the guard",
            peer(30, nao, Some(400), Some(true)),
            reg,
            Ok(()),
        ),
        (
            "the guard, maps unreadable: by its identity",
            peer(30, nao, Some(400), None),
            reg,
            Ok(()),
        ),
        ("this process", peer(10, nao, Some(1), None), reg, Ok(())),
        (
            "root, registered",
            peer(20, 0, Some(500), Some(true)),
            reg,
            Ok(()),
        ),
        (
            "another member of the group, registered in the page by itself",
            peer(20, 65534, Some(500), Some(true)),
            reg,
            Err(PeerRefusal::OtherUser(65534)),
        ),
        (
            "another member of the group",
            peer(77, 65534, Some(9), Some(true)),
            reg,
            Err(PeerRefusal::OtherUser(65534)),
        ),
        (
            "the services' user, not registered",
            peer(77, nao, Some(9), Some(true)),
            reg,
            Err(PeerRefusal::NotRegistered(77)),
        ),
        (
            "a reused pid",
            peer(20, nao, Some(501), Some(true)),
            reg,
            Err(PeerRefusal::Reused(20)),
        ),
        (
            "a pid gone",
            peer(20, nao, None, None),
            reg,
            Err(PeerRefusal::Reused(20)),
        ),
        (
            "registered without a start time",
            peer(20, nao, Some(500), Some(true)),
            [Id { pid: 20, start: 0 }, guard],
            Err(PeerRefusal::Reused(20)),
        ),
        (
            "registered, but not mapping the page",
            peer(20, nao, Some(500), Some(false)),
            reg,
            Err(PeerRefusal::NotAHolder(20)),
        ),
        (
            "pid 0 registers nobody",
            peer(0, nao, Some(0), None),
            [Id { pid: 0, start: 0 }; 2],
            Err(PeerRefusal::NotRegistered(0)),
        ),
    ];
    for (what, p, reg, want) in rows {
        assert_eq!(may_receive(&p, me, nao, reg), want, "{what}");
    }
}

// ---- the canary -------------------------------------------------------------

#[test]
fn stop_port_probe_missed_trips_and_only_its_own_nonce_counts() {
    const MS: u64 = 1_000_000;
    let mut c = Canary::new(0, 200 * MS, 400 * MS);
    assert_eq!(c.step(0), Probe::Send);
    c.sent(7, 0);
    assert_eq!(c.step(100 * MS), Probe::Nothing, "one probe out at a time");
    assert!(!c.echoed(8), "a forged nonce does not count");
    assert!(c.echoed(7));
    assert!(!c.echoed(7), "a replay does not count");
    assert_eq!(
        c.step(150 * MS),
        Probe::Nothing,
        "the next one a period after the last"
    );
    assert_eq!(c.step(200 * MS), Probe::Send);
    c.sent(9, 200 * MS);
    assert_eq!(c.step(599 * MS), Probe::Nothing);
    assert_eq!(c.step(600 * MS), Probe::Missed { first: true });
    assert_eq!(c.step(600 * MS), Probe::Send, "again at once");
    c.sent(10, 600 * MS);
    assert!(!c.echoed(9), "the missed one, late, does not count");
    assert_eq!(c.step(1000 * MS), Probe::Missed { first: false });
    assert_eq!(c.step(1000 * MS), Probe::Send);
    c.sent(11, 1000 * MS);
    assert!(c.echoed(11));
    assert_eq!(c.step(1200 * MS), Probe::Send);
    c.sent(12, 1200 * MS);
    assert_eq!(
        c.step(1600 * MS),
        Probe::Missed { first: true },
        "logged again after one came back"
    );
}

// ---- the listener's timers on its clock ------------------------------------

const VMS: u64 = 1_000_000;

/// A listener on `port` in `dir` whose timers run on `clock`; a stop's
/// trip waits on the listener's thread while `gate` is set (`inside` says
/// it waits): the test acts between the loop's watch and its canary.
fn on_virtual_clock(
    dir: &Path,
    port: u16,
    clock: &nao_kit::clock::VirtualClock,
    gate: &Arc<AtomicBool>,
    inside: &Arc<AtomicBool>,
) -> Counted {
    let (g, i) = (gate.clone(), inside.clone());
    counting_with(
        ListenConfig::new(port, handover_path(&dir.join("deathswitch"), port))
            .with_clock(Arc::new(clock.clone())),
        move || {
            i.store(true, Ordering::SeqCst);
            while g.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            i.store(false, Ordering::SeqCst);
        },
    )
}

/// The held socket as the test's own (a second fd of it, handed over by
/// the listener: the same process may have it).
fn held_socket(dir: &Path, port: u16) -> UdpSocket {
    let path = handover_path(&dir.join("deathswitch"), port);
    wait("the hand-over file", || path.exists());
    UdpSocket::from(fetch(&path, Duration::from_secs(2)).expect("the held socket"))
}

/// The watch looks at the held socket every 200 ms of its clock, not of
/// the machine's: a connect stays unfound while the virtual clock stands,
/// however long the test waits, and is found and undone when the clock
/// reaches 200 ms after the last look.
#[test]
fn udp_watch_judges_its_200_ms_on_the_listeners_clock() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let clock = nao_kit::clock::VirtualClock::new(1_000_000 * VMS);
    let (gate, inside) = Default::default();
    let c = on_virtual_clock(dir.path(), port, &clock, &gate, &inside);
    wait("bound", || c.l.shared().bound.load(Ordering::Relaxed));
    let mine = held_socket(dir.path(), port);
    mine.connect(("127.0.0.1", 9)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        c.unread.load(Ordering::SeqCst),
        0,
        "no look on a clock that stands"
    );
    clock.advance_ns(199 * VMS);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(c.unread.load(Ordering::SeqCst), 0, "199 ms: no look yet");
    clock.advance_ns(VMS);
    wait("the watch's trip", || c.unread.load(Ordering::SeqCst) == 1);
    assert!(
        c.events
            .lock()
            .unwrap()
            .contains(&UdpEvent::Tampered(SocketFault::Connected)),
        "{:?}",
        c.events.lock().unwrap()
    );
    assert!(mine.peer_addr().is_err(), "the connect is undone");
    c.l.stop();
}

/// A probe not back within 400 ms of the listener's clock trips
/// `stop-port-unread`: at 399 ms it does not, at 400 ms it does (once
/// logged). The probe is lost for sure: it is sent while the held socket
/// is connected elsewhere, the test acting while the listener's thread
/// waits in a stop's trip, after its watch and before its canary.
#[test]
fn stop_port_probe_missed_judges_its_400_ms_on_the_listeners_clock() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let clock = nao_kit::clock::VirtualClock::new(1_000_000 * VMS);
    let gate = Arc::new(AtomicBool::new(true));
    let inside = Arc::new(AtomicBool::new(false));
    let c = on_virtual_clock(dir.path(), port, &clock, &gate, &inside);
    wait("bound", || c.l.shared().bound.load(Ordering::Relaxed));
    let mine = held_socket(dir.path(), port);
    // The first probe (sent when the socket was held) is back by now.
    std::thread::sleep(Duration::from_millis(100));
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
    wait("the listener in the stop's trip", || {
        inside.load(Ordering::SeqCst)
    });
    // The next probe is due at 200 ms: sent on this pass, after the watch
    // looked (at 0 ms), into a socket that drops it.
    mine.connect(("127.0.0.1", 9)).unwrap();
    clock.advance_ns(200 * VMS);
    gate.store(false, Ordering::SeqCst);
    // The next pass: the watch finds the connect and undoes it (one trip).
    wait("the watch's trip", || c.unread.load(Ordering::SeqCst) == 1);
    clock.advance_ns(399 * VMS);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.unread.load(Ordering::SeqCst), 1, "399 ms: not missed yet");
    clock.advance_ns(VMS);
    wait("the canary's trip", || c.unread.load(Ordering::SeqCst) == 2);
    let ev = c.events.lock().unwrap().clone();
    assert_eq!(
        ev.iter().filter(|e| **e == UdpEvent::ProbeMissed).count(),
        1,
        "{ev:?}"
    );
    assert_eq!(c.stops.load(Ordering::SeqCst), 1);
    c.l.stop();
}

/// A listener that holds no socket trips `stop-port-unread` 1 s after its
/// start on its clock, not before, however long the machine takes.
#[test]
fn udp_unread_port_trips_at_its_1_s_on_the_listeners_clock() {
    let dir = tempfile::tempdir().unwrap();
    let holder = UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let clock = nao_kit::clock::VirtualClock::new(1_000_000 * VMS);
    let (gate, inside) = Default::default();
    let c = on_virtual_clock(dir.path(), port, &clock, &gate, &inside);
    wait("the bind failed", || {
        c.events
            .lock()
            .unwrap()
            .contains(&UdpEvent::BindFailed(libc::EADDRINUSE))
    });
    clock.advance_ns(999 * VMS);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.unread.load(Ordering::SeqCst), 0, "999 ms: not yet");
    clock.advance_ns(VMS);
    wait("the unread trip", || c.unread.load(Ordering::SeqCst) >= 1);
    assert!(c.l.shared().not_owned.load(Ordering::Relaxed));
    c.l.stop();
}
