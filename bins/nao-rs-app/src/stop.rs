//! The stop path: STOP (one robot) and STOP ALL. Each stop runs on its own
//! thread with a socket bound at start-up; it takes the address book's
//! lock only to copy it (the beacon receiver holds that lock only to
//! record one address, a few microseconds per beacon; garbage never takes
//! it) and never waits on the fleet, the web server or another stop. The datagrams and timing are
//! `nao_rs_beacon::send_stop`'s: `NAO-RS STOP`, ten rounds 5 ms apart.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nao_rs_beacon::{send_stop, stop_targets, StopReport};
use serde::Serialize;
use tokio::sync::oneshot;

/// The most addresses the book keeps in all. A full book makes room by
/// eviction ([`Book::add`]), never by refusing the newest robot; a
/// spoofing flood cannot grow it without bound, and STOP ALL's broadcast
/// still reaches everyone.
pub const MAX_BOOK: usize = 256;

/// How the subnet broadcast addresses are found: `broadcast_addresses`
/// in the app, a stand-in in tests (which must never broadcast).
pub type Enumerate = fn() -> Result<Vec<Ipv4Addr>, String>;

/// One address of a body id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    ip: IpAddr,
    /// When last heard there (the app's clock, ms).
    last_ms: u64,
    /// A beacon heard there verified under the app's key.
    verified: bool,
}

/// Every address each body id was heard at, at most [`MAX_BOOK`] in all.
#[derive(Debug, Default)]
pub struct Book {
    by_body: BTreeMap<String, Vec<Entry>>,
    total: usize,
    evicted: u64,
    refused: u64,
}

impl Book {
    /// Records `ip` for `body`, heard at `now_ms`, `verified` if its
    /// beacon verified (once verified an address stays so). True when the
    /// address is new for the body. A full book first evicts one address
    /// ([`Book::victim`]); only when every address is a verified robot's
    /// and this one is not is the newcomer left out (counted).
    pub fn add(&mut self, body: &str, ip: IpAddr, now_ms: u64, verified: bool) -> bool {
        if let Some(e) = self
            .by_body
            .get_mut(body)
            .and_then(|v| v.iter_mut().find(|e| e.ip == ip))
        {
            e.last_ms = e.last_ms.max(now_ms);
            e.verified |= verified;
            return false;
        }
        if self.total >= MAX_BOOK {
            match self.victim(verified) {
                Some((b, i)) => {
                    if let Some(v) = self.by_body.get_mut(&b) {
                        v.remove(i);
                        if v.is_empty() {
                            self.by_body.remove(&b);
                        }
                    }
                    self.total -= 1;
                    self.evicted += 1;
                }
                None => {
                    self.refused += 1;
                    return false;
                }
            }
        }
        self.by_body
            .entry(body.to_string())
            .or_default()
            .push(Entry {
                ip,
                last_ms: now_ms,
                verified,
            });
        self.total += 1;
        true
    }

    /// The address a full book gives up for a newcomer (`verified`: the
    /// newcomer's beacon verified), by rank: an unverified address before
    /// a verified one (a verified robot's address goes only for another
    /// verified one), then one of the body id with the most addresses (a
    /// flood under one made-up id from many addresses evicts its own),
    /// then the one heard longest ago.
    fn victim(&self, verified: bool) -> Option<(String, usize)> {
        self.by_body
            .iter()
            .flat_map(|(b, v)| {
                v.iter()
                    .enumerate()
                    .map(move |(i, e)| ((e.verified, std::cmp::Reverse(v.len()), e.last_ms), b, i))
            })
            .filter(|((v, _, _), _, _)| verified || !v)
            .min()
            .map(|(_, b, i)| (b.clone(), i))
    }

    /// The addresses of `body`, if it was heard.
    pub fn of(&self, body: &str) -> Option<Vec<IpAddr>> {
        self.by_body
            .get(body)
            .map(|v| v.iter().map(|e| e.ip).collect())
    }

    /// Every address, each once.
    pub fn all(&self) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        for e in self.by_body.values().flatten() {
            if !out.contains(&e.ip) {
                out.push(e.ip);
            }
        }
        out
    }

    /// Addresses held, evicted for a newcomer, newcomers left out.
    pub fn counts(&self) -> (usize, u64, u64) {
        (self.total, self.evicted, self.refused)
    }
}

/// Which robots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The robot of this body id, at the addresses it was heard at.
    One(String),
    /// Every robot heard, the `--target` addresses and every interface's
    /// subnet broadcast.
    All,
}

