//! The actor kit: the building blocks every real-time part of nao-rs uses
//! (the runtime and the guard alike).
//!
//! Its public face:
//! - [`actor`]: [`actor::spawn`] and [`actor::spawn_guarded`] start an
//!   [`actor::Actor`], a named thread with a SCHED_FIFO priority and a CPU
//!   ([`actor::ActorSpec`]), set from inside the thread and read back
//!   ([`actor::Placement`]).
//! - [`ticker`]: the absolute-deadline rule ([`ticker::Schedule`], pure) and
//!   the [`ticker::Ticker`] that sleeps to it on its clock
//!   (`clock_nanosleep(TIMER_ABSTIME)` on the real one; [`ticker::Tick`],
//!   [`ticker::TickStats`]).
//! - [`clock`]: the one clock of the house, the [`clock::Clock`] trait:
//!   [`clock::MonotonicClock`] (the real one, async-signal-safe),
//!   [`clock::VirtualClock`] (moved only when told), and
//!   [`clock::unix_ns`] for display.
//! - [`log`]: events through a ring per actor to a logging actor, repeats
//!   counted ([`log::Logbook`], [`log::EventSink`], [`log::Level`]).
//! - [`notify`]: wake a waiting thread without a lock ([`notify::Notify`],
//!   a futex).
//! - [`facts`]: the start-up facts each robot program logs once
//!   ([`facts::StartupFacts`]: kernel, pidfd, static or not, SCHED_FIFO,
//!   locked memory).
//! - [`ring`]: a preallocated `rtrb` SPSC ring.
//! - `mutation` (feature `mutations`, never in a robot build): the
//!   world's deliberate holes (`docs/world.md`).
//! - [`alloc`]: a counting allocator ([`alloc::CountingAlloc`]), so a
//!   running process shows that its real-time loops allocate nothing.
//! - [`verify_mark`]: the line `cargo nao-rs deploy` writes to
//!   `/etc/nao-rs/verified` and `nao-rs doctor` reads
//!   ([`verify_mark::VerifyMark`], [`verify_mark::parse`]).
//! - [`elf`]: whether a program is static (no `PT_INTERP`, no
//!   `DT_NEEDED`), read from its bytes ([`elf::read`], [`elf::Linking`]).
//!
//! Each item has one path, its module's (`nao_kit::ticker::Ticker`).

#![warn(missing_docs, unreachable_pub)]

pub mod actor;
pub mod alloc;
pub mod clock;
pub mod elf;
pub mod facts;
pub mod hex;
pub mod log;
#[cfg(feature = "mutations")]
pub mod mutation;
pub mod notify;
pub mod ticker;
pub mod verify_mark;

/// A preallocated single-producer single-consumer ring of `capacity` slots
/// (`rtrb`): `push` and `pop` never block and never allocate.
pub fn ring<T>(capacity: usize) -> (rtrb::Producer<T>, rtrb::Consumer<T>) {
    rtrb::RingBuffer::new(capacity.max(1))
}
