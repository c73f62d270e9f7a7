//! The release race: a runtime that registers while the guard lets the
//! board go keeps its registration (found by the take-over benchmark).

mod common;

use std::sync::Arc;

use common::{frozen_runtime, poller, TestBoard};
use deathswitch::{monotonic_ns, Page, Switch};
use nao_rs_guard::core::GuardState;
use nao_rs_guard::log::discard_logbook;

#[test]
fn release_keeps_a_runtime_that_registers_while_the_board_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let page = Arc::new(Page::open(&dir.path().join("deathswitch")).unwrap());
    page.rearm();
    // The runtime taken over: it registers itself (mapping the page) and
    // freezes before its first beat.
    let mut victim = frozen_runtime(&page);
    // A board whose `close` is where a restarting runtime registers.
    let registering = page.clone();
    let board = TestBoard::on_close(move || registering.register(4_000_000));
    let book = discard_logbook();
    let mut p = poller(board, &book);
    let t = monotonic_ns();
    page.write_heartbeat(1, t, false);
    p.poll(&page, t + 1_000_000);
    p.poll(&page, t + 100_000_000);
    assert!(matches!(p.core().state(), GuardState::Holding { .. }));
    assert!(victim
        .wait_exit(std::time::Duration::from_secs(5))
        .is_some());

    page.rearm();
    p.poll(&page, monotonic_ns());
    assert_eq!(p.core().state(), GuardState::Idle, "released");
    assert_eq!(
        page.snapshot().driver_pid,
        Some(4_000_000),
        "the registration made during the release survives"
    );
}
