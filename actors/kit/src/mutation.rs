//! Deliberate holes for the world's explorer (`nao-rs-world`,
//! `docs/world.md`): built only with the `mutations` feature, which no
//! robot build turns on (`scripts/robot-build.sh` builds four named
//! programs without it). Each [`Mutation`] re-introduces one hole that was
//! fixed before, or an obvious one, at the one place in the code it
//! concerns; the world selects at most one for its thread
//! ([`select`]), and the explorer must find it by breaking an invariant.
//!
//! A thread-local value, set by the world before a schedule runs: never an
//! environment variable read at tick rate, and two worlds on two threads
//! (the explorer's test) never see each other's.

use std::cell::Cell;

/// One deliberate hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The gate: a start that finds the page armed counts as awake
    /// (`nao_wire::protocol::gate`).
    StartAwake,
    /// The page: the wake generation is readable while tripped and does
    /// not mix the re-arm's nonce, so one read while tripped counts after
    /// the re-arm (`deathswitch::Snapshot::wake_generation`).
    GenerationWhileTripped,
    /// The page: the heartbeat written cycle first, confirmation last
    /// (`Cells::write_heartbeat`).
    BeatOrder,
    /// The guard's rule 3: a confirmation from before the trip counts
    /// (`deathswitch::rules::decide`).
    StaleConfirmation,
    /// The guard: a take-over signals the pid the page names, verified or
    /// not (`nao_rs_guard::core`).
    UnverifiedKill,
    /// The runtime: its UDP stop listener reads the queue only after the
    /// chest board's start-up (the world's runtime model).
    UdpAfterStartUp,
}

impl Mutation {
    /// Every mutation, in the order of `docs/world.md`'s table.
    pub const ALL: [Mutation; 6] = [
        Mutation::StartAwake,
        Mutation::GenerationWhileTripped,
        Mutation::BeatOrder,
        Mutation::StaleConfirmation,
        Mutation::UnverifiedKill,
        Mutation::UdpAfterStartUp,
    ];

    /// Its name (the command line's and the table's).
    pub fn name(self) -> &'static str {
        match self {
            Mutation::StartAwake => "start-awake",
            Mutation::GenerationWhileTripped => "generation-while-tripped",
            Mutation::BeatOrder => "beat-order",
            Mutation::StaleConfirmation => "stale-confirmation",
            Mutation::UnverifiedKill => "unverified-kill",
            Mutation::UdpAfterStartUp => "udp-after-start-up",
        }
    }

    /// The mutation named `name`.
    pub fn parse(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }
}

thread_local! {
    static SELECTED: Cell<Option<Mutation>> = const { Cell::new(None) };
}

/// Selects `m` (None: none) for this thread.
pub fn select(m: Option<Mutation>) {
    SELECTED.with(|s| s.set(m));
}

/// Whether `m` is selected on this thread.
pub fn on(m: Mutation) -> bool {
    SELECTED.with(|s| s.get() == Some(m))
}
