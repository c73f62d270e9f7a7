//! The LoLA socket spoken to as real LoLA clients do (B-Human, HULKs,
//! `nao_lola`): connect to the Unix socket, read one 896-byte frame, answer
//! with an actuator map, for hundreds of cycles; against the test double
//! body, one server step per cycle (deterministic: a client's answer is in
//! the socket before the next step reads it).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nao_wire::JOINTS;
use serde::Serialize;

use super::double::FakeBody;
use super::frame::FRAME_LEN;
use super::{LolaConfig, LolaServer};
use crate::SensorFrame;

#[path = "../../tests/common/lola_client.rs"]
pub(super) mod lola_client;
use lola_client::{decode, Answer, SENSOR_KEYS};

fn quiet() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

#[test]
fn the_frame_is_as_long_as_a_lola_client_reads() {
    assert_eq!(FRAME_LEN, lola_client::FRAME_LEN);
}

const STEP: Duration = Duration::from_millis(1);

struct Setup {
    _dir: tempfile::TempDir,
    path: PathBuf,
    server: LolaServer,
    body: FakeBody,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("robocup");
    let mut config = LolaConfig::new(quiet());
    config.socket = path.clone();
    let server = LolaServer::bind(config).unwrap();
    Setup {
        _dir: dir,
        path,
        server,
        body: FakeBody::new(),
    }
}

fn sensors(k: usize) -> SensorFrame {
    SensorFrame {
        position: std::array::from_fn(|j| (k * 100 + j) as f32 * 1e-4),
        ..SensorFrame::default()
    }
}

impl Setup {
    /// One cycle: queue sensors `k`, step the server once.
    fn cycle(&mut self, k: usize) {
        self.body.queue(sensors(k));
        assert!(self.server.step(&mut self.body, STEP));
    }

    /// Cycles `ks`, the client `c` reading each frame and, with `answer`
    /// (position, stiffness), answering it.
    fn serve(&mut self, c: &mut Client, ks: std::ops::Range<usize>, answer: Option<(f32, f32)>) {
        for k in ks {
            self.cycle(k);
            c.frame();
            if let Some((position, stiffness)) = answer {
                c.send(&self::answer(position, stiffness));
            }
        }
    }
}

/// A set-up with one client connected (the controller).
fn with_client() -> (Setup, Client) {
    let t = setup();
    let c = Client::connect(&t.path);
    (t, c)
}

/// A controller (the first client) and a monitor (the second), both past
/// the first frame.
fn with_monitor() -> (Setup, Client, Client) {
    let (mut t, mut c) = with_client();
    let mut monitor = Client::connect(&t.path);
    t.cycle(0);
    c.frame();
    monitor.frame();
    (t, c, monitor)
}

/// A LoLA client: blocking reads of exactly one frame, answers.
struct Client {
    s: UnixStream,
}

fn answer(position: f32, stiffness: f32) -> Vec<u8> {
    Answer::new([position; JOINTS], [stiffness; JOINTS]).encode()
}

impl Client {
    fn connect(path: &Path) -> Client {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client { s }
    }

    fn frame(&mut self) -> [u8; FRAME_LEN] {
        let mut f = [0u8; FRAME_LEN];
        self.s.read_exact(&mut f).unwrap();
        f
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// Whether the server closed the connection (reads to end of stream,
    /// skipping frames still buffered).
    fn closed(&mut self) -> bool {
        self.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    return false
                }
                Err(_) => return true,
            }
        }
    }
}

#[test]
fn lola_client_reads_frames_and_answers_for_300_cycles() {
    let (mut t, mut c) = with_client();
    for k in 0..300 {
        t.cycle(k);
        let f = decode(&c.frame());
        assert_eq!(f.keys, SENSOR_KEYS);
        assert_eq!(f.position[..], sensors(k).position[..]);
        c.send(&answer(k as f32 * 0.001, 0.5));
    }
    // The answer to frame k is read in cycle k + 1: 299 commands.
    assert_eq!(t.body.pushed.len(), 299);
    let last = t.body.pushed.last().unwrap();
    assert_eq!(last.position, [0.298; JOINTS]);
    assert_eq!(last.stiffness, [0.5; JOINTS]);
    assert_eq!(last.chest_led, [0, 0, 255]);
    assert_eq!(last.sonar_mode, 0x0c);
    let s = t.server.stats();
    assert_eq!((s.cycles, s.frames_sent, s.frames_skipped), (300, 300, 0));
    assert_eq!(s.messages, 299);
}

