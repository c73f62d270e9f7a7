//! `nao-rs-beacon`: what the robot's beacon service and the operator's app
//! (`nao-rs-app`) share (`docs/app.md`).
//!
//! - [`format`]: the status beacon datagram (robot -> laptop, UDP 7702),
//!   [`format::encode`] / [`format::decode`].
//! - [`auth`]: the network wake datagram (laptop -> robot, UDP 7703), its
//!   HMAC-SHA256 under the team key, [`auth::sign`] / [`auth::verify`];
//!   the beacon's seal under the same key ([`auth::seal_beacon`] /
//!   [`auth::open_beacon`]); the key file ([`auth::TeamKey::read`]).
//! - Here: the stop's sending, shared by the app's STOP / STOP ALL and
//!   usable by `cargo nao-rs stop --broadcast`: the subnet broadcast
//!   address of every IPv4 interface ([`broadcast_addresses`], never
//!   255.255.255.255), the target list ([`stop_targets`], pure) and the
//!   ten datagrams 5 ms apart ([`send_stop`]).
//!
//! - [`Refusal`]: why a codec refused a datagram, the one error shape of
//!   both codecs.
//!
//! The codecs are pure: no I/O, no clock, no panic on any input. Only
//! [`auth::TeamKey::read`], [`interfaces`] and [`send_stop`] touch the
//! system.

pub mod auth;
pub mod format;
/// What the tests of the programs that read beacons or send stops share
/// (this crate's, `nao-rs-app`'s, `cargo-nao-rs`'s): built for them only,
/// with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use nao_kit::clock::{Clock, MonotonicClock};

pub use deathswitch::stop::{PORT as STOP_PORT, PREFIX as STOP_PREFIX};

/// How many stop datagrams one stop sends (`cargo nao-rs stop` too).
pub const STOP_ROUNDS: u32 = 10;

/// The time between two rounds of stop datagrams.
pub const STOP_INTERVAL: Duration = Duration::from_millis(5);

/// A kind of refusal a codec tells apart ([`format::DecodeErrorKind`],
/// [`auth::WakeRefusalKind`]).
pub trait RefusalKind: Copy {
    /// What every message of this kind of refusal starts with
    /// (`"not a beacon"`).
    const WHAT: &'static str;
    /// A short name for logs (`"prefix"`, `"bad-mac"`).
    fn name(self) -> &'static str;
}

/// Why a codec refused a datagram: its [`kind`](Refusal::kind), a value to
/// match on, and a sentence naming the value
/// ([`format::BeaconDecodeError`], [`auth::WakeRefusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal<K> {
    kind: K,
    detail: String,
}

impl<K: RefusalKind> Refusal<K> {
    pub(crate) fn new(kind: K, detail: impl Into<String>) -> Refusal<K> {
        Refusal {
            kind,
            detail: detail.into(),
        }
    }

    /// What kind of refusal.
    pub fn kind(&self) -> K {
        self.kind
    }

    /// What exactly was wrong.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl<K: RefusalKind> std::fmt::Display for Refusal<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", K::WHAT, self.kind.name(), self.detail)
    }
}

impl<K: RefusalKind + std::fmt::Debug> std::error::Error for Refusal<K> {}

/// `s` as a u64 if it is exactly 16 hex digits (either case).
pub(crate) fn parse_hex_u64(s: &str) -> Option<u64> {
    if s.len() != 16 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// One IPv4 address of a network interface, as `getifaddrs` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// The interface's name (`wlan0`).
    pub name: String,
    /// `IFF_UP`.
    pub up: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// `IFF_BROADCAST`: the link has a broadcast address.
    pub broadcast_capable: bool,
    /// The interface's address.
    pub address: Ipv4Addr,
    /// Its netmask.
    pub netmask: Option<Ipv4Addr>,
    /// Its broadcast address, if the kernel names one.
    pub broadcast: Option<Ipv4Addr>,
}

/// The subnet broadcast addresses of `ifaces` (pure): of each interface
/// that is up, not loopback and broadcast capable, its broadcast address
/// (or address | !netmask); never 255.255.255.255 (it leaves only through
/// the default route), 0.0.0.0, or the address itself (a /31 or /32 has
/// no broadcast). Each address once, in the order given.
pub fn subnet_broadcasts(ifaces: &[Interface]) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for i in ifaces {
        if !i.up || i.loopback || !i.broadcast_capable || i.address.is_loopback() {
            continue;
        }
        let Some(mask) = i.netmask else { continue };
        let mask = u32::from(mask);
        if mask.leading_ones() + mask.trailing_zeros() != 32 || mask.leading_ones() >= 31 {
            continue;
        }
        let computed = Ipv4Addr::from(u32::from(i.address) | !mask);
        let b = i.broadcast.unwrap_or(computed);
        if b.is_broadcast() || b.is_unspecified() || b == i.address || out.contains(&b) {
            continue;
        }
        out.push(b);
    }
    out
}

