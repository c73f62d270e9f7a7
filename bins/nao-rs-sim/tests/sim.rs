//! The virtual robot as a process, driven through `SimLink` by the
//! runtime's own start-up and step (`nao_wire::protocol::startup`,
//! `nao_wire::step`): each fault has the effect the spec says the runtime
//! reacts to.

use std::path::PathBuf;
use std::process::Command as Process;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use deathswitch::{MemorySwitch, Switch as _};
use nao_rs_sim::Spawned;
use nao_wire::link::sim::SimLink;
use nao_wire::link::{Link, LinkError, PRODUCT_ID, VENDOR_ID};
use nao_wire::protocol::cycle::{CycleOutput, Reconnect};
use nao_wire::protocol::gate::WakeLatch;
use nao_wire::protocol::startup::{Identity, Startup};
use nao_wire::step::{Step, StepInput, StepOutput};
use nao_wire::Command;

fn exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| testkit::bin("nao-rs-sim")).clone()
}

fn sim(args: &[&str]) -> Spawned {
    Spawned::start(exe(), args).expect("start nao-rs-sim")
}

fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A runtime in miniature: start-up, then the runtime's steps with an
/// armed switch in memory and the protocol model's gate (no wake latch: an
/// armed switch drives; a trip an answer raises trips the switch).
struct Runtime {
    link: SimLink,
    switch: MemorySwitch,
    step: Step,
}

impl Runtime {
    fn start(sim: &Spawned) -> Runtime {
        let mut link = sim.link();
        let id = Startup::run(&mut link).expect("start-up against the simulator");
        Runtime::on(link, &id)
    }

    /// The runtime on `link` for a robot that started up as `id`.
    fn on(link: SimLink, id: &Identity) -> Runtime {
        let switch = MemorySwitch::armed();
        let step = Step::new(id, &[10], &switch.read(), WakeLatch::Off);
        Runtime { link, switch, step }
    }

    /// Tells the simulator `ctl` (a fault), then runs `n` cycles.
    fn after(&mut self, sim: &Spawned, ctl: &str, n: usize) -> Vec<CycleOutput> {
        sim.ctl(ctl).unwrap();
        self.cycles(n, None)
    }

    /// Runs `n` steps with `command` (without waiting for the period).
    fn steps(&mut self, n: usize, command: Option<&Command>) -> Vec<StepOutput> {
        (0..n)
            .map(|_| {
                let input = StepInput {
                    command,
                    now_ns: now_ns(),
                    ..StepInput::default()
                };
                let out = self
                    .step
                    .run(&self.switch, &mut self.link, &input, |_, _| {});
                std::thread::sleep(Duration::from_millis(2));
                out
            })
            .collect()
    }

    /// [`Runtime::steps`]' cycles.
    fn cycles(&mut self, n: usize, command: Option<&Command>) -> Vec<CycleOutput> {
        self.steps(n, command)
            .into_iter()
            .map(|o| o.cycle)
            .collect()
    }
}

#[test]
fn startup_is_answered_like_the_recordings_and_cycles_run_without_failure() {
    let sim = sim(&["--body-id", "SIM-TEST-BODY", "--zero", "3=2222"]);
    let mut link = sim.link();
    let id = Startup::run(&mut link).expect("start-up");
    assert_eq!(id.body_id(), "SIM-TEST-BODY");
    assert_eq!(id.prefs.zero[3], 2222);
    assert_eq!(&id.boot_ids[0], b"BLCH2.1a");
    assert!(id.eeproms[0].starts_with(b"NAO EEPROM A"));
    let mut rt = Runtime::on(link, &id);
    let outs = rt.cycles(10, None);
    assert!(
        outs.iter().all(|o| o.failure.is_none()),
        "{:?}",
        outs.iter().map(|o| o.failure).collect::<Vec<_>>()
    );
    let last = outs.last().unwrap();
    assert_eq!(
        last.accepted_boards, 0x7fff,
        "every board answers version 10"
    );
    assert_eq!(last.sensors.chest_client_state, 0x24);
    // LoLA's sign: gravity as a vector, upright z about -9.81 m/s^2.
    assert!((-9830..=-9790).contains(&last.sensors.imu.accelerometer[2]));
    assert_eq!(
        last.sensors.position_count[3], 2222,
        "the body rests at its zero"
    );
}

