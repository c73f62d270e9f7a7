//! The cycle path allocates nothing once started: a counting global
//! allocator over 1,000 cycles (commands, silence, trips, a chest button
//! press, failed exchanges and a reconnect) against a link that allocates
//! nothing.

mod protocol_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use nao_wire::protocol::cycle::{Cycle, CycleInput, Reconnect};
use nao_wire::protocol::startup::Startup;
use nao_wire::{Command, JOINTS};
use protocol_support::FakeBoard;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    // `try_with`: the thread-local may be gone while a thread exits.
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call unchanged to the system allocator; counting
// has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

    COUNTING.with(|c| c.set(true));
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
            tripped: (300..320).contains(&k),
            page_lost: false,
            trip_count: 0,
        };
        let t = k * 12_000_000 + if k >= 650 { 200_000_000 } else { 0 };
        let out = cycle.run(&mut *board, &input, t);
        reconnects += (out.reconnect == Reconnect::Done) as u32;
        not_all_off += (!out.all_off) as u32;
        trips += out.trips.any() as u32;
    }
    let in_cycles = ALLOCATIONS.load(Ordering::Relaxed);
    // The counter counts: one allocation on purpose.
    let probe = std::hint::black_box(Box::new(k_probe()));
    COUNTING.with(|c| c.set(false));
    drop(probe);

    assert_eq!(in_cycles, 0, "allocations in the cycle path");
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        1,
        "the counting allocator counts"
    );
    // The run really went through the paths it claims to.
    assert_eq!(reconnects, 1);
    assert_eq!(trips, 1);
    assert!(not_all_off > 100);
}

fn k_probe() -> u64 {
    42
}
