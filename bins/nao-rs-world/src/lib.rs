//! nao-rs-world: the whole robot in virtual time, on the laptop only
//! (`docs/world.md`). One process, one thread, a virtual clock and an
//! event queue: the runtime's step with a controller, the guard's core,
//! the page, the virtual robot, the UDP stop and wake datagrams, systemd
//! and the kernel's process life cycle, and a person. A seed picks a
//! schedule of faults and acts ([`schedule`]); the world runs it
//! ([`world`]) and checks the invariants after every event
//! ([`invariants`]); the explorer runs many seeds and shrinks a failure
//! to a story ([`explore`]).

pub mod explore;
pub mod invariants;
pub mod schedule;
pub mod world;