#[test]
fn handshake_versions_late_and_never_are_as_configured() {
    let sim = sim(&["--versions", "11"]);
    let mut rt = Runtime::start(&sim);
    let last = *rt.cycles(5, None).last().unwrap();
    assert_eq!((last.accepted_boards, last.rejected_boards), (0, 0x7fff));
    drop(rt);
    drop(sim);

    let sim = sim_late();
    let mut rt = Runtime::start(&sim);
    let last = *rt.cycles(5, None).last().unwrap();
    // 0x13 (index 3) answers from its 2nd request, still in the handshake;
    // 0x1e (index 14) never: rejected.
    assert_eq!(last.accepted_boards, 0x7fff & !(1 << 14));
    assert_eq!(last.rejected_boards, 1 << 14);
    let status = sim.status().unwrap();
    // Asked in cycles 0, 1 and 2: the answer to cycle 1's frame is handed
    // over only after cycle 2's frame is built (spec section 8).
    assert_eq!(status["handshake"][3]["requests"], 3);
    assert_eq!(status["handshake"][3]["version"], 10);
    assert_eq!(status["handshake"][14]["requests"], 3);
    assert_eq!(status["handshake"][14]["version"], serde_json::Value::Null);
}

/// A plain simulator and a runtime on it, `warm` cycles in.
fn running(warm: usize) -> (Spawned, Runtime) {
    let sim = sim(&[]);
    let mut rt = Runtime::start(&sim);
    rt.cycles(warm, None);
    (sim, rt)
}

fn sim_late() -> Spawned {
    sim(&["--late", "0x13=2", "--never", "0x1e"])
}

#[test]
fn eleven_dropped_answers_lead_to_a_reconnect_ten_do_not() {
    let (sim, mut rt) = running(3);
    let outs = rt.after(&sim, "drop 10", 14);
    assert_eq!(outs.iter().map(|o| o.failed_exchanges).max(), Some(10));
    assert!(outs.iter().all(|o| o.reconnect == Reconnect::None));
    assert_eq!(outs.last().unwrap().failure, None);

    let outs = rt.after(&sim, "drop 11", 16);
    let r: Vec<_> = outs
        .iter()
        .filter(|o| o.reconnect != Reconnect::None)
        .collect();
    assert_eq!(r.len(), 1, "one reconnect");
    assert_eq!(
        (r[0].failed_exchanges, r[0].reconnect),
        (11, Reconnect::Done)
    );
    assert_eq!(
        outs.last().unwrap().failure,
        None,
        "cycles go on after the reconnect"
    );
    assert_eq!(
        sim.status().unwrap()["claims"],
        2,
        "the reconnect claimed again"
    );
}

#[test]
fn eleven_corrupt_answers_lead_to_a_reconnect() {
    let (sim, mut rt) = running(2);
    let outs = rt.after(&sim, "corrupt 11", 15);
    assert!(outs
        .iter()
        .any(|o| o.reconnect == Reconnect::Done && o.failed_exchanges == 11));
    assert_eq!(sim.status().unwrap()["corrupted"], 11);
}

#[test]
fn stall_costs_answers_for_its_time_then_cycles_recover() {
    let (sim, mut rt) = running(2);
    let outs = rt.after(&sim, "stall 60", 12);
    let failed = outs.iter().filter(|o| o.failure.is_some()).count();
    assert!((1..11).contains(&failed), "{failed} failed exchanges");
    assert!(outs.iter().all(|o| o.reconnect == Reconnect::None));
    assert_eq!(outs.last().unwrap().failure, None);
}

#[test]
fn unplug_fails_until_replug_then_the_reconnect_succeeds() {
    let (sim, mut rt) = running(2);
    let outs = rt.after(&sim, "unplug", 12);
    assert!(
        outs.iter().any(|o| o.reconnect == Reconnect::Failed),
        "re-open fails while unplugged"
    );
    let outs = rt.after(&sim, "replug", 14);
    assert!(outs.iter().any(|o| o.reconnect == Reconnect::Done));
    assert_eq!(outs.last().unwrap().failure, None);
    let mut l = sim.link();
    l.open(VENDOR_ID, PRODUCT_ID).unwrap();
    sim.ctl("unplug").unwrap();
    assert_eq!(l.bulk_out(0x02, &[0xa5]), Err(LinkError::NoDevice));
}

/// The reason of the first trip an answer raised (the step trips the
/// switch with it).
fn first_trip(outs: &[StepOutput]) -> Option<nao_wire::Reason> {
    outs.iter().find_map(|o| o.answer_trip)
}

#[test]
fn chest_button_press_trips() {
    let sim = sim(&[]);
    let mut rt = Runtime::start(&sim);
    assert_eq!(first_trip(&rt.steps(5, None)), None);
    let outs = rt.after(&sim, "button", 4);
    assert_eq!(
        outs.iter().filter(|o| o.trips.chest_button).count(),
        1,
        "one answer with button 1"
    );
    let outs = rt.after(&sim, "button 100", 3);
    assert!(
        outs.iter().filter(|o| o.trips.chest_button).count() >= 2,
        "held"
    );
}

