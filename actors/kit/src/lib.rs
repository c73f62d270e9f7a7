//! The actor kit: the building blocks every real-time part of nao-rs uses.
//!
//! - [`actor`]: a named thread with a SCHED_FIFO priority and a CPU, set from
//!   inside the thread and read back.
//! - [`ticker`]: absolute deadlines with `clock_nanosleep(TIMER_ABSTIME)`,
//!   lateness and overrun counters.
//! - [`log`]: events through a ring to a logging actor, repeats counted.
//! - [`notify`]: wake a waiting thread without a lock (a futex).
//! - rings: `rtrb` SPSC rings, preallocated ([`ring`]).
//! - [`alloc`]: a counting allocator, so a running process shows that its
//!   real-time loops allocate nothing.

pub mod actor;
pub mod alloc;
pub mod log;
pub mod notify;
pub mod ticker;

pub use actor::{spawn, Actor, ActorSpec, Placement};
pub use ticker::{monotonic_ns, Schedule, Tick, TickStats, Ticker};

/// A preallocated single-producer single-consumer ring of `capacity` slots
/// (`rtrb`): `push` and `pop` never block and never allocate.
pub fn ring<T>(capacity: usize) -> (rtrb::Producer<T>, rtrb::Consumer<T>) {
    rtrb::RingBuffer::new(capacity.max(1))
}