/// The datagrams' targets for a stop (pure) and the ones left out because
/// the app runs loopback-only (tests).
pub fn plan(
    unicast: &[IpAddr],
    broadcasts: &[Ipv4Addr],
    extra: &[SocketAddr],
    port: u16,
    loopback_only: bool,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let mut all = stop_targets(broadcasts, unicast, port);
    for e in extra {
        let limited = matches!(e.ip(), IpAddr::V4(v) if v.is_broadcast());
        if !limited && !e.ip().is_unspecified() && !all.contains(e) {
            all.push(*e);
        }
    }
    if loopback_only {
        all.into_iter().partition(|t| t.ip().is_loopback())
    } else {
        (all, Vec::new())
    }
}

/// What a stop did, for the page, the API and a benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct StopOutcome {
    /// `"one"` or `"all"`.
    pub scope: &'static str,
    /// The body id of a STOP.
    pub body: Option<String>,
    /// Every target, in sending order.
    pub targets: Vec<String>,
    /// The subnet broadcast addresses among them.
    pub broadcasts: Vec<String>,
    /// Why the broadcast addresses could not be listed, if so.
    pub broadcast_error: Option<String>,
    /// `"off (--no-broadcast)"`, `"on"`, or `"not for one robot"`.
    pub broadcast: &'static str,
    /// Targets left out: the app runs loopback-only.
    pub skipped: Vec<String>,
    /// Datagrams that left.
    pub sent: u32,
    /// Datagrams refused by the kernel.
    pub failed: u32,
    /// The last refusal.
    pub last_error: Option<String>,
    /// From the request reaching the app to the end of the first round
    /// (every target sent to once), in µs.
    pub click_to_first_round_us: u64,
    /// From the request to the last datagram, in µs.
    pub click_to_done_us: u64,
    /// Unix ns when the first round started (to line up with traces).
    pub first_round_unix_ns: u64,
}

/// Sends stops; cheap to clone.
#[derive(Clone)]
pub struct Stopper {
    sock: Arc<UdpSocket>,
    port: u16,
    broadcast: Option<Enumerate>,
    extra: Arc<Vec<SocketAddr>>,
    loopback_only: bool,
    book: Arc<Mutex<Book>>,
}

impl Stopper {
    /// A stopper sending to `port` (7701) through a socket bound now, with
    /// `SO_BROADCAST` set. `broadcast`: `None` sends no broadcast (the
    /// `--no-broadcast` switch, and every test).
    pub fn new(
        port: u16,
        broadcast: Option<Enumerate>,
        extra: Vec<SocketAddr>,
        loopback_only: bool,
        book: Arc<Mutex<Book>>,
    ) -> Result<Stopper, String> {
        let bind = if loopback_only {
            "127.0.0.1:0"
        } else {
            "0.0.0.0:0"
        };
        let sock = UdpSocket::bind(bind)
            .map_err(|e| format!("cannot open the stop's UDP socket on {bind}: {e}"))?;
        sock.set_broadcast(true)
            .map_err(|e| format!("cannot allow broadcast on the stop's socket: {e}"))?;
        Ok(Stopper {
            sock: Arc::new(sock),
            port,
            broadcast,
            extra: Arc::new(extra),
            loopback_only,
            book,
        })
    }

    /// Whether STOP ALL sends to the subnet broadcasts.
    pub fn broadcasts(&self) -> bool {
        self.broadcast.is_some()
    }

    /// Starts a stop now on its own thread; the outcome arrives on the
    /// receiver. `clicked` is when the request reached the app. A STOP of
    /// a body id never heard is refused: STOP ALL stops it.
    pub fn start(
        &self,
        scope: Scope,
        clicked: Instant,
    ) -> Result<oneshot::Receiver<StopOutcome>, String> {
        let unicast = {
            let book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
            match &scope {
                Scope::One(b) => book.of(b).ok_or_else(|| {
                    format!(
                        "no robot with body id {b:?} was heard: STOP ALL stops every robot, heard or not"
                    )
                })?,
                Scope::All => book.all(),
            }
        };
        let (tx, rx) = oneshot::channel();
        let (me, scope2, unicast2) = (self.clone(), scope.clone(), unicast.clone());
        // Each stop its own thread: a stop never waits behind another's
        // 45 ms. Without a thread (resources exhausted) it runs here.
        let spawned = std::thread::Builder::new()
            .name("stop".into())
            .spawn(move || {
                let _ = tx.send(me.run(&scope2, &unicast2, clicked));
            });
        match spawned {
            Ok(_) => Ok(rx),
            Err(e) => {
                crate::server::say(
                    true,
                    format_args!("no thread for the stop ({e}): sending it from here"),
                );
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(self.run(&scope, &unicast, clicked));
                Ok(rx)
            }
        }
    }

