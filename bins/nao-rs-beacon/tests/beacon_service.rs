//! The beacon service end to end, from second processes: the virtual
//! robot, `nao-rs run --controller stand` and `nao-rs-beacon` on a private
//! page; this test is the operator on loopback (beacons to 127.0.0.1, the
//! network wake to 127.0.0.1). Judged by the simulator's trace ("stiff" =
//! a cycle frame with any stiffness above 0) and the page.

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nao_rs_beacon::auth::{sign, TeamKey};
use nao_rs_beacon::format::Motion;
use nao_rs_beacon::format::{self, Beacon, SwitchPosition};
use testkit::{free_udp_port, Proc, Rig, Runtime};

fn naoctl(rig: &Rig, args: &[&str]) {
    testkit::ok(rig.naoctl(args), &format!("naoctl {args:?}"));
}

/// The runtime, the beacon and the operator's socket on the virtual robot
/// (the rig, dropped last).
struct Robot {
    _rt: Proc,
    beacon: Proc,
    operator: UdpSocket,
    wake_port: u16,
    log: PathBuf,
    rig: Rig,
}

const BODY: &str = "test-body-1";

impl Robot {
    fn start(key: Option<&Path>) -> Robot {
        Robot::start_to(key, None, free_udp_port())
    }

    /// The robot with its network wake on `wake_port`, its beacons to the
    /// operator's socket and to `also`.
    fn start_to(key: Option<&Path>, also: Option<std::net::SocketAddr>, wake_port: u16) -> Robot {
        Robot::start_with(key, also, wake_port, &[])
    }

    /// [`Robot::start_to`] with `rt_args` added to the runtime's
    /// `nao-rs run`.
    fn start_with(
        key: Option<&Path>,
        also: Option<std::net::SocketAddr>,
        wake_port: u16,
        rt_args: &[&str],
    ) -> Robot {
        let rig = Rig::start();
        drop(deathswitch::Page::open(rig.page_path()).unwrap());
        naoctl(&rig, &["rearm", "--yes"]);
        let rt = rig.start_runtime(&Runtime::new("rt").priority(0).udp_port(0).args(rt_args));
        let operator = UdpSocket::bind("127.0.0.1:0").unwrap();
        operator
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let log = rig.log_path("beacon");
        let mut cmd = rig.command("nao-rs-beacon");
        cmd.arg("--page")
            .arg(rig.page_path())
            .env("NAO_RS_WAKE_SOCKET", rig.wake_socket("rt"))
            .env("NAO_RS_BEACON", "unicast")
            .env(
                "NAO_RS_BEACON_TARGETS",
                match also {
                    Some(a) => format!("{},{a}", operator.local_addr().unwrap()),
                    None => operator.local_addr().unwrap().to_string(),
                },
            )
            .env("NAO_RS_BEACON_HZ", "10")
            .env("NAO_RS_WAKE_PORT", wake_port.to_string())
            .env("NAO_RS_BODY_ID", BODY)
            .env("NAO_RS_ROBOT_NAME", "nao-test")
            .env(
                "NAO_RS_TEAM_KEY",
                key.map_or_else(|| rig.dir().join("no.key"), Path::to_path_buf),
            )
            .stderr(std::fs::File::create(&log).unwrap());
        let beacon = Proc::spawn("nao-rs-beacon", &mut cmd);
        Robot {
            _rt: rt,
            beacon,
            operator,
            wake_port,
            log,
            rig,
        }
    }

