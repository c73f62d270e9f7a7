//! The guard's poll loop allocates nothing: a counting global allocator
//! counts the allocations of the polling thread while it watches a runtime,
//! takes over, holds the board (against a board that allocates nothing, and
//! against the virtual robot over `SimLink`), verifies and hands over to a
//! restarted runtime, takes the board back past the hand-over bound and
//! releases.

mod common;

use common::{frozen_runtime, poller, TestBoard, HAND_OVER_BOUND};
use deathswitch::Page;
use nao_kit::alloc::{self, allocations};
use nao_rs_guard::board::{Board, WireBoard};
use nao_rs_guard::core::GuardState;
use nao_rs_guard::log::discard_logbook;
use nao_wire::link::sim::SimLink;
use testkit::RigSpec;

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

const MS: u64 = 1_000_000;

#[test]
fn poll_loop_allocates_nothing_watching_holding_handing_over_releasing() {
    let dir = tempfile::tempdir().unwrap();
    let page = Page::open(&dir.path().join("deathswitch")).unwrap();
    page.rearm();
    // A runtime for the guard to kill (it registers itself, mapping the
    // page, and freezes), and later a restarted one to hand over to.
    let mut victim = frozen_runtime(&page);
    let book = discard_logbook();
    let mut p = poller(TestBoard::new(), &book);
    // Virtual time in the past: the page counts a beat more than 50 ms in
    // the future as damage (an impossible value).
    let t0 = deathswitch::monotonic_ns() - 5_000 * MS;

    // Watching: 1,000 polls, the runtime beating every 12 ms (time passed in).
    let n = allocations(|| {
        for i in 0..1000u64 {
            let now = t0 + i * 2 * MS;
            if i % 6 == 0 {
                page.write_heartbeat(i / 6, now, false);
            }
            p.poll(&page, now);
        }
    });
    assert_eq!(p.core().state(), GuardState::Watching);
    assert_eq!(n, 0, "allocations while watching");

    // The beat stops: take-over, then 1,000 polls holding the board.
    let t1 = t0 + 2000 * MS;
    let n = allocations(|| {
        for i in 0..1000u64 {
            p.poll(&page, t1 + 100 * MS + i * 2 * MS);
        }
    });
    assert!(matches!(p.core().state(), GuardState::Holding { .. }));
    assert!(p.board().frames >= 100, "{} frames", p.board().frames);
    assert_eq!(n, 0, "allocations while taking over and holding");
    assert!(victim
        .wait_exit(std::time::Duration::from_secs(5))
        .is_some());

    // Hand-over to a restarted runtime, then a release after a take-over.
    let mut next = frozen_runtime(&page);
    let n = allocations(|| {
        p.poll(&page, deathswitch::monotonic_ns());
    });
    assert_eq!(p.core().state(), GuardState::Idle);
    assert_eq!(n, 0, "allocations at the hand-over");

    // The new runtime never beats: taken back past the hand-over bound
    // (guard rule 6), then a re-arm releases.
    let t2 = deathswitch::monotonic_ns();
    let bound = HAND_OVER_BOUND.as_nanos() as u64;
    let n = allocations(|| {
        p.poll(&page, t2 + 2 * MS);
        p.poll(&page, t2 + bound + 10 * MS);
    });
    assert!(matches!(p.core().state(), GuardState::Holding { .. }));
    assert!(next.wait_exit(std::time::Duration::from_secs(5)).is_some());
    page.rearm();
    let n2 = allocations(|| {
        p.poll(&page, t2 + bound + 12 * MS);
        p.poll(&page, t2 + bound + 14 * MS);
    });
    assert_eq!(p.core().state(), GuardState::Idle);
    assert!(!p.board().is_open());
    assert_eq!(
        n + n2,
        0,
        "allocations at the take-back past the hand-over bound and the release"
    );
    drop(book);
}

#[test]
fn holding_the_virtual_robot_allocates_nothing_per_frame() {
    let rig = RigSpec {
        sim_args: Vec::new(),
        ..RigSpec::default()
    }
    .start();
    let mut board = WireBoard::new(SimLink::new(rig.sim_socket()));
    board.open().expect("link step");
    let n = allocations(|| {
        for i in 0..200u64 {
            board.send_all_off(i * 12 * MS).expect("all-off frame");
        }
    });
    assert_eq!(n, 0, "allocations over 200 guard-mode cycles on SimLink");
    let frames = nao_rs_sim::trace::read(rig.trace_path()).unwrap();
    assert!(frames.iter().filter(|l| l.is_cycle_frame()).count() >= 200);
    assert!(
        frames.iter().all(|l| l.all_off),
        "guard mode sends all-off only"
    );
}