/// The IPv4 addresses of this machine's interfaces (`getifaddrs`).
pub fn interfaces() -> Result<Vec<Interface>, String> {
    use nix::net::if_::InterfaceFlags as F;
    let v4 = |s: Option<&nix::sys::socket::SockaddrStorage>| {
        s.and_then(|s| s.as_sockaddr_in()).map(|a| a.ip())
    };
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("cannot list the network interfaces (getifaddrs): {e}"))?;
    Ok(addrs
        .filter_map(|a| {
            Some(Interface {
                address: v4(a.address.as_ref())?,
                netmask: v4(a.netmask.as_ref()),
                broadcast: v4(a.broadcast.as_ref()),
                up: a.flags.contains(F::IFF_UP),
                loopback: a.flags.contains(F::IFF_LOOPBACK),
                broadcast_capable: a.flags.contains(F::IFF_BROADCAST),
                name: a.interface_name,
            })
        })
        .collect())
}

/// The subnet broadcast address of every IPv4 interface of this machine
/// that is up ([`subnet_broadcasts`] of [`interfaces`]): where STOP ALL
/// and `cargo nao-rs stop --broadcast` send, also without a default route.
pub fn broadcast_addresses() -> Result<Vec<Ipv4Addr>, String> {
    interfaces().map(|i| subnet_broadcasts(&i))
}

/// Where a stop goes (pure): every broadcast address then every unicast
/// address, on `port`, each once; never 255.255.255.255 or an unspecified
/// address.
pub fn stop_targets(broadcasts: &[Ipv4Addr], unicast: &[IpAddr], port: u16) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    let all = broadcasts
        .iter()
        .map(|&b| IpAddr::V4(b))
        .chain(unicast.iter().copied());
    for ip in all {
        let limited = matches!(ip, IpAddr::V4(v) if v.is_broadcast());
        let s = SocketAddr::new(ip, port);
        if !limited && !ip.is_unspecified() && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// What [`send_stop`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// The targets, in sending order.
    pub targets: Vec<SocketAddr>,
    /// Datagrams the kernel took.
    pub sent: u32,
    /// Datagrams refused (`send_to` failed).
    pub failed: u32,
    /// The last failure: its target and error.
    pub last_error: Option<(SocketAddr, String)>,
    /// From the call to the end of the first round (every target sent to
    /// once).
    pub first_round: Duration,
    /// From the call to the last datagram.
    pub done: Duration,
}

/// Sends the stop datagram ([`STOP_PREFIX`], 11 bytes) to every target,
/// `rounds` times, a round every `interval` from the start (absolute, no
/// drift). For broadcast targets `sock` must have `SO_BROADCAST` set. Never
/// waits on anything but its own sleeps; a failed send does not end it.
/// On the real clock ([`send_stop_on`]).
pub fn send_stop(
    sock: &UdpSocket,
    targets: &[SocketAddr],
    rounds: u32,
    interval: Duration,
) -> StopReport {
    send_stop_on(&MonotonicClock, sock, targets, rounds, interval)
}

