//! The guard's real-time numbers. The poll thread, its ticker and the clock
//! come from the actor kit (`nao_kit`): the guard is the same kit in
//! another process.

/// The guard's SCHED_FIFO priority, above the runtime's cycle (30 by default).
pub const GUARD_PRIORITY: u8 = 40;
