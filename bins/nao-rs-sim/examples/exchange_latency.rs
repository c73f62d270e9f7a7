//! Measures the round trip of one cycle (bulk_in of the previous answer,
//! then bulk_out of the frame) through `SimLink` against a running
//! simulator binary, with the runtime's start-up and step (an armed switch
//! in memory); then how soon the claim is free after its holder is killed
//! with SIGKILL.
//!
//! `cargo run -p nao-rs-sim --example exchange_latency -- target/debug/nao-rs-sim [cycles]`

use std::time::Instant;

use deathswitch::{MemorySwitch, Switch as _};
use nao_rs_sim::Spawned;
use nao_wire::link::Link;
use nao_wire::protocol::gate::WakeLatch;
use nao_wire::protocol::startup::Startup;
use nao_wire::step::{Step, StepInput};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(exe) = args.next() else {
        eprintln!("usage: exchange_latency PATH-TO-nao-rs-sim [cycles]");
        std::process::exit(2);
    };
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let sim = match Spawned::start(&exe, &[]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start {exe}: {e}");
            std::process::exit(1);
        }
    };
    let mut link = sim.link();
    let id = match Startup::run(&mut link) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("start-up failed: {e}");
            std::process::exit(1);
        }
    };
    let switch = MemorySwitch::armed();
    let mut step = Step::new(&id, &[10], &switch.read(), WakeLatch::Off);
    let t0 = Instant::now();
    let mut us: Vec<u64> = Vec::with_capacity(n);
    for k in 0..n {
        let input = StepInput {
            now_ns: 12_000_000 * k as u64,
            ..StepInput::default()
        };
        let start = Instant::now();
        let out = step.run(&switch, &mut link, &input, |_, _| {}).cycle;
        us.push(start.elapsed().as_micros() as u64);
        if out.failure.is_some() {
            eprintln!("cycle {k}: {:?}", out.failure);
        }
    }
    let total = t0.elapsed();
    us.sort_unstable();
    let p = |q: f64| us[((us.len() - 1) as f64 * q) as usize];
    println!(
        "{n} cycles in {:?}: median {} us, p99 {} us, max {} us",
        total,
        p(0.5),
        p(0.99),
        us[us.len() - 1]
    );
    // Release on SIGKILL: from the kill to the next successful claim.
    drop(link);
    let mut release_us = Vec::new();
    for _ in 0..20 {
        let Ok(mut holder) = nao_rs_sim::Holder::start(&exe, &sim) else {
            eprintln!("holder did not start");
            std::process::exit(1);
        };
        let mut l = sim.link();
        if l.open(0xffff, 0x0006).is_err() {
            eprintln!("open failed");
            std::process::exit(1);
        }
        let t = Instant::now();
        holder.kill();
        while l.claim_interface(0).is_err() {}
        release_us.push(t.elapsed().as_micros() as u64);
    }
    release_us.sort_unstable();
    println!(
        "claim free after the holder's SIGKILL (kill + reap + claim): median {} us, max {} us",
        release_us[release_us.len() / 2],
        release_us[release_us.len() - 1]
    );
}
