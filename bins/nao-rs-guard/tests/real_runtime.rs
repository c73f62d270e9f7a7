//! The guard with the real runtime, `nao-rs run --controller stand`, on the
//! virtual robot: SIGSTOP, take-over, systemd-style restart, hand-over.

mod common;

use std::time::Duration;

use common::{poll_for, runs, wait_for, GuardRig, Rig, Runtime};
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
