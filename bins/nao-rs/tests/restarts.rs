//! Restarts and the robot's own processes, the runtime's rules: every start
//! is limp, wakes are ordered by the page's wake generation (never by a
//! clock), the motion state and a dead guard are visible in the page, the
//! status file, and sockets with explicit modes. Each from a second process
//! (this test) against `nao-rs run` on the virtual robot, judged by the
//! simulator's trace ("stiff" = a frame with any stiffness above 0) and
//! the page.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    cycle_frames, free_udp_port, naoctl, start_runtime_with, wait_stiff_after, wake, wake_command,
    wake_when_ready, window,
};
use deathswitch::{Motion, Page};
use nao_rs_sim::Spawned;
use nix::sys::signal::Signal;
use testkit::Proc;

fn sim() -> Spawned {
    Spawned::start(testkit::bin("nao-rs-sim"), &["--versions", "10"]).unwrap()
}

/// Waits up to `limit` for `f` to hold (looks every 20 ms: a look may
/// parse the whole trace).
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The stiff frames of `frames` (any sender).
fn stiff(frames: &[nao_rs_sim::TraceLine]) -> Vec<nao_rs_sim::TraceLine> {
    frames
        .iter()
        .filter(|l| l.max_stiffness > 0)
        .copied()
        .collect()
}

/// `nao-rs-guard` on `page`, the sim's board and UDP port `port`.
fn start_guard(sim: &Spawned, page: &Path, port: u16) -> Proc {
    let log = std::fs::File::create(sim.dir().join("guard.log")).unwrap();
    let p = Proc::spawn(
        "nao-rs-guard",
        Command::new(testkit::bin("nao-rs-guard"))
            .arg("--page")
            .arg(page)
            .args(["--link", &sim.link_arg(), "--udp-port", &port.to_string()])
            .env("NAO_RS_DEATHSWITCH", page)
            .stderr(log),
    );
    let g = p.pid();
    let pg = Page::open(page).unwrap();
    wait_for(
        "the guard publishes itself",
        Duration::from_secs(10),
        || pg.snapshot().guard_pid == Some(g),
    );
    p
}

/// `nao-rs run --controller stand` with a guard watching it: at the
/// runtime's real-time priority where permitted (root), as on the robot, so
/// a loaded machine cannot starve its cycle past the guard's 60 ms beat
/// timeout (at the normal policy it can: the guard then rightly takes
/// over); its stderr in `NAME.log` in the simulator's folder.
fn start_guarded_runtime(sim: &Spawned, page: &Path, port: u16, name: &str) -> Proc {
    let mut c = Command::new(testkit::bin("nao-rs"));
    c.args(["run", "--link", &sim.link_arg(), "--controller", "stand"])
        .args(["--udp-port", &port.to_string()])
        .arg("--page")
        .arg(page)
        .arg("--wake-socket")
        .arg(common::wake_socket(sim))
        .env("NAO_RS_DEATHSWITCH", page)
        .stderr(std::fs::File::create(sim.dir().join(format!("{name}.log"))).unwrap());
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: {name} runs at the normal policy (a loaded machine may starve it)");
        c.args(["--priority", "0"]);
    }
    Proc::spawn("nao-rs run", &mut c)
}

fn motion(page: &Page) -> Motion {
    page.snapshot().motion
}

