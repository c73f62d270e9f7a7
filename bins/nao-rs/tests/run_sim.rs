//! `nao-rs run` as a real process against the virtual robot: every trigger
//! makes the very next frame after the trip all-off, as the simulator's
//! trace shows, frame by frame.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{
    frames_after, free_udp_port, naoctl, runtime, setup, signal_ends_the_runtime_safely, truncate,
    wait_tripped, Rig, RunningRuntime, Runtime,
};
use deathswitch::{Page, Reason};
use nao_rs_sim::{Tail, TraceLine};
use nao_wire::link::sim::SimLink;

/// Frame by frame: every frame built after the trip is all-off. Only the
/// frame already on its way when the trip landed (the first one received
/// after it, within one 12 ms period) may still be stiff: the frame after
/// it was built at least one period later, after the trip. (The exact
/// cycle-by-cycle check is in actors/tests/runtime_sim.rs.)
fn assert_all_off_from_next_frame(frames: &[TraceLine], trip_ns: u64) {
    assert!(frames.len() >= 5, "frames after the trip: {frames:?}");
    for (i, l) in frames.iter().enumerate() {
        let in_flight = i == 0 && l.t_ns < trip_ns + 12_000_000;
        assert!(
            l.all_off || in_flight,
            "frame {i} after the trip not all-off: {l:?} (trip at {trip_ns})"
        );
    }
    for w in frames.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "no frame missing: {w:?}"
        );
    }
}

/// The page trips with `reason`; the runtime's frames from the one after
/// the trip on are all-off.
fn assert_tripped_then_all_off(s: &RunningRuntime, reason: Reason) {
    let trip = wait_tripped(&s.page);
    assert_eq!(s.page.reason(), Some(reason));
    assert_all_off_from_next_frame(&frames_after(&s.rig, trip), trip);
}

#[test]
fn udp_stop_makes_the_next_frame_all_off() {
    let s = setup();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Give the listener its first bind (it binds at start).
    tx.send_to(b"NAO-RS STOP", ("127.0.0.1", s.port)).unwrap();
    assert_tripped_then_all_off(&s, Reason::Udp);
}

#[test]
fn naoctl_stop_makes_the_next_frame_all_off() {
    let s = setup();
    naoctl(&s.rig, &["stop"]);
    assert_tripped_then_all_off(&s, Reason::Naoctl);
}

#[test]
fn chest_button_makes_the_next_frame_all_off() {
    let s = setup();
    testkit::ok(s.rig.sim_ctl(&["button"]), "nao-rs-sim ctl button");
    let trip = wait_tripped(&s.page);
    assert_eq!(s.page.reason(), Some(Reason::ChestButton));
    // The runtime trips right after handing the answer over, after that
    // cycle's frame went out: every frame after the trip is all-off.
    let frames = frames_after(&s.rig, trip);
    assert!(frames.iter().all(|l| l.all_off), "{frames:?}");
}

#[test]
fn truncated_page_gives_all_off_and_page_lost() {
    let s = setup();
    let t = deathswitch::monotonic_ns();
    truncate(s.rig.page_path());
    let trip = wait_tripped(&s.page).max(t);
    assert_eq!(s.page.reason(), Some(Reason::PageLost));
    assert_all_off_from_next_frame(&frames_after(&s.rig, trip), trip);
}

#[test]
fn deleted_page_gives_all_off_and_page_lost() {
    let s = setup();
    let t = deathswitch::monotonic_ns();
    std::fs::remove_file(s.rig.page_path()).unwrap();
    // The runtime maps a new page at the path, tripped page-lost.
    let t0 = Instant::now();
    let page = loop {
        if let Ok(p) = Page::open(s.rig.page_path()) {
            if p.reason() == Some(Reason::PageLost) {
                break p;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no page-lost page");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(!page.snapshot().armed);
    assert_all_off_from_next_frame(&frames_after(&s.rig, t), t);
}

#[test]
fn sigterm_trips_shutdown_and_the_last_frame_is_all_off() {
    signal_ends_the_runtime_safely(nix::sys::signal::Signal::SIGTERM);
}

/// Another process (this test) holding the sim's board.
fn hold_the_board(rig: &Rig) -> SimLink {
    use nao_wire::link::Link;
    let mut holder = SimLink::new(rig.sim_socket());
    holder.open(0xffff, 0x0006).unwrap();
    holder.set_configuration(1).unwrap();
    holder.claim_interface(0).unwrap();
    holder
}

#[test]
fn busy_board_is_retried_every_50_ms() {
    use nao_wire::link::Link;
    let rig = Rig::start();
    // Another process (this test) holds the board for 500 ms.
    let mut holder = hold_the_board(&rig);
    let rt = rig.start_runtime(&runtime("stand", free_udp_port()));
    std::thread::sleep(Duration::from_millis(500));
    holder.close();
    let mut tail = Tail::new(rig.trace_path());
    let frame = tail
        .wait_for(Duration::from_secs(8), |l| l.is_cycle_frame())
        .unwrap();
    assert!(
        frame.is_some(),
        "the runtime got the board once it was free"
    );
    drop(rt);
}

#[test]
fn busy_board_for_5_s_fails_with_a_clear_error() {
    let rig = Rig::start();
    // Held to the end of the test.
    let _holder = hold_the_board(&rig);
    let t0 = Instant::now();
    let out = testkit::output(&mut rig.runtime_command(&Runtime::new("rt").priority(0)));
    let waited = t0.elapsed();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy"), "{err}");
    assert!(
        waited >= Duration::from_secs(5),
        "retried for 5 s: {waited:?}"
    );
    let trace = nao_rs_sim::trace::read(rig.trace_path()).unwrap();
    assert!(trace.is_empty(), "no frame sent");
}
