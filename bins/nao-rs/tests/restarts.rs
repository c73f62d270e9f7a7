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
    cycle_frames, free_udp_port, naoctl, runtime, wait_stiff_after, wake, window, Proc, Rig,
    Runtime, RT,
};
use deathswitch::{Motion, Page};
use nix::sys::signal::Signal;

/// Waits up to `limit` for `f` to hold (looks every 20 ms: a look may
/// parse the whole trace).
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    testkit::wait_every(what, limit, Duration::from_millis(20), || f().then_some(()));
}

/// The stiff frames of `frames` (any sender).
fn stiff(frames: &[nao_rs_sim::TraceLine]) -> Vec<nao_rs_sim::TraceLine> {
    frames
        .iter()
        .filter(|l| l.max_stiffness > 0)
        .copied()
        .collect()
}

/// [`runtime`] `stand` as [`RT`], started once its wake socket is there
/// and it registered in the page (its wake generation is its own from
/// then on; limp: every start is).
fn limp_runtime(rig: &Rig) -> Proc {
    let rt = rig.start_runtime(&runtime("stand", free_udp_port()));
    let socket = rig.wake_socket(RT);
    wait_for("the wake socket", Duration::from_secs(15), || {
        socket.exists()
    });
    rig.wait_log(RT, "every start is limp", Duration::from_secs(15));
    rt
}

/// `nao-rs run --controller stand` as `name` with a guard watching it: at
/// the runtime's real-time priority where permitted (root), as on the
/// robot, so a loaded machine cannot starve its cycle past the guard's
/// beat timeout (at the normal policy it can: the guard then rightly
/// takes over).
fn start_guarded_runtime(rig: &Rig, port: u16, name: &str) -> Proc {
    let mut rt = Runtime::new(name).udp_port(port);
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: {name} runs at the normal policy (a loaded machine may starve it)");
        rt = rt.priority(0);
    }
    rig.start_runtime(&rt)
}

/// The virtual robot and its page (naoctl built before anything is timed).
fn rig_and_page() -> (Rig, Page) {
    testkit::bin("naoctl");
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    (rig, page)
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
    let (rig, page) = rig_and_page();
    let port = free_udp_port();
    let _guard = rig.start_guard(port);
    naoctl(&rig, &["rearm", "--yes"]);
    let mut rt = start_guarded_runtime(&rig, port, "rt1");
    wait_for(
        "the first runtime's frames",
        Duration::from_secs(15),
        || cycle_frames(&rig).len() > 20,
    );
    assert!(
        stiff(&cycle_frames(&rig)).is_empty(),
        "stiff before any wake"
    );
    assert_eq!(motion(&page), Motion::LimpWaitingForWake);
    rig.wake_when_ready("rt1");
    wait_stiff_after(&rig, 0, Duration::from_secs(10));
    assert_eq!(motion(&page), Motion::Awake);

    // Crash; the guard takes over (trips); systemd restarts the runtime
    // (the guard hands it the board, still tripped); a person re-arms and
    // does not wake.
    rt.signal(Signal::SIGKILL);
    let _ = rt.wait_exit(Duration::from_secs(5));
    let gpid = _guard.pid();
    wait_for("the guard's take-over", Duration::from_secs(10), || {
        !page.snapshot().armed
            && page.snapshot().guard_holding
            && cycle_frames(&rig)
                .iter()
                .filter(|l| l.peer_pid as u32 == gpid)
                .count()
                >= 3
    });
    let restart = deathswitch::monotonic_ns();
    let rt2 = start_guarded_runtime(&rig, port, "rt2");
    let pid2 = rt2.pid();
    let from_rt2 = |rig: &Rig| {
        cycle_frames(rig)
            .iter()
            .filter(|l| l.peer_pid as u32 == pid2)
            .count()
    };
    wait_for("the hand-over", Duration::from_secs(30), || {
        from_rt2(&rig) > 20
    });
    assert_eq!(motion(&page), Motion::LimpTripped);
    naoctl(&rig, &["rearm", "--yes"]);
    let n = from_rt2(&rig);
    let t0 = Instant::now();
    while from_rt2(&rig) <= n + 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the restarted runtime (pid {pid2}) sent no 200 frames after the re-arm within \
             20 s\nruntime: {}\nguard: {}",
            rig.log("rt2"),
            rig.log("guard")
        );
        // Not more often: each look parses the whole trace.
        std::thread::sleep(Duration::from_millis(200));
    }
    let frames = window(&cycle_frames(&rig), restart, u64::MAX);
    assert!(
        stiff(&frames).is_empty(),
        "a restart on an armed page resumed motion: {} stiff frames of {}",
        stiff(&frames).len(),
        frames.len()
    );
    assert_eq!(motion(&page), Motion::LimpWaitingForWake);
    let woke = deathswitch::monotonic_ns();
    wake(&rig, "rt2");
    wait_stiff_after(&rig, woke, Duration::from_secs(10));
    drop(rt2);

    // A fresh page (a boot): tripped; the re-arm alone does not wake.
    let rig2 = Rig::start();
    let p2 = Page::open(rig2.page_path()).unwrap();
    let _rt3 = rig2.start_runtime(&runtime("stand", free_udp_port()));
    wait_for("frames after boot", Duration::from_secs(15), || {
        cycle_frames(&rig2).len() > 20
    });
    assert_eq!(motion(&p2), Motion::LimpTripped);
    naoctl(&rig2, &["rearm", "--yes"]);
    let rearmed = deathswitch::monotonic_ns();
    std::thread::sleep(Duration::from_millis(500));
    assert!(stiff(&window(&cycle_frames(&rig2), rearmed, u64::MAX)).is_empty());
    assert_eq!(motion(&p2), Motion::LimpWaitingForWake);
    wake(&rig2, RT);
    wait_stiff_after(&rig2, rearmed, Duration::from_secs(10));
}