/// Every start is limp: a runtime restarted on an armed page (a systemd
/// restart after a crash, the guard's take-over and a person's re-arm
/// without a wake) sends no stiff frame until a person's wake; a runtime
/// started on an armed page with no guard (a plain restart) neither; a
/// fresh page (boot) needs the re-arm and the wake. The page says "limp,
/// waiting for a wake" all along.
#[test]
fn every_start_is_limp_until_a_persons_wake() {
    let sim = sim();
    testkit::bin("naoctl");
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    let port = free_udp_port();
    let _guard = start_guard(&sim, &page_path, port);
    naoctl(&page_path, &["rearm", "--yes"]);
    let mut rt = start_guarded_runtime(&sim, &page_path, port, "rt1");
    wait_for(
        "the first runtime's frames",
        Duration::from_secs(15),
        || cycle_frames(&sim).len() > 20,
    );
    assert!(
        stiff(&cycle_frames(&sim)).is_empty(),
        "stiff before any wake"
    );
    assert_eq!(motion(&page), Motion::LimpWaitingForWake);
    wake_when_ready(&sim);
    wait_stiff_after(&sim, 0, Duration::from_secs(10));
    assert_eq!(motion(&page), Motion::Awake);

    // Crash; the guard takes over (trips); systemd restarts the runtime
    // (the guard hands it the board, still tripped); a person re-arms and
    // does not wake.
    rt.signal(Signal::SIGKILL);
    let _ = rt.wait_exit(Duration::from_secs(5));
    let gpid = _guard.pid();
    wait_for("the guard's take-over", Duration::from_secs(10), || {
        page.is_tripped()
            && page.snapshot().guard_holding
            && cycle_frames(&sim)
                .iter()
                .filter(|l| l.peer_pid as u32 == gpid)
                .count()
                >= 3
    });
    let restart = deathswitch::now_ns();
    let rt2_log = sim.dir().join("rt2.log");
    let rt2 = start_guarded_runtime(&sim, &page_path, port, "rt2");
    let pid2 = rt2.pid();
    let from_rt2 = |sim: &Spawned| {
        cycle_frames(sim)
            .iter()
            .filter(|l| l.peer_pid as u32 == pid2)
            .count()
    };
    wait_for("the hand-over", Duration::from_secs(30), || {
        from_rt2(&sim) > 20
    });
    assert_eq!(motion(&page), Motion::LimpTripped);
    naoctl(&page_path, &["rearm", "--yes"]);
    let n = from_rt2(&sim);
    let t0 = Instant::now();
    while from_rt2(&sim) <= n + 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the restarted runtime (pid {pid2}) sent no 200 frames after the re-arm within \
             20 s\nruntime: {}\nguard: {}",
            std::fs::read_to_string(&rt2_log).unwrap_or_default(),
            std::fs::read_to_string(sim.dir().join("guard.log")).unwrap_or_default()
        );
        // Not more often: each look parses the whole trace.
        std::thread::sleep(Duration::from_millis(200));
    }
    let frames = window(&cycle_frames(&sim), restart, u64::MAX);
    assert!(
        stiff(&frames).is_empty(),
        "a restart on an armed page resumed motion: {} stiff frames of {}",
        stiff(&frames).len(),
        frames.len()
    );
    assert_eq!(motion(&page), Motion::LimpWaitingForWake);
    let woke = deathswitch::now_ns();
    wake(&sim);
    wait_stiff_after(&sim, woke, Duration::from_secs(10));
    drop(rt2);

    // A fresh page (a boot): tripped; the re-arm alone does not wake.
    let sim2 = self::sim();
    let page2 = sim2.dir().join("deathswitch");
    let p2 = Page::open(&page2).unwrap();
    let _rt3 = start_runtime_with(&sim2, &page2, free_udp_port(), "stand", &[], Stdio::null());
    wait_for("frames after boot", Duration::from_secs(15), || {
        cycle_frames(&sim2).len() > 20
    });
    assert_eq!(motion(&p2), Motion::LimpTripped);
    naoctl(&page2, &["rearm", "--yes"]);
    let rearmed = deathswitch::now_ns();
    std::thread::sleep(Duration::from_millis(500));
    assert!(stiff(&window(&cycle_frames(&sim2), rearmed, u64::MAX)).is_empty());
    assert_eq!(motion(&p2), Motion::LimpWaitingForWake);
    wake(&sim2);
    wait_stiff_after(&sim2, rearmed, Duration::from_secs(10));
}

