//! The cycle loop allocates nothing: a counting global allocator counts the
//! allocations made on the cycle thread over 1,000 cycles of the runtime
//! against the virtual robot (`SimLink`, whose socket I/O reuses its
//! buffers), through every state of the wake latch: awake, a trip, the
//! re-arm (limp, a silent controller), a wake, awake again.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{config, start, Rig};
use deathswitch::MemorySwitch;
use nao_runtime::{Config, CycleHook, Reason, Switch};
use nao_wire::step::Observed;

#[global_allocator]
static GLOBAL: nao_kit::alloc::CountingAlloc = nao_kit::alloc::CountingAlloc;

const WARM_UP: u64 = 20;
const MEASURED: u64 = 1_000;

/// Counts the cycle thread's allocations from cycle WARM_UP to
/// WARM_UP + MEASURED; publishes the count + 1 in `done`.
struct Meter {
    done: Arc<AtomicU64>,
    from: u64,
}

impl<L> CycleHook<L> for Meter {
    fn before_cycle(&mut self, _link: &mut L, inputs: &Observed<'_>) {
        if inputs.k == WARM_UP {
            self.from = nao_kit::alloc::thread_allocations();
        }
        if inputs.k == WARM_UP + MEASURED {
            let n = nao_kit::alloc::thread_allocations() - self.from;
            self.done.store(n + 1, Ordering::SeqCst);
        }
    }
}

#[test]
fn cycle_loop_allocates_nothing_over_1000_cycles() {
    let rig = Rig::start();
    let done = Arc::new(AtomicU64::new(0));
    let config = Config {
        period_ns: 1_000_000,
        // The chest button's hold rule runs on the cycle thread too: a
        // press shorter than the hold time is counted and let go.
        chest_button: nao_wire::protocol::chest_button::ChestButtonMode::Hold { ms: 3000 },
        ..config()
    };
    let board = Arc::new(MemorySwitch::armed());
    let (rt, mut io) = start(
        &rig,
        &board,
        config,
        Meter {
            done: done.clone(),
            from: 0,
        },
    );
    // A controller commanding every cycle, so the command path is measured.
    let c = nao_wire::Command {
        stiffness: [0.3; 25],
        ..Default::default()
    };
    let handle = rt.handle();
    // Every start is limp: woken once before the measured cycles.
    handle.wake().unwrap();
    let t0 = std::time::Instant::now();
    let mut limp_seen = false;
    let mut woken = false;
    let mut step = 0;
    let mut pressed = false;
    let mut press_seen = false;
    while done.load(Ordering::SeqCst) == 0 {
        let k = io.handle().latest_sensors().cycle;
        // Silent for a while once re-armed: the gate's verdict on the
        // held command is applied on the cycle thread too.
        if !(WARM_UP + 400..WARM_UP + 500).contains(&k) {
            let _ = io.push_command(c);
        }
        let Some(f) = io.next_sensors(100_000_000) else {
            continue;
        };
        press_seen |= f.chest_button;
        if f.cycle >= WARM_UP + 50 && !pressed {
            testkit::ok(rig.sim_ctl(&["button", "40"]), "nao-rs-sim ctl button 40");
            pressed = true;
        }
        // Each step once, at the first frame at or past its cycle (frames
        // may be skipped).
        if f.cycle >= WARM_UP + 200 && step == 0 {
            assert!(
                board.snapshot().armed,
                "a press shorter than the hold time trips nothing"
            );
            board.trip(Reason::Api);
            step = 1;
        } else if f.cycle >= WARM_UP + 300 && step == 1 {
            board.rearm();
            step = 2;
        } else if f.cycle >= WARM_UP + 600 && step == 2 {
            handle.wake().unwrap();
            step = 3;
        }
        if (WARM_UP + 320..WARM_UP + 600).contains(&f.cycle) {
            limp_seen |= f.switch.limp && !f.switch.tripped && f.all_off;
        }
        // The latch let commands pass again (the stiffness itself may still
        // be held down by HAL's ramps on a loaded machine).
        woken |= step == 3 && !f.switch.limp;
        assert!(t0.elapsed().as_secs() < 30, "1,000 cycles within 30 s");
    }
    assert!(press_seen, "the short press reached the program");
    assert!(limp_seen, "re-armed and limp, awaiting the wake");
    assert!(woken, "commands pass again after the wake");
    let (_, summary) = rt.stop();
    assert!(summary.cycles >= WARM_UP + MEASURED);
    assert_eq!(
        done.load(Ordering::SeqCst) - 1,
        0,
        "allocations on the cycle thread in 1,000 cycles"
    );
}
