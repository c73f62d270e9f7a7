//! The measurements: each trial drives the rig and reads the trace and the
//! page. Times are CLOCK_MONOTONIC ns (`deathswitch::monotonic_ns`, the trace's
//! clock).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deathswitch::{monotonic_ns, Reason, TRIP_TIME_PENDING};
use nao_rs_sim::TraceLine;
use nix::sys::signal::Signal;

use super::rig::{self, Rig};
use super::trace::{cycle_timing, CycleTiming};

/// The runtime's cycle period, ns.
pub const PERIOD_NS: u64 = deathswitch::rules::FRAME_PERIOD_NS;

/// How a stop is triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `naoctl stop` (a process; in-process `Page::trip(Naoctl)` when
    /// `naoctl stop` does not trip the page).
    Naoctl,
    /// One `NAO-RS STOP` datagram to the guard's port.
    Udp,
    /// The sim's `button` control command (one chest answer with button 1).
    Button,
}

impl Trigger {
    fn reason(self) -> Reason {
        match self {
            Trigger::Naoctl => Reason::Naoctl,
            Trigger::Udp => Reason::Udp,
            Trigger::Button => Reason::ChestButton,
        }
    }
}

/// One stop trial.
#[derive(Debug, Clone, Copy)]
pub struct StopSample {
    /// Just before the trigger, ns.
    pub t0_ns: u64,
    /// The page's trip time, ns.
    pub trip_ns: u64,
    /// The runtime's first all-off frame on the wire, ns.
    pub all_off_ns: u64,
}

/// Sends one control line to the sim; its answer.
pub fn sim_ctl(rig: &Rig, line: &str) -> Result<String, String> {
    let path = rig.ctl_path();
    let mut s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "cannot connect to the sim's control socket {}: {e}",
            path.display()
        )
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| format!("sim ctl {line:?}: {e}"))?;
    let mut answer = String::new();
    BufReader::new(s)
        .read_line(&mut answer)
        .map_err(|e| format!("sim ctl {line:?}: {e}"))?;
    if answer.starts_with("error") {
        return Err(format!("the sim refused {line:?}: {}", answer.trim()));
    }
    Ok(answer)
}