/// A raw wake datagram `wake <generation>` to the runtime started as
/// `name` (what any process in the page's group can send).
fn raw_wake(rig: &Rig, name: &str, generation: u64) {
    nao_runtime::wake::send(&rig.wake_socket(name), generation).unwrap();
}

/// What a wake formed before the re-arm can carry: the generation a
/// sender read while armed before the trip, the trip count read while
/// tripped (the old rule's generation after the re-arm) and guesses from
/// it, and the generation of a view forged from the page as read while
/// tripped (armed, every other field as read).
#[derive(Debug, Clone, Copy)]
enum Stale {
    /// `nao-rs wake` in the armed epoch before the trip.
    ReadBeforeTheTrip,
    /// `wake <count>`, the count read while tripped.
    TripCount,
    /// `wake <count + 1>`, the next count guessed.
    NextCount,
    /// The generation of the tripped page's fields read as if armed.
    ForgedView,
    /// The generation read before the trip, as a raw datagram sent while
    /// tripped.
    OldGenerationRaw,
}

/// Order by generations, and a wake can only be formed after the re-arm:
/// with the runtime stalled (SIGSTOP) across a trip and a re-arm, a wake
/// formed before the re-arm (each [`Stale`] kind, sent last in its round,
/// the others before it; the raw ones while tripped) is read after the
/// re-arm and used up: no stiff frame. The generation after the re-arm is
/// none of them. Each round ends with `nao-rs wake` after the re-arm,
/// which makes the robot stiff (the positive control). Judged by the
/// trace.
#[test]
fn a_wake_sent_before_a_trip_and_re_arm_never_counts_after_them() {
    let (rig, page) = rig_and_page();
    page.rearm();
    let rt = limp_runtime(&rig);
    let kinds = [
        Stale::ReadBeforeTheTrip,
        Stale::TripCount,
        Stale::NextCount,
        Stale::ForgedView,
        Stale::OldGenerationRaw,
    ];
    let mut rounds = Vec::new();
    for (i, &last) in kinds.iter().enumerate() {
        // Limp, waiting for a wake in generation g.
        let g = page.snapshot().wake_generation().unwrap();
        rt.signal(Signal::SIGSTOP);
        let stalled = deathswitch::monotonic_ns();
        // The wake read in generation g sits unread in the socket.
        wake(&rig, RT);
        naoctl(&rig, &["stop"]);
        let tripped = page.snapshot();
        assert_eq!(tripped.wake_generation(), None);
        let forged = deathswitch::Snapshot {
            armed: true,
            ..tripped
        }
        .wake_generation()
        .unwrap();
        let value = |k: Stale| match k {
            Stale::ReadBeforeTheTrip | Stale::OldGenerationRaw => g,
            Stale::TripCount => tripped.trip_count,
            Stale::NextCount => tripped.trip_count + 1,
            Stale::ForgedView => forged,
        };
        let mut order: Vec<Stale> = kinds[i + 1..].iter().chain(&kinds[..i]).copied().collect();
        order.push(last);
        if matches!(last, Stale::ReadBeforeTheTrip) {
            // That wake alone, as the issue found it.
            order.clear();
        }
        for k in order {
            match k {
                Stale::ReadBeforeTheTrip => {}
                k => raw_wake(&rig, RT, value(k)),
            }
        }
        naoctl(&rig, &["rearm", "--yes"]);
        let after = page.snapshot().wake_generation().unwrap();
        for k in kinds {
            assert_ne!(after, value(k), "{k:?}: the generation after the re-arm");
        }
        rt.signal(Signal::SIGCONT);
        let resumed = deathswitch::monotonic_ns();
        std::thread::sleep(Duration::from_millis(400));
        let woke = deathswitch::monotonic_ns();
        rounds.push((last, stalled, resumed, woke));
        wake(&rig, RT);
        wait_stiff_after(&rig, woke, Duration::from_secs(10));
        // Back to limp, waiting, for the next round.
        naoctl(&rig, &["stop"]);
        naoctl(&rig, &["rearm", "--yes"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    let frames = cycle_frames(&rig);
    let stalls: Vec<u64> = rounds.iter().map(|r| (r.2 - r.1) / 1_000_000).collect();
    eprintln!("stall (SIGSTOP -> SIGCONT) per round, ms: {stalls:?}");
    for &(last, stalled, resumed, woke) in &rounds {
        let w = window(&frames, stalled, woke);
        assert!(
            w.len() >= 10,
            "{last:?}: the runtime went on after the stall: {} frames",
            w.len()
        );
        assert!(
            stiff(&w).is_empty(),
            "{last:?}: a wake formed before the re-arm counted after it (stall {} ms): {:?}",
            (resumed - stalled) / 1_000_000,
            stiff(&w).first()
        );
    }
    let log = rig.log(RT);
    assert!(
        log.contains("wake ignored: its generation is not the page's"),
        "{log}"
    );
}

/// A wake recorded for a runtime never wakes its successor: runtime 1
/// (no guard) is woken by a raw `wake <g>` (the recorded datagram: it
/// counts for runtime 1), then killed with SIGKILL, the page left armed;
/// runtime 2 starts on the armed page (a new generation: its own nonce),
/// and the recorded wake replayed to it, again and again, leaves it limp.
/// `nao-rs wake` then makes it stiff. Judged by the trace.
#[test]
fn a_wake_recorded_for_a_killed_runtime_never_wakes_its_successor() {
    let (rig, page) = rig_and_page();
    page.rearm();
    let port = free_udp_port();
    let mut rt1 = rig.start_runtime(&runtime("stand", port));
    let pid1 = rt1.pid();
    wait_for("runtime 1's registration", Duration::from_secs(15), || {
        page.snapshot().driver_pid == Some(pid1) && rig.wake_socket(RT).exists()
    });
    let recorded = page.snapshot().wake_generation().unwrap();
    let t1 = deathswitch::monotonic_ns();
    raw_wake(&rig, RT, recorded);
    wait_stiff_after(&rig, t1, Duration::from_secs(10));
    rt1.signal(Signal::SIGKILL);
    let _ = rt1.wait_exit(Duration::from_secs(5));
    assert!(page.snapshot().armed, "no guard: nothing tripped");
    let rt2 = rig.start_runtime(&runtime("stand", port));
    let pid2 = rt2.pid();
    let from_rt2 = |rig: &Rig| -> Vec<nao_rs_sim::TraceLine> {
        cycle_frames(rig)
            .into_iter()
            .filter(|l| l.peer_pid as u32 == pid2)
            .collect()
    };
    wait_for("runtime 2's frames", Duration::from_secs(20), || {
        from_rt2(&rig).len() > 20
    });
    let s = page.snapshot();
    assert_eq!(s.driver_pid, Some(pid2));
    assert_ne!(
        s.wake_generation(),
        Some(recorded),
        "a new runtime, a new generation"
    );
    for _ in 0..10 {
        raw_wake(&rig, RT, recorded);
        std::thread::sleep(Duration::from_millis(30));
    }
    std::thread::sleep(Duration::from_millis(300));
    let frames = from_rt2(&rig);
    assert!(
        stiff(&frames).is_empty(),
        "the dead runtime's recorded wake woke its successor: {} stiff frames of {}",
        stiff(&frames).len(),
        frames.len()
    );
    assert_eq!(motion(&page), Motion::LimpWaitingForWake);
    let woke = deathswitch::monotonic_ns();
    wake(&rig, RT);
    let f = wait_stiff_after(&rig, woke, Duration::from_secs(10));
    assert_eq!(f.peer_pid as u32, pid2);
}

/// `nao-rs wake` reads the page and refuses while tripped, naming the
/// reason and the fix, with a non-zero exit; a bare `wake` datagram (an
/// older `nao-rs wake`) is refused by the runtime and logged. No stiff
/// frame.
#[test]
fn nao_rs_wake_refuses_while_tripped_and_a_wake_without_generation_is_refused() {
    let (rig, page) = rig_and_page();
    let _rt = limp_runtime(&rig);
    assert!(!page.snapshot().armed, "a fresh page is tripped (boot)");
    let out = testkit::output(&mut rig.wake_command(RT));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nao-rs wake while tripped: {err}");
    assert!(
        err.contains("tripped (boot); re-arm first with `naoctl rearm`"),
        "{err}"
    );
    naoctl(&rig, &["rearm", "--yes"]);
    let rearmed = deathswitch::monotonic_ns();
    std::os::unix::net::UnixDatagram::unbound()
        .unwrap()
        .send_to(b"wake", rig.wake_socket(RT))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        stiff(&window(&cycle_frames(&rig), rearmed, u64::MAX)).is_empty(),
        "a bare wake counted"
    );
    let log = rig.log(RT);
    assert!(log.contains("without a generation"), "{log}");
    wake(&rig, RT);
    wait_stiff_after(&rig, rearmed, Duration::from_secs(10));
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
    let (rig, page) = rig_and_page();
    let naoctl = testkit::bin("naoctl");
    let nao_rs = testkit::bin("nao-rs");
    let socket = rig.wake_socket(RT);
    let page_path = rig.page_path();
    let socket = socket.to_str().unwrap();
    let page_arg = page_path.to_str().unwrap();
    let wake_args = ["wake", "--socket", socket, "--page", page_arg];
    let _rt = limp_runtime(&rig);
    for (rearm, wake) in [("-2h", "+2h"), ("+2h", "-2h")] {
        stepped(rearm, &naoctl, &["rearm", "--yes"], page_path);
        let rearmed = deathswitch::monotonic_ns();
        std::thread::sleep(Duration::from_millis(200));
        assert!(stiff(&window(&cycle_frames(&rig), rearmed, u64::MAX)).is_empty());
        stepped(wake, &nao_rs, &wake_args, page_path);
        wait_stiff_after(&rig, rearmed, Duration::from_secs(10));
        assert!(page.snapshot().armed, "a clock step tripped the switch");
        // A wake in this generation, then a trip and a re-arm under
        // stepped clocks: limp until the next wake.
        let g = page.snapshot().wake_generation().unwrap();
        stepped(wake, &naoctl, &["stop"], page_path);
        stepped(rearm, &naoctl, &["rearm", "--yes"], page_path);
        let t = deathswitch::monotonic_ns();
        nao_runtime::wake::send(Path::new(socket), g).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            stiff(&window(&cycle_frames(&rig), t + 24_000_000, u64::MAX)).is_empty(),
            "an old generation's wake counted under stepped clocks"
        );
        stepped(wake, &naoctl, &["stop"], page_path);
    }
    assert_ne!(page.reason(), Some(deathswitch::Reason::PageLost));
}

/// The runtime flags a dead guard: the guard named in the page (pid and
/// start time) killed, the runtime's non-real-time side sees it within
/// about a second and the page's safety flags say `guard-dead`; a live
/// guard again clears it.
#[test]
fn a_dead_guard_named_in_the_page_is_flagged_guard_dead() {
    let (rig, page) = rig_and_page();
    let port = free_udp_port();
    let mut guard = rig.start_guard(port);
    let _rt = start_guarded_runtime(&rig, port, "rt");
    let dead = deathswitch::flags::SafetyFlags::GUARD_DEAD.bits();
    wait_for("the runtime's frames", Duration::from_secs(15), || {
        cycle_frames(&rig).len() > 100
    });
    assert_eq!(
        page.snapshot().safety_flags & dead,
        0,
        "a live guard is not dead"
    );
    guard.signal(Signal::SIGKILL);
    let _ = guard.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    wait_for("guard-dead", Duration::from_secs(10), || {
        page.snapshot().safety_flags & dead != 0
    });
    eprintln!("guard-dead raised {:?} after the kill", killed.elapsed());
    let _guard2 = rig.start_guard(port);
    wait_for("guard-dead cleared", Duration::from_secs(10), || {
        page.snapshot().safety_flags & dead == 0
    });
}

/// The status file: `status.json` next to the page, mode 0640 under umask
/// 000, rewritten at least 4 times a second, with the battery, every
/// joint's stiffness and temperature, the hottest joint and the motion
/// state; the LoLA and wake sockets are 0660 under umask 000.
#[test]
fn status_file_and_sockets_have_their_modes_under_umask_000() {
    let rig = Rig::start();
    Page::open(rig.page_path()).unwrap().rearm();
    let lola = rig.dir().join("robocup");
    let status = rig.dir().join("status.json");
    let mut run = rig.runtime_command(&lola_runtime(&lola));
    run.env_remove("NAO_RS_STATUS");
    let _rt = Proc::spawn("nao-rs run", &mut testkit::in_shell("umask 000", &run));
    wait_for("the status file", Duration::from_secs(15), || {
        nao_runtime::status_file::StatusFile::read(&status).is_some_and(|s| s.cycle > 10)
    });
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&lola), 0o660, "LoLA socket {:o}", mode(&lola));
    let w = rig.wake_socket(RT);
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

