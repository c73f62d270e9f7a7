//! `nao-rs-bench`: every safety and timing figure in one run, against the
//! virtual robot (`docs/performance.md`).
//!
//! It starts `nao-rs-sim` (with its trace), `nao-rs-guard` and `nao-rs run
//! --controller stand` on a private folder and a free UDP port, measures
//! each figure (median, p99, max), prints a Markdown table and with `--out
//! DIR` writes `DIR/report.md`, `DIR/samples.csv` and SVG plots. The
//! operator app's figures run five more virtual robots on loopback with
//! `nao-rs-app` clicking STOP ALL, and `nao-rs-beacon` against one of them.
//!
//! A development tool of its own (ptrace, plots): it is not part of the
//! robot's `nao-rs` binary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use nao_runtime::status_file::StatusFile;
use nix::sys::signal::Signal;

mod fleet;
mod http;
mod plot;
mod report;
mod rig;
mod stats;
mod trace;
mod trials;

use report::{Bound, Figure, Unit};
use rig::{Programs, Rig};
use trials::{GuardSample, StopSample, Trigger};

const MS: u64 = 1_000_000;
/// The hold time of the `hold` figures, ms (the shortest `hold` allows; a
/// whole number of 12 ms periods).
const HOLD_MS: u64 = 300;

/// Measure every safety and timing figure of nao-rs against the virtual robot.
#[derive(Parser, Debug, Clone)]
#[command(name = "nao-rs-bench", version, about)]
pub struct BenchArgs {
    /// Trials per stop figure (the guard's figures get half, each); at least 100 for the report.
    #[arg(long)]
    pub trials: Option<u32>,
    /// Write report.md, samples.csv and the SVG plots into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Trials of the guard's start-up deadline (6 s each); default 3 (--quick: 1).
    #[arg(long)]
    pub start_up_trials: Option<u32>,
    /// A short run for tests: 5 trials, 300 cycles per cycle phase, short ramps.
    #[arg(long)]
    pub quick: bool,
    /// Cycles per cycle phase (quiet, loaded); default 10,000 (--quick: 300).
    #[arg(long)]
    pub cycles: Option<u64>,
    /// The folder with nao-rs, nao-rs-sim, nao-rs-guard and naoctl (default: next to this program).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// The recordings to replay (default: ./recordings, else the workspace's).
    #[arg(long, value_name = "DIR")]
    pub recordings: Option<PathBuf>,
    /// STOP ALL trials over 5 virtual robots through nao-rs-app; default 10 (--quick: 3); 0 skips them.
    #[arg(long, value_name = "N")]
    pub stop_all_trials: Option<u32>,
    /// Seconds per window of the beacon's CPU measurement; default 10 (--quick: 5).
    #[arg(long, value_name = "S")]
    pub beacon_seconds: Option<u64>,
    /// Windows of the beacon's CPU measurement; default 3 (--quick: 1); 0 skips it.
    #[arg(long, value_name = "N")]
    pub beacon_windows: Option<u32>,
    /// Trials of the chest button held in `hold:300` (about 1 s each); default 20 (--quick: 2); 0 skips them.
    #[arg(long, value_name = "N")]
    pub hold_trials: Option<u32>,
}

/// The run's settings after defaults.
struct Plan {
    trials: u32,
    guard_trials: u32,
    cycles: u64,
    full_ramps: bool,
    lost_hold: Duration,
    lost_after: Duration,
    replay_runs: u32,
    start_up_trials: u32,
    stop_all_trials: u32,
    beacon_seconds: u64,
    beacon_windows: u32,
    hold_trials: u32,
}

impl Plan {
    fn of(a: &BenchArgs) -> Plan {
        let trials = a.trials.unwrap_or(if a.quick { 5 } else { 100 }).max(1);
        Plan {
            trials,
            guard_trials: (trials / 2).max(1),
            cycles: a
                .cycles
                .unwrap_or(if a.quick { 300 } else { 10_000 })
                .max(10),
            full_ramps: !a.quick,
            // 25 cycles until "lost", 500 down: 6.3 s; 200 up: 2.4 s.
            lost_hold: Duration::from_millis(if a.quick { 1000 } else { 6800 }),
            lost_after: Duration::from_millis(if a.quick { 500 } else { 3000 }),
            replay_runs: if a.quick { 2 } else { 10 },
            start_up_trials: a.start_up_trials.unwrap_or(if a.quick { 1 } else { 3 }),
            stop_all_trials: a.stop_all_trials.unwrap_or(if a.quick { 3 } else { 10 }),
            beacon_seconds: a
                .beacon_seconds
                .unwrap_or(if a.quick { 5 } else { 10 })
                .max(1),
            beacon_windows: a.beacon_windows.unwrap_or(if a.quick { 1 } else { 3 }),
            hold_trials: a.hold_trials.unwrap_or(if a.quick { 2 } else { 20 }),
        }
    }
}

