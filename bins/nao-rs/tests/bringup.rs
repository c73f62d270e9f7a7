//! `nao-rs bringup` as a second process against the virtual robot, judged
//! only by the simulator's trace: every frame's stiffness, commanded
//! position and reported position per joint, with the posture, the toe
//! bumpers and the joint faults its answer carried (`docs/sim.md`, "The
//! trace"). The keys come live on the program's standard input (one byte a
//! jog step; its end quits); the robot is woken with `nao-rs wake`, as a
//! person would. The rules are those of `docs/bringup.md`; each test is
//! named after its rule (`docs/bringup.md`, "Tests").

mod common;

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::time::Duration;

use common::LolaController;
use deathswitch::{Page, Reason};
use nao_rs_sim::{Tail, TraceRecord};
use nao_wire::Joint;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use testkit::{Rig, RigSpec};

/// The name the session is started as (its log `bu.log`, its wake socket
/// `bu.wake.sock` in the rig's folder).
const BU: &str = "bu";
/// The joint brought up.
const JOINT: Joint = Joint::LShoulderPitch;
/// The default stiffness cap, per mille.
const CAP: u16 = 200;
/// The default window, +- rad.
const WINDOW: f32 = 0.3;
/// The default rate, rad/s.
const RATE: f32 = 0.5;
/// What the trace's radians may differ from the runtime's: one encoder
/// count (TAU / 4096 = 0.0015 rad) and the trace's 4 decimals.
const TOL: f32 = 0.002;
/// A frame is built from the answer this many lines before it in the
/// trace: the runtime builds frame k+1, then reads the answer to frame k,
/// then writes frame k+1 (`wire/src/protocol/cycle.rs`, HAL's order), and
/// its gate decides on the sensors of the last answer read, the one to
/// frame k-1. So the first frame built after the runtime read an answer is
/// the second line after that answer's.
const REACTION: usize = 2;
/// What a frame may be late at the simulator against the cycle's own clock
/// (the rate is judged on the simulator's receive times).
const LATE_S: f32 = 0.05;

/// A `nao-rs bringup` session on a rig: the process (killed on drop), its
/// keys, the page (armed: the test is the person at the robot), the rig.
struct Session {
    bu: Child,
    keys: Option<ChildStdin>,
    page: Page,
    rig: Rig,
}

impl Drop for Session {
    fn drop(&mut self) {
        if !matches!(self.bu.try_wait(), Ok(Some(_))) {
            let pid = Pid::from_raw(self.bu.id() as i32);
            let _ = signal::kill(pid, Signal::SIGCONT);
            let _ = self.bu.kill();
            let _ = self.bu.wait();
        }
    }
}

/// A rig whose virtual robot starts with the simulator's `extra` settings
/// (a posture, `--inject` commands).
fn rig(extra: &[&str]) -> Rig {
    let mut sim_args: Vec<String> = vec!["--versions".into(), "10".into()];
    sim_args.extend(extra.iter().map(|s| s.to_string()));
    RigSpec {
        sim_args,
        ..RigSpec::default()
    }
    .start()
}

/// Starts `nao-rs bringup --joint LShoulderPitch` with `extra` options on
/// `rig`, the page re-armed first, the recording in `rec/` of the rig's
/// folder, its keys on a pipe, its output in `bu.log`.
fn start(rig: Rig, extra: &[&str]) -> Session {
    let page = Page::open(rig.page_path()).unwrap();
    page.rearm();
    let rec = rig.dir().join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let log = File::create(rig.log_path(BU)).unwrap();
    let mut cmd = rig.command("nao-rs");
    cmd.args([
        "bringup",
        "--joint",
        JOINT.name(),
        "--link",
        &rig.link_arg(),
    ])
    .args(["--no-udp", "--priority", "0"])
    .arg("--page")
    .arg(rig.page_path())
    .arg("--wake-socket")
    .arg(rig.wake_socket(BU))
    .arg("--record")
    .arg(&rec)
    .args(extra)
    .stdin(Stdio::piped())
    .stdout(log.try_clone().unwrap())
    .stderr(log);
    // SAFETY: runs in the forked child before exec and only calls prctl
    // (PR_SET_PDEATHSIG), an async-signal-safe system call: the session
    // dies with the test.
    unsafe {
        cmd.pre_exec(|| {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            Ok(())
        });
    }
    let mut bu = cmd.spawn().expect("start nao-rs bringup");
    let keys = bu.stdin.take();
    Session {
        bu,
        keys,
        page,
        rig,
    }
}

