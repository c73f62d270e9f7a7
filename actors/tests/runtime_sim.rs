//! The runtime library against the virtual robot (a real `nao-rs-sim`
//! process), with an in-process death switch (`deathswitch::MemorySwitch`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{config, start, Rig};
use deathswitch::MemorySwitch;
use nao_runtime::{Config, NoHook, ProgramIo, Reason, Runtime, SensorFrame};
use nao_wire::link::sim::SimLink;
use nao_wire::Command;

/// The virtual robot, an armed in-process switch and the runtime on them
/// with `cfg`.
fn started(cfg: Config) -> (Rig, Arc<MemorySwitch>, Runtime<SimLink>, ProgramIo) {
    let rig = Rig::start();
    let board = Arc::new(MemorySwitch::armed());
    let (rt, io) = start(&rig, &board, cfg, NoHook);
    (rig, board, rt, io)
}

/// [`started`] with the tests' configuration, woken and driven until every
/// joint is stiff (500).
fn awake() -> (Rig, Arc<MemorySwitch>, Runtime<SimLink>, ProgramIo) {
    let (rig, board, rt, mut io) = started(config());
    rt.handle().wake().unwrap();
    drive(&mut io, |f| f.stiffness_sent.iter().all(|&s| s == 500));
    (rig, board, rt, io)
}

/// One frame the virtual robot received, as its trace file says
/// (`docs/sim.md`, "The trace"): the fields these tests judge by. The
/// runtime's tests read the file the robot writes, not the simulator's
/// crate: tests point down (the simulator is a program above the runtime).
#[derive(Debug, Clone, Copy, serde::Deserialize)]
struct TraceLine {
    seq: u16,
    all_off: bool,
    stiffness_slots: u16,
}

impl TraceLine {
    /// A cycle frame (it carries the stiffness broadcasts), not one of the
    /// two start-up frames.
    fn is_cycle_frame(&self) -> bool {
        self.stiffness_slots > 0
    }
}

