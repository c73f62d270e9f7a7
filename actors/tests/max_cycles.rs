//! `Config::max_cycles`: the runtime runs exactly that many cycles (0 and 1
//! included), the last two (or all, when fewer) with the switch tripped
//! `shutdown`, against the virtual robot (a real `nao-rs-sim` process).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{config, start, Rig};
use deathswitch::MemorySwitch;
use nao_runtime::{Config, CycleHook, Reason};
use nao_wire::step::Observed;

/// Counts the cycles and records which of them were built tripped.
#[derive(Clone, Default)]
struct Cycles {
    count: Arc<AtomicU64>,
    tripped: Arc<Mutex<Vec<bool>>>,
}

impl<L> CycleHook<L> for Cycles {
    fn before_cycle(&mut self, _link: &mut L, i: &Observed<'_>) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.tripped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(i.verdict.tripped);
    }
}

#[test]
fn runs_exactly_max_cycles_the_last_two_tripped() {
    let rig = Rig::start();
    for max in [0u64, 1, 2, 3, 7] {
        let board = Arc::new(MemorySwitch::armed());
        let hook = Cycles::default();
        let config = Config {
            max_cycles: Some(max),
            ..config()
        };
        let (rt, _io) = start(&rig, &board, config, hook.clone());
        let (_, summary) = rt.wait();
        assert_eq!(summary.cycles, max, "max_cycles {max}: cycles run");
        assert_eq!(
            hook.count.load(Ordering::SeqCst),
            max,
            "max_cycles {max}: cycles hooked"
        );
        assert!(!summary.panicked);
        assert_eq!(
            board.snapshot().reason,
            Some(Reason::Shutdown),
            "max_cycles {max}"
        );
        let tripped = hook.tripped.lock().unwrap().clone();
        let stiff = max.saturating_sub(2) as usize;
        assert!(
            tripped[..stiff].iter().all(|&t| !t) && tripped[stiff..].iter().all(|&t| t),
            "max_cycles {max}: only the last two cycles tripped: {tripped:?}"
        );
    }
}
