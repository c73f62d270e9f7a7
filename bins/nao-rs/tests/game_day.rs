//! A game day end to end (`docs/game-day.md`): `nao-rs run --controller
//! lola` as a real process against the virtual robot, a robot program that
//! behaves as hulk's primary-state filter does (a test double written from
//! that behaviour, not hulk's code), chest button presses injected with
//! `nao-rs-sim ctl button MS`, judged by the simulator's trace (the
//! stiffness on the wire) and the page.

mod common;

#[path = "../../../actors/tests/common/lola_client.rs"]
mod lola_client;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{frames_after, free_udp_port, runtime, stiff_after, wait_tripped, Rig, RT};
use deathswitch::{Page, Reason};
use lola_client::{decode, Answer, FRAME_LEN};
use nao_rs_sim::{Tail, TraceLine};
use nao_wire::JOINTS;

const MS: u64 = 1_000_000;

/// The robot program's primary state, as hulk's primary-state filter moves
/// it without a GameController: a chest button press moves Unstiff ->
/// Initial (stiffen and stand), then Initial -> Penalized -> Playing ->
/// Penalized -> Playing ... on each press. (Its "head touch -> Unstiff"
/// gesture cannot happen on nao-rs: head touch reads 0.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Primary {
    Unstiff,
    Initial,
    Penalized,
    Playing,
}

impl Primary {
    /// The state after a chest button press (its rising edge in `Touch[0]`).
    fn on_chest_press(self) -> Primary {
        match self {
            Primary::Unstiff => Primary::Initial,
            Primary::Initial => Primary::Penalized,
            Primary::Penalized => Primary::Playing,
            Primary::Playing => Primary::Penalized,
        }
    }

    /// The stiffness the program commands, per mille: 0 unstiff, else it
    /// stands, at a stiffness of its own for each state so that the trace
    /// tells the states apart.
    fn stiffness_per_mille(self) -> u16 {
        match self {
            Primary::Unstiff => 0,
            Primary::Initial => 500,
            Primary::Penalized => 600,
            Primary::Playing => 700,
        }
    }
}