/// Waits up to `timeout` for the page to be tripped with a stored trip time
/// at or after `t0`; the snapshot's (reason, time).
fn wait_trip(rig: &Rig, t0: u64, timeout: Duration) -> Option<(Option<Reason>, u64)> {
    let end = monotonic_ns() + timeout.as_nanos() as u64;
    loop {
        let s = rig.page.snapshot();
        if !s.armed && s.tripped_at_ns != TRIP_TIME_PENDING && s.tripped_at_ns >= t0 {
            return Some((s.reason, s.tripped_at_ns));
        }
        if monotonic_ns() > end {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Re-arms (the page API: `naoctl rearm` does the same) and wakes the
/// runtime's `stand` controller until a frame with stiffness appears;
/// with `full`, then waits out the 3 s ramp into the pose.
pub fn make_stiff(rig: &mut Rig, full: bool) -> Result<(), String> {
    rig.page.rearm();
    let pid = rig.runtime_pid();
    let wake = rig.wake_path();
    for _ in 0..60 {
        rig.poll()?;
        let from = rig.frames.len();
        // A wake carries the page's wake generation (as `nao-rs wake`).
        if let Some(g) = rig.page.snapshot().wake_generation() {
            let _ = nao_runtime::wake::send(&wake, g);
        }
        let hit = rig.wait_frame(from, Duration::from_millis(50), |f| {
            f.peer_pid == pid && f.is_cycle_frame() && f.max_stiffness > 0
        })?;
        if hit.is_some() {
            if full {
                rig.collect_for(Duration::from_millis(3200))?;
            }
            return Ok(());
        }
    }
    Err(format!(
        "the runtime (pid {pid}) sent no frame with stiffness within 3 s of a re-arm and wakes \
         through {}",
        wake.display()
    ))
}

/// Whether `naoctl stop` trips the page (checked once; otherwise the bench
/// trips in-process with reason `naoctl`).
pub fn naoctl_works(rig: &mut Rig) -> bool {
    rig.page.rearm();
    let t0 = monotonic_ns();
    let ok = Command::new(rig.program("naoctl"))
        .arg("stop")
        .env("NAO_RS_DEATHSWITCH", rig.page_path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok && matches!(
        wait_trip(rig, t0, Duration::from_millis(500)),
        Some((Some(Reason::Naoctl), _))
    )
}

/// One stop trial: stiff, trigger, the page's trip and the runtime's first
/// all-off frame.
pub fn stop_trial(rig: &mut Rig, how: Trigger, naoctl: bool) -> Result<StopSample, String> {
    make_stiff(rig, false)?;
    stop_now(rig, how, naoctl)
}

/// The trigger and the measurement of a stop trial (the runtime is stiff).
pub fn stop_now(rig: &mut Rig, how: Trigger, naoctl: bool) -> Result<StopSample, String> {
    rig.poll()?;
    let from = rig.frames.len();
    let pid = rig.runtime_pid();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot bind a UDP socket on 127.0.0.1: {e}"))?;
    let t0 = monotonic_ns();
    match how {
        Trigger::Naoctl if naoctl => {
            let st = Command::new(rig.program("naoctl"))
                .arg("stop")
                .env("NAO_RS_DEATHSWITCH", rig.page_path())
                .stdout(std::process::Stdio::null())
                .status()
                .map_err(|e| format!("cannot run {}: {e}", rig.program("naoctl").display()))?;
            if !st.success() {
                return Err(format!("`naoctl stop` failed: {st}"));
            }
        }
        Trigger::Naoctl => {
            rig.page.trip(Reason::Naoctl);
        }
        Trigger::Udp => {
            udp.send_to(b"NAO-RS STOP", ("127.0.0.1", rig.udp_port))
                .map_err(|e| {
                    format!(
                        "cannot send the UDP stop to 127.0.0.1:{}: {e}",
                        rig.udp_port
                    )
                })?;
        }
        Trigger::Button => {
            sim_ctl(rig, "button")?;
        }
    }
    let (reason, trip_ns) = wait_trip(rig, t0, Duration::from_secs(1))
        .ok_or_else(|| format!("{how:?}: the page was not tripped within 1 s"))?;
    if reason != Some(how.reason()) {
        return Err(format!(
            "{how:?}: the page was tripped with reason {:?}, expected {}",
            reason.map(Reason::name),
            how.reason()
        ));
    }
    let f = rig
        .wait_frame(from, Duration::from_secs(1), |f| {
            f.peer_pid == pid && f.is_cycle_frame() && f.all_off && f.t_ns >= t0
        })?
        .ok_or_else(|| format!("{how:?}: no all-off frame from the runtime within 1 s"))?;
    Ok(StopSample {
        t0_ns: t0,
        trip_ns,
        all_off_ns: f.t_ns,
    })
}

/// One trial of the chest button in `hold:HOLD_MS` (the runtime runs it):
/// stiff, then the sim's `button` held `hold_ms` + 500 ms; the page's trip
/// (reason `chest-button`, never before `hold_ms`) and the runtime's first
/// all-off frame. Returns once the press has ended, so that the next
/// trial's re-arm sticks.
pub fn hold_trial(rig: &mut Rig, hold_ms: u64) -> Result<StopSample, String> {
    make_stiff(rig, false)?;
    rig.poll()?;
    let from = rig.frames.len();
    let pid = rig.runtime_pid();
    let press_ms = hold_ms + 500;
    let t0 = monotonic_ns();
    sim_ctl(rig, &format!("button {press_ms}"))?;
    let trip = wait_trip(rig, t0, Duration::from_millis(hold_ms + 1000));
    let f = rig.wait_frame(from, Duration::from_millis(hold_ms + 1000), |f| {
        f.peer_pid == pid && f.is_cycle_frame() && f.all_off && f.t_ns >= t0
    })?;
    // The press ends; its release reaches the runtime.
    let end = t0 + (press_ms + 100) * 1_000_000;
    std::thread::sleep(Duration::from_nanos(end.saturating_sub(monotonic_ns())));
    let (reason, trip_ns) =
        trip.ok_or_else(|| format!("hold {hold_ms}: the page was not tripped"))?;
    if reason != Some(Reason::ChestButton) {
        return Err(format!(
            "hold {hold_ms}: the page was tripped with reason {:?}, expected chest-button",
            reason.map(Reason::name)
        ));
    }
    let f = f.ok_or_else(|| format!("hold {hold_ms}: no all-off frame from the runtime"))?;
    Ok(StopSample {
        t0_ns: t0,
        trip_ns,
        all_off_ns: f.t_ns,
    })
}

/// One guard trial.
#[derive(Debug, Clone, Copy)]
pub struct GuardSample {
    /// The signal was sent, ns.
    pub t0_ns: u64,
    /// The page's trip (the guard's take-over), ns.
    pub trip_ns: u64,
    /// The trip's reason.
    pub reason: Option<Reason>,
    /// The guard's first all-off frame, ns.
    pub guard_frame_ns: u64,
}

/// SIGSTOP (or SIGKILL) of a stiff runtime, then the guard's take-over and
/// its first frame; the runtime is reaped and a new one started (the guard
/// hands the board over). With `full`, the runtime first ramps fully.
pub fn guard_trial(rig: &mut Rig, sig: Signal, full: bool) -> Result<GuardSample, String> {
    if rig.runtime_pid() == 0 {
        rig.start_runtime()?;
    }
    make_stiff(rig, full)?;
    rig.poll()?;
    let from = rig.frames.len();
    let gpid = rig.guard_pid();
    if sig == Signal::SIGSEGV {
        // Rust's stack-overflow handler takes a SIGSEGV that is not a fault
        // in a guard page, resets it to the default and returns: the first
        // one only disarms it, the second is the crash (as a real fault).
        rig.runtime().ok_or("no runtime")?.try_signal(sig)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = monotonic_ns();
    rig.runtime().ok_or("no runtime")?.try_signal(sig)?;
    let f = rig
        .wait_frame(from, Duration::from_secs(2), |f| {
            f.peer_pid == gpid && f.t_ns >= t0 && f.all_off
        })?
        .ok_or_else(|| format!("{sig}: no all-off frame from the guard (pid {gpid}) within 2 s"))?;
    let (reason, trip_ns) = wait_trip(rig, t0, Duration::from_secs(1))
        .ok_or_else(|| format!("{sig}: the page was not tripped within 1 s"))?;
    let mut reaped = false;
    if let Some(rt) = rig.runtime() {
        reaped = rt.wait_exit(Duration::from_secs(2)).is_some();
    }
    rig.drop_runtime();
    if !reaped {
        return Err(format!(
            "{sig}: the guard did not kill the runtime within 2 s"
        ));
    }
    rig.start_runtime()?;
    Ok(GuardSample {
        t0_ns: t0,
        trip_ns,
        reason,
        guard_frame_ns: f.t_ns,
    })
}

/// Waits up to `timeout` for `f` to hold, polling every millisecond.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = monotonic_ns() + timeout.as_nanos() as u64;
    while !f() {
        if monotonic_ns() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// The start-up deadline (guard rule 5): a runtime that registered and
/// froze before its first beat, from its registration (seen in the page)
/// to the guard's first all-off frame, ns. The guard is made idle first
/// (the running runtime killed, the take-over released by a re-arm); the
/// bench holds the chest board while `nao-rs run` starts, so it registers
/// and retries the busy board, and is frozen (SIGSTOP) right after its
/// registration; then the bench lets the board go. The guard must trip
/// `guard-start-up-timeout` and kill it; a new runtime is started after
/// the last trial (hand-over).
pub fn start_up_trial(rig: &mut Rig) -> Result<u64, String> {
    use nao_wire::Link;
    if rig.runtime_pid() != 0 {
        let rt = rig.runtime().ok_or("no runtime")?;
        rt.try_signal(Signal::SIGKILL)?;
        let reaped = rt.wait_exit(Duration::from_secs(2)).is_some();
        rig.drop_runtime();
        if !reaped {
            return Err("the running runtime did not end on SIGKILL within 2 s".into());
        }
        if !wait_until(Duration::from_secs(2), || rig.page.snapshot().guard_holding) {
            return Err("the guard did not take over from the killed runtime".into());
        }
    }
    // After a take-over (the last trial's, or the kill above) the guard
    // publishes that it holds the board a moment after its first frame:
    // wait for it, or the release below is judged before the hold and the
    // bench finds the board busy.
    if !rig.page.snapshot().armed
        && !wait_until(Duration::from_secs(2), || rig.page.snapshot().guard_holding)
    {
        return Err("the guard did not take over the tripped page's board within 2 s".into());
    }
    rig.page.rearm();
    if !wait_until(Duration::from_secs(2), || {
        !rig.page.snapshot().guard_holding
    }) {
        return Err("the guard did not release the board at the re-arm".into());
    }
    let mut board = nao_wire::link::sim::SimLink::new(rig.sim_socket());
    nao_wire::protocol::startup::link_up(&mut board)
        .map_err(|e| format!("the bench cannot take the board: {e}"))?;
    let pid = rig.spawn_runtime()?;
    let registered = wait_until(Duration::from_secs(10), || {
        rig.page.snapshot().driver_pid == Some(pid as u32)
    });
    let t_reg = monotonic_ns();
    rig.runtime()
        .ok_or("no runtime")?
        .try_signal(Signal::SIGSTOP)?;
    board.close();
    if !registered {
        return Err(format!(
            "`nao-rs run` (pid {pid}) did not register within 10 s"
        ));
    }
    if rig.page.snapshot().last_cycle.is_some() {
        return Err("the runtime beat before it was frozen (it had the board?)".into());
    }
    rig.poll()?;
    let from = rig.frames.len();
    let gpid = rig.guard_pid();
    let f = rig
        .wait_frame(from, Duration::from_secs(10), |f| {
            f.peer_pid == gpid && f.t_ns >= t_reg && f.all_off
        })?
        .ok_or_else(|| format!("no all-off frame from the guard (pid {gpid}) within 10 s"))?;
    let reason = rig.page.snapshot().reason;
    let reaped = rig
        .runtime()
        .is_some_and(|rt| rt.wait_exit(Duration::from_secs(2)).is_some());
    rig.drop_runtime();
    if reason != Some(Reason::GuardStartUpTimeout) {
        return Err(format!(
            "tripped with {:?}, expected guard-start-up-timeout",
            reason.map(Reason::name)
        ));
    }
    if !reaped {
        return Err("the guard did not kill the frozen runtime within 2 s".into());
    }
    Ok(f.t_ns.saturating_sub(t_reg))
}

/// One stop from 127.0.0.2 in the middle of 200,000 datagrams from
/// 127.0.0.1 to the stop port (both processes' listener): datagram sent ->
/// switch tripped, ns.
pub fn udp_flood_trial(rig: &mut Rig) -> Result<u64, String> {
    const FLOOD: usize = 200_000;
    rig.page.rearm();
    let flooder = std::net::UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot bind a UDP socket on 127.0.0.1: {e}"))?;
    let other = std::net::UdpSocket::bind("127.0.0.2:0")
        .map_err(|e| format!("cannot bind a UDP socket on 127.0.0.2 (127/8 on lo): {e}"))?;
    let to = ("127.0.0.1", rig.udp_port);
    let mut t0 = 0;
    for i in 0..FLOOD {
        let _ = flooder.send_to(b"junk junk junk junk junk", to);
        if i == FLOOD / 2 {
            t0 = monotonic_ns();
            other
                .send_to(b"NAO-RS STOP", to)
                .map_err(|e| format!("cannot send the stop: {e}"))?;
        }
    }
    let (reason, trip_ns) = wait_trip(rig, t0, Duration::from_secs(1))
        .ok_or("the stop inside the flood did not trip within 1 s")?;
    if reason != Some(Reason::Udp) {
        return Err(format!(
            "tripped with {:?}, expected udp",
            reason.map(Reason::name)
        ));
    }
    Ok(trip_ns.saturating_sub(t0))
}

/// Readings of `/proc` at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcSample {
    /// When, ns.
    pub t_ns: u64,
    /// The runtime's CPU time, every thread, ns.
    pub rt_cpu_ns: u64,
    /// The cycle thread's CPU time, ns.
    pub cycle_cpu_ns: u64,
    /// The guard's CPU time, ns.
    pub guard_cpu_ns: u64,
    /// The runtime's VmRSS, kB.
    pub rt_rss_kb: u64,
    /// The guard's VmRSS, kB.
    pub guard_rss_kb: u64,
}

/// One cycle phase.
#[derive(Debug, Clone, Default)]
pub struct CyclePhase {
    /// From the trace.
    pub timing: CycleTiming,
    /// CPU time per cycle, whole runtime, per 1 s window, ns.
    pub rt_cpu_per_cycle: Vec<u64>,
    /// CPU time per cycle, the cycle thread, per 1 s window, ns.
    pub cycle_cpu_per_cycle: Vec<u64>,
    /// The guard's CPU time per 2 ms poll, per 1 s window, ns.
    pub guard_cpu_per_poll: Vec<u64>,
    /// VmRSS samples, kB.
    pub rt_rss_kb: Vec<u64>,
    /// VmRSS samples, kB.
    pub guard_rss_kb: Vec<u64>,
    /// The cycle thread's policy and priority.
    pub cycle_policy: Option<(i32, u32)>,
    /// The runtime's own status (lateness, overruns) at the phase's end.
    pub status: String,
    /// Busy threads run during the phase.
    pub load_threads: usize,
}

/// Measures `cycles` cycles of the running runtime, with a busy loop on
/// every core when `loaded`.
pub fn cycle_phase(rig: &mut Rig, cycles: u64, loaded: bool) -> Result<CyclePhase, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::new();
    let n = if loaded {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        0
    };
    for _ in 0..n {
        let s = stop.clone();
        busy.push(std::thread::spawn(move || {
            let mut x: u64 = 1;
            // Acquire: pairs with the Release below.
            while !s.load(Ordering::Acquire) {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            x
        }));
    }
    let r = measure_cycles(rig, cycles);
    // Release: the busy threads see it with Acquire.
    stop.store(true, Ordering::Release);
    for b in busy {
        let _ = b.join();
    }
    let mut p = r?;
    p.load_threads = n;
    Ok(p)
}

fn proc_sample(rt: i32, cycle_tid: Option<i32>, guard: i32) -> ProcSample {
    ProcSample {
        t_ns: monotonic_ns(),
        rt_cpu_ns: rig::process_cpu_ns(rt).unwrap_or(0),
        cycle_cpu_ns: cycle_tid
            .and_then(|t| rig::thread_cpu_ns(rt, t))
            .unwrap_or(0),
        guard_cpu_ns: rig::process_cpu_ns(guard).unwrap_or(0),
        rt_rss_kb: rig::rss_kb(rt).unwrap_or(0),
        guard_rss_kb: rig::rss_kb(guard).unwrap_or(0),
    }
}

fn measure_cycles(rig: &mut Rig, cycles: u64) -> Result<CyclePhase, String> {
    let rt = rig.runtime_pid();
    let guard = rig.guard_pid();
    let tid = rig::thread_named(rt, "nao-rs-cycle");
    rig.poll()?;
    let from = rig.frames.len();
    let mut samples = vec![proc_sample(rt, tid, guard)];
    let deadline = monotonic_ns() + (cycles * PERIOD_NS) * 2 + 10_000_000_000;
    loop {
        rig.collect_for(Duration::from_millis(1000))?;
        samples.push(proc_sample(rt, tid, guard));
        let got = rig.frames[from..]
            .iter()
            .filter(|f| f.peer_pid == rt && f.is_cycle_frame())
            .count() as u64;
        if got > cycles {
            break;
        }
        if monotonic_ns() > deadline {
            return Err(format!(
                "only {got} of {cycles} cycle frames from the runtime (pid {rt}) in time"
            ));
        }
        if !rig.runtime().is_some_and(|r| r.running()) {
            let log = rig.runtime().map(|r| r.log_tail(8)).unwrap_or_default();
            let reason = rig.page.snapshot().reason.map(Reason::name);
            return Err(format!(
                "the runtime exited during the cycle measurement (the switch: {}):\n{log}",
                reason.unwrap_or("armed")
            ));
        }
    }
    let frames: &[TraceLine] = &rig.frames[from..];
    let mut p = CyclePhase {
        timing: cycle_timing(frames, rt, PERIOD_NS),
        cycle_policy: tid.and_then(|t| rig::policy(rt, Some(t))),
        status: std::fs::read_to_string(rig.status_path())
            .unwrap_or_default()
            .trim()
            .to_string(),
        ..CyclePhase::default()
    };
    for w in samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        let n = frames
            .iter()
            .filter(|f| {
                f.peer_pid == rt && f.is_cycle_frame() && f.t_ns > a.t_ns && f.t_ns <= b.t_ns
            })
            .count() as u64;
        if let Some(c) = b.rt_cpu_ns.saturating_sub(a.rt_cpu_ns).checked_div(n) {
            p.rt_cpu_per_cycle.push(c);
        }
        if let Some(c) = b.cycle_cpu_ns.saturating_sub(a.cycle_cpu_ns).checked_div(n) {
            p.cycle_cpu_per_cycle.push(c);
        }
        let polls = b.t_ns.saturating_sub(a.t_ns) / 2_000_000;
        if let Some(c) = b
            .guard_cpu_ns
            .saturating_sub(a.guard_cpu_ns)
            .checked_div(polls)
        {
            p.guard_cpu_per_poll.push(c);
        }
        p.rt_rss_kb.push(b.rt_rss_kb);
        p.guard_rss_kb.push(b.guard_rss_kb);
    }
    Ok(p)
}

/// The controller-lost ramp: the runtime's controller thread
/// (`nao-rs-control`) is stopped alone with ptrace (PTRACE_SEIZE +
/// PTRACE_INTERRUPT) for `hold`, so the cycle goes on without commands, then
/// resumed and watched for `after`. Returns (stop, resume) times, ns.
pub fn controller_lost(
    rig: &mut Rig,
    hold: Duration,
    after: Duration,
) -> Result<(u64, u64), String> {
    let rt = rig.runtime_pid();
    let tid = rig::thread_named(rt, "nao-rs-control")
        .ok_or_else(|| format!("the runtime (pid {rt}) has no thread named nao-rs-control"))?;
    // Attaches to `tid` without stopping it.
    let rc = ptrace(libc::PTRACE_SEIZE, tid);
    if rc != 0 {
        return Err(format!(
            "cannot ptrace the controller thread {tid} of pid {rt}: {}; run as root or allow \
             ptrace of children (kernel.yama.ptrace_scope <= 1)",
            std::io::Error::last_os_error()
        ));
    }
    // Stops the seized thread.
    ptrace(libc::PTRACE_INTERRUPT, tid);
    let mut status = 0;
    // SAFETY: waits for the traced thread's stop; `status` is a valid int.
    unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    let t_stop = monotonic_ns();
    let r = rig.collect_for(hold);
    let t_resume = monotonic_ns();
    // Detaches the stopped tracee; it resumes with no signal.
    ptrace(libc::PTRACE_DETACH, tid);
    r?;
    rig.collect_for(after)?;
    Ok((t_stop, t_resume))
}

/// `ptrace(request, tid, NULL, NULL)`: the requests used here (SEIZE,
/// INTERRUPT, DETACH) take no address and no data.
fn ptrace(request: libc::c_uint, tid: i32) -> libc::c_long {
    // SAFETY: with null addr and data these requests pass no memory of ours
    // to the kernel; they act only on the thread `tid`.
    unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    }
}

/// The frames of the window [t0, t1] as (ms relative to `t_ref`, stiffness)
/// for process `pid`.
pub fn window(frames: &[TraceLine], pid: i32, t0: u64, t1: u64, t_ref: u64) -> Vec<(f64, f64)> {
    frames
        .iter()
        .filter(|f| f.peer_pid == pid && f.is_cycle_frame() && f.t_ns >= t0 && f.t_ns <= t1)
        .map(|f| {
            (
                (f.t_ns as i128 - t_ref as i128) as f64 / 1e6,
                f64::from(f.max_stiffness),
            )
        })
        .collect()
}
