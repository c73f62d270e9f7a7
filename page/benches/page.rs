//! The page's costs: `cargo bench -p deathswitch --bench page`. Each row
//! times 2,000 batches of 50 calls and prints the per-call median and the
//! worst batch's per-call mean, in ns. The calls are the holders' own: a
//! cycle's `Switch::read` and `Switch::beat`, the guard's `write_heartbeat`,
//! `snapshot` and `check`, a trip and a re-arm.

use deathswitch::{monotonic_ns, Beat, Motion, Page, Reason, Switch};

const BATCHES: usize = 2_000;
const PER_BATCH: u64 = 50;

fn measure(name: &str, mut f: impl FnMut(u64)) {
    let mut per_call = Vec::with_capacity(BATCHES);
    let mut i = 0u64;
    for _ in 0..BATCHES {
        let t0 = monotonic_ns();
        for _ in 0..PER_BATCH {
            f(i);
            i += 1;
        }
        per_call.push((monotonic_ns() - t0) / PER_BATCH);
    }
    per_call.sort_unstable();
    println!(
        "{name:<16} {:>10} {:>10}",
        per_call[BATCHES / 2],
        per_call[BATCHES - 1]
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let page = Page::open(&dir.path().join("deathswitch")).expect("the page");
    println!("{:<16} {:>10} {:>10}", "call", "median ns", "max ns");
    measure("trip", |_| {
        page.trip(Reason::Naoctl);
    });
    measure("trip+rearm", |_| {
        page.rearm();
        page.trip(Reason::Naoctl);
    });
    measure("write_heartbeat", |i| page.write_heartbeat(i, i, true));
    measure("beat", |i| {
        page.beat(&Beat {
            cycle: i,
            t_ns: i,
            all_off: true,
            motion: Motion::LimpTripped,
            safety_flags: 0,
        })
    });
    measure("snapshot", |_| {
        std::hint::black_box(page.snapshot());
    });
    measure("check", |_| {
        std::hint::black_box(page.check());
    });
    measure("read", |_| {
        std::hint::black_box(page.read());
    });
    measure("now_ns", |_| {
        std::hint::black_box(monotonic_ns());
    });
}