/// The simulator's trace so far: every complete line (a last line still
/// being written is left out); panics on a line that is not a frame.
fn trace(rig: &Rig) -> Vec<TraceLine> {
    let path = rig.trace_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read the simulator's trace {}: {e}", path.display()));
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

fn stiff() -> Command {
    Command {
        stiffness: [0.5; 25],
        ..Command::default()
    }
}

/// Runs the controller (one stiff command a cycle) until `until` says so;
/// returns the cycle at which `until` first held.
fn drive(
    io: &mut nao_runtime::ProgramIo,
    mut until: impl FnMut(&nao_runtime::SensorFrame) -> bool,
) -> u64 {
    for _ in 0..2000 {
        let _ = io.push_command(stiff());
        let f = io.next_sensors(1_000_000_000).expect("a cycle within 1 s");
        if until(&f) {
            return f.cycle;
        }
    }
    panic!("condition not met in 2000 cycles");
}

/// Records, per cycle, whether the switch was seen tripped before its frame.
#[derive(Clone)]
struct Seen(Arc<Vec<std::sync::atomic::AtomicU8>>);

impl Seen {
    fn new() -> Self {
        Seen(Arc::new(
            (0..100_000)
                .map(|_| std::sync::atomic::AtomicU8::new(0))
                .collect(),
        ))
    }
    /// The first cycle whose frame was built with the switch tripped.
    fn first_tripped(&self) -> Option<u64> {
        self.0
            .iter()
            .position(|v| v.load(std::sync::atomic::Ordering::SeqCst) == 2)
            .map(|k| k as u64)
    }
}

impl<L> nao_runtime::CycleHook<L> for Seen {
    fn before_cycle(&mut self, _link: &mut L, i: &nao_wire::step::Observed<'_>) {
        if let Some(v) = self.0.get(i.k as usize) {
            v.store(
                1 + u8::from(i.verdict.tripped),
                std::sync::atomic::Ordering::SeqCst,
            );
        }
    }
}

/// The runtime on `sim` with the hook that sees every cycle's switch,
/// driven until every joint is stiff (500).
fn start_stiff(
    rig: &Rig,
    board: &Arc<MemorySwitch>,
) -> (Runtime<SimLink>, nao_runtime::ProgramIo, Seen) {
    let seen = Seen::new();
    let (rt, mut io) = start(rig, board, config(), seen.clone());
    // Every start is limp: the test is the person who wakes it.
    rt.handle().wake().unwrap();
    drive(&mut io, |f| f.stiffness_sent.iter().all(|&s| s == 500));
    (rt, io, seen)
}

fn by_seq(trace: &[TraceLine], seq: u16) -> Option<TraceLine> {
    trace
        .iter()
        .rev()
        .find(|l| l.seq == seq && l.is_cycle_frame())
        .copied()
}

/// The frame of the first cycle that saw the switch tripped is all-off, and
/// the one before was not: frame by frame in the simulator's trace.
fn assert_first_tripped_frame_all_off(rig: &Rig, first_tripped_cycle: u64) {
    std::thread::sleep(Duration::from_millis(100));
    let trace = trace(rig);
    let seq = (first_tripped_cycle + 2) as u16;
    let before = by_seq(&trace, seq.wrapping_sub(1)).expect("frame before the trip in the trace");
    assert!(
        !before.all_off,
        "frame before the trip was stiff: {before:?}"
    );
    let first = by_seq(&trace, seq).expect("first tripped frame in the trace");
    assert!(
        first.all_off,
        "the first frame after the trip is all-off: {first:?}"
    );
    for l in trace.iter().filter(|l| l.is_cycle_frame() && l.seq > seq) {
        assert!(l.all_off, "every later frame all-off: {l:?}");
    }
}

#[test]
fn runtime_returns_identity_at_once_and_cycles() {
    // Once the boards are accepted, the commanded stiffness reaches the frame.
    let (_rig, board, rt, mut io) = awake();
    assert!(!rt.identity().body_id().is_empty());
    assert_eq!(board.snapshot().driver_pid, Some(std::process::id()));
    let f = io.next_sensors(1_000_000_000).unwrap();
    assert!(f.t_ns > 0);
    assert!(f.battery.charge > 0, "battery read: {:?}", f.battery);
    let (_, summary) = rt.stop();
    assert!(summary.cycles > 3);
    assert!(!summary.panicked);
}

/// Every start is limp, whatever the page says: a runtime started on an
/// armed switch sends no stiffness, whatever the program commands, and
/// publishes "limp, waiting for a wake" in the page; a wake in the page's
/// generation lets the commands through; a wake while tripped is refused.
#[test]
fn every_start_is_limp_until_a_wake_whatever_the_page_says() {
    let (_rig, board, rt, mut io) = started(config());
    let mut n = 0;
    drive(&mut io, |f| {
        assert!(
            f.stiffness_sent.iter().all(|&s| s == 0) && f.switch.limp && !f.switch.tripped,
            "stiff before any wake: {:?}",
            f.stiffness_sent
        );
        n += 1;
        n == 200
    });
    assert_eq!(
        board.snapshot().motion,
        nao_runtime::Motion::LimpWaitingForWake
    );
    let generation = board.snapshot().trip_count;
    assert_eq!(
        rt.handle().wake(),
        Ok(generation),
        "a wake carries the armed generation"
    );
    drive(&mut io, |f| f.stiffness_sent.iter().all(|&s| s == 500));
    assert_eq!(board.snapshot().motion, nao_runtime::Motion::Awake);
    io.handle().trip();
    drive(&mut io, |f| f.switch.tripped);
    assert_eq!(board.snapshot().motion, nao_runtime::Motion::LimpTripped);
    assert!(rt.handle().wake().is_err(), "no wake while tripped");
    drop(rt);
}

/// A stiff runtime; `fault` done to it (through the sim, the board or the
/// program's io), driven `until` it shows; `check` on the board and the
/// latest sensors; the frame of the first cycle that saw the switch tripped
/// is all-off.
fn fault_gives_an_all_off_frame(
    fault: impl FnOnce(&Rig, &MemorySwitch, &ProgramIo),
    until: impl FnMut(&SensorFrame) -> bool,
    check: impl FnOnce(&MemorySwitch, &SensorFrame),
) {
    let rig = Rig::start();
    let board = Arc::new(MemorySwitch::armed());
    let (rt, mut io, seen) = start_stiff(&rig, &board);
    fault(&rig, &board, &io);
    drive(&mut io, until);
    check(&board, &io.handle().latest_sensors());
    assert_first_tripped_frame_all_off(&rig, seen.first_tripped().unwrap());
    drop(rt);
}

#[test]
fn api_trip_makes_the_very_next_frame_all_off() {
    fault_gives_an_all_off_frame(
        |_, _, io| io.handle().trip(),
        |f| f.switch.tripped,
        |_, f| {
            assert!(f.all_off);
            assert_eq!(f.switch.reason, Some(Reason::Api));
        },
    );
}

#[test]
fn chest_button_trips_and_the_next_frame_is_all_off() {
    // The cycle that hands over the button answer trips the page; its frame
    // went out before the answer was read, so the next one is all-off.
    fault_gives_an_all_off_frame(
        |rig, _, _| {
            testkit::ok(rig.sim_ctl(&["button"]), "nao-rs-sim ctl button");
        },
        |f| f.all_off,
        |board, _| assert_eq!(board.snapshot().reason, Some(Reason::ChestButton)),
    );
}

#[test]
fn page_lost_gives_all_off_from_that_frame_on() {
    fault_gives_an_all_off_frame(
        |_, board, _| board.damage(),
        |f| f.switch.page_lost,
        |_, f| assert_eq!(f.switch.reason, Some(Reason::PageLost)),
    );
}

#[test]
fn stopping_trips_shutdown_and_the_last_frame_is_all_off() {
    let (rig, board, rt, _io) = awake();
    let (_, summary) = rt.stop();
    assert_eq!(board.snapshot().reason, Some(Reason::Shutdown));
    std::thread::sleep(Duration::from_millis(50));
    let trace = trace(&rig);
    let cycle_frames: Vec<_> = trace.iter().filter(|l| l.is_cycle_frame()).collect();
    let last = cycle_frames.last().unwrap();
    assert!(last.all_off, "last frame all-off: {last:?}");
    assert!(
        cycle_frames[cycle_frames.len() - 2].all_off,
        "one more all-off frame after the trip"
    );
    assert_eq!(last.seq as u64, summary.cycles + 1);
    // The heartbeat confirmed the last frame as all-off.
    let s = board.snapshot();
    assert!(s.last_cycle.is_some());
    assert_eq!(s.all_off_confirmed_cycle, s.last_cycle);
}

#[test]
fn full_command_ring_hands_the_command_back() {
    let (_rig, _board, rt, mut io) = started(Config {
        period_ns: 1_000_000_000,
        ..config()
    });
    let mut handed_back = None;
    for i in 0..64 {
        let c = Command {
            sonar_mode: i,
            ..Command::default()
        };
        if let Err(c) = io.push_command(c) {
            handed_back = Some(c);
            break;
        }
    }
    assert!(
        handed_back.is_some(),
        "a 4-slot ring fills within 64 pushes at 1 Hz"
    );
    drop(rt);
}

struct PanicAt(u64);

impl<L> nao_runtime::CycleHook<L> for PanicAt {
    fn before_cycle(&mut self, _link: &mut L, inputs: &nao_wire::step::Observed<'_>) {
        if inputs.k == self.0 {
            panic!("test: a panic in the cycle actor");
        }
    }
}

#[test]
fn panic_in_the_cycle_trips_fault() {
    let rig = Rig::start();
    let board = Arc::new(MemorySwitch::armed());
    let (rt, _io) = start(&rig, &board, config(), PanicAt(5));
    let (_, summary) = rt.wait();
    assert!(summary.panicked);
    assert_eq!(board.snapshot().reason, Some(Reason::Fault));
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// [`started`] with the UDP stop listener (normal priority) on a free
/// port; the port.
fn started_with_udp() -> (Rig, Arc<MemorySwitch>, Runtime<SimLink>, ProgramIo, u16) {
    let port = testkit::free_udp_port();
    let (rig, board, rt, io) = started(Config {
        udp_port: Some(port),
        udp_priority: None,
        ..config()
    });
    (rig, board, rt, io, port)
}

#[test]
fn udp_flood_does_not_disturb_the_cycle_and_the_stop_still_trips() {
    let (_rig, board, rt, mut io, port) = started_with_udp();
    let before = io.next_sensors(1_000_000_000).unwrap().cycle;
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..20_000u32 {
        let _ = tx.send_to(&i.to_le_bytes(), ("127.0.0.1", port));
    }
    let after = io.next_sensors(1_000_000_000).unwrap();
    assert!(after.cycle > before, "the cycle went on during the flood");
    assert!(!after.switch.tripped, "junk datagrams are ignored");
    assert!(wait_until(|| {
        let _ = tx.send_to(b"NAO-RS STOP", ("127.0.0.1", port));
        board.snapshot().reason == Some(Reason::Udp)
    }));
    drop(rt);
}

/// Both processes read one socket, so the runtime never lets the port go
/// for a guard (it does not even look for one): it holds the port (no
/// other program can bind it), raises no "UDP port not owned", and a stop
/// trips.
#[test]
fn udp_port_is_read_by_the_runtime_also_with_a_live_guard() {
    let (_rig, board, rt, mut io, port) = started_with_udp();
    assert!(wait_until(
        || std::net::UdpSocket::bind(("0.0.0.0", port)).is_err()
    ));
    for _ in 0..30 {
        io.next_sensors(1_000_000_000).unwrap();
    }
    let flags = io.handle().latest_sensors().safety;
    assert!(!flags.contains(nao_runtime::SafetyFlags::UDP_PORT_NOT_OWNED));
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
    assert!(wait_until(|| !board.snapshot().armed));
    drop(rt);
}

/// The status file is the runtime's own, however it is hosted: a program
/// linking the library gets it written (here at `Config::status_file`),
/// whole, at 10 Hz, with the motion state and every joint's stiffness.
#[test]
fn the_library_runtime_writes_the_status_file_itself() {
    use nao_runtime::status_file::StatusFile;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("status.json");
    let (_rig, _board, rt, mut io) = started(Config {
        status_file: Some(path.clone()),
        ..config()
    });
    assert!(wait_until(
        || StatusFile::read(&path).is_some_and(|s| s.cycle > 5)
    ));
    let s = StatusFile::read(&path).unwrap();
    assert_eq!(s.motion, "limp-waiting-for-wake");
    assert_eq!(s.stiffness.len(), 25);
    rt.handle().wake().unwrap();
    drive(&mut io, |f| f.stiffness_sent.iter().all(|&s| s == 500));
    assert!(wait_until(|| StatusFile::read(&path)
        .is_some_and(
            |s| s.motion == "awake" && s.stiffness.iter().all(|&x| x == 500)
        )));
    let (_, summary) = rt.stop();
    let last = StatusFile::read(&path).unwrap();
    assert_eq!(
        last.cycle, summary.cycles,
        "the last status is written at the end"
    );
    assert!(last.tripped && last.motion == "limp-tripped");
}

/// Bring-up always runs `trip`: with `hold:3000` set, a press of one
/// answer (the sim's `button`) reaches the program only in a normal run,
/// and trips `chest-button` in bring-up.
#[test]
fn chest_button_hold_is_trip_in_bring_up() {
    use nao_wire::protocol::bringup::BringUpLimits;
    use nao_wire::protocol::chest_button::ChestButtonMode;
    let hold = ChestButtonMode::Hold { ms: 3000 };
    for bringup in [false, true] {
        let cfg = Config {
            chest_button: hold,
            bringup: bringup.then(|| nao_runtime::BringUpSetup {
                joint: nao_wire::Joint::HeadYaw,
                limits: BringUpLimits::default(),
            }),
            ..config()
        };
        let (rig, board, rt, mut io) = started(cfg);
        drive(&mut io, |_| true);
        testkit::ok(rig.sim_ctl(&["button"]), "nao-rs-sim ctl button");
        let mut seen = false;
        for _ in 0..40 {
            if io
                .next_sensors(1_000_000_000)
                .is_some_and(|f| f.chest_button)
            {
                seen = true;
            }
        }
        let reason = board.snapshot().reason;
        rt.stop();
        assert!(seen, "bring-up {bringup}: the program sees the press");
        if bringup {
            assert_eq!(reason, Some(Reason::ChestButton), "bring-up runs trip");
        } else {
            assert_eq!(reason, None, "hold:3000: a short press does not trip");
        }
    }
}
