//! The nao-rs death switch: a shared page of atomics at
//! `/run/nao-rs/deathswitch` (or `$NAO_RS_DEATHSWITCH`), latched trips with
//! the first reason kept, the runtime's heartbeat and the guard's rules.
//!
//! See `docs/page.md` (fixed points, layout, encodings, choices, the
//! guard's rules).
//!
//! The public face:
//! - what a cycle uses: [`Switch`] (read, trip, beat, register), [`Beat`],
//!   [`Snapshot`], [`Reason`], [`Motion`]; its two switches, [`Page`] (the
//!   page file) and [`MemorySwitch`] (the page's cells on the heap, for
//!   tests and replay);
//! - the page file: [`Page`] ([`Page::open`], [`Page::check`] and the
//!   other holders' calls), [`Integrity`], [`Damage`], [`TimeField`],
//!   [`PageError`], [`fix`], [`default_path`], and read-only [`inspect`]
//!   ([`Inspection`]);
//! - the layout's fixed points: [`LEN`], [`MAGIC`], [`VERSION`],
//!   [`TRIP_TIME_PENDING`] (the layout itself, `Cells`, is the crate's own:
//!   every switch reaches it through [`Switch`] and [`Snapshot`]);
//! - the clocks: [`monotonic_ns`], [`unix_ns`] (the actor kit's, re-exported;
//!   a switch's clock is [`Switch::clock`]);
//! - modules: [`flags`] (the runtime's safety flags), [`process`] (a
//!   process's identity, whether a pid is alive), [`rules`] (the guard's
//!   rules and the runtime's bounds they rely on), [`stop`] (the UDP stop
//!   datagram, and [`stop::udp`], the one listener of the runtime and the
//!   guard), [`socket_file`] (a socket file bound with its mode, no
//!   window).
//!
//! Under `cfg(loom)` only the layout, the trait and the pure parts are
//! built (the loom models run the `Cells` methods in memory).

#![warn(missing_docs, unreachable_pub)]

mod cells;
mod damage;
pub mod flags;
mod motion;
#[cfg(not(loom))]
pub mod process;
mod reason;
pub mod rules;
pub mod stop;
mod switch;
mod sync;

#[cfg(not(loom))]
pub mod exit_watch;
#[cfg(not(loom))]
mod memory;
#[cfg(not(loom))]
mod page;
#[cfg(not(loom))]
mod sigbus;
#[cfg(not(loom))]
pub mod socket_file;

pub use cells::{LEN, MAGIC, TRIP_TIME_PENDING, VERSION};
pub use damage::{Damage, TimeField};
#[cfg(not(loom))]
pub use memory::MemorySwitch;
pub use motion::Motion;
/// The clocks are the actor kit's (async-signal-safe), under the names
/// the page's holders use.
pub use nao_kit::clock::{monotonic_ns, unix_ns};
#[cfg(not(loom))]
pub use page::{default_path, fix, inspect, Inspection, Integrity, Page, PageError};
pub use reason::Reason;
pub use switch::{Beat, Switch};

/// The page's named codes are shown by their names (`name()`: the words
/// of `naoctl`, the beacon and the logs).
macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )*};
}

display_by_name!(Reason, Motion);

/// Every field of the page at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Not tripped, and the page has its magic.
    pub armed: bool,
    /// Why it is tripped (`page-lost` for a page without its magic or with an
    /// unknown code); `None` while armed.
    pub reason: Option<Reason>,
    /// The raw `reason` word (0: armed).
    pub reason_code: u32,
    /// When the trip happened, monotonic ns ([`TRIP_TIME_PENDING`] while
    /// armed or while the trip is being stored).
    pub tripped_at_ns: u64,
    /// When the trip happened, ns since the Unix epoch (0: unknown).
    pub tripped_at_unix_ns: u64,
    /// The runtime's process id.
    pub driver_pid: Option<u32>,
    /// The last heartbeat's cycle; `None`: no heartbeat since cleared.
    pub last_cycle: Option<u64>,
    /// The last heartbeat's time (monotonic ns), with `last_cycle`.
    pub last_beat_ns: Option<u64>,
    /// The last cycle whose frame was confirmed all-off.
    pub all_off_confirmed_cycle: Option<u64>,
    /// The runtime's [`flags::SafetyFlags`] bits.
    pub safety_flags: u32,
    /// The guard's process id.
    pub guard_pid: Option<u32>,
    /// The guard holds the chest board.
    pub guard_holding: bool,
    /// Both magic values and this layout version are present.
    pub magic_ok: bool,
    /// The stored layout version.
    pub version: u32,
    /// Armed -> tripped transitions since the page was made whole
    /// (`trip_count`, `naoctl status --json`): no trip is missed between two
    /// reads that compare it.
    pub trip_count: u64,
    /// When the switch was last re-armed, ns since the Unix epoch (0: never).
    pub armed_at_unix_ns: u64,
    /// The runtime's process start time (`driver_start`, clock ticks since
    /// boot; 0 unknown): with `driver_pid`, an identity a reused pid cannot
    /// match ([`process::ProcessIdentity`]).
    pub driver_start: u64,
    /// The guard's process start time, the same way.
    pub guard_start: u64,
    /// The runtime's motion state as its last frame left it.
    pub motion: Motion,
    /// The page's random value, new whenever the page is made whole (the
    /// network wake's authentication covers it).
    pub nonce: u64,
    /// The random value the last re-arm stored (`arm_nonce`; 0: not
    /// re-armed since the page was made whole).
    pub arm_nonce: u64,
    /// The random value the registered runtime stored when it started
    /// (`driver_nonce`; 0: none registered).
    pub driver_nonce: u64,
}

impl Snapshot {
    /// The wake generation: while the switch is armed with a runtime
    /// registered, a mix of the last re-arm's random `arm_nonce` and the
    /// runtime's random `driver_nonce` (never 0); `None` while tripped,
    /// lost or with no runtime registered. Every re-arm and every start of
    /// a runtime store a new nonce, so a generation cannot be read, guessed
    /// or recorded before the re-arm and the start it belongs to: a wake
    /// carries the generation it saw and counts only while the page reads
    /// exactly that one (`docs/page.md`, "The wake generation").
    pub fn wake_generation(&self) -> Option<u64> {
        // Mutation (the world's, `docs/world.md`): readable while tripped,
        // without the re-arm's nonce.
        #[cfg(all(feature = "mutations", not(loom)))]
        if nao_kit::mutation::on(nao_kit::mutation::Mutation::GenerationWhileTripped) {
            return (self.driver_pid.is_some() && self.driver_nonce != 0)
                .then(|| cells::wake_generation_of(0, self.driver_nonce));
        }
        let whole = self.armed && self.driver_pid.is_some();
        (whole && self.arm_nonce != 0 && self.driver_nonce != 0)
            .then(|| cells::wake_generation_of(self.arm_nonce, self.driver_nonce))
    }
}
