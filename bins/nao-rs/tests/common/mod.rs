//! Shared by the integration tests of `nao-rs run` against the virtual
//! robot (a `testkit::Rig`): the runtime of these tests, woken through
//! `nao-rs wake` as a person would, and the trace as the judge.
#![allow(dead_code, unused_imports)]

use std::path::Path;
use std::time::{Duration, Instant};

use deathswitch::Page;
use nao_rs_sim::{Tail, TraceLine};
pub use testkit::{free_udp_port, Proc, Rig, Runtime};

/// The name of the runtime these tests start (its log `rt.log`, its wake
/// socket `rt.wake.sock` in the rig's folder).
pub const RT: &str = "rt";

/// The runtime, an armed page and the virtual robot (dropped in that order).
pub struct RunningRuntime {
    pub rt: Proc,
    pub page: Page,
    pub port: u16,
    pub rig: Rig,
}

/// `nao-rs run --controller CONTROLLER --priority 0 --udp-port PORT` as [`RT`].
pub fn runtime(controller: &str, port: u16) -> Runtime {
    Runtime::new(RT)
        .controller(controller)
        .priority(0)
        .udp_port(port)
}

/// The simulator, an armed page, and `nao-rs run --controller stand`,
/// woken (every start is limp; the test is the person at the robot) and
/// ramped up until a frame is stiff.
pub fn setup() -> RunningRuntime {
    let s = setup_with("stand", &[]);
    s.rig.wake_when_ready(RT);
    wait_stiff_after(&s.rig, 0, Duration::from_secs(15));
    s
}

/// The simulator, an armed page, and [`runtime`] with `controller` and
/// `extra` arguments started (not waited for).
pub fn setup_with(controller: &str, extra: &[&str]) -> RunningRuntime {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    page.rearm(); // the test is the person at the robot
    let port = free_udp_port();
    let rt = rig.start_runtime(&runtime(controller, port).args(extra));
    RunningRuntime {
        rt,
        page,
        port,
        rig,
    }
}

/// Waits for a stiff cycle frame sent at or after `t_ns`; returns it.
pub fn wait_stiff_after(rig: &Rig, t_ns: u64, limit: Duration) -> TraceLine {
    let mut tail = Tail::new(rig.trace_path());
    tail.wait_for(limit, |l| {
        l.is_cycle_frame() && l.max_stiffness > 0 && l.t_ns >= t_ns
    })
    .unwrap()
    .unwrap_or_else(|| panic!("no stiff frame within {limit:?} after {t_ns}"))
}

/// Waits until the simulator has a cycle frame sent at or after `t_ns`.
pub fn wait_frame_after(rig: &Rig, t_ns: u64, limit: Duration) {
    let mut tail = Tail::new(rig.trace_path());
    let f = tail
        .wait_for(limit, |l| l.is_cycle_frame() && l.t_ns >= t_ns)
        .unwrap();
    assert!(f.is_some(), "no frame within {limit:?} after {t_ns}");
}

/// The cycle frames the simulator received, in order.
pub fn cycle_frames(rig: &Rig) -> Vec<TraceLine> {
    let lines = nao_rs_sim::trace::read(rig.trace_path()).unwrap();
    lines
        .into_iter()
        .filter(TraceLine::is_cycle_frame)
        .collect()
}

/// Truncates the page file at `path` to 0 bytes under the live runtime.
pub fn truncate(path: &Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// Runs `naoctl ARGS` on the rig's page; asserts it succeeded.
pub fn naoctl(rig: &Rig, args: &[&str]) {
    testkit::ok(rig.naoctl(args), &format!("naoctl {args:?}"));
}

/// Runs `nao-rs wake` for the runtime started as `name`; asserts it
/// succeeded.
pub fn wake(rig: &Rig, name: &str) {
    testkit::ok(rig.wake(name), "nao-rs wake");
}

/// `sig` to a stiff `stand` runtime: it trips `shutdown`, its last two
/// frames are all-off and confirmed, and it exits 0.
pub fn signal_ends_the_runtime_safely(sig: nix::sys::signal::Signal) {
    let mut s = setup();
    s.rt.signal(sig);
    let status =
        s.rt.wait_exit(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("nao-rs run did not stop on {sig:?} within 5 s"));
    assert!(status.success(), "{sig:?}: {status:?}");
    assert_eq!(
        s.page.reason(),
        Some(deathswitch::Reason::Shutdown),
        "{sig:?}"
    );
    let frames = cycle_frames(&s.rig);
    let n = frames.len();
    assert!(
        frames[n - 1].all_off && frames[n - 2].all_off,
        "{sig:?}: {:?}",
        &frames[n - 3..]
    );
    let snap = s.page.snapshot();
    assert_eq!(
        snap.all_off_confirmed_cycle, snap.last_cycle,
        "{sig:?}: the last frame was confirmed all-off"
    );
}

/// Waits until the page is tripped; returns the trip's monotonic time.
pub fn wait_tripped(page: &Page) -> u64 {
    testkit::wait_for("the switch tripped", Duration::from_secs(5), || {
        let s = page.snapshot();
        (!s.armed && s.tripped_at_ns != deathswitch::TRIP_TIME_PENDING).then_some(s.tripped_at_ns)
    })
}

/// The cycle frames sent at or after `t_ns`, read 150 ms from now.
pub fn frames_after(rig: &Rig, t_ns: u64) -> Vec<TraceLine> {
    std::thread::sleep(Duration::from_millis(150));
    let mut f = cycle_frames(rig);
    f.retain(|l| l.t_ns >= t_ns);
    f
}

/// The frames of `frames` sent in `[from_ns, to_ns)`.
pub fn window(frames: &[TraceLine], from_ns: u64, to_ns: u64) -> Vec<TraceLine> {
    frames
        .iter()
        .filter(|l| l.t_ns >= from_ns && l.t_ns < to_ns)
        .copied()
        .collect()
}

/// The stiff frames of `frames` other than the one already on its way at
/// `t_ns` (the first frame after it, within one 12 ms period).
pub fn stiff_after(frames: &[TraceLine], t_ns: u64) -> Vec<TraceLine> {
    frames
        .iter()
        .enumerate()
        .filter(|(i, l)| l.max_stiffness > 0 && !(*i == 0 && l.t_ns < t_ns + 12_000_000))
        .map(|(_, l)| *l)
        .collect()
}

/// A LoLA controller in a thread: reads each 896-byte sensor frame and
/// answers with `message` until dropped; counts the frames.
pub struct LolaController {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    frames: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LolaController {
    /// Starts answering on the connected socket `c`.
    pub fn start(mut c: std::os::unix::net::UnixStream, message: Vec<u8>) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(AtomicU64::new(0));
        let (st, fr) = (stop.clone(), frames.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 896];
            // Relaxed: a flag and a counter of this test only.
            while !st.load(Ordering::Relaxed) {
                if c.read_exact(&mut buf).is_err() {
                    return;
                }
                fr.fetch_add(1, Ordering::Relaxed);
                if c.write_all(&message).is_err() {
                    return;
                }
            }
        });
        LolaController {
            stop,
            frames,
            thread: Some(thread),
        }
    }

    /// Sensor frames answered so far.
    pub fn frames(&self) -> u64 {
        // Relaxed: a counter of this test only.
        self.frames.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for LolaController {
    fn drop(&mut self) {
        // Relaxed: a flag of this test only.
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
