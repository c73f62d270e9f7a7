//! The protocol core's tests that drive it whole (a fake chest board, the
//! cycle, the start-up, the step, replay, the property and fuzz tests):
//! unit tests of the crate, so the internals they reach stay the crate's.

mod fuzz_protocol;
mod fuzz_recording;
mod protocol_alloc;
mod protocol_cycle;
mod protocol_props;
mod replay_sessions;
mod step;
mod support;

/// The unit tests' allocator: counts each thread's allocations
/// (`nao_kit::alloc::allocations`), for the zero-allocation tests here and
/// in `protocol::bringup`.
#[global_allocator]
static GLOBAL: nao_kit::alloc::CountingAlloc = nao_kit::alloc::CountingAlloc;