    fn run(&self, scope: &Scope, unicast: &[IpAddr], clicked: Instant) -> StopOutcome {
        let (bcast, berr, bstate) = match (scope, self.broadcast) {
            (Scope::One(_), _) => (Vec::new(), None, "not for one robot"),
            (Scope::All, None) => (Vec::new(), None, "off (--no-broadcast)"),
            (Scope::All, Some(f)) => match f() {
                Ok(b) => (b, None, "on"),
                Err(e) => (Vec::new(), Some(e), "on"),
            },
        };
        let extra: &[SocketAddr] = match scope {
            Scope::All => &self.extra,
            Scope::One(_) => &[],
        };
        let (targets, skipped) = plan(unicast, &bcast, extra, self.port, self.loopback_only);
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let started = Instant::now();
        let r: StopReport = send_stop(
            &self.sock,
            &targets,
            nao_rs_beacon::STOP_ROUNDS,
            nao_rs_beacon::STOP_INTERVAL,
        );
        let before = started.duration_since(clicked);
        let us = |d: Duration| d.as_micros() as u64;
        StopOutcome {
            scope: match scope {
                Scope::One(_) => "one",
                Scope::All => "all",
            },
            body: match scope {
                Scope::One(b) => Some(b.clone()),
                Scope::All => None,
            },
            targets: targets.iter().map(ToString::to_string).collect(),
            broadcasts: bcast.iter().map(ToString::to_string).collect(),
            broadcast_error: berr,
            broadcast: bstate,
            skipped: skipped.iter().map(ToString::to_string).collect(),
            sent: r.sent,
            failed: r.failed,
            last_error: r.last_error.map(|(t, e)| format!("{t}: {e}")),
            click_to_first_round_us: us(before + r.first_round),
            click_to_done_us: us(before + r.done),
            first_round_unix_ns: unix,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn stop_all_plan_is_broadcasts_then_robots_then_extra_targets() {
        let (t, skipped) = plan(
            &[ip("10.0.0.5"), ip("192.168.1.5")],
            &[Ipv4Addr::new(10, 0, 255, 255), Ipv4Addr::BROADCAST],
            &[
                "10.0.0.9:7701".parse().unwrap(),
                "10.0.0.5:7701".parse().unwrap(),
            ],
            7701,
            false,
        );
        let want: Vec<SocketAddr> = [
            "10.0.255.255:7701",
            "10.0.0.5:7701",
            "192.168.1.5:7701",
            "10.0.0.9:7701",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(t, want);
        assert!(skipped.is_empty());
    }

    #[test]
    fn loopback_only_leaves_every_other_address_out() {
        let (t, skipped) = plan(
            &[ip("127.0.0.2"), ip("10.0.0.5")],
            &[Ipv4Addr::new(10, 0, 255, 255)],
            &[],
            7701,
            true,
        );
        assert_eq!(t, ["127.0.0.2:7701".parse::<SocketAddr>().unwrap()]);
        assert_eq!(skipped.len(), 2);
    }

    #[test]
    fn the_book_merges_and_is_bounded() {
        let mut b = Book::default();
        assert!(b.add("B1", ip("10.0.0.5"), 0, true));
        assert!(!b.add("B1", ip("10.0.0.5"), 1, true));
        assert!(b.add("B1", ip("10.0.1.5"), 2, true));
        assert!(b.add("B2", ip("10.0.0.5"), 3, false));
        assert_eq!(b.of("B1").unwrap().len(), 2);
        assert_eq!(b.all(), [ip("10.0.0.5"), ip("10.0.1.5")]);
        assert_eq!(b.of("B3"), None);
        for i in 0..1000u32 {
            b.add(
                &format!("X{i}"),
                IpAddr::from([127, 1, (i >> 8) as u8, i as u8]),
                10 + u64::from(i),
                false,
            );
        }
        assert_eq!(b.counts().0, MAX_BOOK);
        assert!(b.all().len() <= MAX_BOOK);
        // The verified robot stays; the newest made-up id is there too.
        assert_eq!(b.of("B1").unwrap().len(), 2);
        assert!(b.of("X999").is_some());
    }

    /// The attack and its variants, each a row: who fills the
    /// book, then who comes; whether the robot that comes is reachable
    /// and whether the verified robot already there still is.
    #[test]
    fn the_address_book_evicts_unverified_and_oldest_first_never_the_newest() {
        struct Row {
            what: &'static str,
            key: bool,
            many_bodies: bool,
        }
        for row in [
            Row {
                what: "one made-up id from 300 addresses, with a key",
                key: true,
                many_bodies: false,
            },
            Row {
                what: "300 made-up ids, with a key",
                key: true,
                many_bodies: true,
            },
            Row {
                what: "one made-up id from 300 addresses, no key",
                key: false,
                many_bodies: false,
            },
        ] {
            let mut b = Book::default();
            // A real robot heard before the flood, and again during it.
            b.add("REAL1", ip("10.0.0.11"), 0, row.key);
            for i in 0..300u32 {
                let body = if row.many_bodies {
                    format!("FAKE{i}")
                } else {
                    "FAKE".into()
                };
                b.add(
                    &body,
                    IpAddr::from([10, 1, (i >> 8) as u8, i as u8]),
                    1 + u64::from(i),
                    false,
                );
                if i % 50 == 0 {
                    b.add("REAL1", ip("10.0.0.11"), 1 + u64::from(i), row.key);
                }
            }
            // A robot first heard after the flood.
            assert!(
                b.add("REAL2", ip("10.0.0.12"), 1000, row.key),
                "{}",
                row.what
            );
            assert_eq!(b.of("REAL2"), Some(vec![ip("10.0.0.12")]), "{}", row.what);
            if row.key || !row.many_bodies {
                assert_eq!(b.of("REAL1"), Some(vec![ip("10.0.0.11")]), "{}", row.what);
            }
            assert!(b.all().contains(&ip("10.0.0.12")), "{}", row.what);
            assert_eq!(b.counts().0, MAX_BOOK, "{}", row.what);
            assert!(b.counts().1 > 0, "{}", row.what);
        }
        // A book full of verified robots: an unverified newcomer is left
        // out (counted), a verified one evicts the verified address heard
        // longest ago.
        let mut b = Book::default();
        for i in 0..MAX_BOOK as u32 {
            b.add(
                &format!("R{i}"),
                IpAddr::from([10, 2, (i >> 8) as u8, i as u8]),
                u64::from(i) + 1,
                true,
            );
        }
        assert!(!b.add("FAKE", ip("10.9.9.9"), 999, false));
        assert_eq!(b.of("FAKE"), None);
        assert_eq!(b.counts().2, 1);
        assert!(b.add("NEW", ip("10.9.9.8"), 999, true));
        assert_eq!(b.of("R0"), None, "the oldest verified address made room");
        assert!(b.of("NEW").is_some());
    }

    fn loopback_broadcast() -> Result<Vec<Ipv4Addr>, String> {
        // Stands in for the interfaces' broadcasts: loopback only.
        Ok(vec![Ipv4Addr::new(127, 0, 0, 1)])
    }

    #[test]
    fn stop_all_sends_ten_rounds_to_the_book_and_the_injected_broadcasts() {
        let rx_robot = UdpSocket::bind("127.0.0.2:0").unwrap();
        let port = rx_robot.local_addr().unwrap().port();
        // The "broadcast" (127.0.0.1) on the same port: a robot never heard.
        let rx_unheard = UdpSocket::bind(("127.0.0.1", port)).unwrap();
        for r in [&rx_robot, &rx_unheard] {
            r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let book = Arc::new(Mutex::new(Book::default()));
        book.lock().unwrap().add("B1", ip("127.0.0.2"), 0, true);
        let s = Stopper::new(port, Some(loopback_broadcast), vec![], true, book).unwrap();
        let o = s
            .start(Scope::All, Instant::now())
            .unwrap()
            .blocking_recv()
            .unwrap();
        assert_eq!(
            o.targets,
            [format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")]
        );
        assert_eq!((o.sent, o.failed), (20, 0));
        assert_eq!(o.broadcasts, ["127.0.0.1"]);
        assert!(o.click_to_first_round_us <= o.click_to_done_us);
        for r in [&rx_robot, &rx_unheard] {
            nao_rs_beacon::testing::expect_stops(r, 10);
        }
    }

    #[test]
    fn stop_one_goes_to_that_robot_only_and_an_unknown_one_is_refused() {
        let rx1 = UdpSocket::bind("127.0.0.3:0").unwrap();
        let port = rx1.local_addr().unwrap().port();
        let rx2 = UdpSocket::bind(("127.0.0.4", port)).unwrap();
        rx1.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        rx2.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let book = Arc::new(Mutex::new(Book::default()));
        book.lock().unwrap().add("B1", ip("127.0.0.3"), 0, true);
        book.lock().unwrap().add("B2", ip("127.0.0.4"), 0, true);
        let s = Stopper::new(port, Some(loopback_broadcast), vec![], true, book).unwrap();
        let e = s
            .start(Scope::One("B9".into()), Instant::now())
            .unwrap_err();
        assert!(e.contains("STOP ALL"), "{e}");
        let o = s
            .start(Scope::One("B1".into()), Instant::now())
            .unwrap()
            .blocking_recv()
            .unwrap();
        assert_eq!(o.targets, [format!("127.0.0.3:{port}")]);
        assert_eq!(o.broadcast, "not for one robot");
        nao_rs_beacon::testing::expect_stops(&rx1, 10);
        assert!(
            rx2.recv_from(&mut [0u8; 32]).is_err(),
            "robot B2 got a stop"
        );
    }
}
