//! Shared helpers of the guard's integration tests: starting the guard and
//! the runtime (as `testkit::Proc`, killed on drop), waiting with a deadline.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use testkit::Proc;

/// Wait until `f` gives Some, up to `timeout`; panics with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until `f` gives Some, up to `timeout`; None after it.
pub fn wait_for_opt<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The virtual robot's cycle frames so far, in trace order.
pub fn cycle_frames(sim: &nao_rs_sim::Spawned) -> Vec<nao_rs_sim::TraceLine> {
    sim.trace()
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.is_cycle_frame())
        .collect()
}

/// Senders in trace order, one entry per run of frames from the same pid.
pub fn runs(frames: &[nao_rs_sim::TraceLine]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for f in frames {
        if out.last() != Some(&(f.peer_pid as u32)) {
            out.push(f.peer_pid as u32);
        }
    }
    out
}

/// Starts `nao-rs-guard` on `page_path` and the virtual robot `sim` (UDP
/// stop off, log in `guard.log` next to the sim's socket) and waits until
/// it has published itself in the page.
pub fn start_guard(sim: &nao_rs_sim::Spawned, page_path: &std::path::Path) -> Proc {
    let page = deathswitch::Page::open(page_path).expect("page");
    let guard = Proc::spawn(
        "nao-rs-guard",
        Command::new(env!("CARGO_BIN_EXE_nao-rs-guard"))
            .arg("--page")
            .arg(page_path)
            .args(["--link", &sim.link_arg(), "--udp-port", "0"])
            .env("NAO_RS_DEATHSWITCH", page_path)
            .stderr(std::fs::File::create(sim.dir().join("guard.log")).unwrap()),
    );
    wait_for(
        "the guard to publish itself",
        Duration::from_secs(10),
        || (page.snapshot().guard_pid == Some(guard.pid())).then_some(()),
    );
    guard
}

/// Starts the real runtime, `nao-rs run`, on the virtual robot `sim` and
/// `page_path` with `controller`, its UDP stop on `udp_port` (None: off),
/// its wake socket at `NAME.wake.sock` and its log in `NAME.log` next to
/// the sim's socket.
pub fn nao_rs_run(
    sim: &nao_rs_sim::Spawned,
    page_path: &std::path::Path,
    name: &str,
    controller: &str,
    udp_port: Option<u16>,
) -> Proc {
    let mut cmd = Command::new(testkit::bin("nao-rs"));
    cmd.arg("run")
        .arg("--page")
        .arg(page_path)
        .args(["--link", &sim.link_arg(), "--controller", controller])
        .arg("--wake-socket")
        .arg(sim.dir().join(format!("{name}.wake.sock")))
        .env("NAO_RS_DEATHSWITCH", page_path)
        .stderr(std::fs::File::create(sim.dir().join(format!("{name}.log"))).unwrap());
    match udp_port {
        Some(p) => cmd.args(["--udp-port", &p.to_string()]),
        None => cmd.arg("--no-udp"),
    };
    Proc::spawn("nao-rs run", &mut cmd)
}
