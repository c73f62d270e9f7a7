//! The guard with the real runtime, `nao-rs run --controller stand`, on the
//! virtual robot: SIGSTOP, take-over, systemd-style restart, hand-over.

mod common;

use std::time::Duration;

use common::{cycle_frames, nao_rs_run, runs, start_guard, wait_for, wait_for_opt};
use deathswitch::{Page, Reason};
use nao_rs_sim::Spawned;
use nix::sys::signal::Signal;

fn count_from(sim: &Spawned, pid: u32) -> usize {
    cycle_frames(sim)
        .iter()
        .filter(|l| l.peer_pid as u32 == pid)
        .count()
}

#[test]
fn real_runtime_sigstop_take_over_then_restart_hand_over_still_tripped() {
    let sim = Spawned::start(testkit::bin("nao-rs-sim"), &["--versions", "10"]).expect("sim");
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    let guard_log = sim.dir().join("guard.log");
    let guard = start_guard(&sim, &page_path);
    let runtime = |name: &str| nao_rs_run(&sim, &page_path, name, "stand", None);

    page.rearm();
    let mut rt1 = runtime("rt1");
    wait_for("the runtime's frames", Duration::from_secs(20), || {
        (count_from(&sim, rt1.pid()) >= 20).then_some(())
    });
    rt1.signal(Signal::SIGSTOP);
    wait_for("the guard's frames", Duration::from_secs(5), || {
        (count_from(&sim, guard.pid()) >= 3).then_some(())
    });
    assert_eq!(page.snapshot().reason, Some(Reason::GuardHeartbeatLost));
    assert!(
        rt1.wait_exit(Duration::from_secs(2)).is_some(),
        "the guard killed the stopped runtime"
    );
    let f = cycle_frames(&sim);
    assert_eq!(runs(&f), vec![rt1.pid(), guard.pid()]);
    assert!(f
        .iter()
        .filter(|l| l.peer_pid as u32 == guard.pid())
        .all(|l| l.all_off));

    // systemd restarts it: hand-over; the switch stays tripped, all-off.
    let rt2 = runtime("rt2");
    wait_for("the new runtime's frames", Duration::from_secs(20), || {
        (count_from(&sim, rt2.pid()) >= 20).then_some(())
    });
    let s = page.snapshot();
    assert!(!s.armed && !s.guard_holding);
    assert_eq!(s.driver_pid, Some(rt2.pid()));
    let f = cycle_frames(&sim);
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
    let taken = wait_for_opt(Duration::from_millis(500), || {
        page.snapshot().guard_holding.then_some(())
    });
    assert!(
        taken.is_none(),
        "the guard took a healthy runtime over:\n{}",
        std::fs::read_to_string(&guard_log).unwrap_or_default()
    );
}
