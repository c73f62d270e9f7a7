//! The guard's real-time numbers and its clock. The poll thread and its
//! ticker come from the actor kit (`nao_actors::kit`): the guard is the same
//! kit in another process.

/// The guard's SCHED_FIFO priority (spec/death-switch.md).
pub const GUARD_PRIORITY: u8 = 40;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    nao_actors::kit::monotonic_ns()
}