#[test]
fn heated_joint_trips_with_reason_heat() {
    let sim = sim(&[]);
    let mut rt = Runtime::start(&sim);
    sim.ctl("heat LKneePitch").unwrap();
    let outs = rt.steps(4, None);
    assert_eq!(first_trip(&outs), Some(nao_wire::Reason::Heat));
    let last = &outs.last().unwrap().cycle;
    assert_eq!(last.trips.heat, Some(nao_wire::Joint::LKneePitch));
    assert!(last.sensors.temperature[10] >= 90);
}

#[test]
fn faulted_joint_trips_with_reason_fault() {
    let sim = sim(&["--fault", "7"]);
    let mut rt = Runtime::start(&sim);
    let outs = rt.steps(4, None);
    assert_eq!(first_trip(&outs), Some(nao_wire::Reason::Fault));
    assert_eq!(
        outs.last().unwrap().cycle.trips.fault,
        Some(nao_wire::Joint::LHipYawPitch)
    );
    sim.ctl("clear").unwrap();
    let outs = rt.steps(3, None);
    assert_eq!(outs.last().unwrap().answer_trip, None);
}

#[test]
fn overcurrent_lowers_the_overcurrent_level() {
    let (sim, mut rt) = running(3);
    let outs = rt.after(&sim, "overcurrent 5200", 6);
    let last = outs.last().unwrap();
    assert_eq!(last.sensors.battery.current_ma, 5200);
    assert!(last.levels.overcurrent < 1000, "{:?}", last.levels);
}

#[test]
fn trace_has_one_line_per_frame_with_peer_pid_seq_and_stiffness() {
    let (sim, mut rt) = running(5);
    let cmd = Command {
        stiffness: [0.5; nao_wire::JOINTS],
        ..Command::default()
    };
    rt.cycles(5, Some(&cmd));
    let lines = sim.trace().unwrap();
    assert_eq!(lines.len(), 12, "2 start-up frames and 10 cycles");
    let seqs: Vec<u16> = lines.iter().map(|l| l.seq).collect();
    assert_eq!(seqs, (0..12).collect::<Vec<u16>>());
    assert!(lines
        .iter()
        .all(|l| l.peer_pid == std::process::id() as i32));
    assert!(!lines[0].is_cycle_frame() && lines[2].is_cycle_frame());
    assert!(lines[..7].iter().all(|l| l.all_off));
    let last = lines.last().unwrap();
    assert_eq!(
        (
            last.max_stiffness,
            last.max_stiffness_all,
            last.max_stiffness_accepted
        ),
        (500, 500, 500)
    );
    assert!(!last.all_off);
    assert!(lines.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
}

#[test]
fn claim_is_exclusive_and_released_on_sigkill_of_the_holder() {
    let sim = sim(&[]);
    let mut holder = nao_rs_sim::Holder::start(exe(), &sim).unwrap();
    assert_eq!(sim.status().unwrap()["holder_pid"], holder.pid());
    let mut link = sim.link();
    link.open(VENDOR_ID, PRODUCT_ID).unwrap();
    assert_eq!(link.claim_interface(0), Err(LinkError::Busy));
    assert_eq!(link.bulk_out(0x02, &[0xa5]), Err(LinkError::Busy));
    assert!(
        Startup::run(&mut sim.link()).is_err(),
        "a second runtime's start-up is refused"
    );

    holder.kill(); // SIGKILL
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match link.claim_interface(0) {
            Ok(()) => break,
            Err(LinkError::Busy) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("claim after the holder's SIGKILL: {e}"),
        }
    }
    assert_eq!(sim.status().unwrap()["holder_pid"], std::process::id());
}