/// `nao-rs run` as `rt` refuses to start because another program serves
/// the socket at `path`: non-zero exit, an error naming the path and the
/// fix (the option `fix`), and no frame sent.
fn refused_for_a_held_path(rig: &Rig, rt: &Runtime, path: &Path, fix: &str) {
    let out = testkit::output(&mut rig.runtime_command(rt));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {:?}: {err}", out.status);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("another program serves it"), "{err}");
    assert!(err.contains(fix), "the fix: {err}");
    assert!(cycle_frames(rig).is_empty(), "no frame sent");
}

/// A wake-socket path another program holds is an error: `nao-rs run`
/// exits non-zero, naming the path and the fix, before sending any frame;
/// the other program's socket stays and still receives. A squatter there
/// could otherwise read (or fake) every person's wake.
#[test]
fn a_wake_path_held_by_another_program_is_an_error_naming_the_path() {
    let rig = Rig::start();
    let path = rig.wake_socket(RT);
    let squatter = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    refused_for_a_held_path(&rig, &Runtime::new(RT).priority(0), &path, "--wake-socket");
    std::os::unix::net::UnixDatagram::unbound()
        .unwrap()
        .send_to(b"ping", &path)
        .expect("the squatter's socket is still there");
    let mut buf = [0u8; 8];
    assert_eq!(squatter.recv(&mut buf).unwrap(), 4);
}

