//! The release race: a runtime that registers while the guard lets the
//! board go keeps its registration (found by the take-over benchmark).

use std::sync::Arc;

use deathswitch::rules::Settings;
use deathswitch::{now_ns, Page};
use nao_rs_guard::board::Board;
use nao_rs_guard::core::State;
use nao_rs_guard::log::{discard_logbook, RING_CAPACITY};
use nao_rs_guard::poller::Poller;
use nao_wire::LinkError;

/// A board whose `close` is where a restarting runtime registers.
struct RegisterOnClose {
    page: Arc<Page>,
    pid: u32,
    open: bool,
}

impl Board for RegisterOnClose {
    fn open(&mut self) -> Result<(), LinkError> {
        self.open = true;
        Ok(())
    }
    fn send_all_off(&mut self, _t_ns: u64) -> Result<(), LinkError> {
        Ok(())
    }
    fn close(&mut self) {
        self.page.register_driver(self.pid);
        self.open = false;
    }
    fn is_open(&self) -> bool {
        self.open
    }
}

#[test]
fn release_keeps_a_runtime_that_registers_while_the_board_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let page = Arc::new(Page::open(&dir.path().join("deathswitch")).unwrap());
    page.rearm();
    // The runtime taken over: it registers itself (mapping the page) and
    // freezes before its first beat.
    let mut victim = testkit::Proc::spawn(
        "test runtime",
        std::process::Command::new(testkit::bin(testkit::TEST_RUNTIME))
            .arg("--page")
            .arg(page.path())
            .args(["--link", "sim:/nonexistent", "--freeze", "registered"]),
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while page.snapshot().driver_pid != Some(victim.pid()) {
        assert!(std::time::Instant::now() < until, "the runtime registers");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let board = RegisterOnClose {
        page: page.clone(),
        pid: 4_000_000,
        open: false,
    };
    let book = discard_logbook();
    let mut p = Poller::new(
        board,
        Settings::default(),
        std::process::id(),
        book.sink("guard-poll", RING_CAPACITY),
    );
    let t = now_ns();
    page.write_heartbeat(1, t, false);
    p.poll(&page, t + 1_000_000);
    p.poll(&page, t + 100_000_000);
    assert!(matches!(p.core().state(), State::Holding { .. }));
    assert!(victim
        .wait_exit(std::time::Duration::from_secs(5))
        .is_some());

    page.rearm();
    p.poll(&page, now_ns());
    assert_eq!(p.core().state(), State::Idle, "released");
    assert_eq!(
        page.snapshot().driver_pid,
        Some(4_000_000),
        "the registration made during the release survives"
    );
}