/// Order by generations: a wake read while armed in generation g and sent
/// while the runtime is stalled (SIGSTOP), then a trip and a re-arm, then
/// the runtime resumes: the wake is used up (generation g + 1 now), no
/// stiff frame. Five trials, judged by the trace; each ends with a proper
/// wake that does make the robot stiff.
#[test]
fn a_wake_sent_before_a_trip_and_re_arm_never_counts_after_them() {
    let sim = sim();
    testkit::bin("naoctl");
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    page.rearm();
    let rt = start_runtime_with(
        &sim,
        &page_path,
        free_udp_port(),
        "stand",
        &[],
        Stdio::null(),
    );
    wait_for("the wake socket", Duration::from_secs(15), || {
        common::wake_socket(&sim).exists()
    });
    let mut rounds = Vec::new();
    for _ in 0..5 {
        // Limp, waiting for a wake in generation g.
        let g = page.snapshot().wake_generation().unwrap();
        rt.signal(Signal::SIGSTOP);
        let stalled = deathswitch::now_ns();
        // The wake, read in generation g, sits unread in the socket.
        wake(&sim);
        naoctl(&page_path, &["stop"]);
        naoctl(&page_path, &["rearm", "--yes"]);
        assert_eq!(page.snapshot().wake_generation(), Some(g + 1));
        rt.signal(Signal::SIGCONT);
        let resumed = deathswitch::now_ns();
        std::thread::sleep(Duration::from_millis(400));
        let woke = deathswitch::now_ns();
        rounds.push((stalled, resumed, woke));
        wake(&sim);
        wait_stiff_after(&sim, woke, Duration::from_secs(10));
        // Back to limp, waiting, for the next round.
        naoctl(&page_path, &["stop"]);
        naoctl(&page_path, &["rearm", "--yes"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    let frames = cycle_frames(&sim);
    let stalls: Vec<u64> = rounds.iter().map(|r| (r.1 - r.0) / 1_000_000).collect();
    eprintln!("stall (SIGSTOP -> SIGCONT) per round, ms: {stalls:?}");
    for (i, &(stalled, resumed, woke)) in rounds.iter().enumerate() {
        let w = window(&frames, stalled, woke);
        assert!(
            w.len() >= 10,
            "round {i}: the runtime went on after the stall: {} frames",
            w.len()
        );
        assert!(
            stiff(&w).is_empty(),
            "round {i}: the stale wake counted after the re-arm (stall {} ms): {:?}",
            (resumed - stalled) / 1_000_000,
            stiff(&w).first()
        );
    }
}

/// `nao-rs wake` reads the page and refuses while tripped, naming the
/// reason and the fix, with a non-zero exit; a bare `wake` datagram (an
/// older `nao-rs wake`) is refused by the runtime and logged. No stiff
/// frame.
#[test]
fn nao_rs_wake_refuses_while_tripped_and_a_wake_without_generation_is_refused() {
    let sim = sim();
    testkit::bin("naoctl");
    let page_path = sim.dir().join("deathswitch");
    let log_path = sim.dir().join("runtime.log");
    let page = Page::open(&page_path).unwrap();
    let _rt = start_runtime_with(
        &sim,
        &page_path,
        free_udp_port(),
        "stand",
        &[],
        Stdio::from(std::fs::File::create(&log_path).unwrap()),
    );
    wait_for("the wake socket", Duration::from_secs(15), || {
        common::wake_socket(&sim).exists()
    });
    assert!(page.is_tripped(), "a fresh page is tripped (boot)");
    let out = wake_command(&sim).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nao-rs wake while tripped: {err}");
    assert!(
        err.contains("tripped (boot); re-arm first with `naoctl rearm`"),
        "{err}"
    );
    naoctl(&page_path, &["rearm", "--yes"]);
    let rearmed = deathswitch::now_ns();
    std::os::unix::net::UnixDatagram::unbound()
        .unwrap()
        .send_to(b"wake", common::wake_socket(&sim))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        stiff(&window(&cycle_frames(&sim), rearmed, u64::MAX)).is_empty(),
        "a bare wake counted"
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("without a generation"), "{log}");
    wake(&sim);
    wait_stiff_after(&sim, rearmed, Duration::from_secs(10));
}

/// `faketime` (Debian's package), or `None` with the reason.
fn faketime() -> Result<(), String> {
    match Command::new("faketime").arg("--version").output() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "faketime is not installed ({e}): `apt-get install -y faketime`"
        )),
    }
}