/// The robot program in a thread: reads every LoLA frame, moves its primary
/// state on each rising edge of the chest button, answers with its
/// stiffness at the measured positions (it holds the pose it finds).
struct Program {
    state: Arc<Mutex<Primary>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Program {
    fn start(socket: &Path) -> Program {
        let mut s = testkit::wait_for(
            &format!("the LoLA socket {}", socket.display()),
            Duration::from_secs(15),
            || UnixStream::connect(socket).ok(),
        );
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let state = Arc::new(Mutex::new(Primary::Unstiff));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stop2) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; FRAME_LEN];
            let mut was_pressed = false;
            // Relaxed: a flag of this test only.
            while !stop2.load(Ordering::Relaxed) {
                if s.read_exact(&mut buf).is_err() {
                    return;
                }
                let f = decode(&buf);
                let pressed = f.touch[0] > 0.5;
                let mut p = st.lock().unwrap();
                if pressed && !was_pressed {
                    *p = p.on_chest_press();
                }
                was_pressed = pressed;
                let stiffness = p.stiffness_per_mille() as f32 / 1000.0;
                drop(p);
                let position: [f32; JOINTS] = std::array::from_fn(|j| f.position[j]);
                if s.write_all(&Answer::new(position, [stiffness; JOINTS]).encode())
                    .is_err()
                {
                    return;
                }
            }
        });
        Program {
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn state(&self) -> Primary {
        *self.state.lock().unwrap()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // Relaxed: a flag of this test only.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A robot on a fresh page (tripped `boot`, as after a boot): the virtual
/// robot, `nao-rs run --controller lola` with `extra` arguments, and the
/// program connected.
struct Robot {
    program: Program,
    _rt: testkit::Proc,
    page: Page,
    rig: Rig,
}

impl Robot {
    fn boot(extra: &[&str]) -> Robot {
        let rig = Rig::start();
        let page = Page::open(rig.page_path()).unwrap();
        let socket = rig.dir().join("robocup");
        let mut args = vec!["--lola-socket", socket.to_str().unwrap()];
        args.extend_from_slice(extra);
        let rt = rig.start_runtime(&runtime("lola", free_udp_port()).args(&args));
        let program = Program::start(&socket);
        Robot {
            program,
            _rt: rt,
            page,
            rig,
        }
    }

    /// A press of `ms` on the chest button (`nao-rs-sim ctl button MS`);
    /// returns when it was injected (monotonic ns).
    fn press(&self, ms: u64) -> u64 {
        let t = deathswitch::monotonic_ns();
        testkit::ok(
            self.rig.sim_ctl(&["button", &ms.to_string()]),
            "nao-rs-sim ctl button",
        );
        t
    }

    /// A short press (150 ms), then time for the release to reach the
    /// program.
    fn short_press(&self) -> u64 {
        let t = self.press(150);
        std::thread::sleep(Duration::from_millis(400));
        t
    }

    fn naoctl(&self, args: &[&str]) -> serde_json::Value {
        let out = testkit::ok(self.rig.naoctl(args), &format!("naoctl {args:?}"));
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// `naoctl status --json` once the runtime's status file names its
    /// chest button mode.
    fn chest_button_mode(&self) -> String {
        testkit::wait_for(
            "the chest button mode in `naoctl status --json`",
            Duration::from_secs(15),
            || {
                let v = self.naoctl(&["status", "--json"]);
                v["chest_button"].as_str().map(str::to_string)
            },
        )
    }

    /// Waits for a cycle frame at or after `t_ns` whose largest stiffness
    /// is `per_mille`.
    fn wait_stiffness(&self, t_ns: u64, per_mille: u16, what: &str) -> TraceLine {
        let mut tail = Tail::new(self.rig.trace_path());
        tail.wait_for(Duration::from_secs(5), |l| {
            l.is_cycle_frame() && l.t_ns >= t_ns && l.max_stiffness == per_mille
        })
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "{what}: no frame with stiffness {per_mille} per mille within 5 s (the program \
                 is {:?}, the page {:?})",
                self.program.state(),
                self.page.snapshot().reason
            )
        })
    }

    /// The cycle frames sent in `[from_ns, to_ns)`.
    fn frames(&self, from_ns: u64, to_ns: u64) -> Vec<TraceLine> {
        let lines = nao_rs_sim::trace::read(self.rig.trace_path()).unwrap();
        lines
            .into_iter()
            .filter(|l| l.is_cycle_frame() && l.t_ns >= from_ns && l.t_ns < to_ns)
            .collect()
    }

    /// Watches the frames for `ms` from now: all of them all-off.
    fn assert_limp_for(&self, ms: u64, what: &str) {
        let t = deathswitch::monotonic_ns();
        std::thread::sleep(Duration::from_millis(ms));
        let f = self.frames(t, deathswitch::monotonic_ns());
        assert!(
            f.len() as u64 >= ms / 24,
            "{what}: too few frames: {}",
            f.len()
        );
        let stiff: Vec<_> = f.iter().filter(|l| !l.all_off).collect();
        assert!(
            stiff.is_empty(),
            "{what}: {} stiff frames (the program is {:?}): {:?}",
            stiff.len(),
            self.program.state(),
            stiff.first()
        );
    }
}

const HOLD_MS: u64 = 1000;