fn main() -> ExitCode {
    match run(&BenchArgs::parse()) {
        Ok(all_pass) => {
            if all_pass {
                ExitCode::SUCCESS
            } else {
                eprintln!("nao-rs-bench: some figures failed their bound (see the table)");
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("nao-rs-bench: {e}");
            ExitCode::from(2)
        }
    }
}

fn say(t0: Instant, what: &str) {
    eprintln!("[{:6.1} s] {what}", t0.elapsed().as_secs_f64());
}

/// Every figure of the run, in table order.
struct Figures {
    naoctl_trip: Figure,
    naoctl_cmd: Figure,
    udp_frame: Figure,
    udp_trip: Figure,
    button_trip: Figure,
    button_cmd: Figure,
    hold_cmd: Figure,
    hold_trip: Figure,
    stop_takeover: Figure,
    takeover_frame: Figure,
    stop_frame: Figure,
    kill_frame: Figure,
    segv_frame: Figure,
    kill_frame_floor: Figure,
    segv_frame_floor: Figure,
    start_up_frame: Figure,
    udp_flood: Figure,
    period_quiet: Figure,
    late_quiet: Figure,
    period_loaded: Figure,
    late_loaded: Figure,
    rt_cpu: Figure,
    cycle_cpu: Figure,
    guard_cpu: Figure,
    rt_rss: Figure,
    guard_rss: Figure,
    allocs: Figure,
    replay: Figure,
    world_schedules: Figure,
    world_simulated: Figure,
    stop_all: Figure,
    stop_all_round: Figure,
    beacon_cpu: Figure,
    beacon_cpu_ns: Figure,
}

/// A stop's bound as the cycle meets it: the runtime reads the switch once,
/// at the start of a cycle, so a trip that lands just after that read (or,
/// for the chest button, is stored when an answer is handed over after the
/// frame is written) shows in the next cycle's frame: one period plus that
/// cycle's lateness, which is below one period when no deadline is missed.
fn stop_bound() -> Bound {
    Bound::MaxAtMost(
        24 * MS,
        "the next cycle's frame: one 12 ms period + its lateness (<= one period)".into(),
    )
}

impl Figures {
    fn new() -> Figures {
        let f = Figure::new;
        let takeover = "60 ms beat timeout + 2 ms poll";
        let chain = "60 ms beat timeout + 2 ms poll + one 12 ms cycle";
        Figures {
            naoctl_trip: f("stop_naoctl", "`naoctl stop`: page trip -> first all-off frame", Unit::Ms, stop_bound()),
            naoctl_cmd: f("stop_naoctl_cmd", "`naoctl stop`: command started -> first all-off frame", Unit::Ms, Bound::Reference("includes starting naoctl".into())),
            udp_frame: f("stop_udp", "UDP stop: datagram sent -> first all-off frame", Unit::Ms, stop_bound()),
            udp_trip: f("udp_trip", "UDP stop: datagram sent -> switch tripped", Unit::Ms, Bound::Reference("part of the line above".into())),
            button_trip: f("stop_button", "chest button: page trip -> first all-off frame", Unit::Ms, stop_bound()),
            button_cmd: f("stop_button_cmd", "chest button: sim `button` command -> first all-off frame", Unit::Ms, Bound::Reference("2 to 3 periods + lateness by the protocol: an answer is handed over one cycle after its frame".into())),
            hold_cmd: f("stop_button_hold", "chest button `hold:300`: sim `button 800` (held) -> first all-off frame", Unit::Ms, Bound::MaxAtMost((HOLD_MS + 48) * MS, "300 ms + one 12 ms period + lateness (<= one period) from the first answer that shows the press, + 2 periods for the answer's way from the press (the trip mode's command row)".into())),
            hold_trip: f("hold_trip", "chest button `hold:300`: sim `button 800` (held) -> switch tripped", Unit::Ms, Bound::Reference("never below 300 ms (checked by the game-day test)".into())),
            stop_takeover: f("guard_sigstop_takeover", "SIGSTOP of the runtime -> guard's take-over (page trip)", Unit::Ms, Bound::MaxAtMost(62 * MS, format!("{takeover}; on the robot: 62 ms"))),
            takeover_frame: f("guard_takeover_frame", "guard's take-over (page trip) -> its first all-off frame", Unit::Ms, Bound::MaxAtMost(12 * MS, "one 12 ms cycle; on the robot: 9 ms after the kill".into())),
            stop_frame: f("guard_sigstop_frame", "SIGSTOP of the runtime -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(74 * MS, format!("{chain}; on the robot: 62 + 9 ms"))),
            kill_frame: f("guard_sigkill_frame", "external SIGKILL of the runtime -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(15 * MS, "goal: median <= 5 ms, max <= 15 ms (the runtime's pidfd)".into())),
            segv_frame: f("guard_sigsegv_frame", "runtime crash (SIGSEGV) -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(15 * MS, "as SIGKILL (the runtime's pidfd)".into())),
            kill_frame_floor: f("guard_sigkill_frame_no_pidfd", "without pidfd (kernel 4.4 floor): external SIGKILL of the runtime -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(15 * MS, "goal: median <= 5 ms, max <= 15 ms (the runtime's exit-watch connection)".into())),
            segv_frame_floor: f("guard_sigsegv_frame_no_pidfd", "without pidfd (kernel 4.4 floor): runtime crash (SIGSEGV) -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(15 * MS, "as SIGKILL (the runtime's exit-watch connection)".into())),
            start_up_frame: f("guard_start_up_frame", "runtime registered, frozen before its first beat -> guard's first all-off frame", Unit::Ms, Bound::MaxAtMost(deathswitch::rules::START_UP_BOUND_NS + 14 * MS, "the 6 s start-up bound + 2 ms poll + one 12 ms cycle".into())),
            udp_flood: f("udp_flood_trip", "UDP stop from 127.0.0.2 inside a 200,000-datagram flood from 127.0.0.1: sent -> switch tripped", Unit::Ms, Bound::MaxAtMost(50 * MS, "50 ms".into())),
            period_quiet: f("period_quiet", "cycle period, quiet", Unit::Ms, Bound::MaxAtMost(24 * MS - 1, "no deadline missed (< 2 periods); on the robot: slowest 12.4 ms over 1,043 cycles".into())),
            late_quiet: f("lateness_quiet", "cycle lateness at the board, quiet", Unit::Ms, Bound::MaxAtMost(12 * MS, "one period: no deadline missed".into())),
            period_loaded: f("period_loaded", "cycle period, busy loop on every core", Unit::Ms, Bound::MaxAtMost(24 * MS - 1, "no deadline missed (< 2 periods); on the robot: slowest 12.4 ms over 1,043 cycles".into())),
            late_loaded: f("lateness_loaded", "cycle lateness at the board, busy loop on every core", Unit::Ms, Bound::MaxAtMost(12 * MS, "one period: no deadline missed".into())),
            rt_cpu: f("runtime_cpu_per_cycle", "runtime CPU time per cycle, all threads (1 s windows)", Unit::Ms, Bound::Reference("-".into())),
            cycle_cpu: f("cycle_thread_cpu_per_cycle", "cycle thread CPU time per cycle (1 s windows)", Unit::Ms, Bound::MaxAtMost(12 * MS, "fits in one cycle".into())),
            guard_cpu: f("guard_cpu_per_poll", "guard CPU time per 2 ms poll (1 s windows)", Unit::Ms, Bound::MaxAtMost(2 * MS, "fits in one poll".into())),
            rt_rss: f("runtime_rss", "runtime resident memory (VmRSS)", Unit::MiB, Bound::Reference("-".into())),
            guard_rss: f("guard_rss", "guard resident memory (VmRSS)", Unit::MiB, Bound::Reference("-".into())),
            allocs: {
                let mut a = f("allocations_per_cycle", "cycle-thread allocations after start-up (total at the end of the quiet / loaded phase)", Unit::Count, Bound::MaxAtMost(0, "goal: 0".into()));
                a.note = "the runtime's status file does not report `cycle_allocations` (nao-rs built without its counting allocator?)".into();
                a
            },
            replay: f("replay_speed", "replay of recordings/ (start-up and cycles)", Unit::PerSecond, Bound::Reference("the robot runs 83 cycles/s".into())),
            world_schedules: f("world_schedules", "nao-rs-world: schedules explored a wall second (one thread, 1 s windows)", Unit::Rate, Bound::Reference("100,000 in 3 min on 2 cores: 278 a thread".into())),
            world_simulated: f("world_simulated_seconds", "nao-rs-world: simulated seconds a wall second (one thread, 1 s windows)", Unit::Rate, Bound::Reference("10^6 in 3 min on 2 cores: 2,778 a thread".into())),
            stop_all: f("stop_all_5_robots", "STOP ALL over 5 robots: click -> last robot's first all-off frame", Unit::Ms, Bound::Reference("no bound set; each robot: the next cycle's frame after its datagram".into())),
            stop_all_round: f("stop_all_first_round", "STOP ALL over 5 robots: click -> first round sent (the app's answer)", Unit::Ms, Bound::Reference("part of the line above".into())),
            beacon_cpu: f("beacon_cpu", "beacon CPU on the robot (nao-rs-beacon at 2 Hz, utime + stime)", Unit::Percent, Bound::MaxAtMost(999, "below 1 % of one core".into())),
            beacon_cpu_ns: f("beacon_cpu_schedstat", "beacon CPU on the robot, the same windows from the threads' schedstat (ns)", Unit::Percent, Bound::Reference("the line above at ns resolution".into())),
        }
    }

    fn all(&self) -> Vec<Figure> {
        [
            &self.naoctl_trip,
            &self.naoctl_cmd,
            &self.udp_frame,
            &self.udp_trip,
            &self.button_trip,
            &self.button_cmd,
            &self.hold_cmd,
            &self.hold_trip,
            &self.stop_takeover,
            &self.takeover_frame,
            &self.stop_frame,
            &self.kill_frame,
            &self.segv_frame,
            &self.kill_frame_floor,
            &self.segv_frame_floor,
            &self.start_up_frame,
            &self.udp_flood,
            &self.period_quiet,
            &self.late_quiet,
            &self.period_loaded,
            &self.late_loaded,
            &self.rt_cpu,
            &self.cycle_cpu,
            &self.guard_cpu,
            &self.rt_rss,
            &self.guard_rss,
            &self.allocs,
            &self.replay,
            &self.world_schedules,
            &self.world_simulated,
            &self.stop_all,
            &self.stop_all_round,
            &self.beacon_cpu,
            &self.beacon_cpu_ns,
        ]
        .into_iter()
        .cloned()
        .collect()
    }
}

fn recordings_dir(a: &BenchArgs) -> PathBuf {
    if let Some(d) = &a.recordings {
        return d.clone();
    }
    let here = PathBuf::from("recordings");
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recordings")
}

/// Text about the machine: CPUs, model, kernel.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{cpus} CPUs ({model}), Linux {kernel}")
}

/// Records a failed trial: counted in the figure's note.
fn failed(fig: &mut Figure, e: &str) {
    eprintln!("nao-rs-bench: {}: trial failed: {e}", fig.key);
    let n = fig
        .note
        .split(' ')
        .next()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    fig.note = format!("{n} trial(s) failed, last: {e}");
}

fn run(a: &BenchArgs) -> Result<bool, String> {
    let t_start = Instant::now();
    let plan = Plan::of(a);
    let bins = rig::find_programs(a.bin_dir.as_deref())?;
    let fleet_bins = bins.clone();
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out)
            .map_err(|e| format!("--out {}: cannot create it: {e}", out.display()))?;
    }
    let mut figs = Figures::new();
    let mut notes: Vec<String> = Vec::new();
    let mut plots: Vec<(String, String)> = Vec::new();
    say(
        t_start,
        "starting the virtual robot, the guard and the runtime",
    );
    let mut rig = Rig::start(bins)?;
    rig.start_runtime()?;
    let naoctl = trials::naoctl_works(&mut rig);
    if !naoctl {
        notes.push(
            "`naoctl stop` did not trip the page: the naoctl figures trip in-process with \
             `deathswitch::Page::trip(Reason::Naoctl)` (what naoctl does), so they measure the \
             trip to the frame, not naoctl's start-up."
                .into(),
        );
    }

    // The UDP stop plot: a full ramp into the pose, then one stop.
    say(t_start, "UDP stop plot");
    trials::make_stiff(&mut rig, plan.full_ramps)?;
    let t_ramp = deathswitch::monotonic_ns();
    let s = trials::stop_now(&mut rig, Trigger::Udp, naoctl)?;
    rig.collect_for(Duration::from_millis(500))?;
    push_stop(&mut figs.udp_frame, &mut figs.udp_trip, &s, s.t0_ns);
    let udp_plot = trials::window(
        &rig.frames,
        rig.runtime_pid(),
        t_ramp.saturating_sub(3_500 * MS),
        s.t0_ns + 500 * MS,
        s.t0_ns,
    );

    say(
        t_start,
        &format!(
            "stop trials: {} each of naoctl, UDP, chest button",
            plan.trials
        ),
    );
    for _ in 0..plan.trials {
        match trials::stop_trial(&mut rig, Trigger::Naoctl, naoctl) {
            Ok(s) => push_trip_and_command(&mut figs.naoctl_trip, &mut figs.naoctl_cmd, &s),
            Err(e) => failed(&mut figs.naoctl_trip, &e),
        }
        match trials::stop_trial(&mut rig, Trigger::Udp, naoctl) {
            Ok(s) => push_stop(&mut figs.udp_frame, &mut figs.udp_trip, &s, s.t0_ns),
            Err(e) => failed(&mut figs.udp_frame, &e),
        }
        match trials::stop_trial(&mut rig, Trigger::Button, naoctl) {
            Ok(s) => push_trip_and_command(&mut figs.button_trip, &mut figs.button_cmd, &s),
            Err(e) => failed(&mut figs.button_trip, &e),
        }
    }

    if plan.hold_trials > 0 {
        say(
            t_start,
            &format!(
                "chest button hold trials: {} with `--chest-button hold:{HOLD_MS}`",
                plan.hold_trials
            ),
        );
        rig.restart_runtime(vec!["--chest-button".into(), format!("hold:{HOLD_MS}")])?;
        for _ in 0..plan.hold_trials {
            match trials::hold_trial(&mut rig, HOLD_MS) {
                Ok(s) => push_stop(&mut figs.hold_cmd, &mut figs.hold_trip, &s, s.t0_ns),
                Err(e) => failed(&mut figs.hold_cmd, &e),
            }
        }
        rig.restart_runtime(Vec::new())?;
    }

    say(
        t_start,
        "controller-lost ramp (the controller thread held with ptrace)",
    );
    let mut lost_plot = None;
    trials::make_stiff(&mut rig, plan.full_ramps)?;
    match trials::controller_lost(&mut rig, plan.lost_hold, plan.lost_after) {
        Ok((t_stop, t_resume)) => {
            let pts = trials::window(
                &rig.frames,
                rig.runtime_pid(),
                t_stop.saturating_sub(500 * MS),
                t_resume + plan.lost_after.as_nanos() as u64,
                t_stop,
            );
            lost_plot = Some((pts, (t_resume - t_stop) as f64 / 1e6));
        }
        Err(e) => notes.push(format!("controller-lost ramp not plotted: {e}")),
    }

    say(
        t_start,
        &format!("cycle timing, quiet: {} cycles", plan.cycles),
    );
    trials::make_stiff(&mut rig, false)?;
    let quiet = trials::cycle_phase(&mut rig, plan.cycles, false)?;
    say(
        t_start,
        &format!("cycle timing, loaded: {} cycles", plan.cycles),
    );
    let loaded = trials::cycle_phase(&mut rig, plan.cycles, true)?;
    for (p, period, late) in [
        (&quiet, &mut figs.period_quiet, &mut figs.late_quiet),
        (&loaded, &mut figs.period_loaded, &mut figs.late_loaded),
    ] {
        period.samples = p.timing.periods_ns.clone();
        late.samples = p.timing.lateness_ns.clone();
        figs.rt_cpu.samples.extend(&p.rt_cpu_per_cycle);
        figs.cycle_cpu.samples.extend(&p.cycle_cpu_per_cycle);
        figs.guard_cpu.samples.extend(&p.guard_cpu_per_poll);
        figs.rt_rss.samples.extend(&p.rt_rss_kb);
        figs.guard_rss.samples.extend(&p.guard_rss_kb);
    }
    // The runtime counts its cycle thread's allocations from the first
    // cycle on (kit::alloc::CountingAlloc) and reports the total in its
    // status file.
    let allocations = |p: &trials::CyclePhase| {
        serde_json::from_str::<StatusFile>(&p.status)
            .ok()
            .and_then(|s| s.cycle_allocations)
    };
    if let (Some(q), Some(l)) = (allocations(&quiet), allocations(&loaded)) {
        figs.allocs.samples = vec![q, l];
        figs.allocs.note = String::new();
    }
    let policy = |p: &trials::CyclePhase| match p.cycle_policy {
        Some((pol, prio)) => format!("{} {prio}", rig::policy_name(pol)),
        None => "unknown".into(),
    };
    let guard_poll = rig::thread_named(rig.guard_pid(), "guard-poll")
        .and_then(|t| rig::policy(rig.guard_pid(), Some(t)))
        .map_or("unknown".into(), |(p, q)| {
            format!("{} {q}", rig::policy_name(p))
        });
    notes.push(format!(
        "Cycle thread (nao-rs-cycle): {} (quiet), {} (loaded); guard poll thread: {guard_poll}; \
         the sim: {}. Loaded: {} busy-loop threads at SCHED_OTHER. Seq gaps in the trace: {} \
         quiet, {} loaded.",
        policy(&quiet),
        policy(&loaded),
        if rig.sim_fifo {
            format!("SCHED_FIFO {}", rig::SIM_PRIORITY)
        } else {
            "SCHED_OTHER (SCHED_FIFO refused)".into()
        },
        loaded.load_threads,
        quiet.timing.seq_gaps,
        loaded.timing.seq_gaps,
    ));
    notes.push(format!(
        "The runtime's own status file at the end of the quiet / loaded phase: `{}` / `{}`.",
        quiet.status, loaded.status
    ));

    say(
        t_start,
        &format!(
            "guard trials: {} each of SIGSTOP, SIGKILL and SIGSEGV",
            plan.guard_trials
        ),
    );
    let mut guard_plot = None;
    for i in 0..plan.guard_trials {
        let full = i == 0 && plan.full_ramps;
        match trials::guard_trial(&mut rig, Signal::SIGSTOP, full) {
            Ok(g) => {
                push_guard_stop(&mut figs, &g);
                if i == 0 {
                    guard_plot = Some(g);
                }
            }
            Err(e) => failed(&mut figs.stop_takeover, &e),
        }
        // The runtime ends (the pidfd figures): the signal to the guard's frame.
        for (sig, fig) in [
            (Signal::SIGKILL, &mut figs.kill_frame),
            (Signal::SIGSEGV, &mut figs.segv_frame),
        ] {
            match trials::guard_trial(&mut rig, sig, false) {
                Ok(g) => fig.samples.push(g.guard_frame_ns.saturating_sub(g.t0_ns)),
                Err(e) => failed(fig, &e),
            }
        }
    }
    // The same without pidfds (the robot's Linux 4.4): the guard restarted
    // under testkit's kernel 4.4 floor sees the exit through the runtime's
    // exit-watch connection; then the usual guard again.
    say(
        t_start,
        &format!(
            "guard trials without pidfd (kernel 4.4 floor): {} each of SIGKILL and SIGSEGV",
            plan.guard_trials
        ),
    );
    match rig.restart_guard(true) {
        Ok(()) => {
            for _ in 0..plan.guard_trials {
                for (sig, fig) in [
                    (Signal::SIGKILL, &mut figs.kill_frame_floor),
                    (Signal::SIGSEGV, &mut figs.segv_frame_floor),
                ] {
                    match trials::guard_trial(&mut rig, sig, false) {
                        Ok(g) if g.reason == Some(deathswitch::Reason::GuardRuntimeExited) => {
                            fig.samples.push(g.guard_frame_ns.saturating_sub(g.t0_ns))
                        }
                        Ok(g) => failed(
                            fig,
                            &format!("{sig}: taken over as {:?}, not as an exit", g.reason),
                        ),
                        Err(e) => failed(fig, &e),
                    }
                }
            }
        }
        Err(e) => {
            failed(&mut figs.kill_frame_floor, &e);
            failed(&mut figs.segv_frame_floor, &e);
        }
    }
    rig.restart_guard(false)?;
    if plan.start_up_trials > 0 {
        say(
            t_start,
            &format!(
                "start-up deadline trials: {} (6 s each)",
                plan.start_up_trials
            ),
        );
        for _ in 0..plan.start_up_trials {
            match trials::start_up_trial(&mut rig) {
                Ok(ns) => figs.start_up_frame.samples.push(ns),
                Err(e) => failed(&mut figs.start_up_frame, &e),
            }
        }
        rig.start_runtime()?;
    }
    say(t_start, "UDP flood trials");
    for _ in 0..plan.guard_trials.clamp(1, 10) {
        match trials::udp_flood_trial(&mut rig) {
            Ok(ns) => figs.udp_flood.samples.push(ns),
            Err(e) => failed(&mut figs.udp_flood, &e),
        }
    }
    let guard_pts = guard_plot.map(|g| {
        // The runtime that was stopped is the one whose frames end at t0.
        let before: Vec<_> = rig
            .frames
            .iter()
            .filter(|f| f.t_ns < g.t0_ns && f.is_cycle_frame() && f.peer_pid != rig.guard_pid())
            .rev()
            .take(1)
            .map(|f| f.peer_pid)
            .collect();
        let rt = before.first().copied().unwrap_or(0);
        let w0 = g.t0_ns.saturating_sub(300 * MS);
        (
            trials::window(&rig.frames, rt, w0, g.t0_ns + 300 * MS, g.t0_ns),
            trials::window(
                &rig.frames,
                rig.guard_pid(),
                g.t0_ns,
                g.t0_ns + 300 * MS,
                g.t0_ns,
            ),
            (g.trip_ns as i128 - g.t0_ns as i128) as f64 / 1e6,
        )
    });

    say(t_start, "replay speed");
    replay_speed(&recordings_dir(a), plan.replay_runs, &mut figs.replay);
    say(t_start, "world speed");
    world_speed(if a.quick { 1 } else { 5 }, &mut figs);
    drop(rig);
    app_figures(&fleet_bins, &plan, &mut figs, &mut notes, t_start);

    let all = figs.all();
    let table = report::table(&all);
    let header = format!(
        "nao-rs-bench on {}; {} trials per stop figure, {} per guard figure, {} cycles per cycle \
         phase, {} STOP ALL trials, {} beacon window(s) of {} s; {:.0} s in all.\n",
        machine(),
        plan.trials,
        plan.guard_trials,
        plan.cycles,
        plan.stop_all_trials,
        plan.beacon_windows,
        plan.beacon_seconds,
        t_start.elapsed().as_secs_f64()
    );
    println!("{header}\n{table}");
    for n in &notes {
        println!("- {n}");
    }
    if let Some(out) = &a.out {
        let w = |name: &str, text: &str| {
            let p = out.join(name);
            std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
        };
        w("samples.csv", &report::csv(&all))?;
        plot::histogram(
            &out.join("lateness.svg"),
            "Cycle lateness at the board (12 ms grid)",
            "lateness (ms)",
            &[
                ("quiet", &figs.late_quiet.samples),
                ("busy loop on every core", &figs.late_loaded.samples),
            ],
            100_000,
        )?;
        plots.push(("lateness.svg".into(), "the lateness histogram".into()));
        plot::stiffness(
            &out.join("stop_udp.svg"),
            "Stiffness around a UDP stop (stand ramp, then the stop at 0 ms)",
            &[plot::PlotLine {
                name: "runtime",
                points: udp_plot,
            }],
            &[(0.0, "UDP datagram sent")],
        )?;
        plots.push(("stop_udp.svg".into(), "stiffness around a UDP stop".into()));
        if let Some((pts, resume)) = lost_plot {
            plot::stiffness(
                &out.join("controller_lost.svg"),
                "Controller lost: no command from 0 ms until resumed",
                &[plot::PlotLine {
                    name: "runtime",
                    points: pts,
                }],
                &[(0.0, "controller stopped"), (resume, "controller resumed")],
            )?;
            plots.push((
                "controller_lost.svg".into(),
                "the controller-lost ramp".into(),
            ));
        }
        if let Some((rt, guard, trip)) = guard_pts {
            plot::stiffness(
                &out.join("guard_takeover.svg"),
                "Guard take-over: SIGSTOP of the runtime at 0 ms",
                &[
                    plot::PlotLine {
                        name: "runtime",
                        points: rt,
                    },
                    plot::PlotLine {
                        name: "guard",
                        points: guard,
                    },
                ],
                &[(0.0, "SIGSTOP"), (trip, "guard's take-over (trip)")],
            )?;
            plots.push(("guard_takeover.svg".into(), "a guard take-over".into()));
        }
        let mut md = format!("# nao-rs-bench\n\n{header}\n{table}\n");
        for n in &notes {
            md.push_str(&format!("- {n}\n"));
        }
        md.push_str("\nRaw samples: `samples.csv` (figure, unit, index, value).\n\n");
        for (file, what) in &plots {
            md.push_str(&format!("![{what}]({file})\n\n"));
        }
        w("report.md", &md)?;
        say(
            t_start,
            &format!("wrote {}", out.join("report.md").display()),
        );
    }
    Ok(all.iter().all(|f| f.verdict() != Some(false)))
}

fn push_stop(frame: &mut Figure, trip: &mut Figure, s: &StopSample, t0: u64) {
    frame.samples.push(s.all_off_ns.saturating_sub(t0));
    trip.samples.push(s.trip_ns.saturating_sub(t0));
}

/// A stop's first all-off frame counted from the trip (`from_trip`) and from
/// the command that caused it (`from_command`).
fn push_trip_and_command(from_trip: &mut Figure, from_command: &mut Figure, s: &StopSample) {
    from_trip
        .samples
        .push(s.all_off_ns.saturating_sub(s.trip_ns));
    from_command
        .samples
        .push(s.all_off_ns.saturating_sub(s.t0_ns));
}

fn push_guard_stop(figs: &mut Figures, g: &GuardSample) {
    if g.reason != Some(deathswitch::Reason::GuardHeartbeatLost) {
        failed(
            &mut figs.stop_takeover,
            &format!(
                "trip reason {:?}, expected guard-heartbeat-lost",
                g.reason.map(|r| r.name())
            ),
        );
        return;
    }
    figs.stop_takeover
        .samples
        .push(g.trip_ns.saturating_sub(g.t0_ns));
    figs.takeover_frame
        .samples
        .push(g.guard_frame_ns.saturating_sub(g.trip_ns));
    figs.stop_frame
        .samples
        .push(g.guard_frame_ns.saturating_sub(g.t0_ns));
}

fn replay_speed(dir: &Path, runs: u32, fig: &mut Figure) {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rec"))
            .collect(),
        Err(e) => {
            fig.note = format!("cannot read {}: {e}; give --recordings DIR", dir.display());
            return;
        }
    };
    files.sort();
    for p in &files {
        for _ in 0..runs {
            match nao_wire::replay::replay_file(p) {
                Ok(r) => {
                    let ns = r.elapsed.as_nanos().max(1);
                    fig.samples
                        .push((u128::from(r.cycles) * 1_000_000_000 / ns) as u64);
                }
                Err(e) => {
                    fig.note = format!("{} did not replay: {e}", p.display());
                    return;
                }
            }
        }
    }
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    fig.name = format!(
        "replay of {} ({} runs each), cycles a second",
        names.join(", "),
        runs
    );
}

/// The world's speed (`docs/world.md`): `windows` windows of 1 s of
/// exploring on this thread, each a sample of schedules a second and of
/// simulated seconds a second. Every invariant must hold meanwhile.
fn world_speed(windows: u32, figs: &mut Figures) {
    use nao_rs_world::explore::{explore, Budget};
    let mut from = 0;
    for _ in 0..windows {
        let r = explore(
            from,
            Budget {
                guard_stall_max_ns: nao_rs_world::schedule::GUARD_STALL_MAX_NS,
                schedules: u64::MAX,
                simulated_ns: u64::MAX,
                wall: Duration::from_secs(1),
            },
            None,
        );
        if let Some(f) = r.failure {
            failed(&mut figs.world_schedules, &f.to_string());
            return;
        }
        let wall = r.wall.as_secs_f64().max(1e-9);
        figs.world_schedules
            .samples
            .push((r.schedules as f64 / wall) as u64);
        figs.world_simulated
            .samples
            .push((r.simulated_ns as f64 / 1e9 / wall) as u64);
        from += r.schedules;
    }
}

/// The operator app's figures: STOP ALL over five robots through
/// `nao-rs-app`, then the beacon's CPU against the first robot. A robot or
/// program that cannot start leaves the rows "not measured" with the
/// reason; it does not end the bench.
fn app_figures(
    bins: &Programs,
    plan: &Plan,
    figs: &mut Figures,
    notes: &mut Vec<String>,
    t0: Instant,
) {
    let skipped = |fig: &mut Figure, why: &str| fig.note = why.to_string();
    if plan.stop_all_trials == 0 {
        skipped(&mut figs.stop_all, "skipped (--stop-all-trials 0)");
        skipped(&mut figs.stop_all_round, "skipped (--stop-all-trials 0)");
    }
    if plan.beacon_windows == 0 {
        skipped(&mut figs.beacon_cpu, "skipped (--beacon-windows 0)");
        skipped(&mut figs.beacon_cpu_ns, "skipped (--beacon-windows 0)");
    }
    if plan.stop_all_trials == 0 && plan.beacon_windows == 0 {
        return;
    }
    let n = if plan.stop_all_trials > 0 {
        fleet::ROBOTS
    } else {
        1
    };
    say(t0, &format!("{n} virtual robot(s) for the app's figures"));
    let mut fl = match fleet::SimFleet::start(bins, n) {
        Ok(f) => f,
        Err(e) => {
            for fig in [
                &mut figs.stop_all,
                &mut figs.stop_all_round,
                &mut figs.beacon_cpu,
                &mut figs.beacon_cpu_ns,
            ] {
                if fig.note.is_empty() {
                    fig.note = format!("the robots did not start: {e}");
                }
            }
            return;
        }
    };
    if plan.stop_all_trials > 0 {
        say(
            t0,
            &format!("STOP ALL trials: {} over {n} robots", plan.stop_all_trials),
        );
        let mut done_us = Vec::new();
        let mut first_ns = Vec::new();
        match fl.start_app() {
            Err(e) => {
                figs.stop_all.note = e.clone();
                figs.stop_all_round.note = e;
            }
            Ok(_) => {
                for _ in 0..plan.stop_all_trials {
                    match fleet::stop_all_trial(&mut fl) {
                        Ok(s) => {
                            figs.stop_all
                                .samples
                                .push(s.last_all_off_ns.saturating_sub(s.t0_ns));
                            figs.stop_all_round
                                .samples
                                .push(s.answer.click_to_first_round_us.saturating_mul(1000));
                            first_ns.push(s.first_all_off_ns.saturating_sub(s.t0_ns));
                            done_us.push(s.answer.click_to_done_us);
                        }
                        Err(e) => failed(&mut figs.stop_all, &e),
                    }
                    // The app's last rounds are out (it answered after
                    // them); give the runtimes a moment to read them.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        if let (Some(f), Some(d)) = (stats::summarize(&first_ns), stats::summarize(&done_us)) {
            notes.push(format!(
                "STOP ALL over {n} robots (`nao-rs-app --loopback-only --no-broadcast`, one \
                 `--target 127.0.0.1:PORT` a robot, each robot a sim and `nao-rs run` without a \
                 guard): click -> first robot's first all-off frame {} / {} ms (median / max); the \
                 app's click -> last datagram (10 rounds 5 ms apart) {:.3} / {:.3} ms.",
                Unit::Ms.show(f.median),
                Unit::Ms.show(f.max),
                d.median as f64 / 1000.0,
                d.max as f64 / 1000.0,
            ));
        }
    }
    if plan.beacon_windows > 0 {
        say(
            t0,
            &format!(
                "beacon CPU: {} window(s) of {} s",
                plan.beacon_windows, plan.beacon_seconds
            ),
        );
        match fl.robots.first_mut() {
            None => {
                figs.beacon_cpu.note = "no robot".into();
                figs.beacon_cpu_ns.note = "no robot".into();
            }
            Some(r) => {
                match fleet::beacon_cpu(r, plan.beacon_seconds, plan.beacon_windows) {
                    Ok(b) => {
                        figs.beacon_cpu.samples = b.percent_milli.clone();
                        figs.beacon_cpu_ns.samples = b.precise_milli.clone();
                        let show = |v: &[u64]| {
                            v.iter()
                                .map(|x| Unit::Percent.show(*x))
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        notes.push(format!(
                        "Beacon CPU: `nao-rs-beacon` at its default 2 Hz, unicast to a loopback \
                         socket of the bench, a team key present (the network wake listening), \
                         against a running robot; utime + stime of /proc/PID/stat over {} s \
                         windows at {} ticks a second (resolution {} %): {} %; the same windows \
                         from the threads' schedstat (ns): {} %; beacons received a window: {:?}.",
                        b.seconds,
                        b.clk_tck,
                        Unit::Percent.show(fleet::percent_milli(1, b.clk_tck, plan.beacon_seconds * 1_000_000_000).unwrap_or(0)),
                        show(&b.percent_milli),
                        show(&b.precise_milli),
                        b.beacons,
                    ));
                    }
                    Err(e) => {
                        failed(&mut figs.beacon_cpu, &e);
                        figs.beacon_cpu_ns.note = figs.beacon_cpu.note.clone();
                    }
                }
            }
        }
    }
}