#[test]
fn silent_client_stops_commands_so_the_controller_lost_ramp_takes_over() {
    let (mut t, mut c) = with_client();
    t.serve(&mut c, 0..50, Some((0.1, 0.5)));
    let pushed = t.body.pushed.len();
    // Silent: still reads every frame, answers none.
    t.serve(&mut c, 50..150, None);
    // Only the answer to frame 49 arrived after the silence began.
    assert_eq!(t.body.pushed.len(), pushed + 1);
    // Answers again: served again.
    t.serve(&mut c, 150..160, Some((0.2, 0.5)));
    assert_eq!(t.body.pushed.len(), pushed + 1 + 9);
    assert_eq!(t.body.pushed.last().unwrap().position, [0.2; JOINTS]);
}

#[test]
fn disconnected_client_stops_commands_and_a_reconnecting_client_is_served_again() {
    let (mut t, mut c) = with_client();
    t.serve(&mut c, 0..20, Some((0.1, 0.5)));
    drop(c);
    let pushed = t.body.pushed.len();
    for k in 20..100 {
        t.cycle(k);
    }
    // The last answer was in the socket before the disconnect.
    assert!(t.body.pushed.len() <= pushed + 1);
    let pushed = t.body.pushed.len();
    assert!(!t.server.stats().has_controller);
    assert_eq!(t.server.stats().clients, 0);
    let mut c = Client::connect(&t.path);
    t.serve(&mut c, 100..200, Some((0.3, 0.6)));
    assert_eq!(t.body.pushed.len(), pushed + 99);
    assert_eq!(t.body.pushed.last().unwrap().stiffness, [0.6; JOINTS]);
}

#[test]
fn malformed_message_closes_that_client_and_the_bridge_goes_on() {
    let (mut t, mut c, mut monitor) = with_monitor();
    // A Position of 24 values.
    #[derive(Serialize)]
    struct Short {
        #[serde(rename = "Position")]
        position: [f32; 24],
    }
    c.send(
        &rmp_serde::to_vec_named(&Short {
            position: [0.0; 24],
        })
        .unwrap(),
    );
    t.cycle(1);
    assert!(c.closed());
    assert_eq!(t.server.stats().malformed, 1);
    assert!(t.body.pushed.is_empty());
    // The monitor still gets every frame.
    monitor.frame();
    for k in 2..10 {
        t.cycle(k);
        monitor.frame();
    }
    // Plain garbage closes a new controller too; the next one works.
    let mut c = Client::connect(&t.path);
    c.send(&[0xc1, 0x00, 0x01]);
    t.cycle(10);
    assert!(c.closed());
    assert_eq!(t.server.stats().malformed, 2);
    let mut c = Client::connect(&t.path);
    t.serve(&mut c, 11..20, Some((0.1, 0.5)));
    assert_eq!(t.body.pushed.len(), 8);
}

#[test]
fn second_client_gets_sensor_frames_only() {
    let mut t = setup();
    let mut first = Client::connect(&t.path);
    let mut second = Client::connect(&t.path);
    for k in 0..100 {
        t.cycle(k);
        let a = first.frame();
        let b = second.frame();
        assert_eq!(a, b);
        first.send(&answer(0.1, 0.5));
        second.send(&answer(0.9, 1.0));
    }
    assert_eq!(t.body.pushed.len(), 99);
    assert!(t
        .body
        .pushed
        .iter()
        .all(|c| c.stiffness == [0.5; JOINTS] && c.position == [0.1; JOINTS]));
    // The controller leaves: the monitor does not take over.
    drop(first);
    let pushed = t.body.pushed.len();
    for k in 100..120 {
        t.cycle(k);
        second.frame();
        second.send(&answer(0.9, 1.0));
    }
    assert!(t.body.pushed.len() <= pushed + 1);
    assert!(!t.server.stats().has_controller);
}

