//! The guard against the virtual robot: real processes, real signals.
//!
//! Each test starts `nao-rs-sim` (its trace shows who sent each frame, by
//! `peer_pid`), the guard and the runtime `nao-rs run --controller stand`
//! (with `--fault KIND` where it must misbehave) on private paths, and kills
//! them all at the end, also on failure.

mod common;

use std::time::Duration;

use common::{guarded, runs, stiff_nao_rs_run, wait_for, wake_until_stiff, GuardRig, Runtime};
use deathswitch::Reason;
use nao_wire::link::sim::SimLink;
use nix::sys::signal::Signal;

#[test]
fn sigstop_runtime_guard_trips_kills_it_and_sends_all_off() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let mut rt = stiff_nao_rs_run(&rig, "rt", None);
    assert!(page.snapshot().armed, "healthy runtime: armed");

    rt.signal(Signal::SIGSTOP);
    let frames = rig.wait_frames_from(guard.pid(), 12, Duration::from_secs(5));

    let snap = page.snapshot();
    assert_eq!(snap.reason, Some(Reason::GuardHeartbeatLost));
    assert!(
        snap.guard_holding,
        "the page says the guard holds the board"
    );
    let status = rt
        .wait_exit(Duration::from_secs(2))
        .expect("the guard killed the stopped runtime");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "killed with SIGKILL: {status:?}"
    );

    // The trace: the runtime's frames, then only the guard's, all all-off.
    assert_eq!(
        runs(&frames),
        vec![rt.pid(), guard.pid()],
        "who sent each frame"
    );
    let guard_frames: Vec<_> = frames
        .iter()
        .filter(|l| l.peer_pid as u32 == guard.pid())
        .collect();
    assert!(
        guard_frames
            .iter()
            .all(|l| l.all_off && l.max_stiffness == 0),
        "{guard_frames:?}"
    );
    // Frames every 12 ms: the mean gap is the cycle; single gaps carry the
    // jitter of the exchange (the read of the previous answer comes first).
    let gaps: Vec<u64> = guard_frames
        .windows(2)
        .map(|w| w[1].t_ns - w[0].t_ns)
        .collect();
    let span = guard_frames.last().unwrap().t_ns - guard_frames[0].t_ns;
    let mean = span as f64 / gaps.len() as f64 / 1e6;
    assert!(
        (10.0..=14.0).contains(&mean),
        "mean gap between guard frames {mean:.2} ms: {gaps:?}"
    );
    assert!(
        gaps.iter().all(|&g| g > 2_000_000),
        "two guard frames in one poll: {gaps:?}"
    );
    rig.wait_guard_log("guard-heartbeat-lost");
}

#[test]
fn runtime_that_never_confirms_is_taken_over_with_guard_no_confirmation() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let mut rt = stiff_nao_rs_run(&rig, "rt", Some("never-confirm"));
    assert!(page.trip(Reason::Naoctl));
    let tripped_at = page.snapshot().tripped_at_ns;

    let frames = rig.wait_frames_from(guard.pid(), 1, Duration::from_secs(5));
    rt.wait_exit(Duration::from_secs(2))
        .expect("the guard killed the runtime");
    // The first reason stays; the guard's own reason is in its log.
    assert_eq!(page.snapshot().reason, Some(Reason::Naoctl));
    rig.wait_guard_log("guard-no-confirmation");
    // Not before the window ended (the rig's guard runs with the tests'
    // window, `TEST_CONFIRM_WINDOW_MS`); how soon after it is the world's
    // I3 (the robot's 40 ms, in virtual time) and the bench's.
    let first = frames
        .iter()
        .find(|l| l.peer_pid as u32 == guard.pid())
        .unwrap();
    let ms = (first.t_ns - tripped_at) as f64 / 1e6;
    assert!(
        ms >= testkit::TEST_CONFIRM_WINDOW_MS as f64,
        "taken over {ms:.1} ms after the trip: before the {} ms window ended",
        testkit::TEST_CONFIRM_WINDOW_MS
    );
}

#[test]
fn sigkill_restart_hands_over_still_tripped_new_runtime_all_off_until_rearm() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let mut rt1 = stiff_nao_rs_run(&rig, "rt1", None);
    rt1.signal(Signal::SIGKILL);
    rt1.wait_exit(Duration::from_secs(2)).unwrap();
    rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));
    // The pidfd saw the exit: taken over at once, not after the beat timeout.
    assert_eq!(page.snapshot().reason, Some(Reason::GuardRuntimeExited));

    // The restart: hand-over, the switch stays tripped.
    let mut rt2 = rig.start_runtime(&Runtime::new("rt2"));
    rig.wait_frames_from(rt2.pid(), 20, Duration::from_secs(20));
    let snap = page.snapshot();
    assert!(!snap.armed, "still tripped after the hand-over");
    assert_eq!(snap.driver_pid, Some(rt2.pid()));
    assert!(!snap.guard_holding);
    rig.wait_guard_log("handed over");
    let frames = rig.frames();
    assert!(
        frames
            .iter()
            .filter(|l| l.peer_pid as u32 == rt2.pid())
            .all(|l| l.all_off),
        "new runtime all-off while tripped"
    );

    // A re-arm (and a person's wake): the new runtime is no longer held
    // all-off; the guard stays out.
    let before = frames.len();
    page.rearm();
    assert!(
        wake_until_stiff(&rig, "rt2", &mut rt2, before, Duration::from_secs(5)),
        "no stiff frames after the re-arm:\n{}",
        rig.log("rt2")
    );
    let after = rig.frames();
    assert_eq!(runs(&after), vec![rt1.pid(), guard.pid(), rt2.pid()]);
}

