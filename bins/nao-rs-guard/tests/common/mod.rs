//! Shared by the guard's integration tests: the virtual robot's trace as
//! frames per sender, the runtimes the guard watches (started on a
//! `testkit::Rig`), and the guard's poll loop in-process over a test board.
// Each test file uses a part of this module and of what it re-exports.
#![allow(dead_code, unused_imports)]

use std::process::Command;
use std::time::Duration;

use deathswitch::rules::Settings;
use deathswitch::Page;
use nao_kit::log::Logbook;
use nao_rs_guard::board::Board;
use nao_rs_guard::log::RING_CAPACITY;
use nao_rs_guard::poller::Poller;
use nao_rs_sim::TraceLine;
use nao_wire::LinkError;
pub use testkit::{poll_for, wait_for, Proc, Rig, Runtime};

/// The virtual robot, its armed-or-not page and the guard on it (UDP stop
/// off), published in the page. Dropped in reverse: guard, page, rig.
pub fn guarded() -> (Rig, Page, Proc) {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).expect("page");
    let guard = rig.start_guard(0);
    (rig, page, guard)
}

/// The frames of `frames` that `pid` sent.
pub fn sent_by(frames: &[TraceLine], pid: u32) -> Vec<TraceLine> {
    let mut f = frames.to_vec();
    f.retain(|l| l.peer_pid as u32 == pid);
    f
}

/// What the guard's tests read and start on a rig.
pub trait GuardRig {
    /// The virtual robot's cycle frames so far, in trace order.
    fn frames(&self) -> Vec<TraceLine>;
    /// The cycle frames `pid` sent so far.
    fn frames_from(&self, pid: u32) -> Vec<TraceLine>;
    /// Waits until `n` cycle frames from `pid` are in the trace; every
    /// cycle frame so far (of any sender).
    fn wait_frames_from(&self, pid: u32, n: usize, timeout: Duration) -> Vec<TraceLine>;
    /// Waits (3 s at most) until the guard's log says `what`.
    fn wait_guard_log(&self, what: &str);
    /// The guard's test runtime (`testkit::TEST_RUNTIME`) with `extra`
    /// arguments (`--stiffness S`, `--never-confirm`, `--freeze WHEN`).
    fn runtime(&self, extra: &[&str]) -> Proc;
    /// A runtime at stiffness 0.5, once 10 of its frames are in the trace.
    fn stiff_runtime(&self) -> Proc;
}

impl GuardRig for Rig {
    fn frames(&self) -> Vec<TraceLine> {
        let lines = nao_rs_sim::trace::read(self.trace_path()).unwrap_or_default();
        lines
            .into_iter()
            .filter(TraceLine::is_cycle_frame)
            .collect()
    }

    fn frames_from(&self, pid: u32) -> Vec<TraceLine> {
        sent_by(&self.frames(), pid)
    }

    fn wait_frames_from(&self, pid: u32, n: usize, timeout: Duration) -> Vec<TraceLine> {
        wait_for(&format!("{n} frames from pid {pid}"), timeout, || {
            let f = self.frames();
            (f.iter().filter(|l| l.peer_pid as u32 == pid).count() >= n).then_some(f)
        })
    }

    fn wait_guard_log(&self, what: &str) {
        self.wait_log("guard", what, Duration::from_secs(3));
    }

    fn runtime(&self, extra: &[&str]) -> Proc {
        Proc::spawn(
            "test runtime",
            Command::new(testkit::bin(testkit::TEST_RUNTIME))
                .arg("--page")
                .arg(self.page_path())
                .args(["--link", &self.link_arg()])
                .args(extra)
                .env("NAO_RS_DEATHSWITCH", self.page_path()),
        )
    }

    fn stiff_runtime(&self) -> Proc {
        let rt = self.runtime(&["--stiffness", "0.5"]);
        self.wait_frames_from(rt.pid(), 10, Duration::from_secs(10));
        rt
    }
}

/// The real runtime, `nao-rs run --controller stand` as `name` on `rig`,
/// with `--fault KIND` when given (a build with the `fault-injection`
/// feature: `never-confirm`, `crash-on-usr2`), woken through `nao-rs wake`
/// (every start is limp: the test is the person at the robot; the page must
/// be armed) and returned once 10 of its frames are stiff. The freezing
/// faults (`freeze-registered`, `freeze-linked`) never wake: start those
/// with `rig.start_runtime(&Runtime::new(name).fault(kind))`.
pub fn stiff_nao_rs_run(rig: &Rig, name: &str, fault: Option<&str>) -> Proc {
    let mut rt = Runtime::new(name);
    if let Some(kind) = fault {
        rt = rt.fault(kind);
    }
    let p = rig.start_runtime(&rt);
    rig.wake_when_ready(name);
    wait_for(
        &format!("10 stiff frames from {name}"),
        Duration::from_secs(20),
        || {
            let f = rig.frames_from(p.pid());
            (f.iter().filter(|l| l.max_stiffness > 0).count() >= 10).then_some(())
        },
    );
    p
}

/// Senders in trace order, one entry per run of frames from the same pid.
pub fn runs(frames: &[TraceLine]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for f in frames {
        if out.last() != Some(&(f.peer_pid as u32)) {
            out.push(f.peer_pid as u32);
        }
    }
    out
}

/// A runtime that registers itself in `page` (mapping it) and freezes
/// before its first beat, with no board; returned once it has registered.
pub fn frozen_runtime(page: &Page) -> Proc {
    let p = Proc::spawn(
        "test runtime",
        Command::new(testkit::bin(testkit::TEST_RUNTIME))
            .arg("--page")
            .arg(page.path())
            .args(["--link", "sim:/nonexistent", "--freeze", "registered"]),
    );
    wait_for("the runtime registers", Duration::from_secs(10), || {
        (page.snapshot().driver_pid == Some(p.pid())).then_some(())
    });
    p
}

/// The guard's poll loop over `board` with the default settings, logging
/// into `book`.
pub fn poller<B: Board>(board: B, book: &Logbook) -> Poller<B> {
    let log = book.sink("guard-poll", RING_CAPACITY);
    Poller::new(board, Settings::default(), std::process::id(), log)
}

/// A board that counts its frames, allocates nothing, and calls
/// `on_close` when it is let go.
pub struct TestBoard<F: FnMut()> {
    pub frames: u64,
    open: bool,
    on_close: F,
}

impl TestBoard<fn()> {
    /// A board that does nothing but count.
    pub fn new() -> TestBoard<fn()> {
        TestBoard::on_close(|| {})
    }
}

impl<F: FnMut()> TestBoard<F> {
    /// A board whose `close` calls `on_close` first.
    pub fn on_close(on_close: F) -> TestBoard<F> {
        TestBoard {
            frames: 0,
            open: false,
            on_close,
        }
    }
}

impl<F: FnMut()> Board for TestBoard<F> {
    fn open(&mut self) -> Result<(), LinkError> {
        self.open = true;
        Ok(())
    }
    fn send_all_off(&mut self, _t_ns: u64) -> Result<(), LinkError> {
        self.frames += 1;
        Ok(())
    }
    fn close(&mut self) {
        (self.on_close)();
        self.open = false;
    }
    fn is_open(&self) -> bool {
        self.open
    }
}
