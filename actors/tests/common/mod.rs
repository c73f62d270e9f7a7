//! Shared by the runtime's integration tests: the quiet test
//! configuration, the virtual robot (a `testkit::Rig`) with a runtime on an
//! in-process switch, and a LoLA client's frame and answer (`lola_client.rs`,
//! which the LoLA server's own unit tests share).
#![allow(dead_code)]

use std::sync::Arc;

use deathswitch::MemorySwitch;
use nao_runtime::{Config, CycleHook, ProgramIo, Runtime};
use nao_wire::link::sim::SimLink;
pub use testkit::Rig;

mod lola_client;
#[allow(unused_imports)] // Not every test binary speaks LoLA.
pub use lola_client::{decode, Answer, Frame, FRAME_LEN, SENSOR_KEYS};

/// A logger that drops everything.
pub fn quiet() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// The tests' configuration: normal priority, no UDP stop, quiet.
pub fn config() -> Config {
    Config {
        cycle_priority: None,
        udp_port: None,
        logger: Some(quiet()),
        ..Config::default()
    }
}

/// The runtime started with `cfg` and `hook` on the virtual robot of `rig`
/// and the in-process switch `board`; panics when it does not start.
pub fn start<H: CycleHook<SimLink> + Send + 'static>(
    rig: &Rig,
    board: &Arc<MemorySwitch>,
    cfg: Config,
    hook: H,
) -> (Runtime<SimLink>, ProgramIo) {
    Runtime::start_with_hook(SimLink::new(rig.sim_socket()), board.clone(), cfg, hook)
        .expect("start the runtime on the virtual robot")
}