impl Session {
    fn pid(&self) -> u32 {
        self.bu.id()
    }

    /// Wakes the session with `nao-rs wake` once its wake socket is there.
    fn wake(&self) {
        self.rig.wake_when_ready(BU);
    }

    /// Waits until the session's terminal shows `what` (its state lines).
    fn wait_shown(&self, what: &str) {
        self.rig.wait_log(BU, what, Duration::from_secs(15));
    }

    /// `nao-rs-sim ctl WORDS...`.
    fn sim(&self, words: &[&str]) {
        testkit::ok(
            self.rig.sim_ctl(words),
            &format!("nao-rs-sim ctl {words:?}"),
        );
    }

    /// Presses keys (`+`, `-`).
    fn keys(&mut self, k: &str) {
        let stdin = self.keys.as_mut().expect("keys open");
        stdin.write_all(k.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// `n` jog steps `k`, `every` apart.
    fn jog(&mut self, k: &str, n: usize, every: Duration) {
        for _ in 0..n {
            self.keys(k);
            std::thread::sleep(every);
        }
    }

    /// Ends the keys (the session quits: limp, stop) and waits for the
    /// process to end; its status.
    fn quit(&mut self) -> ExitStatus {
        self.keys = None;
        self.wait_exit(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("nao-rs bringup did not quit:\n{}", self.log()))
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        testkit::poll_for(limit, || self.bu.try_wait().ok().flatten())
    }

    fn log(&self) -> String {
        self.rig.log(BU)
    }

    /// Holds the toe bumpers `words` (`left`, `right`) and waits for the
    /// first frame after it with the joint stiff; returns it.
    fn press(&self, words: &str) -> TraceRecord {
        let pid = self.pid() as i32;
        let j = JOINT.index();
        let mut tail = Tail::from_end(self.rig.trace_path()).unwrap();
        self.sim(&["bumper", words]);
        tail.wait_for_record(Duration::from_secs(10), |r| {
            r.frame.peer_pid == pid && r.stiffness.get(j).is_some_and(|&s| s > 0)
        })
        .unwrap()
        .unwrap_or_else(|| panic!("the joint never got stiff:\n{}", self.log()))
    }

    /// Waits for `n` more cycle frames of the process `pid`.
    fn wait_frames(&self, pid: u32, n: usize) {
        let mut tail = Tail::from_end(self.rig.trace_path()).unwrap();
        let mut seen = 0;
        let got = tail
            .wait_for(Duration::from_secs(10), |l| {
                if l.is_cycle_frame() && l.peer_pid as u32 == pid {
                    seen += 1;
                }
                seen >= n
            })
            .unwrap();
        assert!(got.is_some(), "{n} frames of {pid}:\n{}", self.log());
    }

    /// The session's cycle frames, in order.
    fn frames(&self) -> Vec<TraceRecord> {
        frames_of(&self.rig, self.pid())
    }

    /// The recording the session wrote.
    fn recording(&self) -> PathBuf {
        let dir = self.rig.dir().join("rec");
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "one recording: {files:?}");
        files.into_iter().next().unwrap()
    }
}

/// The cycle frames of the process `pid` in the rig's trace, in order.
fn frames_of(rig: &Rig, pid: u32) -> Vec<TraceRecord> {
    nao_rs_sim::trace::read_records(rig.trace_path())
        .unwrap()
        .into_iter()
        .filter(|r| r.frame.is_cycle_frame() && r.frame.peer_pid as u32 == pid)
        .collect()
}

/// The joint's stiffness in frame `r`, per mille.
fn stiff(r: &TraceRecord) -> u16 {
    r.stiffness[JOINT.index()]
}

/// A run of the joint: the frames `[first, last]` with it stiff in a row.
#[derive(Debug, Clone, Copy)]
struct Run {
    first: usize,
    last: usize,
    /// The position measured when the joint was enabled, rad: what the
    /// frame before the first stiff one commands (the run's start, at
    /// stiffness 0 while the ramp begins, or limp: the measured position).
    p0: f32,
}

/// Judges the frames of one bring-up session by the rules that hold in
/// every frame (`docs/bringup.md`, "The rules"); returns the joint's runs.
///
/// - one joint: every other joint's stiffness is 0;
/// - low stiffness: the joint's is at most `cap`;
/// - hold-to-run: a frame is stiff only when the answer it was built from
///   ([`REACTION`] lines before) carried a toe bumper held, so a release
///   is 0 from the first frame built after the runtime read it;
/// - the window: each commanded position of a run is within `window` of
///   the position measured when it was enabled;
/// - the rate: between any two frames of a run, the commanded position
///   moves at most `rate` times the time between them.
fn assert_bringup_rules(f: &[TraceRecord], cap: u16, window: f32, rate: f32) -> Vec<Run> {
    let j = JOINT.index();
    assert!(!f.is_empty(), "no frames");
    let mut runs: Vec<Run> = Vec::new();
    for (n, r) in f.iter().enumerate() {
        assert_eq!(r.stiffness.len(), nao_wire::JOINTS, "frame {n}: {r:?}");
        for (k, &s) in r.stiffness.iter().enumerate() {
            assert!(
                k == j || s == 0,
                "frame {n}: joint {k} has stiffness {s}: only {JOINT} may be stiff"
            );
        }
        let s = stiff(r);
        assert!(s <= cap, "frame {n}: stiffness {s} above the cap {cap}");
        if s == 0 {
            continue;
        }
        assert!(n >= REACTION, "the session's first frames are stiff: {r:?}");
        let before = &f[n - REACTION];
        assert!(
            before.bumper_held(),
            "frame {n} stiff ({s}) though the answer it was built from had no toe bumper held \
             (seq {} bumpers {:?})",
            before.frame.seq,
            before.bumpers
        );
        match runs.last_mut() {
            Some(run) if run.last + 1 == n => run.last = n,
            _ => runs.push(Run {
                first: n,
                last: n,
                p0: f[n - 1].target[j],
            }),
        }
    }
    for run in &runs {
        // The frame before the first stiff one commands the measured
        // position (the run's start at stiffness 0, or limp).
        let from = run.first - 1;
        let span = &f[from..=run.last];
        for (i, r) in span.iter().enumerate() {
            let target = r.target[j];
            assert!(
                (target - run.p0).abs() <= window + TOL,
                "frame {}: commanded {target:+.4} rad outside the window {:+.4} +- {window}",
                from + i,
                run.p0
            );
            for (h, e) in span[..i].iter().enumerate() {
                let moved = (target - e.target[j]).abs();
                let dt = (r.frame.t_ns - e.frame.t_ns) as f64 / 1e9;
                let allowed = rate * (dt as f32 + LATE_S) + TOL;
                assert!(
                    moved <= allowed,
                    "frames {}..{}: commanded moved {moved:.4} rad in {dt:.3} s: faster than \
                     {rate} rad/s",
                    from + h,
                    from + i
                );
            }
        }
    }
    runs
}

/// Every frame from `from` on is all-off.
fn assert_all_off_from(f: &[TraceRecord], from: usize) {
    for (n, r) in f.iter().enumerate().skip(from) {
        assert!(
            r.frame.all_off,
            "frame {n} after the trip not all-off: {r:?}"
        );
    }
}

/// The first frame (index) built after a trip: the first all-off frame
/// after the last stiff one.
fn trip_frame(f: &[TraceRecord]) -> usize {
    let last_stiff = f
        .iter()
        .rposition(|r| stiff(r) > 0)
        .expect("a stiff frame before the trip");
    assert!(last_stiff + 1 < f.len(), "no frame after the trip");
    last_stiff + 1
}

/// Waits until the page is tripped with `reason`.
fn wait_tripped(s: &Session, reason: Reason) {
    testkit::wait_for("the switch tripped", Duration::from_secs(10), || {
        (!s.page.snapshot().armed).then_some(())
    });
    assert_eq!(s.page.reason(), Some(reason), "\n{}", s.log());
}

/// A lying robot, woken, the session waiting for the toe bumper; then the
/// bumper held and the joint stiff.
fn lying_enabled(sim: &[&str], extra: &[&str]) -> Session {
    let mut args = vec!["--posture", "lying-back"];
    args.extend_from_slice(sim);
    let s = start(rig(&args), extra);
    s.wake();
    s.wait_shown("waiting bumper-not-held");
    s.press("left");
    s
}

const KEY_GAP: Duration = Duration::from_millis(120);

#[test]
fn bringup_standing_robot_gets_no_stiffness() {
    let mut s = start(rig(&["--posture", "standing"]), &[]);
    s.wake();
    s.wait_shown("waiting not-lying");
    s.sim(&["bumper", "both"]);
    // Longer than the lying check's 1 s hold, keys pressed throughout.
    s.jog("+", 12, KEY_GAP);
    s.jog("-", 4, KEY_GAP);
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    assert!(f.len() >= 100, "{} frames", f.len());
    let stiff_frames: Vec<_> = f.iter().filter(|r| !r.frame.all_off).collect();
    assert!(stiff_frames.is_empty(), "standing, stiff: {stiff_frames:?}");
    assert!(
        f.iter()
            .skip(f.len() / 2)
            .all(|r| r.bumper_held() && r.posture == nao_rs_sim::body::Posture::Standing),
        "the bumper was held on a standing robot"
    );
}

#[test]
fn bringup_lying_robot_without_bumper_gets_no_stiffness() {
    let mut s = start(rig(&["--posture", "lying-back"]), &[]);
    s.wake();
    s.wait_shown("waiting bumper-not-held");
    s.jog("+", 12, KEY_GAP);
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    assert!(f.len() >= 100, "{} frames", f.len());
    let stiff_frames: Vec<_> = f.iter().filter(|r| !r.frame.all_off).collect();
    assert!(
        stiff_frames.is_empty(),
        "no bumper, stiff: {stiff_frames:?}"
    );
}

#[test]
fn bringup_bumper_held_stiffens_only_the_joint_within_cap_window_and_rate() {
    // A tighter window (0.1 rad) and cap (0.15), reached by the jog steps.
    let mut s = lying_enabled(&[], &["--window", "0.1", "--max-stiffness", "0.15"]);
    s.jog("+", 5, KEY_GAP);
    std::thread::sleep(Duration::from_millis(400));
    s.jog("-", 2, KEY_GAP);
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    let runs = assert_bringup_rules(&f, 150, 0.1, RATE);
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    let run = runs[0];
    let j = JOINT.index();
    let targets: Vec<f32> = f[run.first..=run.last]
        .iter()
        .map(|r| r.target[j])
        .collect();
    let top = targets.iter().copied().fold(f32::MIN, f32::max);
    assert!(
        (top - (run.p0 + 0.1)).abs() <= TOL,
        "five steps of 0.05 rad end at the window's edge {:+.4}: {top:+.4}",
        run.p0 + 0.1
    );
    let peak = f[run.first..=run.last].iter().map(stiff).max().unwrap();
    assert!(peak >= 100, "ramped up toward the cap: {peak}");
    // The joint followed the commanded position (the virtual motor).
    let last = &f[run.last];
    assert!(
        (last.position[j] - last.target[j]).abs() < 0.05,
        "followed: {last:?}"
    );
}

#[test]
fn bringup_bumper_released_limps_the_joint_from_the_next_frame() {
    let mut s = lying_enabled(&[], &[]);
    s.jog("+", 2, KEY_GAP);
    s.sim(&["bumper", "none"]);
    s.wait_frames(s.pid(), 20);
    // Pressed again, a fresh start; released again.
    s.press("right");
    s.sim(&["bumper", "none"]);
    s.wait_frames(s.pid(), 20);
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    let runs = assert_bringup_rules(&f, CAP, WINDOW, RATE);
    assert_eq!(runs.len(), 2, "two presses, two runs: {runs:?}");
    for run in &runs {
        // The first answer without the bumper is the last stiff frame's
        // (or the one after it): the frame after that answer is limp.
        let released = (run.first..f.len())
            .find(|&n| !f[n].bumper_held())
            .expect("released");
        assert!(
            run.last < released + REACTION,
            "{run:?} released at {released}"
        );
        assert!(
            f[released + REACTION..]
                .iter()
                .take(15)
                .all(|r| r.frame.all_off),
            "limp from the first frame built after the release (answer {released})"
        );
    }
    // The second press is a fresh start where the first run left the
    // joint: it commands the position measured then, its window around it.
    let j = JOINT.index();
    assert!(
        (runs[1].p0 - runs[0].p0).abs() > 0.01,
        "the first run moved the joint: {runs:?}"
    );
    let press = runs[1].first - 1 - REACTION;
    assert!(
        (f[press].position[j] - runs[1].p0).abs() <= TOL,
        "the second run starts at the position measured at its press: {runs:?}"
    );
}

#[test]
fn bringup_reversed_joint_trips_wrong_direction_within_the_bound_then_all_off() {
    let name = JOINT.name();
    let fault = format!("joint-fault {name} reversed");
    let mut s = lying_enabled(&["--inject", &fault], &[]);
    s.keys("+");
    wait_tripped(&s, Reason::BringupWrongDirection);
    s.wait_frames(s.pid(), 20);
    assert!(s.quit().success(), "{}", s.log());
    assert!(
        s.log().contains("trip bringup-wrong-direction"),
        "{}",
        s.log()
    );
    let f = s.frames();
    let runs = assert_bringup_rules(&f, CAP, WINDOW, RATE);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (run, j) = (runs[0], JOINT.index());
    assert!(f[run.first].joint_fault(name).is_some_and(|jf| jf.reversed));
    // The step is +: the first answer more than 0.02 rad below the
    // position at the press trips; the first frame built from it is
    // all-off.
    let beyond = (run.first..f.len())
        .find(|&n| f[n].position[j] - run.p0 < -0.02)
        .expect("the joint moved against the step");
    assert_eq!(
        trip_frame(&f),
        beyond + REACTION,
        "tripped by the first frame built from it"
    );
    assert_all_off_from(&f, beyond + REACTION);
    // Within the bound: no stiff frame was built from an answer farther
    // than 0.02 rad the wrong way.
    for n in run.first..=run.last {
        assert!(
            f[n - REACTION].position[j] - run.p0 >= -0.02 - TOL,
            "frame {n}"
        );
    }
}

#[test]
fn bringup_stuck_joint_trips_following_error() {
    let fault = format!("joint-fault {} stuck", JOINT.name());
    let mut s = lying_enabled(&["--inject", &fault], &[]);
    s.jog("+", 5, KEY_GAP);
    wait_tripped(&s, Reason::BringupFollowingError);
    s.wait_frames(s.pid(), 20);
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    let runs = assert_bringup_rules(&f, CAP, WINDOW, RATE);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let j = JOINT.index();
    // The error the gate sees for frame n: the answer it is built from
    // against the position commanded in the frame before.
    let err = |n: usize| (f[n - REACTION].position[j] - f[n - 1].target[j]).abs();
    let t = trip_frame(&f);
    assert!(
        (t - 9..=t).all(|n| err(n) > 0.15 - TOL),
        "the 10 answers before the trip were more than 0.15 rad off"
    );
    assert!(
        !(t - 10..t).all(|n| err(n) > 0.15 + TOL),
        "tripped one frame late"
    );
    assert_all_off_from(&f, t);
}

#[test]
fn bringup_high_current_trips_over_current() {
    let fault = format!("joint-fault {} high-current:2000", JOINT.name());
    let mut s = lying_enabled(&["--inject", &fault], &[]);
    wait_tripped(&s, Reason::BringupOverCurrent);
    s.wait_frames(s.pid(), 20);
    assert!(s.quit().success(), "{}", s.log());
    let f = s.frames();
    assert_bringup_rules(&f, CAP, WINDOW, RATE);
    let j = JOINT.index();
    let t = trip_frame(&f);
    let over = |n: usize| f[n - REACTION].current_ma[j] > 1500;
    assert!(
        (t - 19..=t).all(over),
        "20 answers above 1,500 mA before the trip"
    );
    assert!(!(t - 20..t).all(over), "tripped one frame late");
    assert_all_off_from(&f, t);
}

#[test]
fn bringup_guard_take_over_limps_every_joint() {
    let rig = rig(&["--posture", "lying-back"]);
    let guard = rig.start_guard(0);
    let mut s = start(rig, &[]);
    s.wake();
    s.wait_shown("waiting bumper-not-held");
    s.press("left");
    s.jog("+", 1, KEY_GAP);
    signal::kill(Pid::from_raw(s.pid() as i32), Signal::SIGSTOP).unwrap();
    s.wait_frames(guard.pid(), 12);
    assert_eq!(s.page.reason(), Some(Reason::GuardHeartbeatLost));
    assert!(
        s.wait_exit(Duration::from_secs(2)).is_some(),
        "the guard killed the stopped session"
    );
    let all = nao_rs_sim::trace::read_records(s.rig.trace_path()).unwrap();
    let senders: Vec<u32> = all
        .iter()
        .filter(|r| r.frame.is_cycle_frame())
        .map(|r| r.frame.peer_pid as u32)
        .fold(Vec::new(), |mut v, p| {
            if v.last() != Some(&p) {
                v.push(p);
            }
            v
        });
    assert_eq!(senders, vec![s.pid(), guard.pid()], "who sent each frame");
    let runs = assert_bringup_rules(&s.frames(), CAP, WINDOW, RATE);
    assert_eq!(runs.len(), 1);
    let g = frames_of(&s.rig, guard.pid());
    assert!(g.len() >= 12);
    assert!(
        g.iter()
            .all(|r| r.frame.all_off && r.frame.max_stiffness == 0),
        "the guard's frames are all-off: {g:?}"
    );
    drop(guard);
    drop(s);
}

// ---- LoLA ----

/// A LoLA actuator message: every joint at `stiffness` and `position`, in
/// MessagePack.
fn lola_message(stiffness: f32, position: f32) -> Vec<u8> {
    let mut m = vec![0x82];
    for (key, v) in [("Stiffness", stiffness), ("Position", position)] {
        m.push(0xa0 | key.len() as u8);
        m.extend_from_slice(key.as_bytes());
        m.extend_from_slice(&[0xdc, 0x00, 25]);
        for _ in 0..25 {
            m.push(0xca);
            m.extend_from_slice(&v.to_be_bytes());
        }
    }
    m
}

/// A LoLA client answering every sensor frame with full stiffness and
/// position 0.5 rad for every joint, until dropped.
fn lola_client(path: &Path) -> LolaController {
    let c = testkit::wait_for("the LoLA socket", Duration::from_secs(15), || {
        std::os::unix::net::UnixStream::connect(path).ok()
    });
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    LolaController::start(c, lola_message(1.0, 0.5))
}

#[test]
fn bringup_ignores_a_lola_client_commanding_full_stiffness() {
    let rig = rig(&["--posture", "lying-back"]);
    let socket = rig.dir().join("robocup");
    let socket_arg = socket.display().to_string();
    let mut s = start(rig, &["--lola-socket", &socket_arg]);
    let client = lola_client(&socket);
    s.wake();
    s.wait_shown("waiting bumper-not-held");
    // Woken, lying, no bumper: the client's full stiffness is ignored.
    s.wait_frames(s.pid(), 40);
    s.press("left");
    s.jog("+", 2, KEY_GAP);
    s.wait_frames(s.pid(), 40);
    let answered = client.frames();
    drop(client);
    assert!(s.quit().success(), "{}", s.log());
    assert!(
        answered >= 80,
        "the client got {answered} frames and answered each"
    );
    let f = s.frames();
    // Only the joint, at most the cap, within window and rate: the
    // client's 1.0 and 0.5 rad never reach the frames.
    let runs = assert_bringup_rules(&f, CAP, WINDOW, RATE);
    assert_eq!(runs.len(), 1);
    let j = JOINT.index();
    for (n, r) in f.iter().enumerate() {
        for (k, &p) in r.target.iter().enumerate() {
            assert!(
                k == j || (p - f[0].target[k]).abs() <= TOL,
                "frame {n}: joint {k} commanded to {p:+.4} rad"
            );
        }
    }
}

#[test]
fn bringup_session_recording_replays_byte_for_byte() {
    let mut s = lying_enabled(&[], &["--max-stiffness", "0.1"]);
    s.jog("+", 2, KEY_GAP);
    s.sim(&["bumper", "none"]);
    s.wait_frames(s.pid(), 5);
    assert!(s.quit().success(), "{}", s.log());
    assert_bringup_rules(&s.frames(), 100, WINDOW, RATE);
    let rec = s.recording();
    let name = rec.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with("bringup-") && name.ends_with("-LShoulderPitch.rec"),
        "{name}"
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(
        text.contains("\nbringup LShoulderPitch max-stiffness=0.1\n"),
        "the session's setting is recorded"
    );
    assert_eq!(text.matches("\njog +\n").count(), 2, "both jog steps");
    assert!(text.contains("\nwake\n"), "the wake is recorded");
    let replay = testkit::output(s.rig.command("nao-rs").arg("replay").arg(&rec));
    assert!(
        replay.status.success(),
        "replay: {}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
}
