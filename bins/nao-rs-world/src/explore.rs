//! The explorer: seeds pick schedules, the world runs each, and a failing
//! one is shrunk to the fewest actions that still break the same
//! invariant, then told as a story (one line per event, virtual time
//! first).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::invariants::Inv;
use crate::schedule::Schedule;
use crate::world::{run_schedule, Mutation, Outcome};

/// A failing schedule, shrunk.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed that picked it (`nao-rs-world --seed S` replays it).
    pub seed: u64,
    /// The invariant it breaks.
    pub inv: Inv,
    /// The shrunk schedule.
    pub shrunk: Schedule,
    /// The shrunk schedule's story.
    pub story: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seed {} breaks {} (replay: nao-rs-world --seed {}); shrunk to {} action(s):",
            self.seed,
            self.inv,
            self.seed,
            self.shrunk.actions.len()
        )?;
        for l in &self.story {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

/// What a budget of exploration gave.
#[derive(Debug, Clone)]
pub struct Report {
    /// Schedules run.
    pub schedules: u64,
    /// Virtual ns simulated, all schedules.
    pub simulated_ns: u64,
    /// Events run, all schedules.
    pub events: u64,
    /// Stiff frames runtimes sent, all schedules.
    pub stiff_frames: u64,
    /// All-off frames the guard sent, all schedules.
    pub guard_frames: u64,
    /// Wall time.
    pub wall: Duration,
    /// The first failure found, shrunk.
    pub failure: Option<Failure>,
}

/// When to stop, and which schedules.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The longest guard stall a schedule holds
    /// ([`crate::schedule::GUARD_STALL_MAX_NS`] by default).
    pub guard_stall_max_ns: u64,
    /// At most this many schedules.
    pub schedules: u64,
    /// At most this many simulated ns.
    pub simulated_ns: u64,
    /// At most this long (wall).
    pub wall: Duration,
}

/// Shrinks `schedule` (which breaks `inv`): drops one action at a time
/// while the rest still breaks `inv`, to a fixpoint; then ends the run
/// just after the break.
pub fn shrink(schedule: &Schedule, inv: Inv, mutation: Option<Mutation>) -> Schedule {
    let breaks = |s: &Schedule| {
        run_schedule(s.clone(), mutation, false)
            .violation
            .filter(|v| v.inv == inv)
    };
    let mut best = schedule.clone();
    let mut changed = true;
    while changed {
        changed = false;
        let mut i = 0;
        while i < best.actions.len() {
            let mut t = best.clone();
            t.actions.remove(i);
            if breaks(&t).is_some() {
                best = t;
                changed = true;
            } else {
                i += 1;
            }
        }
    }
    if let Some(v) = breaks(&best) {
        let mut t = best.clone();
        t.run_ns = v.at_ns + 1;
        if breaks(&t).is_some() {
            best = t;
        }
    }
    best
}

/// Runs seeds `first..` (each seed one schedule) on this thread until the
/// budget is spent or a schedule breaks an invariant (then shrunk).
pub fn explore(first: u64, budget: Budget, mutation: Option<Mutation>) -> Report {
    explore_until(first, budget, mutation, &AtomicBool::new(false))
}

/// [`explore`], stopping also when `stop` is set (another thread found a
/// failure); sets it on a failure.
fn explore_until(
    first: u64,
    budget: Budget,
    mutation: Option<Mutation>,
    stop: &AtomicBool,
) -> Report {
    let pick = |seed| Schedule::from_seed_with(seed, budget.guard_stall_max_ns);
    let start = Instant::now();
    let mut rep = Report {
        schedules: 0,
        simulated_ns: 0,
        events: 0,
        stiff_frames: 0,
        guard_frames: 0,
        wall: Duration::ZERO,
        failure: None,
    };
    let mut seed = first;
    while rep.schedules < budget.schedules
        && rep.simulated_ns < budget.simulated_ns
        && start.elapsed() < budget.wall
        // Relaxed: a flag, read again next schedule.
        && !stop.load(Ordering::Relaxed)
    {
        let out: Outcome = run_schedule(pick(seed), mutation, false);
        rep.schedules += 1;
        rep.simulated_ns += out.simulated_ns;
        rep.events += out.events;
        rep.stiff_frames += out.stiff_frames;
        rep.guard_frames += out.guard_frames;
        if let Some(v) = out.violation {
            // Relaxed: as above.
            stop.store(true, Ordering::Relaxed);
            let shrunk = shrink(&pick(seed), v.inv, mutation);
            let story = story(&shrunk, mutation);
            rep.failure = Some(Failure {
                seed,
                inv: v.inv,
                shrunk,
                story,
            });
            break;
        }
        seed = seed.wrapping_add(1);
    }
    rep.wall = start.elapsed();
    rep
}

/// The story of `schedule`: its start, then one line per notable event.
pub fn story(schedule: &Schedule, mutation: Option<Mutation>) -> Vec<String> {
    let mut lines = vec![format!(
        "    0.000 s  the guard runs; the page is armed; {} for {:.3} s{}",
        if schedule.bringup.is_some() {
            "the runtime runs bring-up"
        } else {
            "the runtime runs a program that asks for stiffness 0.5"
        },
        schedule.run_ns as f64 / 1e9,
        mutation.map_or(String::new(), |m| format!(" (mutation {m:?})"))
    )];
    lines.extend(run_schedule(schedule.clone(), mutation, true).story);
    lines
}

/// [`explore`] on `threads` threads, seeds interleaved from `first`
/// (thread k runs `first + k*2^40 ..`); the budget is split between them.
pub fn explore_parallel(
    first: u64,
    budget: Budget,
    mutation: Option<Mutation>,
    threads: u64,
) -> Report {
    let threads = threads.max(1);
    let each = Budget {
        guard_stall_max_ns: budget.guard_stall_max_ns,
        schedules: budget.schedules.div_ceil(threads),
        simulated_ns: budget.simulated_ns.div_ceil(threads),
        wall: budget.wall,
    };
    let start = Instant::now();
    let stop = AtomicBool::new(false);
    let reports: Vec<Report> = std::thread::scope(|s| {
        let stop = &stop;
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || explore_until(first.wrapping_add(k << 40), each, mutation, stop))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| panic!("an explorer thread panicked"))
            })
            .collect()
    });
    let mut rep = Report {
        schedules: 0,
        simulated_ns: 0,
        events: 0,
        stiff_frames: 0,
        guard_frames: 0,
        wall: start.elapsed(),
        failure: None,
    };
    for r in reports {
        rep.schedules += r.schedules;
        rep.simulated_ns += r.simulated_ns;
        rep.events += r.events;
        rep.stiff_frames += r.stiff_frames;
        rep.guard_frames += r.guard_frames;
        if rep.failure.is_none() {
            rep.failure = r.failure;
        }
    }
    rep
}