/// Runs `cmd` under a wall clock stepped by `offset` (`-2h`, `+2h`), the
/// monotonic clock untouched; asserts it succeeded.
fn stepped(offset: &str, cmd: &Path, args: &[&str], page: &Path) {
    let out = Command::new("faketime")
        .args(["-f", offset])
        .arg(cmd)
        .args(args)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("NAO_RS_DEATHSWITCH", page)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "faketime {offset} {} {args:?}: {}",
        cmd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Clock steps of +-2 h change nothing: a re-arm made under a clock 2 h
/// behind, a wake under a clock 2 h ahead (and the other way round) wake
/// the robot; a wake sent before the trip stays used up whatever the
/// clocks; no trip, no page-lost.
#[test]
fn clock_steps_of_two_hours_change_nothing() {
    if let Err(why) = faketime() {
        eprintln!("skipped: {why}");
        return;
    }
    let sim = sim();
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    let naoctl = testkit::bin("naoctl");
    let nao_rs = testkit::bin("nao-rs");
    let socket = common::wake_socket(&sim);
    let socket = socket.to_str().unwrap();
    let page_arg = page_path.to_str().unwrap();
    let wake_args = ["wake", "--socket", socket, "--page", page_arg];
    let _rt = start_runtime_with(
        &sim,
        &page_path,
        free_udp_port(),
        "stand",
        &[],
        Stdio::null(),
    );
    wait_for("the wake socket", Duration::from_secs(15), || {
        Path::new(socket).exists()
    });
    for (rearm, wake) in [("-2h", "+2h"), ("+2h", "-2h")] {
        stepped(rearm, &naoctl, &["rearm", "--yes"], &page_path);
        let rearmed = deathswitch::now_ns();
        std::thread::sleep(Duration::from_millis(200));
        assert!(stiff(&window(&cycle_frames(&sim), rearmed, u64::MAX)).is_empty());
        stepped(wake, &nao_rs, &wake_args, &page_path);
        wait_stiff_after(&sim, rearmed, Duration::from_secs(10));
        assert!(!page.is_tripped(), "a clock step tripped the switch");
        // A wake in this generation, then a trip and a re-arm under
        // stepped clocks: limp until the next wake.
        let g = page.snapshot().wake_generation().unwrap();
        stepped(wake, &naoctl, &["stop"], &page_path);
        stepped(rearm, &naoctl, &["rearm", "--yes"], &page_path);
        let t = deathswitch::now_ns();
        nao_runtime::wake::send(Path::new(socket), g).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            stiff(&window(&cycle_frames(&sim), t + 24_000_000, u64::MAX)).is_empty(),
            "an old generation's wake counted under stepped clocks"
        );
        stepped(wake, &naoctl, &["stop"], &page_path);
    }
    assert_ne!(page.reason(), Some(deathswitch::Reason::PageLost));
}

/// The runtime flags a dead guard: the guard named in the page (pid and
/// start time) killed, the runtime's non-real-time side sees it within
/// about a second and the page's safety flags say `guard-dead`; a live
/// guard again clears it.
#[test]
fn a_dead_guard_named_in_the_page_is_flagged_guard_dead() {
    let sim = sim();
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    let port = free_udp_port();
    let mut guard = start_guard(&sim, &page_path, port);
    let _rt = start_guarded_runtime(&sim, &page_path, port, "rt");
    let dead = deathswitch::flags::SafetyFlags::GUARD_DEAD.bits();
    wait_for("the runtime's frames", Duration::from_secs(15), || {
        cycle_frames(&sim).len() > 100
    });
    assert_eq!(page.safety_flags() & dead, 0, "a live guard is not dead");
    guard.signal(Signal::SIGKILL);
    let _ = guard.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    wait_for("guard-dead", Duration::from_secs(10), || {
        page.safety_flags() & dead != 0
    });
    eprintln!("guard-dead raised {:?} after the kill", killed.elapsed());
    let _guard2 = start_guard(&sim, &page_path, port);
    wait_for("guard-dead cleared", Duration::from_secs(10), || {
        page.safety_flags() & dead == 0
    });
}

