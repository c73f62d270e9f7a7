//! The app end to end on loopback: the binary started with loopback ports,
//! beacons sent to it from 127.0.0.x, its API and events read over HTTP,
//! its stops and wakes received on loopback sockets. Every app here runs
//! with `--no-broadcast --loopback-only`: nothing leaves this machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nao_rs_beacon::auth::{seal_beacon, verify, TeamKey, WakeDatagram};
use nao_rs_beacon::format::{encode, Beacon, Motion, SwitchPosition};
use serde_json::Value;

struct App {
    child: Child,
    http: SocketAddr,
    beacon: SocketAddr,
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn app(extra: &[&str]) -> App {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nao-rs-app"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--beacon-bind",
            "127.0.0.1",
            "--beacon-port",
            "0",
            "--no-broadcast",
            "--loopback-only",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    // The rest of its output is read and dropped; the app survives a
    // closed stdout too (`say`).
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    // "nao-rs-app: page http://127.0.0.1:P/ beacons udp 127.0.0.1:Q"
    let http = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no page address in {line:?}"))
        .parse()
        .unwrap();
    let beacon = line
        .split("udp ")
        .nth(1)
        .unwrap_or_else(|| panic!("no beacon address in {line:?}"))
        .trim()
        .parse()
        .unwrap();
    App {
        child,
        http,
        beacon,
    }
}

fn request(a: &App, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(a.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n");
    if !headers.iter().any(|h| h.starts_with("Host:")) {
        req += &format!("Host: {}\r\n", a.http);
    }
    for h in headers {
        req += h;
        req += "\r\n";
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (code, body)
}

fn json(a: &App, method: &str, path: &str, headers: &[&str]) -> (u16, Value) {
    let (c, b) = request(a, method, path, headers);
    (
        c,
        serde_json::from_str(&b).unwrap_or_else(|e| panic!("{e}: {b:?}")),
    )
}

fn robots(a: &App) -> Vec<Value> {
    let (c, v) = json(a, "GET", "/api/robots", &[]);
    assert_eq!(c, 200);
    v["robots"].as_array().unwrap().clone()
}

/// Polls /api/robots until `f` holds (10 s at most).
fn until(a: &App, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let r = robots(a);
        if f(&r) {
            return r;
        }
        assert!(Instant::now() < end, "{what}: never; last {r:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The sample beacon as robot `name` with body id `body` and sequence
/// number `seq`, armed at trip count 5.
fn beacon(body: &str, name: &str, seq: u64) -> Beacon {
    Beacon {
        seq,
        name: name.into(),
        body_id: body.into(),
        trip_count: 5,
        wake_generation: Some(5),
        nonce: 0xfeed_0000_0000_0001,
        ..nao_rs_beacon::testing::sample()
    }
}

/// A robot on loopback address `ip`: sends beacons from `ip` (sealed when
/// it has a key), hears stops on `ip:stop_port`.
struct Robot {
    tx: UdpSocket,
    stop: UdpSocket,
    seal: Option<(TeamKey, u64)>,
}

impl Robot {
    fn new(ip: &str, stop_port: u16) -> Robot {
        let stop = UdpSocket::bind((ip, stop_port)).unwrap();
        stop.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Robot {
            tx: UdpSocket::bind((ip, 0)).unwrap(),
            stop,
            seal: None,
        }
    }

    /// A robot whose beacon service holds `key` and started with nonce
    /// `start`.
    fn sealed(ip: &str, stop_port: u16, key: &std::path::Path, start: u64) -> Robot {
        Robot {
            seal: Some((TeamKey::read(key).unwrap(), start)),
            ..Robot::new(ip, stop_port)
        }
    }

    fn datagram(&self, b: &Beacon) -> Vec<u8> {
        match &self.seal {
            Some((k, start)) => seal_beacon(k, *start, &encode(b)),
            None => encode(b),
        }
    }

    fn send(&self, a: &App, b: &Beacon) {
        self.tx.send_to(&self.datagram(b), a.beacon).unwrap();
    }

    /// Stop datagrams heard within `wait` of the last one.
    fn stops(&self, wait: Duration) -> usize {
        self.stop.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 64];
        let mut n = 0;
        while let Ok((len, _)) = self.stop.recv_from(&mut buf) {
            assert_eq!(&buf[..len], b"NAO-RS STOP");
            n += 1;
        }
        n
    }
}

fn free_port(ip: &str) -> u16 {
    UdpSocket::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn beacons_make_cards_seen_in_the_api_and_the_events() {
    let a = app(&[]);
    let r = Robot::new("127.0.0.11", free_port("127.0.0.11"));
    r.send(&a, &beacon("BODY11", "nao11", 1));
    let got = until(&a, "a card", |r| r.len() == 1);
    let card = &got[0];
    assert_eq!(card["body"], "BODY11");
    assert_eq!(card["addrs"][0], "127.0.0.11");
    let c = &card["claimants"][0];
    assert_eq!(c["name"], "nao11");
    assert_eq!(c["link"], "good");
    assert_eq!(c["state"]["code"], "armed");
    assert_eq!(c["state"]["words"], "armed and moving");
    assert_eq!(c["beacon"]["nonce"], "feed000000000001");
    assert_eq!(card["events"][0]["kind"], "first");
    assert_eq!(card["wake"]["offered"], false);

    // The events stream carries the next change: a trip.
    let mut s = TcpStream::connect(a.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: {}\r\n\r\n", a.http).unwrap();
    let mut b = beacon("BODY11", "nao11", 2);
    b.switch = SwitchPosition::Tripped;
    b.reason = Some("chest-button".into());
    b.trip_count = 6;
    b.wake_generation = None;
    b.motion = Motion::LimpTripped;
    r.send(&a, &b);
    let mut seen = String::new();
    let mut buf = [0u8; 65536];
    let end = Instant::now() + Duration::from_secs(10);
    while !seen.contains("tripped: chest-button (trip 6)") {
        assert!(Instant::now() < end, "no trip in the events: {seen}");
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "events ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    assert!(seen.contains("event: fleet"), "{seen}");
}

#[test]
fn the_page_is_served_self_contained() {
    let a = app(&[]);
    let (code, page) = request(&a, "GET", "/", &[]);
    assert_eq!(code, 200);
    assert!(page.contains("STOP ALL"), "{page}");
    let (code, _) = request(&a, "GET", "/api/robots", &["Host: evil.example"]);
    assert_eq!(code, 403, "a re-bound DNS name is refused");
}

#[test]
fn stop_goes_to_one_robot_and_stop_all_to_every_robot_and_target() {
    let port = free_port("127.0.0.21");
    let r1 = Robot::new("127.0.0.21", port);
    let r2 = Robot::new("127.0.0.22", port);
    // Never heard: reached through --target only.
    let r3 = Robot::new("127.0.0.23", port);
    let p = port.to_string();
    let a = app(&["--stop-port", &p, "--target", "127.0.0.23"]);
    r1.send(&a, &beacon("B21", "nao21", 1));
    r2.send(&a, &beacon("B22", "nao22", 1));
    until(&a, "two cards", |r| r.len() == 2);

    let (code, o) = json(&a, "POST", "/api/stop/B21", &[]);
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["sent"], 10);
    assert_eq!(o["targets"][0], format!("127.0.0.21:{port}"));
    assert_eq!(r1.stops(Duration::from_millis(500)), 10);
    assert_eq!(r2.stops(Duration::from_millis(300)), 0);
    assert_eq!(r3.stops(Duration::from_millis(10)), 0);

    let (code, o) = json(&a, "POST", "/api/stop/NOBODY", &[]);
    assert_eq!(code, 404);
    assert!(o["error"].as_str().unwrap().contains("STOP ALL"), "{o}");

    let (code, o) = json(&a, "POST", "/api/stop-all", &[]);
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["sent"], 30, "{o}");
    assert_eq!(o["broadcast"], "off (--no-broadcast)");
    assert!(
        o["click_to_first_round_us"].as_u64().unwrap() <= o["click_to_done_us"].as_u64().unwrap()
    );
    for r in [&r1, &r2, &r3] {
        assert_eq!(r.stops(Duration::from_millis(500)), 10);
    }
    let cards = robots(&a);
    assert!(
        cards.iter().all(|c| c["events"][0]["kind"] == "stop-sent"),
        "{cards:?}"
    );
}

fn key_file(dir: &std::path::Path, byte: u8) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(format!("team{byte}.key"));
    std::fs::write(&p, [byte; 32]).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
fn wake_is_offered_only_when_limp_waiting_and_verifies_on_the_robot() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), 3);
    let wake_port = free_port("127.0.0.31");
    let wake_rx = UdpSocket::bind(("127.0.0.31", wake_port)).unwrap();
    wake_rx
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let a = app(&[
        "--key",
        key.to_str().unwrap(),
        "--wake-port",
        &wake_port.to_string(),
    ]);
    let r = Robot::sealed("127.0.0.31", free_port("127.0.0.31"), &key, 31);
    r.send(&a, &beacon("B31", "nao31", 1));
    until(&a, "a card", |r| r.len() == 1);
    let (code, o) = json(&a, "POST", "/api/wake/B31", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 409, "awake: no wake");
    assert!(o["error"].as_str().unwrap().contains("not limp"), "{o}");

    let mut b = beacon("B31", "nao31", 2);
    b.motion = Motion::LimpWaitingForWake;
    r.send(&a, &b);
    until(&a, "wake offered", |r| r[0]["wake"]["offered"] == true);
    let (code, _) = json(&a, "POST", "/api/wake/B31", &[]);
    assert_eq!(code, 403, "a wake without the page's header is refused");
    let (code, o) = json(&a, "POST", "/api/wake/B31", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["generation"], 5);

    let mut buf = [0u8; 600];
    let (n, _) = wake_rx.recv_from(&mut buf).unwrap();
    let d = WakeDatagram::decode(&buf[..n]).unwrap();
    let k = TeamKey::read(&key).unwrap();
    assert_eq!(d.key_id, k.id());
    assert_eq!(verify(Some(&k), &d, "B31", b.nonce, Some(5)), Ok(()));
    // Replayed after the next trip and re-arm: refused by the robot.
    assert!(verify(Some(&k), &d, "B31", b.nonce, Some(6)).is_err());
    let cards = robots(&a);
    assert_eq!(cards[0]["events"][0]["kind"], "wake-sent");
}

#[test]
fn without_a_key_the_card_says_network_wake_needs_one() {
    let a = app(&[]);
    let r = Robot::new("127.0.0.41", free_port("127.0.0.41"));
    let mut b = beacon("B41", "nao41", 1);
    b.motion = Motion::LimpWaitingForWake;
    r.send(&a, &b);
    let got = until(&a, "a card", |r| r.len() == 1);
    assert_eq!(got[0]["wake"]["offered"], false);
    assert_eq!(
        got[0]["wake"]["why_not"],
        "network wake needs a key: start the app with --key FILE"
    );
    let (code, _) = json(&a, "POST", "/api/wake/B41", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 409);
    // The app says its view is unauthenticated: in the JSON and the page.
    let (_, v) = json(&a, "GET", "/api/robots", &[]);
    assert_eq!(v["authenticated"], false);
    assert_eq!(got[0]["claimants"][0]["trust"], "unauthenticated");
    let (_, page) = request(&a, "GET", "/", &[]);
    assert!(page.contains("UNAUTHENTICATED"), "the page never says so");
}

/// An app with a key and a wake receiver on 127.0.0.`n`.
fn keyed_app(dir: &std::path::Path, n: u8) -> (App, std::path::PathBuf, UdpSocket) {
    let key = key_file(dir, 3);
    let ip = format!("127.0.0.{n}");
    let wake_port = free_port(&ip);
    let wake_rx = UdpSocket::bind((ip.as_str(), wake_port)).unwrap();
    let a = app(&[
        "--key",
        key.to_str().unwrap(),
        "--wake-port",
        &wake_port.to_string(),
    ]);
    (a, key, wake_rx)
}

/// No wake datagram arrives at `rx` within `wait`.
fn no_wake(rx: &UdpSocket, wait: Duration) {
    rx.set_read_timeout(Some(wait)).unwrap();
    let got = rx.recv_from(&mut [0u8; 600]);
    assert!(got.is_err(), "a wake was sent: {got:?}");
}

/// Issue 27 point 2: a host that copies a robot's body id, name and nonce
/// (all broadcast) and claims "limp, waiting for a wake" with its sequence
/// number ahead, unsealed, sealed with another key, or forged under the
/// team key's id. The app shows the robot's own verified state (moving,
/// not tripped, not limp), flags the second sender (DUPLICATE), and
/// neither offers nor signs a WAKE.
#[test]
fn a_forged_beacon_is_not_shown_gets_no_wake_and_the_card_is_flagged_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let (a, key, wake_rx) = keyed_app(dir.path(), 101);
    let robot = Robot::sealed("127.0.0.101", free_port("127.0.0.101"), &key, 0x5eed);
    let spoofers = [
        Robot::new("127.0.0.102", free_port("127.0.0.102")),
        Robot::sealed(
            "127.0.0.103",
            free_port("127.0.0.103"),
            &key_file(dir.path(), 9),
            0x5eed,
        ),
    ];
    // Another key under the team key's id: a forged MAC.
    let forged = {
        let other = TeamKey::from_bytes(&[9; 32]).unwrap();
        let own_id = TeamKey::read(&key).unwrap().id().to_string();
        move |b: &Beacon| {
            let d = String::from_utf8(seal_beacon(&other, 0x5eed, &encode(b))).unwrap();
            d.replace(
                &format!("\"key\":\"{}\"", other.id()),
                &format!("\"key\":\"{own_id}\""),
            )
        }
    };
    let fake_tx = UdpSocket::bind("127.0.0.104:0").unwrap();
    for seq in 1..=6 {
        robot.send(&a, &beacon("B101", "nao101", seq));
        let mut lie = beacon("B101", "nao101", seq + 100);
        lie.motion = Motion::LimpWaitingForWake;
        for s in &spoofers {
            s.send(&a, &lie);
        }
        fake_tx.send_to(forged(&lie).as_bytes(), a.beacon).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = until(&a, "flagged", |r| r.len() == 1 && r[0]["duplicate"] == true);
    let card = &got[0];
    assert_eq!(card["verified"], true);
    let c = &card["claimants"][0];
    assert_eq!(c["trust"], "verified", "{card}");
    assert_eq!(c["state"]["code"], "armed", "{card}");
    assert_eq!(c["beacon"]["seq"], 6, "{card}");
    assert_eq!(c["start"], "0000000000005eed");
    let other = &card["claimants"][1];
    assert_eq!(other["trust"], "unverified", "{card}");
    assert_eq!(
        other["beacon"],
        Value::Null,
        "an unverified beacon's fields are never shown"
    );
    assert_eq!(other["state"]["code"], "unverified");
    assert_eq!(other["addrs"].as_array().unwrap().len(), 3, "{card}");
    assert_eq!(card["wake"]["offered"], false);
    let (code, o) = json(&a, "POST", "/api/wake/B101", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 409, "{o}");
    assert!(o["error"].as_str().unwrap().contains("DUPLICATE"), "{o}");
    no_wake(&wake_rx, Duration::from_millis(300));
    // The spoofers alone, under another body id: nothing verified, no
    // state, no WAKE.
    let mut lie = beacon("B105", "nao105", 1);
    lie.motion = Motion::LimpWaitingForWake;
    spoofers[0].send(&a, &lie);
    let got = until(&a, "the spoofer's card", |r| r.len() == 2);
    let card = got.iter().find(|c| c["body"] == "B105").unwrap();
    assert_eq!(card["verified"], false);
    assert_eq!(card["claimants"][0]["state"]["code"], "unverified");
    assert_eq!(card["wake"]["offered"], false);
    let (code, o) = json(&a, "POST", "/api/wake/B105", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 409, "{o}");
    no_wake(&wake_rx, Duration::from_millis(300));
}

/// A recorded sealed beacon ("limp, waiting for a wake") replayed after
/// the robot moved on: from another address it is a second sender, from
/// the robot's own address nothing; the state stays the robot's newest and
/// no WAKE is signed from the old one.
#[test]
fn a_replayed_sealed_beacon_is_not_taken_and_signs_no_wake() {
    let dir = tempfile::tempdir().unwrap();
    let (a, key, wake_rx) = keyed_app(dir.path(), 111);
    let robot = Robot::sealed("127.0.0.111", free_port("127.0.0.111"), &key, 7);
    let mut limp = beacon("B111", "nao111", 5);
    limp.motion = Motion::LimpWaitingForWake;
    let recorded = robot.datagram(&limp);
    robot.send(&a, &limp);
    until(&a, "limp", |r| {
        r.len() == 1 && r[0]["wake"]["offered"] == true
    });
    robot.send(&a, &beacon("B111", "nao111", 6));
    until(&a, "moving", |r| {
        r[0]["claimants"][0]["state"]["code"] == "armed"
    });
    // From the robot's own address: reordered or replayed, not taken.
    robot.tx.send_to(&recorded, a.beacon).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = robots(&a);
    assert_eq!(r[0]["claimants"][0]["state"]["code"], "armed", "{r:?}");
    assert_eq!(r[0]["duplicate"], false);
    // From another address, while the robot goes on: flagged.
    let replayer = UdpSocket::bind("127.0.0.112:0").unwrap();
    for seq in 7..=9 {
        replayer.send_to(&recorded, a.beacon).unwrap();
        robot.send(&a, &beacon("B111", "nao111", seq));
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = until(&a, "flagged", |r| r[0]["duplicate"] == true);
    assert_eq!(r[0]["claimants"][0]["state"]["code"], "armed", "{r:?}");
    assert!(
        r[0]["claimants"][1]["why"]
            .as_str()
            .unwrap()
            .contains("replayed"),
        "{r:?}"
    );
    let (code, _) = json(&a, "POST", "/api/wake/B111", &["x-nao-rs-app: 1"]);
    assert_eq!(code, 409);
    no_wake(&wake_rx, Duration::from_millis(300));
}

/// Issue 27 point 4: one made-up body id from 300 source addresses (and
/// 300 made-up ids), with and without a key; then every real robot, the
/// one heard before and the one first heard after the flood, still gets
/// its STOP and STOP ALL (with `--no-broadcast`).
#[test]
fn a_flood_from_300_addresses_does_not_disable_stop() {
    let dir = tempfile::tempdir().unwrap();
    for (n, keyed) in [(121u8, true), (131, false)] {
        let key = key_file(dir.path(), 3);
        let port = free_port(&format!("127.0.0.{n}"));
        let p = port.to_string();
        let a = if keyed {
            app(&["--stop-port", &p, "--key", key.to_str().unwrap()])
        } else {
            app(&["--stop-port", &p])
        };
        let mk = |ip: String| {
            if keyed {
                Robot::sealed(&ip, port, &key, u64::from(n))
            } else {
                Robot::new(&ip, port)
            }
        };
        let early = mk(format!("127.0.0.{n}"));
        let late = mk(format!("127.0.0.{}", n + 1));
        early.send(&a, &beacon(&format!("EARLY{n}"), "early", 1));
        until(&a, "the early robot", |r| r.len() == 1);
        let fake = beacon("MADEUP", "x", 1);
        for i in 0..300u32 {
            let src = format!("127.{}.{}.{}", n, 1 + i / 200, i % 200 + 1);
            let s = UdpSocket::bind((src.as_str(), 0)).unwrap();
            s.send_to(&encode(&fake), a.beacon).unwrap();
            let mut other = fake.clone();
            other.body_id = format!("MADE{i}");
            s.send_to(&encode(&other), a.beacon).unwrap();
            if i % 100 == 0 {
                early.send(&a, &beacon(&format!("EARLY{n}"), "early", 2 + u64::from(i)));
            }
            if i % 10 == 9 {
                // Paced so that the kernel's buffer keeps the flood.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // Heard after the flood, beaconing as a robot does (the kernel
        // drops what arrives while its buffer is full of the flood).
        until(&a, "the robot heard after the flood", |r| {
            late.send(&a, &beacon(&format!("LATE{n}"), "late", 1));
            r.iter().any(|c| c["body"] == format!("LATE{n}"))
        });
        let end = Instant::now() + Duration::from_secs(10);
        let v = loop {
            let (_, v) = json(&a, "GET", "/api/robots", &[]);
            if v["book"]["evicted"].as_u64().unwrap() > 0 || Instant::now() > end {
                break v;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(v["book"]["evicted"].as_u64().unwrap() > 0, "{}", v["book"]);
        assert!(
            v["book"]["addresses"].as_u64().unwrap() <= 256,
            "{}",
            v["book"]
        );
        for (r, body) in [(&early, format!("EARLY{n}")), (&late, format!("LATE{n}"))] {
            let (code, o) = json(&a, "POST", &format!("/api/stop/{body}"), &[]);
            assert_eq!(code, 200, "keyed {keyed}: {o}");
            assert_eq!(
                r.stops(Duration::from_millis(500)),
                10,
                "keyed {keyed}: {body}"
            );
        }
        let (code, o) = json(&a, "POST", "/api/stop-all", &[]);
        assert_eq!(code, 200, "{o}");
        for r in [&early, &late] {
            assert_eq!(
                r.stops(Duration::from_millis(500)),
                10,
                "keyed {keyed}: STOP ALL"
            );
        }
    }
}

/// A STOP of which no datagram can leave (here: port 0, which the kernel
/// refuses) answers with an error saying so, and the card's log says so.
#[test]
fn a_stop_that_cannot_be_sent_says_so() {
    let a = app(&["--stop-port", "0"]);
    let r = Robot::new("127.0.0.141", free_port("127.0.0.141"));
    r.send(&a, &beacon("B141", "nao141", 1));
    until(&a, "a card", |r| r.len() == 1);
    let (code, o) = json(&a, "POST", "/api/stop/B141", &[]);
    assert_eq!(code, 502, "{o}");
    assert!(o["error"].as_str().unwrap().contains("NOT SENT"), "{o}");
    assert_eq!(o["sent"], 0);
    let (code, o) = json(&a, "POST", "/api/stop-all", &[]);
    assert_eq!(code, 502, "{o}");
    let got = robots(&a);
    assert_eq!(got[0]["events"][0]["kind"], "stop-failed", "{got:?}");
    let (_, page) = request(&a, "GET", "/", &[]);
    assert!(page.contains("NOT SENT"), "the page shows no unsent stop");
}

#[test]
fn a_bad_key_file_is_refused_at_start_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), 4);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nao-rs-app"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--beacon-port",
            "0",
            "--no-broadcast",
        ])
        .args(["--loopback-only", "--key", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains(&format!("chmod 600 {}", key.display())), "{e}");
}

#[test]
fn two_robots_claiming_one_body_id_are_both_shown_and_flagged() {
    let a = app(&[]);
    let r1 = Robot::new("127.0.0.51", free_port("127.0.0.51"));
    let r2 = Robot::new("127.0.0.52", free_port("127.0.0.52"));
    let mut other = beacon("B51", "impostor", 1);
    other.nonce = 99;
    for seq in 1..4 {
        r1.send(&a, &beacon("B51", "nao51", seq));
        other.seq = seq;
        r2.send(&a, &other);
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = until(&a, "flagged", |r| r.len() == 1 && r[0]["duplicate"] == true);
    assert_eq!(got[0]["claimants"].as_array().unwrap().len(), 2);
    assert_eq!(got[0]["addrs"].as_array().unwrap().len(), 2);
}

#[test]
fn a_quiet_robot_goes_late_then_offline() {
    let a = app(&[]);
    let r = Robot::new("127.0.0.61", free_port("127.0.0.61"));
    r.send(&a, &beacon("B61", "nao61", 1));
    until(&a, "good", |r| {
        r.len() == 1 && r[0]["claimants"][0]["link"] == "good"
    });
    until(&a, "late", |r| r[0]["claimants"][0]["link"] == "late");
    let got = until(&a, "offline", |r| r[0]["claimants"][0]["link"] == "offline");
    assert_eq!(got[0]["claimants"][0]["state"]["code"], "offline");
    // The log's line comes with the app's next tick (every 250 ms).
    until(&a, "lost logged", |r| r[0]["events"][0]["kind"] == "lost");
}

#[test]
fn a_flood_of_garbage_does_not_hold_up_the_stop_or_the_page() {
    let port = free_port("127.0.0.71");
    let r = Robot::new("127.0.0.71", port);
    let a = app(&["--stop-port", &port.to_string()]);
    r.send(&a, &beacon("B71", "nao71", 1));
    until(&a, "a card", |r| r.len() == 1);
    let target = a.beacon;
    let flood = std::thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.72:0").unwrap();
        let mut sent = 0u32;
        for i in 0..100_000u32 {
            let d: &[u8] = match i % 4 {
                0 => b"NAO-RS BEACON 1\n{\"seq\":",
                1 => b"NAO-RS BEACON 9\n{}",
                2 => &[0xff; 1500],
                _ => b"garbage",
            };
            if s.send_to(d, target).is_ok() {
                sent += 1;
            }
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(20));
    let (code, o) = json(&a, "POST", "/api/stop-all", &[]);
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["sent"], 10);
    assert_eq!(r.stops(Duration::from_millis(500)), 10);
    let sent = flood.join().unwrap();
    assert!(sent > 90_000, "{sent}");
    // The page still answers and counts the garbage by kind.
    let (_, v) = json(&a, "GET", "/api/robots", &[]);
    assert!(v["bad"]["count"].as_u64().unwrap() > 0, "{}", v["bad"]);
    for kind in ["json", "version", "oversized", "prefix"] {
        assert!(
            v["bad"]["by_kind"][kind].as_u64().unwrap_or(0) > 0,
            "{kind}: {}",
            v["bad"]
        );
    }
    // And takes beacons again: sent the way a robot does, again and again
    // (the kernel drops what arrives while its buffer is full of garbage).
    let end = Instant::now() + Duration::from_secs(10);
    for seq in 2.. {
        r.send(&a, &beacon("B71", "nao71", seq));
        let r = robots(&a);
        if r[0]["claimants"][0]["beacons"].as_u64().unwrap() > 1 {
            break;
        }
        assert!(
            Instant::now() < end,
            "no beacon taken after the flood: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