/// `nao-rs run --controller lola --priority 0` as [`RT`] with its LoLA
/// socket at `lola`.
fn lola_runtime(lola: &Path) -> Runtime {
    Runtime::new(RT)
        .controller("lola")
        .priority(0)
        .arg("--lola-socket")
        .arg(lola)
}

/// A LoLA path another program listens on is an error: `nao-rs run
/// --controller lola` exits non-zero, naming the path and the fix, before
/// sending any frame; the other program's socket stays.
#[test]
fn a_lola_path_held_by_another_listener_is_an_error_naming_the_path() {
    let rig = Rig::start();
    let lola = rig.dir().join("robocup");
    let _squatter = std::os::unix::net::UnixListener::bind(&lola).unwrap();
    refused_for_a_held_path(&rig, &lola_runtime(&lola), &lola, "--lola-socket");
    assert!(std::os::unix::net::UnixStream::connect(&lola).is_ok());

    // A socket file of another user (root only: chown).
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the other-user case: not root (chown needs it)");
        return;
    }
    let other = rig.dir().join("robocup2");
    drop(std::os::unix::net::UnixListener::bind(&other).unwrap());
    nix::unistd::chown(&other, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = testkit::output(&mut rig.runtime_command(&lola_runtime(&other)));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("of user 65534"), "{err}");
    assert!(cycle_frames(&rig).is_empty(), "no frame sent");
}