    /// The next beacon that satisfies `f`, within `limit`.
    fn beacon_where(&self, limit: Duration, f: impl Fn(&Beacon) -> bool) -> Beacon {
        let t0 = Instant::now();
        let mut buf = [0u8; 2048];
        let mut last = None;
        while t0.elapsed() < limit {
            if let Ok(n) = self.operator.recv(&mut buf) {
                let b = format::decode(&buf[..n]).expect("a beacon decodes");
                if f(&b) {
                    return b;
                }
                last = Some(b);
            }
        }
        panic!(
            "no such beacon within {limit:?}; the last: {last:#?}\nbeacon log:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
            + "\n--- rt ---\n"
            + &std::fs::read_to_string(self.rig.log_path("rt")).unwrap_or_default()
    }

    fn wake(&self, datagram: &[u8]) {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .send_to(datagram, ("127.0.0.1", self.wake_port))
            .unwrap();
    }

    /// Stiff cycle frames received at or after `t_ns`.
    fn stiff_since(&self, t_ns: u64) -> usize {
        nao_rs_sim::trace::read(self.rig.trace_path())
            .unwrap()
            .iter()
            .filter(|l| l.is_cycle_frame() && l.t_ns >= t_ns && l.max_stiffness > 0)
            .count()
    }

    fn wait_stiff_since(&self, t_ns: u64, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if self.stiff_since(t_ns) > 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

fn key_file(dir: &Path, name: &str, byte: u8) -> (PathBuf, TeamKey) {
    let p = dir.join(name);
    std::fs::write(&p, [byte; 32]).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = TeamKey::read(&p).unwrap();
    (p, k)
}

/// The app wakes only after a person's re-arm, and only with the team key:
/// a wake signed with another key, or a recorded wake replayed after the
/// next trip and re-arm, makes nothing stiff; a wake with the key in the
/// page's armed epoch does. The beacon tells the motion state all along.
#[test]
fn the_network_wake_counts_only_with_the_key_in_the_armed_epoch_it_names() {
    let keys = tempfile::tempdir().unwrap();
    let (path, key) = key_file(keys.path(), "team.key", 7);
    let (_, other) = key_file(keys.path(), "other.key", 9);
    let r = Robot::start(Some(&path));
    // Re-armed at start, every start limp: the beacon says so.
    let b = r.beacon_where(Duration::from_secs(20), |b| {
        b.motion == Motion::LimpWaitingForWake && b.switch == SwitchPosition::Armed
    });
    assert!(b.net_wake, "a key is there: network wake on");
    assert_eq!(b.body_id, BODY);
    let generation = b.wake_generation.unwrap();
    let t0 = deathswitch::monotonic_ns();
    // Another team's key: refused, nothing stiff.
    r.wake(&sign(&other, BODY, b.nonce, generation).encode());
    // Garbage and another robot's wake: refused.
    r.wake(b"NAO-RS WAKE 1\n{\"garbage\":");
    r.wake(&sign(&key, "another-body", b.nonce, generation).encode());
    assert!(
        !r.wait_stiff_since(t0, Duration::from_millis(800)),
        "stiff after refused wakes"
    );
    // The team key, this epoch: stiff.
    let good = sign(&key, BODY, b.nonce, generation).encode();
    r.wake(&good);
    assert!(
        r.wait_stiff_since(t0, Duration::from_secs(5)),
        "the verified wake made nothing stiff\n{}",
        r.log()
    );
    let b = r.beacon_where(Duration::from_secs(5), |b| {
        b.motion == Motion::Awake && b.max_stiffness.is_some_and(|s| s > 0.0)
    });
    assert!(b.stiffness.is_some() && b.temperature.is_some(), "{b:#?}");
    // A trip, a person's re-arm: the recorded wake is dead.
    naoctl(&r.rig, &["stop"]);
    r.beacon_where(Duration::from_secs(5), |b| {
        b.switch == SwitchPosition::Tripped && b.reason.as_deref() == Some("naoctl")
    });
    naoctl(&r.rig, &["rearm", "--yes"]);
    let b = r.beacon_where(Duration::from_secs(5), |b| {
        b.motion == Motion::LimpWaitingForWake
    });
    assert_ne!(b.wake_generation, Some(generation), "a new armed epoch");
    let t1 = deathswitch::monotonic_ns();
    r.wake(&good);
    assert!(
        !r.wait_stiff_since(t1, Duration::from_millis(800)),
        "a replayed wake made the robot stiff"
    );
    let log = r.log();
    for says in [
        "wrong-key-id",
        "other-body",
        "malformed",
        "stale-generation",
        "woken by 127.0.0.1",
    ] {
        assert!(log.contains(says), "{says:?} missing in the log:\n{log}");
    }
}

/// No key file on the robot: network wake is off (the beacon says so) and a
/// wake is not even listened for; the beacon still reports.
#[test]
fn without_a_key_file_network_wake_is_off_and_the_beacon_says_so() {
    let r = Robot::start(None);
    let b = r.beacon_where(Duration::from_secs(20), |b| {
        b.motion == Motion::LimpWaitingForWake
    });
    assert!(!b.net_wake);
    assert!(r.log().contains("network wake is off"), "{}", r.log());
    // The runtime runs the default chest button mode, and its status file
    // says so.
    let b = r.beacon_where(Duration::from_secs(10), |b| b.chest_button.is_some());
    assert_eq!(b.chest_button, Some(format::ChestButtonMode::Trip));
}

/// Issue 31: the beacon says the chest button mode the runtime runs, read
/// from the runtime's own status file (`nao-rs run --chest-button
/// hold:1000`), never another.
#[test]
fn the_beacon_says_the_chest_button_mode_the_runtime_runs() {
    let r = Robot::start_with(
        None,
        None,
        free_udp_port(),
        &["--chest-button", "hold:1000"],
    );
    let b = r.beacon_where(Duration::from_secs(20), |b| b.chest_button.is_some());
    assert_eq!(
        b.chest_button,
        Some(format::ChestButtonMode::Hold { ms: 1000 })
    );
}

/// The beacon survives garbage and a flood on its wake port, and keeps
/// beaconing: a bounded amount of work per datagram.
#[test]
fn the_beacon_service_survives_a_flood_of_garbage_wakes() {
    let keys = tempfile::tempdir().unwrap();
    let (path, _) = key_file(keys.path(), "team.key", 7);
    let mut r = Robot::start(Some(&path));
    let first = r.beacon_where(Duration::from_secs(20), |_| true);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..20_000u32 {
        let junk = i.to_le_bytes().repeat((i % 300) as usize);
        let _ = s.send_to(&junk, ("127.0.0.1", r.wake_port));
    }
    let later = r.beacon_where(Duration::from_secs(5), |b| b.seq > first.seq + 5);
    assert!(later.seq > first.seq);
    assert!(r.beacon.running(), "the service died\n{}", r.log());
}

/// The operator's app (the binary) on loopback with the team key, sending
/// wakes to `wake_port`; its page's address and its beacon address.
struct App {
    _proc: Proc,
    http: std::net::SocketAddr,
    beacon: std::net::SocketAddr,
}

impl App {
    fn start(key: &Path, wake_port: u16, log: &Path) -> App {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(testkit::bin("nao-rs-app"));
        cmd.args(["--listen", "127.0.0.1:0", "--beacon-bind", "127.0.0.1"])
            .args(["--beacon-port", "0", "--no-broadcast", "--loopback-only"])
            .arg("--key")
            .arg(key)
            .args(["--wake-port", &wake_port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap());
        let mut p = Proc::spawn("nao-rs-app", &mut cmd);
        let mut out = std::io::BufReader::new(p.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        // "nao-rs-app: page http://127.0.0.1:P/ beacons udp 127.0.0.1:Q"
        let http = line
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next());
        let beacon = line.split("udp ").nth(1).map(str::trim);
        App {
            _proc: p,
            http: http
                .and_then(|h| h.parse().ok())
                .unwrap_or_else(|| panic!("{line:?}")),
            beacon: beacon
                .and_then(|b| b.parse().ok())
                .unwrap_or_else(|| panic!("{line:?}")),
        }
    }

    fn request(&self, method: &str, path: &str) -> (u16, serde_json::Value) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\nx-nao-rs-app: 1\r\n\r\n",
            self.http
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let code = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").map_or("", |x| x.1);
        (
            code,
            serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// The card of `body` once `f` holds for it (10 s at most).
    fn card_where(&self, body: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        testkit::wait_for(
            &format!("the card of {body}"),
            Duration::from_secs(10),
            || {
                let (_, v) = self.request("GET", "/api/robots");
                v["robots"]
                    .as_array()?
                    .iter()
                    .find(|c| c["body"] == body && f(c))
                    .cloned()
            },
        )
    }
}

/// Issue 27 point 2 end to end: the robot (virtual robot, runtime, beacon
/// with the team key) re-armed and limp, waiting for a wake; a host copies
/// its body id, name and nonce and claims "limp, waiting for a wake" at
/// another generation, its sequence number ahead. The app (with the key)
/// flags the card DUPLICATE and signs no WAKE; a trip and a person's
/// re-arm later the robot is still limp (nothing was signed to replay).
/// Positive control: once the spoofer is quiet, WAKE from the app makes
/// the robot stiff.
#[test]
fn a_forged_beacon_gets_no_wake_signed_and_the_robot_stays_limp() {
    let keys = tempfile::tempdir().unwrap();
    let (path, _) = key_file(keys.path(), "team.key", 7);
    // The app first (its beacon port), then the robot beaconing to it.
    let wake_port = free_udp_port();
    let app = App::start(&path, wake_port, &keys.path().join("app.log"));
    let r = Robot::start_to(Some(&path), Some(app.beacon), wake_port);
    let real = r.beacon_where(Duration::from_secs(20), |b| {
        b.motion == Motion::LimpWaitingForWake && b.switch == SwitchPosition::Armed
    });
    app.card_where(BODY, |c| {
        c["verified"] == true && c["wake"]["offered"] == true
    });
    let t0 = deathswitch::monotonic_ns();
    let spoofer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut lie = real.clone();
    lie.wake_generation = real.wake_generation.map(|g| g ^ 1);
    lie.trip_count = real.trip_count + 1;
    let card = {
        let mut card = None;
        for i in 0..40u64 {
            lie.seq = real.seq + 1_000 + i;
            spoofer.send_to(&format::encode(&lie), app.beacon).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let (_, v) = app.request("GET", "/api/robots");
            if let Some(c) = v["robots"].as_array().and_then(|a| a.first()) {
                if c["duplicate"] == true {
                    card = Some(c.clone());
                    break;
                }
            }
        }
        card.expect("the card was never flagged DUPLICATE")
    };
    assert_eq!(card["claimants"][0]["trust"], "verified", "{card}");
    assert_eq!(card["wake"]["offered"], false, "{card}");
    let (code, o) = app.request("POST", &format!("/api/wake/{BODY}"));
    assert_eq!(code, 409, "{o}");
    assert!(
        !r.wait_stiff_since(t0, Duration::from_millis(500)),
        "stiff after a refused WAKE"
    );
    // A trip and a person's re-arm: still limp (no wake was signed).
    naoctl(&r.rig, &["stop"]);
    r.beacon_where(Duration::from_secs(5), |b| {
        b.switch == SwitchPosition::Tripped
    });
    naoctl(&r.rig, &["rearm", "--yes"]);
    r.beacon_where(Duration::from_secs(5), |b| {
        b.motion == Motion::LimpWaitingForWake
    });
    assert!(
        !r.wait_stiff_since(t0, Duration::from_millis(800)),
        "stiff after the re-arm: a wake formed from the forged beacon counted"
    );
    // The spoofer quiet: once it is offline the flag clears and WAKE
    // (signed from the verified beacon) makes the robot stiff.
    app.card_where(BODY, |c| {
        c["duplicate"] == false && c["wake"]["offered"] == true
    });
    let t1 = deathswitch::monotonic_ns();
    let (code, o) = app.request("POST", &format!("/api/wake/{BODY}"));
    assert_eq!(code, 200, "{o}");
    assert!(
        r.wait_stiff_since(t1, Duration::from_secs(5)),
        "the verified WAKE made nothing stiff\n{}",
        r.log()
    );
}

/// Issue 27 point 7: a FIFO at the key path (nobody ever writes it) does
/// not hang the beacon: it logs the path and the fix at once and beacons
/// without network wake.
#[test]
fn a_fifo_at_the_key_path_does_not_hang_the_beacon() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("team.key");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let operator = UdpSocket::bind("127.0.0.1:0").unwrap();
    operator
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let log = dir.path().join("beacon.log");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nao-rs-beacon"));
    cmd.arg("--page")
        .arg(dir.path().join("no-page"))
        .env("NAO_RS_BEACON", "unicast")
        .env(
            "NAO_RS_BEACON_TARGETS",
            operator.local_addr().unwrap().to_string(),
        )
        .env("NAO_RS_BEACON_HZ", "10")
        .env("NAO_RS_WAKE_PORT", free_udp_port().to_string())
        .env("NAO_RS_BODY_ID", BODY)
        .env("NAO_RS_TEAM_KEY", &fifo)
        .stderr(std::fs::File::create(&log).unwrap());
    let _p = Proc::spawn("nao-rs-beacon", &mut cmd);
    let mut buf = [0u8; 2048];
    let n = operator
        .recv(&mut buf)
        .expect("no beacon: the beacon hangs on the FIFO");
    let b = format::decode(&buf[..n]).unwrap();
    assert!(!b.net_wake);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&fifo.display().to_string()) && text.contains("not a regular file"),
        "{text}"
    );
}
