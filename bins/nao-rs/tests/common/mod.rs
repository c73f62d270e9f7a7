//! Shared by the integration tests of `nao-rs run` against the virtual
//! robot: the processes (simulator, runtime, naoctl, `nao-rs wake`) and
//! the trace as the judge.
#![allow(dead_code)]

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deathswitch::Page;
use nao_rs_sim::{Spawned, TraceLine};
pub use testkit::Proc;

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Setup {
    pub sim: Spawned,
    pub page_path: PathBuf,
    pub page: Page,
    pub port: u16,
    pub rt: Proc,
}

/// `nao-rs run --controller stand` on the simulator `sim`, page `page`.
pub fn start_runtime(sim: &Spawned, page: &Path, port: u16, extra: &[&str]) -> Proc {
    start_runtime_with(sim, page, port, "stand", extra, Stdio::null())
}

/// `nao-rs run --controller CONTROLLER EXTRA...`, stderr to `stderr`.
pub fn start_runtime_with(
    sim: &Spawned,
    page: &Path,
    port: u16,
    controller: &str,
    extra: &[&str],
    stderr: Stdio,
) -> Proc {
    let child = Command::new(testkit::bin("nao-rs"))
        .args([
            "run",
            "--link",
            &sim.link_arg(),
            "--controller",
            controller,
            "--priority",
            "0",
        ])
        .args(["--udp-port", &port.to_string()])
        .arg("--page")
        .arg(page)
        .arg("--wake-socket")
        .arg(wake_socket(sim))
        .args(extra)
        .env("NAO_RS_DEATHSWITCH", page)
        .stdin(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start nao-rs run");
    Proc::from(child)
}

/// The wake socket the runtimes of these tests listen on.
pub fn wake_socket(sim: &Spawned) -> PathBuf {
    sim.dir().join("wake.sock")
}

/// The simulator, an armed page, and `nao-rs run --controller stand`,
/// woken (every start is limp; the test is the person at the robot) and
/// ramped up until a frame is stiff.
pub fn setup() -> Setup {
    let s = setup_with("stand", &[]);
    wake_when_ready(&s.sim);
    wait_stiff_after(&s.sim, 0, Duration::from_secs(15));
    s
}

/// Waits (up to 15 s) for the runtime's wake socket, then `nao-rs wake`.
pub fn wake_when_ready(sim: &Spawned) {
    let t0 = Instant::now();
    while !wake_socket(sim).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no wake socket at {}",
            wake_socket(sim).display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    wake(sim);
}

/// The simulator, an armed page, and `nao-rs run --controller CONTROLLER
/// EXTRA...` started (not waited for).
pub fn setup_with(controller: &str, extra: &[&str]) -> Setup {
    let sim = Spawned::start(testkit::bin("nao-rs-sim"), &["--versions", "10"]).unwrap();
    let page_path = sim.dir().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    page.rearm(); // the test is the person at the robot
    let port = free_udp_port();
    let rt = start_runtime_with(&sim, &page_path, port, controller, extra, Stdio::null());
    Setup {
        sim,
        page_path,
        page,
        port,
        rt,
    }
}

/// Waits for a stiff cycle frame sent at or after `t_ns`; returns it.
pub fn wait_stiff_after(sim: &Spawned, t_ns: u64, limit: Duration) -> TraceLine {
    let mut tail = sim.tail();
    tail.wait_for(limit, |l| {
        l.is_cycle_frame() && l.max_stiffness > 0 && l.t_ns >= t_ns
    })
    .unwrap()
    .unwrap_or_else(|| panic!("no stiff frame within {limit:?} after {t_ns}"))
}

/// Waits until the simulator has a cycle frame sent at or after `t_ns`.
pub fn wait_frame_after(sim: &Spawned, t_ns: u64, limit: Duration) {
    let mut tail = sim.tail();
    let f = tail
        .wait_for(limit, |l| l.is_cycle_frame() && l.t_ns >= t_ns)
        .unwrap();
    assert!(f.is_some(), "no frame within {limit:?} after {t_ns}");
}

/// The cycle frames the simulator received, in order.
pub fn cycle_frames(sim: &Spawned) -> Vec<TraceLine> {
    sim.trace()
        .unwrap()
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

/// Runs `cmd` to its end; asserts it succeeded, naming it `what` with its
/// stderr.
pub fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `naoctl ARGS` on `page`; asserts it succeeded.
pub fn naoctl(page: &Path, args: &[&str]) {
    run_ok(
        Command::new(testkit::bin("naoctl"))
            .args(args)
            .env("NAO_RS_DEATHSWITCH", page)
            .stdin(Stdio::null()),
        &format!("naoctl {args:?}"),
    );
}

/// Runs `nao-rs wake` on the wake socket of `sim`'s runtime (its page:
/// `deathswitch` in the simulator's folder).
pub fn wake(sim: &Spawned) {
    run_ok(&mut wake_command(sim), "nao-rs wake");
}

/// `nao-rs wake` for `sim`'s runtime, not run yet.
pub fn wake_command(sim: &Spawned) -> Command {
    let mut c = Command::new(testkit::bin("nao-rs"));
    c.arg("wake")
        .arg("--socket")
        .arg(wake_socket(sim))
        .arg("--page")
        .arg(sim.dir().join("deathswitch"))
        .stdin(Stdio::null());
    c
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
    let frames = cycle_frames(&s.sim);
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
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let s = page.snapshot();
        if !s.armed && s.tripped_at_ns != deathswitch::TRIP_TIME_PENDING {
            return s.tripped_at_ns;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the switch was not tripped within 5 s");
}

pub fn frames_after(sim: &Spawned, t_ns: u64) -> Vec<TraceLine> {
    std::thread::sleep(Duration::from_millis(150));
    sim.trace()
        .unwrap()
        .into_iter()
        .filter(|l| l.is_cycle_frame() && l.t_ns >= t_ns)
        .collect()
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
