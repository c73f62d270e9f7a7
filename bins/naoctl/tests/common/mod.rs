//! The runtime against the virtual robot, for the compound-fault tests
//! judged by the simulator's trace ("stiff" = a frame with any stiffness
//! above 0).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deathswitch::Page;
use nao_rs_sim::{Tail, TraceLine};
use testkit::{Proc, Rig, RigSpec, Runtime};

/// The name of the robot's runtime (its log and wake socket in the rig).
const RT: &str = "rt";

/// The simulator and `nao-rs run --controller stand` on the page at
/// `page_path`, re-armed (the test is the person at the robot), woken, and
/// ramped up until a frame is stiff.
pub struct Robot {
    pub rt: Proc,
    pub page_path: PathBuf,
    pub rig: Rig,
}

impl Robot {
    /// Starts the robot with its page at `page_path` (`None`: `run/deathswitch`
    /// in the rig's folder).
    pub fn start(page_path: Option<&Path>) -> Robot {
        let page = page_path.unwrap_or(Path::new("run/deathswitch"));
        let rig = RigSpec {
            page: Some(page.to_path_buf()),
            ..RigSpec::default()
        }
        .start();
        let page_path = rig.page_path().to_path_buf();
        Page::open(&page_path).unwrap().rearm();
        let rt = rig.start_runtime(&Runtime::new(RT).priority(0));
        // Every start is limp: the test wakes it, as a person would.
        rig.wake_when_ready(RT);
        let mut tail = Tail::new(rig.trace_path());
        let stiff = |l: &TraceLine| l.is_cycle_frame() && l.max_stiffness > 0;
        let got = tail.wait_for(Duration::from_secs(15), stiff).unwrap();
        assert!(got.is_some(), "the stand controller stiffens the joints");
        Robot { rt, page_path, rig }
    }

    /// `nao-rs wake` through the robot's wake socket.
    pub fn wake(&self) {
        let _ = self.rig.wake(RT);
    }

    /// The cycle frames received from `t_ns` on, over the next `ms`.
    pub fn frames_from(&self, t_ns: u64, ms: u64) -> Vec<TraceLine> {
        std::thread::sleep(Duration::from_millis(ms));
        let mut f = nao_rs_sim::trace::read(self.rig.trace_path()).unwrap();
        f.retain(|l| l.is_cycle_frame() && l.t_ns >= t_ns);
        f
    }
}

/// Judged by the trace: the runtime keeps sending frames (nothing hangs or
/// spins instead of cycling), and every frame after the fault is all-off;
/// only the one already on its way when the fault landed may still be
/// stiff: the first frame, received within two 12 ms periods (its cycle
/// checked the page before the fault; on a loaded machine the cycle thread
/// can be preempted between that check and the write).
pub fn assert_all_off_from_that_frame(frames: &[TraceLine], fault_ns: u64, what: &str) {
    assert!(
        frames.len() >= 10,
        "{what}: the runtime stopped sending frames: {frames:?}"
    );
    for (i, l) in frames.iter().enumerate() {
        let in_flight = i == 0 && l.t_ns < fault_ns + 24_000_000;
        assert!(
            l.all_off || in_flight,
            "{what}: stiff frame {i} after the fault: {l:?} (fault at {fault_ns})"
        );
    }
}

/// naoctl, built by this package.
pub const NAOCTL: &str = env!("CARGO_BIN_EXE_naoctl");

/// A private folder with the page path `deathswitch` in it (not created).
pub struct Env {
    pub dir: tempfile::TempDir,
    pub page: PathBuf,
}

pub fn env() -> Env {
    let (dir, page) = testkit::page_path();
    Env { dir, page }
}

/// Runs naoctl on `page` (`NAO_RS_DEATHSWITCH`).
pub fn naoctl(page: &Path, args: &[&str]) -> std::process::Output {
    Command::new(NAOCTL)
        .args(args)
        .env("NAO_RS_DEATHSWITCH", page)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs naoctl with a bound (a hung naoctl fails the test).
pub fn naoctl_bounded(page: &Path, args: &[&str]) -> (std::process::Output, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(NAOCTL)
        .args(args)
        .env("NAO_RS_DEATHSWITCH", page)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = t0 + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("naoctl {args:?} did not answer within 10 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    (out, t0.elapsed())
}

pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
