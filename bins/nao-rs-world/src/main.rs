//! `nao-rs-world`: the seeded explorer of fault schedules (`docs/world.md`).
//!
//! - `nao-rs-world --seed S`: replays schedule S and tells its story;
//! - `nao-rs-world --schedules N` / `--seconds T` / `--forever`: explores
//!   from `--from` (default 0), on `--threads` threads (default 2);
//! - `--mutation NAME`: with one deliberate hole (the `mutations`
//!   feature);
//! - `--bench`: the table of schedules per second and simulated seconds
//!   per wall second.
//!
//! Exit status 1 when a schedule breaks an invariant (its seed and its
//! shrunk story are printed), 2 on a bad argument.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use nao_rs_world::explore::{explore_parallel, story, Budget};
use nao_rs_world::schedule::Schedule;
use nao_rs_world::world::{run_schedule, Mutation};

#[derive(Parser, Debug)]
#[command(
    name = "nao-rs-world",
    about = "The whole robot in virtual time: a seeded explorer of fault schedules"
)]
struct Args {
    /// Replay this one schedule and print its story.
    #[arg(long)]
    seed: Option<u64>,
    /// Explore this many schedules.
    #[arg(long)]
    schedules: Option<u64>,
    /// Explore until this many seconds are simulated.
    #[arg(long)]
    seconds: Option<u64>,
    /// Explore until stopped (or a failure).
    #[arg(long)]
    forever: bool,
    /// The first seed explored.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Explorer threads.
    #[arg(long, default_value_t = 2)]
    threads: u64,
    /// One deliberate hole (`mutations` feature): start-awake,
    /// generation-while-tripped, beat-order, stale-confirmation,
    /// unverified-kill, udp-after-start-up.
    #[arg(long)]
    mutation: Option<String>,
    /// Print the speed table (5 s of exploring).
    #[arg(long)]
    bench: bool,
    /// The longest guard stall a schedule holds, ms (default 1500: past
    /// the runtime's 1 s restart delay).
    #[arg(long, default_value_t = nao_rs_world::schedule::GUARD_STALL_MAX_NS / nao_rs_world::schedule::MS)]
    guard_stall_max_ms: u64,
}

#[cfg(feature = "mutations")]
fn mutation(name: &str) -> Result<Mutation, String> {
    Mutation::parse(name).ok_or_else(|| {
        let names: Vec<_> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!(
            "--mutation {name}: no such mutation; one of {}",
            names.join(", ")
        )
    })
}

#[cfg(not(feature = "mutations"))]
fn mutation(name: &str) -> Result<Mutation, String> {
    Err(format!(
        "--mutation {name}: built without the `mutations` feature; build with `--features mutations`"
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let m = match args.mutation.as_deref().map(mutation).transpose() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("nao-rs-world: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = args.seed {
        let s = Schedule::from_seed_with(seed, args.guard_stall_max_ms.saturating_mul(1_000_000));
        for l in story(&s, m) {
            println!("{l}");
        }
        let out = run_schedule(s, m, false);
        println!("log hash {:016x}, {} events", out.log_hash, out.events);
        return match out.violation {
            Some(v) => {
                println!("seed {seed} breaks {}: {}", v.inv, v.what);
                ExitCode::from(1)
            }
            None => {
                println!("seed {seed}: every invariant held");
                ExitCode::SUCCESS
            }
        };
    }
    let forever = Duration::from_secs(u64::MAX / 4);
    let budget = if args.bench {
        Budget {
            guard_stall_max_ns: args.guard_stall_max_ms.saturating_mul(1_000_000),
            schedules: u64::MAX,
            simulated_ns: u64::MAX,
            wall: Duration::from_secs(5),
        }
    } else if let Some(n) = args.schedules {
        Budget {
            guard_stall_max_ns: args.guard_stall_max_ms.saturating_mul(1_000_000),
            schedules: n,
            simulated_ns: u64::MAX,
            wall: forever,
        }
    } else if let Some(t) = args.seconds {
        Budget {
            guard_stall_max_ns: args.guard_stall_max_ms.saturating_mul(1_000_000),
            schedules: u64::MAX,
            simulated_ns: t.saturating_mul(1_000_000_000),
            wall: forever,
        }
    } else if args.forever {
        Budget {
            guard_stall_max_ns: args.guard_stall_max_ms.saturating_mul(1_000_000),
            schedules: u64::MAX,
            simulated_ns: u64::MAX,
            wall: forever,
        }
    } else {
        eprintln!("nao-rs-world: say --seed S, --schedules N, --seconds T, --forever or --bench");
        return ExitCode::from(2);
    };
    let rep = explore_parallel(args.from, budget, m, args.threads);
    let wall = rep.wall.as_secs_f64().max(1e-9);
    if args.bench {
        println!("| nao-rs-world ({} threads) | value |", args.threads);
        println!("|---|---|");
        println!(
            "| schedules per second | {:.0} |",
            rep.schedules as f64 / wall
        );
        println!(
            "| simulated seconds per wall second | {:.0} |",
            rep.simulated_ns as f64 / 1e9 / wall
        );
        println!("| events per second | {:.0} |", rep.events as f64 / wall);
    }
    println!(
        "{} schedules, {:.0} simulated s, {} events, {} stiff frames, {} guard frames in {:.1} s",
        rep.schedules,
        rep.simulated_ns as f64 / 1e9,
        rep.events,
        rep.stiff_frames,
        rep.guard_frames,
        wall
    );
    match rep.failure {
        Some(f) => {
            print!("{f}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}
