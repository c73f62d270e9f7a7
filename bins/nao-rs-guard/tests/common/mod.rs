//! Shared by the guard's integration tests: the virtual robot's trace as
//! frames per sender, the runtimes the guard watches (the real runtime,
//! `nao-rs run`, started on a `testkit::Rig`, with `--fault KIND` where a
//! test needs a runtime that misbehaves), and the guard's poll loop
//! in-process over a test board.
// Each test file uses a part of this module and of what it re-exports.
#![allow(dead_code, unused_imports)]

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Guard rule 6, the hand-over bound the guard is held to (docs/guard.md,
/// "Fixed points": 1 s): a runtime handed the board beats within it or is
/// taken back. The page's own rules test pins its constant to the same.
pub const HAND_OVER_BOUND: Duration = Duration::from_nanos(deathswitch::rules::HAND_OVER_BOUND_NS);

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
    /// Whether `pid` sent a stiff frame after the first `after` frames.
    fn stiff_from(&self, pid: u32, after: usize) -> bool;
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

    fn stiff_from(&self, pid: u32, after: usize) -> bool {
        self.frames()
            .iter()
            .skip(after)
            .any(|l| l.peer_pid as u32 == pid && !l.all_off && l.max_stiffness > 0)
    }
}

/// The real runtime, `nao-rs run --controller stand` as `name` on `rig`,
/// with `--fault KIND` when given (`never-confirm`, `crash-on-usr2`), woken
/// through `nao-rs wake` (every start is limp: the test is the person at
/// the robot; the page must be armed) and returned once 10 of its frames
/// are stiff (a wake is sent again every 200 ms until the first: one sent
/// before the runtime reads its socket may come too early). The
/// freezing faults (`freeze-registered`, `freeze-linked`) never beat:
/// start those with `rig.start_runtime(&Runtime::new(name).fault(kind))`.
pub fn stiff_nao_rs_run(rig: &Rig, name: &str, fault: Option<&str>) -> Proc {
    let mut rt = Runtime::new(name);
    if let Some(kind) = fault {
        rt = rt.fault(kind);
    }
    let mut p = rig.start_runtime(&rt);
    let pid = p.pid();
    if !wake_until_stiff(rig, name, &mut p, 0, Duration::from_secs(20)) {
        panic!(
            "{name} (pid {pid}) sent no stiff frame within 20 s:\n{}\nguard:\n{}",
            rig.log(name),
            rig.log("guard")
        );
    }
    wait_for(
        &format!("10 stiff frames from {name}"),
        Duration::from_secs(20),
        || {
            let f = rig.frames_from(pid);
            (f.iter().filter(|l| l.max_stiffness > 0).count() >= 10).then_some(())
        },
    );
    p
}

/// A stiff runtime (`nao-rs run` as `rt`) on `rig` hangs (SIGSTOP) and
/// the guard `guard_pid` takes over: waits for `n` of the guard's frames.
/// The hung runtime (kept until dropped) and the guard's frames so far.
pub fn hang_taken_over(rig: &Rig, guard_pid: u32, n: usize) -> (Proc, Vec<TraceLine>) {
    let rt = stiff_nao_rs_run(rig, "rt", None);
    rt.signal(nix::sys::signal::Signal::SIGSTOP);
    let frames = rig.wait_frames_from(guard_pid, n, Duration::from_secs(5));
    (rt, sent_by(&frames, guard_pid))
}

/// Wakes the runtime started as `name` (`nao-rs wake`, again every 200 ms)
/// until it sends a stiff frame after the first `after` frames of the
/// trace, for up to `timeout`; false when it does not or exits.
pub fn wake_until_stiff(
    rig: &Rig,
    name: &str,
    rt: &mut Proc,
    after: usize,
    timeout: Duration,
) -> bool {
    let pid = rt.pid();
    let socket = rig.wake_socket(name);
    let stiff = poll_for(timeout, || {
        if !rt.running() {
            return Some(false);
        }
        if socket.exists() {
            let _ = rig.wake(name);
        }
        poll_for(Duration::from_millis(200), || {
            rig.stiff_from(pid, after).then_some(true)
        })
    });
    stiff == Some(true)
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
/// before its first beat, with no board (`nao-rs run --fault
/// freeze-registered` on a board that does not exist); returned once it
/// has registered.
pub fn frozen_runtime(page: &Page) -> Proc {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: a counter for unique names, no data behind it.
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let dir = page.path().parent().expect("the page's folder");
    let p = Proc::spawn(
        "nao-rs run --fault freeze-registered",
        Command::new(testkit::bin("nao-rs"))
            .args(["run", "--link", "sim:/nonexistent", "--controller", "none"])
            .args([
                "--no-udp",
                "--priority",
                "0",
                "--fault",
                "freeze-registered",
            ])
            .arg("--page")
            .arg(page.path())
            .arg("--wake-socket")
            .arg(dir.join(format!("frozen{n}.wake.sock")))
            .env("NAO_RS_DEATHSWITCH", page.path()),
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

/// `nao-rs-guard` on `rig` (UDP stop off) at `RLIMIT_NOFILE` `n` (soft and
/// hard, set in the child), its stderr to `log`; not started.
pub fn guard_with_nofile(rig: &Rig, n: u64, log: &std::path::Path) -> Command {
    let mut cmd = rig.guard_command(0);
    cmd.stderr(std::fs::File::create(log).unwrap())
        .stdout(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    cmd
}

/// The guard at the lowest `RLIMIT_NOFILE` from 7 up that it starts at
/// (registers in the page), with that limit; `spawn(n)` starts one. A
/// refused start is judged when it exits, not after the whole wait.
pub fn lowest_nofile_guard(page: &Page, mut spawn: impl FnMut(u64) -> Proc) -> (u64, Proc) {
    for n in 7..64 {
        let mut g = spawn(n);
        let up = poll_for(Duration::from_secs(5), || {
            if page.snapshot().guard_pid == Some(g.pid()) {
                Some(true)
            } else if !g.running() {
                Some(false)
            } else {
                None
            }
        });
        match up {
            Some(true) => return (n, g),
            Some(false) => continue,
            None => panic!("the guard at RLIMIT_NOFILE {n} neither registered nor exited in 5 s"),
        }
    }
    panic!("the guard starts at no RLIMIT_NOFILE below 64");
}
