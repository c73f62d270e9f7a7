//! Compound faults, the runtime's cases: faults on top of faults, each from a
//! second process (this test) against `nao-rs run` on the virtual robot,
//! judged by the simulator's trace ("stiff" = a frame with any stiffness
//! above 0).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    cycle_frames, naoctl, setup, setup_with, signal_ends_the_runtime_safely, stiff_after, truncate,
    wait_frame_after, wait_stiff_after, wake, window, LolaController, Rig, RT,
};
use nix::sys::signal::Signal;

/// `naoctl stop`, then the page's trip time (monotonic ns), read before
/// anything re-arms: the judge's start (frames built before it may be
/// stiff).
fn naoctl_stop(s: &common::RunningRuntime) -> u64 {
    naoctl(&s.rig, &["stop"]);
    let snap = s.page.snapshot();
    assert!(!snap.armed, "naoctl stop tripped the switch");
    snap.tripped_at_ns
}

/// Relative times (ms after `t0`) and stiffness of `frames`, for messages.
fn show(frames: &[nao_rs_sim::TraceLine], t0: u64) -> String {
    frames
        .iter()
        .map(|l| {
            format!(
                "{:+.1}ms:{}",
                (l.t_ns as f64 - t0 as f64) / 1e6,
                l.max_stiffness
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The frames after `t_ns` for the next `ms` milliseconds (waited for).
fn settle(rig: &Rig, t_ns: u64, ms: u64) {
    wait_frame_after(rig, t_ns + ms * 1_000_000, Duration::from_secs(5));
}

/// One round: `naoctl stop`, re-armed at once, limp (no wake) for
/// `limp_ms`, then woken and stiff again. Its (stop, re-armed, woken)
/// times.
fn stop_rearm_wake(s: &common::RunningRuntime, limp_ms: u64) -> (u64, u64, u64) {
    let stop = naoctl_stop(s);
    naoctl(&s.rig, &["rearm", "--yes"]);
    let rearmed = deathswitch::monotonic_ns();
    settle(&s.rig, rearmed, limp_ms);
    let woke = deathswitch::monotonic_ns();
    wake(&s.rig, RT);
    // Stiff again after the wake (the stand ramp's first step).
    wait_stiff_after(&s.rig, woke, Duration::from_secs(5));
    (stop, rearmed, woke)
}
#[test]
fn damaged_page_re_armed_within_one_cycle() {
    let s = setup();
    testkit::bin("naoctl");
    for round in 0..5 {
        let t = deathswitch::monotonic_ns();
        truncate(s.rig.page_path());
        // naoctl makes the page whole (tripped page-lost), then re-arms.
        naoctl(&s.rig, &["rearm", "--yes"]);
        let rearmed = deathswitch::monotonic_ns();
        settle(&s.rig, rearmed, 100);
        // Two repairers race: when the runtime saw the truncated page
        // before naoctl made it whole, its own repair (trip page-lost)
        // can land after the re-arm. The safe outcome: tripped again, and
        // the person re-arms again, as at the robot.
        let page = deathswitch::inspect(s.rig.page_path()).unwrap().snapshot;
        if !page.armed {
            assert_eq!(
                page.reason,
                Some(deathswitch::Reason::PageLost),
                "round {round}"
            );
            naoctl(&s.rig, &["rearm", "--yes"]);
            settle(&s.rig, deathswitch::monotonic_ns(), 100);
        }
        let woke = deathswitch::monotonic_ns();
        let w = window(&cycle_frames(&s.rig), t, woke);
        let stiff = stiff_after(&w, t);
        assert!(
            stiff.is_empty(),
            "round {round}: stiff after the damage before the wake: {stiff:?}"
        );
        wake(&s.rig, RT);
        wait_stiff_after(&s.rig, woke, Duration::from_secs(5));
    }
}

// ---- LoLA ----

/// A LoLA actuator message `{"Stiffness": [s; 25]}` in MessagePack.
fn stiffness_message(s: f32) -> Vec<u8> {
    let mut m = vec![0x81, 0xa9];
    m.extend_from_slice(b"Stiffness");
    m.extend_from_slice(&[0xdc, 0x00, 25]);
    for _ in 0..25 {
        m.push(0xca);
        m.extend_from_slice(&s.to_be_bytes());
    }
    m
}

fn lola_connect(path: &Path) -> UnixStream {
    let t0 = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(c) => {
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                return c;
            }
            Err(e) => {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "LoLA socket {}: {e}",
                    path.display()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A monitor writing valid messages as fast as it can, never reading.
fn flooding_monitor(path: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let mut c = lola_connect(path);
    std::thread::spawn(move || {
        let m = stiffness_message(1.0);
        let mut n = 0;
        c.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        while !stop.load(Ordering::Relaxed) {
            match c.write_all(&m) {
                Ok(()) => n += 1,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break,
            }
        }
        n
    })
}

/// `nao-rs run --controller lola` on a LoLA socket of its own, woken once
/// ready: the socket's folder (kept until dropped), the socket, the runtime.
fn lola_runtime() -> (tempfile::TempDir, PathBuf, common::RunningRuntime) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("robocup");
    let s = setup_with("lola", &["--lola-socket", socket.to_str().unwrap()]);
    s.rig.wake_when_ready(RT);
    (dir, socket, s)
}

#[test]
fn lola_bridge_stalled_by_monitor_clients() {
    testkit::bin("naoctl");
    let (_socket_dir, socket, s) = lola_runtime();
    let ctl = LolaController::start(lola_connect(&socket), stiffness_message(0.5));
    wait_stiff_after(&s.rig, 0, Duration::from_secs(15));

    // Two monitors stream valid messages as fast as they can.
    let stop_monitors = Arc::new(AtomicBool::new(false));
    let monitors: Vec<_> = (0..2)
        .map(|_| flooding_monitor(&socket, stop_monitors.clone()))
        .collect();
    let flood = deathswitch::monotonic_ns();
    let frames_before = ctl.frames();
    settle(&s.rig, flood, 1000);
    let frames_during = ctl.frames() - frames_before;

    // During the flood: the stop, then the re-arm a few ms later, no wake;
    // then (to start the next round stiff) the wake. Ten rounds.
    let rounds: Vec<_> = (0..10).map(|_| stop_rearm_wake(&s, 300)).collect();
    stop_monitors.store(true, Ordering::Relaxed);
    let sent: u64 = monitors.into_iter().map(|m| m.join().unwrap()).sum();

    let frames = cycle_frames(&s.rig);
    for (i, &(stop, rearmed, woke)) in rounds.iter().enumerate() {
        let w = window(&frames, stop, woke);
        let stiff = stiff_after(&w, stop);
        assert!(
            stiff.is_empty(),
            "round {i}: {} stiff frames after the trip (re-armed {} us later, no wake): {}",
            stiff.len(),
            (rearmed - stop) / 1000,
            show(&w, stop)
        );
        assert!(w.len() >= 20, "round {i}: the runtime went on: {}", w.len());
    }
    // The controlling client was served through the flood: its frames
    // came every cycle and its stiffness held (no controller-lost ramp).
    assert!(
        frames_during >= 40,
        "the controller got {frames_during} frames in 1 s of flood (monitors sent {sent})"
    );
    let held = window(&frames, flood + 500_000_000, flood + 1_000_000_000);
    assert!(
        !held.is_empty() && held.iter().all(|l| l.max_stiffness == 500),
        "the controller's stiffness held through the flood: {:?}",
        held.iter().map(|l| l.max_stiffness).collect::<Vec<_>>()
    );
    eprintln!("flood: controller frames {frames_during} in 1 s, monitor messages {sent}");
    drop(ctl);
}

#[test]
fn lola_controller_that_reconnects_within_one_cycle() {
    let (_socket_dir, socket, s) = lola_runtime();
    // The first client is the controller; a monitor stays connected
    // throughout (it must not become the controller).
    let mut c = lola_connect(&socket);
    let monitor = lola_connect(&socket);
    let mut buf = [0u8; 896];
    let t0 = Instant::now();
    loop {
        c.read_exact(&mut buf).unwrap();
        c.write_all(&stiffness_message(0.5)).unwrap();
        if cycle_frames(&s.rig)
            .last()
            .is_some_and(|l| l.max_stiffness == 500)
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "never stiff");
    }
    // Close with a frame unread (the server's read gets ECONNRESET) and
    // connect again at once: within one cycle.
    drop(c);
    let back = deathswitch::monotonic_ns();
    let ctl = LolaController::start(lola_connect(&socket), stiffness_message(0.7));
    let f = wait_stiff_after(&s.rig, back, Duration::from_secs(3));
    let mut tail = nao_rs_sim::Tail::new(s.rig.trace_path());
    let at_700 = tail
        .wait_for(Duration::from_secs(3), |l| {
            l.is_cycle_frame() && l.t_ns >= back && l.max_stiffness == 700
        })
        .unwrap();
    assert!(
        at_700.is_some(),
        "the reconnected controller's stiffness 0.7 never reached the robot \
         (it was made a monitor); first frame after: {f:?}"
    );
    assert!(ctl.frames() > 0);
    drop(monitor);
}

// ---- Signals ----

/// Each signal that ends the runtime (but SIGTERM, below), one runtime
/// each: trips `shutdown`, the last frame all-off.
#[test]
fn every_stop_signal_trips_shutdown_and_the_last_frame_is_all_off() {
    for sig in [
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGINT,
    ] {
        signal_ends_the_runtime_safely(sig);
    }
}

// SIGTERM: `sigterm_trips_shutdown_and_the_last_frame_is_all_off` in run_sim.rs.

// ---- Memory ----

/// A number of `/proc/PID/status` (`field` with its colon; kB for sizes).
fn status_number(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

#[test]
fn memory_locked() {
    let s = setup();
    let locked = status_number(s.rt.pid(), "VmLck:");
    drop(s.rt);
    let stderr = s.rig.log(RT);
    let warnings = stderr.matches("memory not locked").count();
    if nix::unistd::geteuid().is_root() {
        assert!(locked > 0, "VmLck {locked} kB as root; stderr: {stderr}");
        assert_eq!(warnings, 0, "{stderr}");
    } else {
        eprintln!("not root: mlockall may be refused; checking the warning instead");
        assert!(
            locked > 0 || warnings == 1,
            "VmLck {locked} kB and {warnings} warnings: {stderr}"
        );
    }
    eprintln!("VmLck of nao-rs run: {locked} kB");
}

/// Under `mlockall` every byte of every thread's stack is resident, and a
/// killed runtime's exit frees all of it before the kernel lets the chest
/// board go to the guard: the runtime's threads have small stacks
/// (`nao_kit::actor::STACK_BYTES`), so the running runtime stays under
/// 16 MiB resident (with std's 2 MiB stacks it was 21 MiB).
#[test]
fn the_runtimes_threads_have_small_stacks_so_little_memory_is_locked() {
    let s = setup();
    let pid = s.rt.pid();
    let (rss, threads) = (status_number(pid, "VmRSS:"), status_number(pid, "Threads:"));
    eprintln!("nao-rs run: VmRSS {rss} kB, {threads} threads");
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: mlockall may be refused, stacks are then not resident; not judged");
        return;
    }
    assert!(
        threads >= 6,
        "{threads} threads: the runtime's threads are counted"
    );
    assert!(
        rss < 16 << 10,
        "nao-rs run has {rss} kB resident with {threads} threads: a thread with a large stack?"
    );
}
