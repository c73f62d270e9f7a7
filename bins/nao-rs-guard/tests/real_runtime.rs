//! The guard with the real runtime, `nao-rs run --controller stand`, on the
//! virtual robot: SIGSTOP, take-over, systemd-style restart, hand-over; and
//! a guard stopped across a restart.

mod common;

use std::time::Duration;

use common::{
    poll_for, runs, stiff_nao_rs_run, wait_for, wake_until_stiff, GuardRig, Rig, Runtime,
};
use deathswitch::{Page, Reason};
use nix::sys::signal::Signal;

#[test]
fn real_runtime_sigstop_take_over_then_restart_hand_over_still_tripped() {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    let guard = rig.start_guard(0);
    let runtime = |name: &str| rig.start_runtime(&Runtime::new(name));

    page.rearm();
    let mut rt1 = runtime("rt1");
    wait_for("the runtime's frames", Duration::from_secs(20), || {
        (rig.frames_from(rt1.pid()).len() >= 20).then_some(())
    });
    rt1.signal(Signal::SIGSTOP);
    wait_for("the guard's frames", Duration::from_secs(5), || {
        (rig.frames_from(guard.pid()).len() >= 3).then_some(())
    });
    assert_eq!(page.snapshot().reason, Some(Reason::GuardHeartbeatLost));
    assert!(
        rt1.wait_exit(Duration::from_secs(2)).is_some(),
        "the guard killed the stopped runtime"
    );
    let f = rig.frames();
    assert_eq!(runs(&f), vec![rt1.pid(), guard.pid()]);
    assert!(f
        .iter()
        .filter(|l| l.peer_pid as u32 == guard.pid())
        .all(|l| l.all_off));

    // systemd restarts it: hand-over; the switch stays tripped, all-off.
    let rt2 = runtime("rt2");
    wait_for("the new runtime's frames", Duration::from_secs(20), || {
        (rig.frames_from(rt2.pid()).len() >= 20).then_some(())
    });
    let s = page.snapshot();
    assert!(!s.armed && !s.guard_holding);
    assert_eq!(s.driver_pid, Some(rt2.pid()));
    let f = rig.frames();
    assert_eq!(
        runs(&f),
        vec![rt1.pid(), guard.pid(), rt2.pid()],
        "never both at once"
    );
    assert!(
        f.iter()
            .filter(|l| l.peer_pid as u32 == rt2.pid())
            .all(|l| l.all_off),
        "all-off while tripped"
    );

    // A re-arm: the healthy runtime confirms and beats; the guard stays out.
    page.rearm();
    let taken = poll_for(Duration::from_millis(500), || {
        page.snapshot().guard_holding.then_some(())
    });
    assert!(
        taken.is_none(),
        "the guard took a healthy runtime over:\n{}",
        rig.log("guard")
    );
}

/// The guard stopped (SIGSTOP) across a restart: its runtime is killed,
/// the next one registers and takes the free board, then the guard goes
/// on. It trips `guard-runtime-exited` and, finding the board busy, hands
/// it to the successor (`Transition::Succeeded`). Re-armed and woken, the
/// successor moves; when it hangs, the guard kills it and its all-off
/// frames follow. Before, the guard held nothing, a re-arm cleared the
/// successor's registration and its hang got no frame from anyone (the
/// world's finding 1). Judged by the virtual robot's trace.
#[test]
fn a_guard_stopped_across_a_restart_hands_the_board_to_the_successor() {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    let guard = rig.start_guard(0);
    page.rearm();
    let mut rt1 = stiff_nao_rs_run(&rig, "rt1", None);
    guard.signal(Signal::SIGSTOP);
    rt1.signal(Signal::SIGKILL);
    rt1.wait_exit(Duration::from_secs(2)).expect("killed");
    // systemd's restart, while the guard is stopped.
    let mut rt2 = rig.start_runtime(&Runtime::new("rt2"));
    wait_for("the successor's frames", Duration::from_secs(20), || {
        (rig.frames_from(rt2.pid()).len() >= 10).then_some(())
    });
    guard.signal(Signal::SIGCONT);
    rig.wait_guard_log("chest board handed over");
    let s = page.snapshot();
    assert_eq!(s.reason, Some(Reason::GuardRuntimeExited));
    assert_eq!(s.driver_pid, Some(rt2.pid()));
    // Re-armed: the successor keeps its registration and, woken, moves.
    page.rearm();
    let n = rig.frames().len();
    assert!(
        wake_until_stiff(&rig, "rt2", &mut rt2, n, Duration::from_secs(20)),
        "the successor moves after a re-arm and a wake:\n{}",
        rig.log("guard")
    );
    assert_eq!(page.snapshot().driver_pid, Some(rt2.pid()));
    // It hangs: killed, and the guard's all-off frames follow.
    rt2.signal(Signal::SIGSTOP);
    wait_for("the guard's frames", Duration::from_secs(5), || {
        (rig.frames_from(guard.pid()).len() >= 3).then_some(())
    });
    assert!(
        rt2.wait_exit(Duration::from_secs(2)).is_some(),
        "the guard killed the hung successor"
    );
    let f = rig.frames();
    assert_eq!(
        runs(&f),
        vec![rt1.pid(), rt2.pid(), guard.pid()],
        "one writer at a time"
    );
    assert!(f
        .iter()
        .filter(|l| l.peer_pid as u32 == guard.pid())
        .all(|l| l.all_off));
}