/// [`send_stop`] with its rounds due on `clock`: round `k` at the start
/// plus `k * interval`, sleeping on the clock (to a virtual clock's
/// deadline, when a test moves it there).
pub fn send_stop_on<C: Clock + ?Sized>(
    clock: &C,
    sock: &UdpSocket,
    targets: &[SocketAddr],
    rounds: u32,
    interval: Duration,
) -> StopReport {
    let start = clock.now_ns();
    let interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    let since = |now: u64| Duration::from_nanos(now.saturating_sub(start));
    let mut r = StopReport {
        targets: targets.to_vec(),
        sent: 0,
        failed: 0,
        last_error: None,
        first_round: Duration::ZERO,
        done: Duration::ZERO,
    };
    for round in 0..rounds {
        if round > 0 {
            clock
                .sleep_until_ns(start.saturating_add(interval_ns.saturating_mul(u64::from(round))));
        }
        for &t in targets {
            match sock.send_to(STOP_PREFIX, t) {
                Ok(_) => r.sent += 1,
                Err(e) => {
                    r.failed += 1;
                    r.last_error = Some((t, e.to_string()));
                }
            }
        }
        if round == 0 {
            r.first_round = since(clock.now_ns());
        }
    }
    r.done = since(clock.now_ns());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(addr: [u8; 4], prefix: u32) -> Interface {
        Interface {
            name: "eth0".into(),
            up: true,
            loopback: false,
            broadcast_capable: true,
            address: Ipv4Addr::from(addr),
            netmask: Some(Ipv4Addr::from(
                u32::MAX.checked_shl(32 - prefix).unwrap_or(0),
            )),
            broadcast: None,
        }
    }

    #[test]
    fn subnet_broadcasts_of_each_interface_never_the_limited_one() {
        let wifi = iface([10, 0, 24, 7], 16);
        let mut wired = iface([192, 168, 13, 2], 24);
        wired.broadcast = Some(Ipv4Addr::new(192, 168, 13, 255));
        let mut lo = iface([127, 0, 0, 1], 8);
        lo.loopback = true;
        let mut down = iface([172, 16, 0, 1], 24);
        down.up = false;
        let mut p2p = iface([10, 9, 0, 1], 24);
        p2p.broadcast_capable = false;
        let slash32 = iface([10, 8, 0, 1], 32);
        let slash31 = iface([10, 8, 1, 0], 31);
        let mut limited = iface([10, 7, 0, 1], 24);
        limited.broadcast = Some(Ipv4Addr::BROADCAST);
        let mut no_mask = iface([10, 6, 0, 1], 24);
        no_mask.netmask = None;
        let mut odd_mask = iface([10, 5, 0, 1], 24);
        odd_mask.netmask = Some(Ipv4Addr::new(255, 0, 255, 0));
        let twice = iface([10, 0, 99, 1], 16);
        let got = subnet_broadcasts(&[
            wifi, wired, lo, down, p2p, slash32, slash31, limited, no_mask, odd_mask, twice,
        ]);
        assert_eq!(
            got,
            [
                Ipv4Addr::new(10, 0, 255, 255),
                Ipv4Addr::new(192, 168, 13, 255)
            ]
        );
    }

    #[test]
    fn stop_targets_are_broadcasts_then_unicast_once_each() {
        let t = stop_targets(
            &[Ipv4Addr::new(10, 0, 255, 255), Ipv4Addr::BROADCAST],
            &[
                "10.0.0.5".parse().unwrap(),
                "10.0.0.5".parse().unwrap(),
                "0.0.0.0".parse().unwrap(),
                "::1".parse().unwrap(),
            ],
            7701,
        );
        let want: Vec<SocketAddr> = vec![
            "10.0.255.255:7701".parse().unwrap(),
            "10.0.0.5:7701".parse().unwrap(),
            "[::1]:7701".parse().unwrap(),
        ];
        assert_eq!(t, want);
    }

    #[test]
    fn the_machine_s_broadcast_list_holds_no_limited_or_loopback_address() {
        // Reads the interfaces, sends nothing.
        let b = broadcast_addresses().unwrap();
        assert!(
            b.iter().all(|a| !a.is_broadcast() && !a.is_loopback()),
            "{b:?}"
        );
    }

    #[test]
    fn send_stop_sends_each_round_to_each_target_on_loopback() {
        let rx1 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        for r in [&rx1, &rx2] {
            r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let targets = [rx1.local_addr().unwrap(), rx2.local_addr().unwrap()];
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = send_stop(&tx, &targets, STOP_ROUNDS, STOP_INTERVAL);
        assert_eq!((r.sent, r.failed), (20, 0));
        assert!(r.first_round <= r.done);
        for rx in [&rx1, &rx2] {
            crate::testing::expect_stops(rx, 10);
        }
    }

    #[test]
    fn send_stop_rounds_are_due_every_interval_on_its_clock() {
        let clock = nao_kit::clock::VirtualClock::new(1_000_000_000);
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = rx.local_addr().unwrap();
        let driver = clock.clone();
        let sender = std::thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            send_stop_on(&clock, &tx, &[target], 3, Duration::from_millis(5))
        });
        let mut b = [0u8; 32];
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            rx.recv(&mut b).unwrap(),
            STOP_PREFIX.len(),
            "round 0 at once"
        );
        // Round 1 is due 5 ms after the start on the clock, however long
        // the machine waits.
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        driver.advance_ns(4_999_999);
        assert!(rx.recv(&mut b).is_err(), "not before 5 ms");
        driver.advance_ns(1);
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(rx.recv(&mut b).is_ok(), "round 1 at 5 ms");
        driver.advance_ns(5_000_000);
        assert!(rx.recv(&mut b).is_ok(), "round 2 at 10 ms");
        let r = sender.join().unwrap();
        assert_eq!((r.sent, r.failed), (3, 0));
        // (The first round's time is read after its sends, when the test
        // may have moved the clock towards 5 ms already.)
        assert!(r.first_round < Duration::from_millis(5), "{r:?}");
        assert_eq!(r.done, Duration::from_millis(10));
    }

    #[test]
    fn a_failed_send_is_counted_and_named_and_the_rest_still_go() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // An IPv6 target from an IPv4 socket fails at once, locally.
        let bad: SocketAddr = "[::1]:9".parse().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = send_stop(&tx, &[bad, rx.local_addr().unwrap()], 2, Duration::ZERO);
        assert_eq!((r.sent, r.failed), (2, 2));
        assert_eq!(r.last_error.as_ref().map(|e| e.0), Some(bad));
        crate::testing::expect_stops(&rx, 2);
    }

    #[test]
    fn hex_nonces_are_exactly_16_digits() {
        assert_eq!(parse_hex_u64("00000000000000ff"), Some(255));
        assert_eq!(parse_hex_u64("FFFFFFFFFFFFFFFF"), Some(u64::MAX));
        assert_eq!(parse_hex_u64("ff"), None);
        assert_eq!(parse_hex_u64("+000000000000000"), None);
        assert_eq!(parse_hex_u64("00000000000000fg"), None);
        assert_eq!(parse_hex_u64("0000000000000000ff"), None);
    }
}