#[test]
fn monitors_streaming_as_fast_as_they_can_never_starve_the_controller() {
    let (mut t, mut c) = with_client();
    t.cycle(0);
    c.frame();
    // Two monitors write valid messages as fast as they can, never reading.
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let sent = std::sync::Arc::new(AtomicUsize::new(0));
    let monitors: Vec<_> = (0..2)
        .map(|_| {
            let mut s = UnixStream::connect(&t.path).unwrap();
            let (stop, sent) = (stop.clone(), sent.clone());
            std::thread::spawn(move || {
                let m = answer(0.9, 1.0);
                // Relaxed: a plain stop flag and a counter.
                while !stop.load(Ordering::Relaxed) && s.write_all(&m).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let t0 = std::time::Instant::now();
    while sent.load(Ordering::Relaxed) < 200 {
        assert!(t0.elapsed() < Duration::from_secs(10), "monitors streaming");
        std::thread::sleep(Duration::from_millis(1));
    }
    let pushed = t.body.pushed.len();
    for k in 1..200 {
        c.send(&answer(0.1, 0.5));
        t.cycle(k);
        c.frame();
    }
    stop.store(true, Ordering::Relaxed);
    // The server kept serving cycles; the controller's every answer went in.
    assert_eq!(t.body.pushed.len(), pushed + 199);
    assert!(t.body.pushed[pushed..]
        .iter()
        .all(|c| c.stiffness == [0.5; JOINTS] && c.position == [0.1; JOINTS]));
    assert_eq!(t.server.stats().clients, 3);
    drop(t);
    for m in monitors {
        m.join().unwrap();
    }
}

#[test]
fn a_controller_that_reconnects_within_one_cycle_is_the_controller_again() {
    let (mut t, mut c, mut monitor) = with_monitor();
    for k in 1..20 {
        t.cycle(k);
        c.frame();
        monitor.frame();
        c.send(&answer(0.1, 0.5));
    }
    // The controller closes (with frames unread: a reset) and connects
    // again before the next cycle.
    t.cycle(20);
    drop(c);
    let mut c = Client::connect(&t.path);
    let pushed = t.body.pushed.len();
    for k in 21..60 {
        t.cycle(k);
        c.frame();
        monitor.send(&answer(0.9, 1.0));
        c.send(&answer(0.3, 0.6));
    }
    let s = t.server.stats();
    assert!(s.has_controller);
    assert_eq!(s.controller_reconnects, 1);
    assert_eq!(s.io_errors, 0, "the reset is a normal disconnect");
    assert!(t.body.pushed.len() >= pushed + 38);
    assert_eq!(t.body.pushed.last().unwrap().stiffness, [0.6; JOINTS]);
    assert_eq!(t.body.pushed.last().unwrap().position, [0.3; JOINTS]);
}

#[test]
fn econnreset_on_read_is_a_normal_disconnect() {
    let (mut t, mut c) = with_client();
    t.cycle(0);
    c.send(&answer(0.1, 0.5));
    // A frame is in the client's socket, unread, when it closes: the
    // server's next read gets ECONNRESET.
    t.cycle(1);
    drop(c);
    t.cycle(2);
    let s = t.server.stats();
    assert_eq!(s.clients, 0);
    assert_eq!((s.disconnects, s.io_errors), (1, 0), "{s:?}");
}

#[test]
fn slow_client_gets_whole_frames_only() {
    let (mut t, mut c) = with_client();
    // Never reads: the socket buffer fills, frames are skipped, never cut.
    for k in 0..2000 {
        t.cycle(k);
    }
    let s = t.server.stats();
    assert!(s.frames_skipped > 0, "{s:?}");
    let mut prev = None;
    for _ in 0..s.frames_sent.min(200) {
        let f = decode(&c.frame());
        assert_eq!(f.keys, SENSOR_KEYS);
        // Positions encode the cycle: frames arrive in order.
        let k = (f.position[0] / 1e-2).round() as i64;
        if let Some(p) = prev {
            assert!(k > p);
        }
        prev = Some(k);
    }
}

#[test]
fn ring_full_drops_the_command_and_goes_on() {
    let (mut t, mut c) = with_client();
    t.body.ring_full = true;
    t.serve(&mut c, 0..10, Some((0.1, 0.5)));
    assert_eq!(t.server.stats().ring_full, 9);
    t.body.ring_full = false;
    t.cycle(10);
    assert_eq!(t.body.pushed.len(), 1);
}

#[test]
fn a_step_without_sensors_sends_no_frame_but_notices_a_malformed_client() {
    let (mut t, mut c) = with_client();
    c.send(&[0xc1]);
    assert!(!t.server.step(&mut t.body, STEP));
    assert!(c.closed());
    assert_eq!(t.server.stats().frames_sent, 0);
}

#[test]
fn stale_socket_file_is_replaced_live_one_and_other_files_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("robocup");
    let cfg = |p: &Path| {
        let mut c = LolaConfig::new(quiet());
        c.socket = p.to_path_buf();
        c
    };
    // A stale socket (its listener is gone).
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = LolaServer::bind(cfg(&path)).unwrap();
    // Live: refused, with the path in the message.
    let e = LolaServer::bind(cfg(&path)).err().unwrap();
    assert!(e.0.contains("another program serves it"), "{e}");
    assert!(e.0.contains(&path.display().to_string()), "{e}");
    drop(server);
    assert!(
        !path.exists(),
        "the socket file is removed when the server ends"
    );
    // Not a socket: refused, not deleted.
    std::fs::write(&path, b"data").unwrap();
    let e = LolaServer::bind(cfg(&path)).err().unwrap();
    assert!(e.0.contains("not a socket"), "{e}");
    assert!(path.exists());
}