/// The status file: `status.json` next to the page, mode 0640 under umask
/// 000, rewritten at least 4 times a second, with the battery, every
/// joint's stiffness and temperature, the hottest joint and the motion
/// state; the LoLA and wake sockets are 0660 under umask 000.
#[test]
fn status_file_and_sockets_have_their_modes_under_umask_000() {
    let sim = sim();
    let page_path = sim.dir().join("deathswitch");
    Page::open(&page_path).unwrap().rearm();
    let lola = sim.dir().join("robocup");
    let status = sim.dir().join("status.json");
    let rt = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(testkit::bin("nao-rs"))
        .args(["run", "--link", &sim.link_arg(), "--controller", "lola"])
        .args(["--priority", "0", "--no-udp", "--lola-socket"])
        .arg(&lola)
        .arg("--page")
        .arg(&page_path)
        .arg("--wake-socket")
        .arg(common::wake_socket(&sim))
        .env_remove("NAO_RS_STATUS")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _rt = Proc::from(rt);
    wait_for("the status file", Duration::from_secs(15), || {
        nao_runtime::status_file::StatusFile::read(&status).is_some_and(|s| s.cycle > 10)
    });
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&lola), 0o660, "LoLA socket {:o}", mode(&lola));
    let w = common::wake_socket(&sim);
    assert_eq!(mode(&w), 0o660, "wake socket {:o}", mode(&w));
    assert_eq!(mode(&status), 0o640, "status file {:o}", mode(&status));
    // At least 4 writes a second.
    let mut seen = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        if let Some(s) = nao_runtime::status_file::StatusFile::read(&status) {
            seen.insert(s.time_unix_ms);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen.len() >= 4, "{} writes in 1 s", seen.len());
    let s = nao_runtime::status_file::StatusFile::read(&status).unwrap();
    assert_eq!(s.stiffness.len(), 25);
    assert_eq!(s.temperature_c.len(), 25);
    assert!(s.battery.charge_per_mille > 0, "{s:?}");
    assert!(s.hottest_joint.is_some(), "{s:?}");
    assert_eq!(s.motion, "limp-waiting-for-wake");
    assert!(s.limp && !s.tripped);
}

/// `nao-rs run --controller lola` on the virtual robot with its LoLA
/// socket at `lola`, run to its exit.
fn run_lola(sim: &Spawned, page_path: &Path, lola: &Path) -> std::process::Output {
    Command::new(testkit::bin("nao-rs"))
        .args(["run", "--link", &sim.link_arg(), "--controller", "lola"])
        .args(["--priority", "0", "--no-udp", "--lola-socket"])
        .arg(lola)
        .arg("--page")
        .arg(page_path)
        .arg("--wake-socket")
        .arg(common::wake_socket(sim))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A LoLA path another program listens on is an error: `nao-rs run
/// --controller lola` exits non-zero, naming the path and the fix, before
/// sending any frame; the other program's socket stays.
#[test]
fn a_lola_path_held_by_another_listener_is_an_error_naming_the_path() {
    let sim = sim();
    let page_path = sim.dir().join("deathswitch");
    let lola = sim.dir().join("robocup");
    let _squatter = std::os::unix::net::UnixListener::bind(&lola).unwrap();
    let out = run_lola(&sim, &page_path, &lola);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {:?}: {err}", out.status);
    assert!(err.contains(&lola.display().to_string()), "{err}");
    assert!(err.contains("another program serves it"), "{err}");
    assert!(err.contains("--lola-socket"), "the fix: {err}");
    assert!(cycle_frames(&sim).is_empty(), "no frame sent");
    assert!(std::os::unix::net::UnixStream::connect(&lola).is_ok());

    // A socket file of another user (root only: chown).
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the other-user case: not root (chown needs it)");
        return;
    }
    let other = sim.dir().join("robocup2");
    drop(std::os::unix::net::UnixListener::bind(&other).unwrap());
    nix::unistd::chown(&other, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = run_lola(&sim, &page_path, &other);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("of user 65534"), "{err}");
    assert!(cycle_frames(&sim).is_empty(), "no frame sent");
}