/// `nao-rs-sim ctl --socket SOCKET ARGS...` run to its end.
fn ctl(sim: &Spawned, args: &[&str]) -> std::process::Output {
    Process::new(exe())
        .args(["ctl", "--socket"])
        .arg(sim.socket())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ctl_subcommand_prints_status_json_and_refuses_bad_commands() {
    let sim = sim(&["--overcurrent", "5300"]);
    let out = ctl(&sim, &["status"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plugged"], true);
    assert_eq!(v["faults"]["overcurrent_ma"], 5300);
    let out = ctl(&sim, &["heat", "99"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("0..=24"));
}

#[test]
fn bad_settings_exit_with_a_message_naming_the_flag() {
    let out = Process::new(exe())
        .args(["--socket", "/nonexistent-dir/x.sock", "--late", "0x05=2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--late"));
}

#[test]
fn a_recording_made_against_the_simulator_replays() {
    use nao_wire::recording::record_link::RecordingLink;
    let sim = sim(&["--late", "0x13=2"]);
    let mut rec = RecordingLink::new(sim.link(), Vec::new()).unwrap();
    rec.accepted(&[10]).unwrap();
    rec.switch(true).unwrap();
    let id = Startup::run(&mut rec).expect("start-up");
    let switch = MemorySwitch::armed();
    let mut step = Step::new(&id, &[10], &switch.read(), WakeLatch::Off);
    let stand = Command {
        stiffness: [0.4; nao_wire::JOINTS],
        ..Command::default()
    };
    let mut reconnects = 0;
    for k in 0..60u64 {
        let t_ms = 300 + 12 * k;
        rec.cycle(k, t_ms).unwrap();
        if k == 10 {
            rec.command(&stand).unwrap();
        }
        if k == 20 {
            sim.ctl("drop 11").unwrap();
        }
        let input = StepInput {
            command: (k >= 10).then_some(&stand),
            now_ns: t_ms * 1_000_000,
            ..StepInput::default()
        };
        let out = step.run(&switch, &mut rec, &input, |_, _| {}).cycle;
        reconnects += usize::from(out.reconnect == Reconnect::Done);
    }
    assert_eq!(reconnects, 1);
    let (_, bytes) = rec.finish().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.contains("!timeout"),
        "the dropped answers are in the recording"
    );
    nao_wire::recording::parse(&text).expect("the recording parses");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.rec");
    std::fs::write(&path, &text).unwrap();
    let report =
        nao_wire::replay::replay_file(&path).unwrap_or_else(|e| panic!("replay failed: {e}"));
    assert_eq!(report.cycles, 60);
}

#[test]
fn sigterm_removes_the_sockets_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut child = Process::new(exe())
        .arg("--socket")
        .arg(&socket)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        dir.path().join("s.sock.ctl").exists(),
        "control socket at PATH.ctl"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(!socket.exists() && !dir.path().join("s.sock.ctl").exists());
}

/// Total foot load in kg with the simulator's default calibration.
fn foot_kg(p: &[[u16; 4]; 2]) -> f32 {
    let cal = nao_rs_sim::prefs::default_foot_calibration();
    (0..8)
        .map(|i| f32::from(p[i / 4][i % 4]) * cal[i / 4][i % 4].gain + cal[i / 4][i % 4].offset)
        .sum()
}

/// `nao-rs-sim ctl` through the binary: prints `ok`.
fn ctl_ok(sim: &Spawned, args: &[&str]) {
    let out = ctl(sim, args);
    assert!(
        out.status.success(),
        "ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn postures_bumpers_and_shaking_set_by_ctl_appear_in_the_answers_and_the_trace() {
    let sim = sim(&["--posture", "lying-back", "--inject", "bumper right"]);
    let mut rt = Runtime::start(&sim);
    let s = rt.cycles(3, None).last().unwrap().sensors;
    let [x, y, z] = s.imu.accelerometer;
    assert!((-9830..=-9790).contains(&x), "on the back: x about -g, {x}");
    assert!(y.abs() < 3000 && z.abs() < 3000, "{y} {z}");
    assert!(foot_kg(&s.foot_pressure).abs() < 0.4, "lying: no weight");
    assert_eq!(s.bumpers, [0, 3], "--inject bumper right");

    let mut step = |args: &[&str]| {
        ctl_ok(&sim, args);
        rt.cycles(3, None).last().unwrap().sensors
    };
    let s = step(&["posture", "lying-front"]);
    assert!(
        (9790..=9830).contains(&s.imu.accelerometer[0]),
        "on the front: x about +g"
    );
    let s = step(&["posture", "standing"]);
    assert!((-9830..=-9790).contains(&s.imu.accelerometer[2]));
    assert!((foot_kg(&s.foot_pressure) - 5.3).abs() < 0.4, "body weight");
    let s = step(&["posture", "sitting"]);
    assert!(
        (foot_kg(&s.foot_pressure) - 1.0).abs() < 0.4,
        "sitting: some"
    );
    assert!(s.imu.accelerometer[0].abs() < 3000, "about upright");
    let s = step(&["bumper", "left"]);
    assert_eq!(s.bumpers, [3, 0]);
    let s = step(&["bumper", "none"]);
    assert_eq!(s.bumpers, [0, 0]);
    assert!(s.imu.gyroscope.iter().all(|g| g.abs() <= 3), "at rest");
    let s = step(&["imu-shake", "300"]);
    assert!(s.imu.gyroscope.iter().all(|g| g.abs() >= 297), "shaken");
    let s = step(&["imu-shake", "0"]);
    assert!(s.imu.gyroscope.iter().all(|g| g.abs() <= 3), "still again");

    // The trace shows every change, in order, on the frames whose answers
    // reported it.
    use nao_rs_sim::body::Posture;
    let records = sim.records().unwrap();
    let mut seen: Vec<(Posture, [u8; 2])> = Vec::new();
    for r in &records {
        if seen.last() != Some(&(r.posture, r.bumpers)) {
            seen.push((r.posture, r.bumpers));
        }
    }
    assert_eq!(
        seen,
        [
            (Posture::LyingBack, [0, 3]),
            (Posture::LyingFront, [0, 3]),
            (Posture::Standing, [0, 3]),
            (Posture::Sitting, [0, 3]),
            (Posture::Sitting, [3, 0]),
            (Posture::Sitting, [0, 0]),
        ]
    );
    assert!(records.iter().any(|r| r.imu_shake_mrad_s == 300));
    assert_eq!(records.last().unwrap().imu_shake_mrad_s, 0);

    // Refused values name themselves and the fix.
    let out = ctl(&sim, &["posture", "upside-down"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("upside-down") && err.contains("lying-back"),
        "{err}"
    );
}

#[test]
fn joint_faults_set_by_ctl_change_what_the_joints_do_and_report() {
    use nao_wire::Joint;
    let z = nao_rs_sim::prefs::DEFAULT_ZEROS;
    let (sim, mut rt) = running(2);
    let (lsp, rsp, knee) = (
        Joint::LShoulderPitch.index(),
        Joint::RShoulderPitch.index(),
        Joint::LKneePitch.index(),
    );
    // Offset: reported = true + 0.1 rad (65 counts), also at rest.
    ctl_ok(&sim, &["joint-fault", "LKneePitch", "offset:0.1"]);
    let s = rt.cycles(3, None).last().unwrap().sensors;
    assert_eq!(s.position_count[knee], z[knee] + 65);
    ctl_ok(&sim, &["joint-fault", "LKneePitch", "clear"]);
    let s = rt.cycles(3, None).last().unwrap().sensors;
    assert_eq!(s.position_count[knee], z[knee]);

    // Reversed and stuck: both shoulders commanded to +0.1 rad, stiff.
    ctl_ok(&sim, &["joint-fault", "LShoulderPitch", "reversed"]);
    ctl_ok(&sim, &["joint-fault", "RShoulderPitch", "stuck"]);
    let mut cmd = Command::default();
    for j in [lsp, rsp] {
        cmd.position[j] = 0.1;
        cmd.stiffness[j] = 1.0;
    }
    let s = rt.cycles(40, Some(&cmd)).last().unwrap().sensors;
    assert_eq!(s.position_count[lsp], z[lsp] - 65, "moved the other way");
    assert_eq!(s.position_count[rsp], z[rsp], "did not move");
    assert!(s.current_ma[rsp] > 500, "stalled: {}", s.current_ma[rsp]);

    // High current: while stiff only.
    ctl_ok(&sim, &["joint-fault", "LKneePitch", "high-current:2000"]);
    let mut cmd = Command::default();
    cmd.stiffness[knee] = 0.2;
    let s = rt.cycles(4, Some(&cmd)).last().unwrap().sensors;
    assert_eq!(s.current_ma[knee], 2000);
    let s = rt
        .cycles(4, Some(&Command::default()))
        .last()
        .unwrap()
        .sensors;
    assert_eq!(s.current_ma[knee], 0, "limp");

    let status = sim.status().unwrap();
    let names: Vec<&str> = status["faults"]["joints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["joint"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["LShoulderPitch", "LKneePitch", "RShoulderPitch"]);
    let last = sim.records().unwrap().pop().unwrap();
    assert!(last.joint_fault("LShoulderPitch").unwrap().reversed);
    assert!(last.joint_fault("RShoulderPitch").unwrap().stuck);
    assert_eq!(
        last.joint_fault("LKneePitch").unwrap().high_current_ma,
        Some(2000)
    );

    // clear ends every joint fault.
    ctl_ok(&sim, &["clear"]);
    assert_eq!(
        sim.status().unwrap()["faults"]["joints"],
        serde_json::json!([])
    );
    let out = ctl(&sim, &["joint-fault", "LKneePitch", "offset:9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("offset:9"));
}