/// The robot handler's flow with `hold:1000`: boot tripped; re-arm and
/// wake; a short press makes the program stand (stiffness on the wire),
/// short presses toggle penalized and playing, the switch stays armed; a
/// long press stops the robot (all-off, reason `chest-button`), no earlier
/// than the hold time; a re-arm does not resume motion, nor does a press;
/// a wake does.
#[test]
fn chest_button_hold_game_day_flow_short_presses_reach_the_program_a_long_press_stops() {
    let r = Robot::boot(&["--chest-button", &format!("hold:{HOLD_MS}")]);
    assert_eq!(r.chest_button_mode(), format!("hold:{HOLD_MS}"));
    assert_eq!(r.page.reason(), Some(Reason::Boot), "a boot starts tripped");
    r.assert_limp_for(300, "booted, tripped");

    // The handler checks the robot, re-arms and wakes it.
    r.naoctl(&["rearm", "--yes"]);
    testkit::ok(r.rig.wake(RT), "nao-rs wake");
    r.assert_limp_for(300, "woken, the program unstiff");
    assert_eq!(r.program.state(), Primary::Unstiff);

    // A short press: the program stands up; the switch stays armed.
    let t = r.short_press();
    r.wait_stiffness(t, 500, "Initial: the program stands");
    assert_eq!(r.program.state(), Primary::Initial);
    let standing = deathswitch::monotonic_ns();
    // Short presses toggle penalized and playing.
    for (want, per_mille) in [
        (Primary::Penalized, 600),
        (Primary::Playing, 700),
        (Primary::Penalized, 600),
        (Primary::Playing, 700),
    ] {
        let t = r.short_press();
        r.wait_stiffness(t, per_mille, &format!("{want:?}"));
        assert_eq!(r.program.state(), want);
        assert!(
            r.page.snapshot().armed,
            "a short press does not stop the robot"
        );
    }
    let now = deathswitch::monotonic_ns();
    let f = r.frames(standing, now);
    assert!(
        f.iter().all(|l| !l.all_off),
        "the robot stood through every short press"
    );

    // A long press stops it: all-off, reason chest-button, not before the
    // hold time.
    let t = r.press(2 * HOLD_MS + 500);
    let trip = wait_tripped(&r.page);
    assert_eq!(r.page.reason(), Some(Reason::ChestButton));
    assert!(
        trip >= t + HOLD_MS * MS,
        "tripped {} ms after the press began, before the hold time {HOLD_MS} ms",
        (trip - t) / MS
    );
    let after = frames_after(&r.rig, trip);
    assert!(
        stiff_after(&after, trip).is_empty(),
        "every frame after the trip is all-off: {after:?}"
    );
    assert_eq!(
        r.naoctl(&["status", "--json"])["reason"],
        "chest-button",
        "naoctl says why"
    );
    // The press ends (2.5 s after it began) and the release reaches the
    // program.
    let released = t + (2 * HOLD_MS + 800) * MS;
    std::thread::sleep(Duration::from_nanos(
        released.saturating_sub(deathswitch::monotonic_ns()),
    ));

    // The program still asks to stand; a re-arm does not resume motion.
    assert_ne!(r.program.state(), Primary::Unstiff);
    r.naoctl(&["rearm", "--yes"]);
    r.assert_limp_for(1000, "re-armed, not woken");
    // A press never wakes.
    r.short_press();
    r.assert_limp_for(600, "re-armed, a short press");
    assert!(r.page.snapshot().armed, "a short press does not trip");
    // A wake does: the program's stiffness is on the wire again.
    let t = deathswitch::monotonic_ns();
    testkit::ok(r.rig.wake(RT), "nao-rs wake");
    let want = r.program.state().stiffness_per_mille();
    r.wait_stiffness(t, want, "woken after the stop");
}

/// The same flow in `trip` mode (the default): the first press, the one
/// that would start the robot, trips the switch; the program's stand never
/// reaches the wire.
#[test]
fn chest_button_trip_mode_the_first_press_stops_the_robot() {
    let r = Robot::boot(&[]);
    assert_eq!(r.chest_button_mode(), "trip");
    r.naoctl(&["rearm", "--yes"]);
    let woken = deathswitch::monotonic_ns();
    testkit::ok(r.rig.wake(RT), "nao-rs wake");
    r.assert_limp_for(300, "woken, the program unstiff");
    r.press(150);
    let trip = wait_tripped(&r.page);
    assert_eq!(r.page.reason(), Some(Reason::ChestButton));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        r.program.state(),
        Primary::Initial,
        "the program saw the press"
    );
    let f = r.frames(woken, deathswitch::monotonic_ns());
    assert!(
        f.iter().all(|l| l.all_off),
        "the stand the press asked for never reached the wire (trip at {trip})"
    );
}

/// A hold time outside 300..=3000 ms is refused before any frame, naming
/// the setting, the value, the range and the file.
#[test]
fn chest_button_hold_out_of_range_is_refused_naming_the_setting_and_the_file() {
    let rig = Rig::start();
    for bad in ["hold:5000", "hold:299", "hold:soon", "stop"] {
        let mut c =
            rig.runtime_command(&runtime("none", free_udp_port()).args(["--chest-button", bad]));
        let out = testkit::output(&mut c);
        assert!(!out.status.success(), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for want in [
            "--chest-button",
            bad,
            "300",
            "3000",
            "NAO_RS_CHEST_BUTTON",
            "/etc/nao-rs/nao-rs.conf",
        ] {
            assert!(err.contains(want), "{bad}: {want:?} missing in: {err}");
        }
    }
    let frames = nao_rs_sim::trace::read(rig.trace_path()).unwrap_or_default();
    assert!(frames.is_empty(), "no frame was sent: {frames:?}");
}
