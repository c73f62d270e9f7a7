//! The cycle path allocates nothing once started: a counting global
//! allocator over 1,000 cycles (commands, silence, trips, a chest button
//! press, failed exchanges and a reconnect) against a link that allocates
//! nothing.

use super::support::FakeBoard;
use crate::protocol::cycle::{Cycle, CycleInput, Reconnect};
use crate::protocol::gate::Verdict;
use crate::protocol::startup::Startup;
use crate::{Command, JOINTS};

#[test]
fn cycle_path_allocates_nothing_over_1000_cycles() {
    let mut board = FakeBoard::new();
    let id = Startup::run(&mut *board).unwrap();
    let mut cycle = Box::new(Cycle::from_identity(&id, &[10]));
    let stand = Command {
        stiffness: [0.6; JOINTS],
        position: [0.2; JOINTS],
        ..Command::default()
    };
    let limp = Command {
        position: [f32::NAN; JOINTS],
        ..Command::default()
    };
    let mut reconnects = 0;
    let mut not_all_off = 0;
    let mut trips = 0;

    let in_cycles = nao_kit::alloc::allocations(|| {
        for k in 0..1000u64 {
            let command = match k % 400 {
                0..=199 => Some(&stand),
                200..=209 => Some(&limp),
                _ if k % 400 < 300 => None,
                _ => Some(&stand),
            };
            board.chest_button = k == 500;
            board.battery_ma = if (600..700).contains(&k) { 5000 } else { 1200 };
            if k == 800 {
                board.fail_reads = 11;
            }
            let input = CycleInput {
                command,
                verdict: if (300..320).contains(&k) {
                    &Verdict::LIMP
                } else {
                    &Verdict::AWAKE
                },
            };
            let t = k * 12_000_000 + if k >= 650 { 200_000_000 } else { 0 };
            let out = cycle.run(&mut *board, &input, t);
            reconnects += (out.reconnect == Reconnect::Done) as u32;
            not_all_off += (!out.all_off) as u32;
            trips += u32::from(out.trips.reason().is_some());
        }
    });
    // The counter counts: one allocation on purpose.
    let probe = nao_kit::alloc::allocations(|| drop(std::hint::black_box(Box::new(k_probe()))));

    assert_eq!(in_cycles, 0, "allocations in the cycle path");
    assert_eq!(probe, 1, "the counting allocator counts");
    // The run really went through the paths it claims to.
    assert_eq!(reconnects, 1);
    assert_eq!(trips, 1);
    assert!(not_all_off > 100);
}

fn k_probe() -> u64 {
    42
}