#[test]
fn rearm_with_no_runtime_guard_releases_the_board() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let mut rt = rig.start_runtime(&Runtime::new("rt"));
    rig.wait_frames_from(rt.pid(), 5, Duration::from_secs(20));
    rt.signal(Signal::SIGKILL);
    rt.wait_exit(Duration::from_secs(2)).unwrap();
    rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));

    page.rearm();
    wait_for("the guard to release", Duration::from_secs(2), || {
        (!page.snapshot().guard_holding).then_some(())
    });
    let snap = page.snapshot();
    assert_eq!(snap.driver_pid, None, "driver fields cleared");
    assert_eq!(snap.last_cycle, None);
    // No guard frames any more, and the board is free for the next runtime.
    std::thread::sleep(Duration::from_millis(50));
    let n = rig.frames().len();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rig.frames().len(), n, "frames after the release");
    let mut link = SimLink::new(rig.sim_socket());
    nao_wire::protocol::startup::link_up(&mut link).expect("the board is free after the release");
    rig.wait_guard_log("released");
}

#[test]
fn two_processes_race_guard_and_restarting_runtime_never_both_send() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let mut pids = Vec::new();
    // Three crash-restart rounds; each restart starts the moment the guard
    // has taken over, racing its first frames and the hand-over.
    for round in 0..3 {
        let rt = rig.start_runtime(&Runtime::new(&format!("rt{round}")));
        pids.push(rt.pid());
        rig.wait_frames_from(rt.pid(), 8, Duration::from_secs(20));
        page.rearm();
        rt.signal(if round % 2 == 0 {
            Signal::SIGSTOP
        } else {
            Signal::SIGKILL
        });
        wait_for("the take-over", Duration::from_secs(5), || {
            page.snapshot().guard_holding.then_some(())
        });
        drop(rt);
    }
    let last = rig.start_runtime(&Runtime::new("last"));
    pids.push(last.pid());
    let frames = rig.wait_frames_from(last.pid(), 10, Duration::from_secs(20));
    let g = guard.pid();
    let want: Vec<u32> = pids
        .iter()
        .flat_map(|&p| [p, g])
        .take(pids.len() * 2 - 1)
        .collect();
    assert_eq!(
        runs(&frames),
        want,
        "each runtime's frames, then the guard's, never interleaved"
    );
    for w in frames.windows(2) {
        assert!(w[1].t_ns >= w[0].t_ns, "trace in time order");
        if w[0].peer_pid != w[1].peer_pid {
            assert!(w[1].t_ns > w[0].t_ns, "two senders in the same instant");
        }
    }
}

/// The runtime's pidfd. A runtime that ends for any reason
/// (SIGKILL, segfault, abort, a clean SIGTERM) is taken over at once with
/// `guard-runtime-exited` (not after the beat timeout, whose reason would
/// be `guard-heartbeat-lost`), and the board keeps getting all-off frames
/// from the guard. A clean exit tripped `shutdown` first: the first reason
/// stays, and the guard takes the board over the same way.
#[test]
fn runtime_exit_of_any_cause_is_taken_over_at_once_by_the_pidfd() {
    for (sig, want) in [
        (Signal::SIGKILL, Reason::GuardRuntimeExited),
        // A real segfault in the runtime's cycle thread (SIGUSR2 asks
        // `nao-rs run --fault crash-on-usr2` for one).
        (Signal::SIGUSR2, Reason::GuardRuntimeExited),
        (Signal::SIGABRT, Reason::GuardRuntimeExited),
        (Signal::SIGTERM, Reason::Shutdown),
    ] {
        let (rig, page, guard) = guarded();
        page.rearm();
        let fault = (sig == Signal::SIGUSR2).then_some("crash-on-usr2");
        let mut rt = stiff_nao_rs_run(&rig, "rt", fault);
        let count_before = page.snapshot().trip_count;
        rt.signal(sig);
        let status = rt
            .wait_exit(Duration::from_secs(2))
            .unwrap_or_else(|| panic!("{sig}: the runtime did not exit"));
        if sig == Signal::SIGUSR2 {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGSEGV), "a real segfault");
        }
        let frames = rig.wait_frames_from(guard.pid(), 5, Duration::from_secs(5));
        let snap = page.snapshot();
        assert_eq!(snap.reason, Some(want), "{sig}");
        assert!(snap.guard_holding, "{sig}: the guard holds the board");
        assert!(snap.trip_count > count_before, "{sig}");
        assert_eq!(runs(&frames), vec![rt.pid(), guard.pid()], "{sig}");
        assert!(
            frames
                .iter()
                .filter(|l| l.peer_pid as u32 == guard.pid())
                .all(|l| l.all_off && l.max_stiffness == 0),
            "{sig}: the guard's frames are all-off"
        );
        rig.wait_guard_log("guard-runtime-exited");
    }
}
