//! The page layout: a `#[repr(C)]` struct of atomics only, and every rule
//! that reads or writes it (trip, re-arm, heartbeat, snapshot), as methods
//! with the time passed in. [`crate::Page`] maps this struct from the page
//! file; the loom models run the same methods on an in-memory value.
//!
//! Encodings (docs/page.md has the table):
//! - `reason`: 0 armed, else [`Reason`] code.
//! - `beat_cycle`, `all_off_cycle`: cycle + 1; 0 means none since cleared.
//! - `tripped_at_ns`: [`TRIP_TIME_PENDING`] while armed and in the instant
//!   between a trip's compare-and-swap and its time store.

use crate::damage::{Damage, TimeField, FUTURE_TOLERANCE_NS};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::{Beat, Motion, Reason, Snapshot};

/// The magic value at offset 0 and offset 120 (ASCII "NAORS-DS", little
/// endian). A page without both counts as tripped.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NAORS-DS");
/// The layout version this crate reads and writes (4: the re-arm's and
/// the runtime's random values, `arm_nonce` and `driver_nonce`, before the
/// tail magic, which moved from 120 to 136; version 3 took the identities'
/// start times, the runtime's motion state and the page's nonce).
pub const VERSION: u32 = 4;
/// The size of the layout and of the page file, in bytes.
pub const LEN: usize = 144;
/// `tripped_at_ns` while armed, and while a trip is being stored.
pub const TRIP_TIME_PENDING: u64 = u64::MAX;

/// The page: atomics only, so no reader sees half a write and a crashed
/// writer leaves no lock behind.
#[repr(C)]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct Cells {
    magic_head: AtomicU64,
    version: AtomicU32,
    reason: AtomicU32,
    tripped_at_ns: AtomicU64,
    tripped_at_unix_ns: AtomicU64,
    driver_pid: AtomicU32,
    safety_flags: AtomicU32,
    beat_cycle: AtomicU64,
    beat_ns: AtomicU64,
    all_off_cycle: AtomicU64,
    guard_pid: AtomicU32,
    guard_holding: AtomicU32,
    trip_count: AtomicU64,
    armed_at_unix_ns: AtomicU64,
    driver_start: AtomicU64,
    guard_start: AtomicU64,
    motion: AtomicU32,
    reserved: AtomicU32,
    nonce: AtomicU64,
    arm_nonce: AtomicU64,
    driver_nonce: AtomicU64,
    magic_tail: AtomicU64,
}

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<Cells>() == LEN);
    assert!(std::mem::align_of::<Cells>() == 8);
    assert!(std::mem::offset_of!(Cells, magic_head) == 0);
    assert!(std::mem::offset_of!(Cells, version) == 8);
    assert!(std::mem::offset_of!(Cells, reason) == 12);
    assert!(std::mem::offset_of!(Cells, tripped_at_ns) == 16);
    assert!(std::mem::offset_of!(Cells, tripped_at_unix_ns) == 24);
    assert!(std::mem::offset_of!(Cells, driver_pid) == 32);
    assert!(std::mem::offset_of!(Cells, safety_flags) == 36);
    assert!(std::mem::offset_of!(Cells, beat_cycle) == 40);
    assert!(std::mem::offset_of!(Cells, beat_ns) == 48);
    assert!(std::mem::offset_of!(Cells, all_off_cycle) == 56);
    assert!(std::mem::offset_of!(Cells, guard_pid) == 64);
    assert!(std::mem::offset_of!(Cells, guard_holding) == 68);
    assert!(std::mem::offset_of!(Cells, trip_count) == 72);
    assert!(std::mem::offset_of!(Cells, armed_at_unix_ns) == 80);
    assert!(std::mem::offset_of!(Cells, driver_start) == 88);
    assert!(std::mem::offset_of!(Cells, guard_start) == 96);
    assert!(std::mem::offset_of!(Cells, motion) == 104);
    assert!(std::mem::offset_of!(Cells, reserved) == 108);
    assert!(std::mem::offset_of!(Cells, nonce) == 112);
    assert!(std::mem::offset_of!(Cells, arm_nonce) == 120);
    assert!(std::mem::offset_of!(Cells, driver_nonce) == 128);
    assert!(std::mem::offset_of!(Cells, magic_tail) == 136);
};

/// splitmix64's finalizer: a bijection of u64 whose every output bit
/// depends on every input bit (the wake generation's mix, the nonce's
/// fallback when the kernel has no random bytes yet). Pure.
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The wake generation of a page re-armed with `arm_nonce` and driven by
/// the runtime that registered `driver_nonce` (both random, neither 0):
/// never 0, and another value when either changes. Pure.
pub(crate) const fn wake_generation_of(arm_nonce: u64, driver_nonce: u64) -> u64 {
    let g = mix64(mix64(arm_nonce) ^ driver_nonce);
    if g == 0 {
        1
    } else {
        g
    }
}

fn some_if_nonzero_minus_one(v: u64) -> Option<u64> {
    v.checked_sub(1)
}

fn pid(v: u32) -> Option<u32> {
    (v != 0).then_some(v)
}

// Under loom the page file is compiled out, and with it the only users of
// the crate-internal methods.
#[cfg_attr(loom, allow(dead_code))]
impl Cells {
    /// An all-zero page in memory (no magic: it reads tripped), for models
    /// and tests.
    pub(crate) fn zeroed() -> Cells {
        Cells {
            magic_head: AtomicU64::new(0),
            version: AtomicU32::new(0),
            reason: AtomicU32::new(0),
            tripped_at_ns: AtomicU64::new(0),
            tripped_at_unix_ns: AtomicU64::new(0),
            driver_pid: AtomicU32::new(0),
            safety_flags: AtomicU32::new(0),
            beat_cycle: AtomicU64::new(0),
            beat_ns: AtomicU64::new(0),
            all_off_cycle: AtomicU64::new(0),
            guard_pid: AtomicU32::new(0),
            guard_holding: AtomicU32::new(0),
            trip_count: AtomicU64::new(0),
            armed_at_unix_ns: AtomicU64::new(0),
            driver_start: AtomicU64::new(0),
            guard_start: AtomicU64::new(0),
            motion: AtomicU32::new(0),
            reserved: AtomicU32::new(0),
            nonce: AtomicU64::new(0),
            arm_nonce: AtomicU64::new(0),
            driver_nonce: AtomicU64::new(0),
            magic_tail: AtomicU64::new(0),
        }
    }

    /// Makes the page whole: clears the magic first (readers see tripped
    /// meanwhile), zeroes every field, stores `reason` tripped at the given
    /// times and the page's new `nonce` (0 is stored as 1: a whole page's
    /// nonce is never 0), then writes the magic back. `trip_count` becomes
    /// one more than the count it held (1 on a fresh, zeroed file).
    pub(crate) fn initialize(&self, reason: Reason, now_ns: u64, unix_ns: u64, nonce: u64) {
        self.initialize_after(reason, now_ns, unix_ns, 0, nonce)
    }

    /// [`Cells::initialize`], with `trip_count` one more than the larger of
    /// the count the page held and `seen` (the highest count the repairing
    /// holder read): a repair always changes the count every holder last
    /// read, so none misses the `page-lost` trip even if a person re-arms
    /// before it looks again.
    pub(crate) fn initialize_after(
        &self,
        reason: Reason,
        now_ns: u64,
        unix_ns: u64,
        seen: u64,
        nonce: u64,
    ) {
        let count = self
            .trip_count
            .load(Ordering::Acquire)
            .max(seen)
            .saturating_add(1);
        // Release: the zeroed magic is ordered before every field below.
        self.magic_head.store(0, Ordering::Release);
        self.magic_tail.store(0, Ordering::Release);
        // The reason first, so the page is tripped before the fields change.
        self.reason.store(reason.code(), Ordering::Release);
        self.tripped_at_ns.store(now_ns, Ordering::Release);
        self.tripped_at_unix_ns.store(unix_ns, Ordering::Release);
        self.driver_pid.store(0, Ordering::Release);
        self.safety_flags.store(0, Ordering::Release);
        self.beat_cycle.store(0, Ordering::Release);
        self.beat_ns.store(0, Ordering::Release);
        self.all_off_cycle.store(0, Ordering::Release);
        self.guard_pid.store(0, Ordering::Release);
        self.guard_holding.store(0, Ordering::Release);
        self.trip_count.store(count, Ordering::Release);
        self.armed_at_unix_ns.store(0, Ordering::Release);
        self.driver_start.store(0, Ordering::Release);
        self.guard_start.store(0, Ordering::Release);
        self.motion.store(Motion::None.code(), Ordering::Release);
        self.reserved.store(0, Ordering::Release);
        self.nonce.store(nonce.max(1), Ordering::Release);
        self.arm_nonce.store(0, Ordering::Release);
        self.driver_nonce.store(0, Ordering::Release);
        self.version.store(VERSION, Ordering::Release);
        self.magic_tail.store(MAGIC, Ordering::Release);
        // Release: pairs with the Acquire loads of `magic_ok`; the magic is
        // the last store, so a reader seeing it sees the whole page.
        self.magic_head.store(MAGIC, Ordering::Release);
    }

    /// Both magic values present (the version is checked apart).
    pub(crate) fn magic_present(&self) -> bool {
        self.magic_head.load(Ordering::Acquire) == MAGIC
            && self.magic_tail.load(Ordering::Acquire) == MAGIC
    }

    /// The stored layout version.
    pub(crate) fn version(&self) -> u32 {
        self.version.load(Ordering::Acquire)
    }

    /// Both magic values and this crate's layout version.
    pub(crate) fn magic_ok(&self) -> bool {
        self.magic_present() && self.version() == VERSION
    }

    /// Trips with `reason` if armed (compare-and-swap from 0): true when
    /// this call tripped it. The first reason stays until [`Cells::rearm`].
    /// Lock-free and async-signal-safe.
    pub(crate) fn trip(&self, reason: Reason, now_ns: u64, unix_ns: u64) -> bool {
        // AcqRel: the success publishes the reason (Release) and orders the
        // time stores after it; pairs with the Acquire load in `snapshot`.
        let won = self
            .reason
            .compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.tripped_at_ns.store(now_ns, Ordering::Release);
            self.tripped_at_unix_ns.store(unix_ns, Ordering::Release);
            self.trip_count.fetch_add(1, Ordering::AcqRel);
        }
        won
    }

    /// Trips with `reason` whatever was stored (damage: the stored reason is
    /// not trusted). Used by the integrity repair only.
    pub(crate) fn force_trip(&self, reason: Reason, now_ns: u64, unix_ns: u64) {
        self.reason.store(reason.code(), Ordering::Release);
        self.tripped_at_ns.store(now_ns, Ordering::Release);
        self.tripped_at_unix_ns.store(unix_ns, Ordering::Release);
        self.trip_count.fetch_add(1, Ordering::AcqRel);
    }

    /// Re-arms: a person's act, for `naoctl rearm` only. The trip time is
    /// set pending and `nonce` (a new random value: 0 is stored as 1) is
    /// stored as `arm_nonce` before the reason is cleared (Release), so a
    /// later trip's reader never pairs the new reason with the old time,
    /// and a reader that sees this re-arm's armed state sees its nonce:
    /// its wake generation exists only from this re-arm on
    /// ([`Snapshot::wake_generation`]). `unix_ns` is stored as the time of
    /// the re-arm (display only).
    pub(crate) fn rearm(&self, unix_ns: u64, nonce: u64) {
        self.tripped_at_ns
            .store(TRIP_TIME_PENDING, Ordering::Release);
        self.tripped_at_unix_ns.store(0, Ordering::Release);
        self.armed_at_unix_ns.store(unix_ns, Ordering::Release);
        self.arm_nonce.store(nonce.max(1), Ordering::Release);
        // Release: the pending time and the nonce above are visible to
        // whoever sees armed (Acquire load of `reason` in `snapshot`).
        self.reason.store(0, Ordering::Release);
    }

    /// How many times the switch went from armed to tripped since the page
    /// was made whole (a repair or a fresh page counts its own trip: 1).
    /// A holder that sees this number change since its last frame knows a
    /// trip happened in between, even if a re-arm came before it looked.
    pub(crate) fn trip_count(&self) -> u64 {
        // Acquire: pairs with the AcqRel increment in `trip`/`force_trip`.
        self.trip_count.load(Ordering::Acquire)
    }

    /// The raw `reason` word (0: armed, if the magic is present).
    pub(crate) fn reason_code(&self) -> u32 {
        self.reason.load(Ordering::Acquire)
    }

    /// The reason: the stored one, or [`Reason::PageLost`] for a page
    /// without its magic (or with an unknown code); `None` while armed.
    pub(crate) fn reason(&self) -> Option<Reason> {
        let code = self.reason.load(Ordering::Acquire);
        if !self.magic_ok() {
            return Some(Reason::PageLost);
        }
        match code {
            0 => None,
            c => Some(Reason::from_code(c).unwrap_or(Reason::PageLost)),
        }
    }

    /// The heartbeat after a frame: the all-off confirmation (only when
    /// `all_off`), then the time, then the cycle, each a Release store, so a
    /// reader that sees cycle N sees N's confirmation.
    pub(crate) fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool) {
        let stored = cycle.saturating_add(1);
        // Mutation (the world's, `docs/world.md`): cycle first,
        // confirmation last.
        #[cfg(all(feature = "mutations", not(loom)))]
        if nao_kit::mutation::on(nao_kit::mutation::Mutation::BeatOrder) {
            self.beat_cycle.store(stored, Ordering::Release);
            self.beat_ns.store(t_ns, Ordering::Release);
            if all_off {
                self.all_off_cycle.store(stored, Ordering::Release);
            }
            return;
        }
        if all_off {
            self.all_off_cycle.store(stored, Ordering::Release);
        }
        self.beat_ns.store(t_ns, Ordering::Release);
        // Release: pairs with the Acquire load of `beat_cycle` in `snapshot`.
        self.beat_cycle.store(stored, Ordering::Release);
    }

    /// One cycle's [`crate::Switch::beat`]: the motion state and the
    /// safety flags, then the heartbeat ([`Cells::write_heartbeat`]), so a
    /// reader that sees cycle N sees N's motion and flags.
    pub(crate) fn beat(&self, beat: &Beat) {
        self.set_motion(beat.motion);
        self.set_safety_flags(beat.safety_flags);
        self.write_heartbeat(beat.cycle, beat.t_ns, beat.all_off);
    }

    /// Stores the runtime's identity: its process id and its start time
    /// (`driver_start`, [`crate::process::start_time`]; 0 unknown), which a
    /// reused pid cannot match. A new runtime in place of another (a
    /// restart) first clears its predecessor's heartbeat and motion state:
    /// they are not the new runtime's, and a guard that judged the beat
    /// would see a runtime still in its start-up as hung since the
    /// predecessor's last beat and kill it. The same identity again (or
    /// one stored after a repair zeroed it) keeps the beat. `nonce` is the
    /// runtime's random value (`driver_nonce`, new at every start of a
    /// runtime: its wake generation is its own), stored before the pid.
    pub(crate) fn register_driver(&self, pid: u32, start: u64, nonce: u64) {
        let before = self.driver_pid.load(Ordering::Acquire);
        let before_start = self.driver_start.load(Ordering::Acquire);
        if before != 0 && (before != pid || before_start != start) {
            self.clear_heartbeat();
            self.motion.store(Motion::None.code(), Ordering::Release);
        }
        self.driver_start.store(start, Ordering::Release);
        self.driver_nonce.store(nonce, Ordering::Release);
        // Release: pairs with the Acquire load of `driver_pid` in
        // `snapshot`: a reader that sees the new pid sees the cleared beat,
        // the new start time and the new runtime's nonce.
        self.driver_pid.store(pid, Ordering::Release);
    }

    /// The stored `driver_start` (0: unknown).
    pub(crate) fn driver_start(&self) -> u64 {
        self.driver_start.load(Ordering::Acquire)
    }

    /// The stored `driver_nonce` (0: no runtime registered).
    pub(crate) fn driver_nonce(&self) -> u64 {
        self.driver_nonce.load(Ordering::Acquire)
    }

    /// The stored `guard_start` (0: unknown).
    pub(crate) fn guard_start(&self) -> u64 {
        self.guard_start.load(Ordering::Acquire)
    }

    /// The runtime publishes its motion state (every frame; one store).
    pub(crate) fn set_motion(&self, motion: Motion) {
        self.motion.store(motion.code(), Ordering::Release);
    }

    /// The stored `driver_pid` (0: none).
    pub(crate) fn driver_pid(&self) -> u32 {
        self.driver_pid.load(Ordering::Acquire)
    }

    /// The stored guard: (`guard_pid`, `guard_holding` != 0).
    pub(crate) fn guard(&self) -> (u32, bool) {
        (
            self.guard_pid.load(Ordering::Acquire),
            self.guard_holding.load(Ordering::Acquire) != 0,
        )
    }

    /// Clears the heartbeat (cycle first, so readers see "no heartbeat"),
    /// keeps `driver_pid`.
    pub(crate) fn clear_heartbeat(&self) {
        self.beat_cycle.store(0, Ordering::Release);
        self.beat_ns.store(0, Ordering::Release);
        self.all_off_cycle.store(0, Ordering::Release);
    }

    /// Guard release without a race: clears `driver_pid` only while it still
    /// is `pid` (compare-and-swap), then the heartbeat. Returns false, and
    /// changes nothing, when another runtime registered in the meantime.
    pub(crate) fn clear_driver_if(&self, pid: u32) -> bool {
        // AcqRel pairs with the Release store of `register_driver`.
        let cleared = self
            .driver_pid
            .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if cleared {
            self.clear_heartbeat();
            self.motion.store(Motion::None.code(), Ordering::Release);
            self.driver_start.store(0, Ordering::Release);
            self.driver_nonce.store(0, Ordering::Release);
        }
        cleared
    }

    /// Publishes the runtime's safety flags ([`crate::flags::SafetyFlags`] bits).
    pub(crate) fn set_safety_flags(&self, bits: u32) {
        self.safety_flags.store(bits, Ordering::Release);
    }

    /// Publishes the guard's identity (pid 0: none; `start` its process
    /// start time, 0 unknown) and whether it holds the chest board.
    pub(crate) fn set_guard(&self, pid: u32, start: u64, holding_board: bool) {
        self.guard_start.store(start, Ordering::Release);
        self.guard_pid.store(pid, Ordering::Release);
        self.guard_holding
            .store(u32::from(holding_board), Ordering::Release);
    }

    /// The reserved word is not zero, `guard_holding` is neither 0 nor 1,
    /// `motion` is no [`Motion`] code, or the nonce is 0: values no nao-rs
    /// writes.
    pub(crate) fn garbage(&self) -> bool {
        self.reserved.load(Ordering::Acquire) != 0
            || self.guard_holding.load(Ordering::Acquire) > 1
            || Motion::from_code(self.motion.load(Ordering::Acquire)).is_none()
            || self.nonce.load(Ordering::Acquire) == 0
    }

    /// The page's own damage, judged from its values alone: a missing
    /// magic, another version, garbage, or an impossible value
    /// (`impossible`). `clock` gives the monotonic ns and is read after
    /// the fields are loaded, so a genuine time is never after it.
    /// "Armed with a trip time" is confirmed by a second load of `reason`:
    /// a trip that lands between the loads is a trip, not damage. Atomic
    /// loads only, no allocation.
    pub(crate) fn judge(&self, clock: impl FnOnce() -> u64) -> Option<Damage> {
        if !self.magic_present() {
            return Some(Damage::NoMagic);
        }
        let version = self.version();
        if version != VERSION {
            return Some(Damage::OtherVersion { found: version });
        }
        if self.garbage() {
            return Some(Damage::Garbage);
        }
        let s = self.snapshot();
        let now_ns = clock();
        match impossible(&s, now_ns) {
            // Acquire: pairs with the trip's compare-and-swap; a trip that
            // came after the snapshot's load of `reason` shows here.
            Some(Damage::TripTimeWhileArmed) if self.reason_code() != 0 => None,
            d => d,
        }
    }

    /// Every field. The heartbeat is loaded cycle, then time, then
    /// confirmation (Acquire), the opposite of the writer's order.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // Acquire: pairs with the Release store of `beat_cycle`.
        let cycle = self.beat_cycle.load(Ordering::Acquire);
        let beat = self.beat_ns.load(Ordering::Acquire);
        let conf = self.all_off_cycle.load(Ordering::Acquire);
        // The count before the reason: an armed read is never paired with
        // the count of a trip that came after it (the wake generation).
        // Acquire: pairs with the Release increment in `trip`.
        let trip_count = self.trip_count.load(Ordering::Acquire);
        let code = self.reason.load(Ordering::Acquire);
        // The re-arm's nonce after the reason: Acquire on `reason` pairs
        // with the re-arm's Release store of 0, so an armed read that saw a
        // re-arm carries that re-arm's nonce (or a later one), never the
        // one of the epoch before the trip (loom:
        // `loom_an_armed_read_after_a_trip_never_carries_the_old_generation`).
        let arm_nonce = self.arm_nonce.load(Ordering::Acquire);
        // The pid before its nonce: pairs with `register_driver`'s Release.
        let driver_pid = self.driver_pid.load(Ordering::Acquire);
        let driver_nonce = self.driver_nonce.load(Ordering::Acquire);
        let magic_ok = self.magic_ok();
        let reason = if !magic_ok {
            Some(Reason::PageLost)
        } else if code == 0 {
            None
        } else {
            Some(Reason::from_code(code).unwrap_or(Reason::PageLost))
        };
        let last_cycle = some_if_nonzero_minus_one(cycle);
        Snapshot {
            armed: code == 0 && magic_ok,
            reason,
            reason_code: code,
            tripped_at_ns: self.tripped_at_ns.load(Ordering::Acquire),
            tripped_at_unix_ns: self.tripped_at_unix_ns.load(Ordering::Acquire),
            driver_pid: pid(driver_pid),
            last_cycle,
            last_beat_ns: last_cycle.map(|_| beat),
            all_off_confirmed_cycle: some_if_nonzero_minus_one(conf),
            safety_flags: self.safety_flags.load(Ordering::Acquire),
            guard_pid: pid(self.guard_pid.load(Ordering::Acquire)),
            guard_holding: self.guard_holding.load(Ordering::Acquire) != 0,
            magic_ok,
            version: self.version(),
            trip_count,
            armed_at_unix_ns: self.armed_at_unix_ns.load(Ordering::Acquire),
            driver_start: self.driver_start.load(Ordering::Acquire),
            guard_start: self.guard_start.load(Ordering::Acquire),
            motion: Motion::from_code(self.motion.load(Ordering::Acquire)).unwrap_or(Motion::None),
            nonce: self.nonce.load(Ordering::Acquire),
            arm_nonce,
            driver_nonce,
        }
    }
}

/// The impossible values of a snapshot taken before `now_ns` was read
/// (`docs/page.md`, "Impossible values"): an unknown reason code; a trip
/// time stored while armed; a monotonic time (`tripped_at_ns`, `beat_ns`)
/// after `now_ns` + [`FUTURE_TOLERANCE_NS`]. The Unix times are display
/// only and never judged: a wall clock stepped by hours changes nothing.
/// Pure: the time is passed in.
pub(crate) fn impossible(s: &Snapshot, now_ns: u64) -> Option<Damage> {
    let code = s.reason_code;
    if code != 0 && Reason::from_code(code).is_none() {
        return Some(Damage::UnknownReason { code });
    }
    if code == 0 && (s.tripped_at_ns != TRIP_TIME_PENDING || s.tripped_at_unix_ns != 0) {
        return Some(Damage::TripTimeWhileArmed);
    }
    let late = now_ns.saturating_add(FUTURE_TOLERANCE_NS);
    let future = |field| Some(Damage::FutureTime { field });
    if s.tripped_at_ns != TRIP_TIME_PENDING && s.tripped_at_ns > late {
        return future(TimeField::TrippedAt);
    }
    if s.last_beat_ns.is_some_and(|t| t > late) {
        return future(TimeField::Beat);
    }
    None
}

#[cfg(not(loom))]
impl Cells {
    /// A page in memory holding a copy of `bytes` (a page file read with
    /// `pread`), for read-only inspection (`deathswitch::inspect`).
    pub(crate) fn from_bytes(bytes: &[u8; LEN]) -> Cells {
        let c = Cells::zeroed();
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |o: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[o..o + 4]);
            u32::from_le_bytes(b)
        };
        let r = Ordering::Relaxed;
        c.magic_head.store(u64_at(0), r);
        c.version.store(u32_at(8), r);
        c.reason.store(u32_at(12), r);
        c.tripped_at_ns.store(u64_at(16), r);
        c.tripped_at_unix_ns.store(u64_at(24), r);
        c.driver_pid.store(u32_at(32), r);
        c.safety_flags.store(u32_at(36), r);
        c.beat_cycle.store(u64_at(40), r);
        c.beat_ns.store(u64_at(48), r);
        c.all_off_cycle.store(u64_at(56), r);
        c.guard_pid.store(u32_at(64), r);
        c.guard_holding.store(u32_at(68), r);
        c.trip_count.store(u64_at(72), r);
        c.armed_at_unix_ns.store(u64_at(80), r);
        c.driver_start.store(u64_at(88), r);
        c.guard_start.store(u64_at(96), r);
        c.motion.store(u32_at(104), r);
        c.reserved.store(u32_at(108), r);
        c.nonce.store(u64_at(112), r);
        c.arm_nonce.store(u64_at(120), r);
        c.driver_nonce.store(u64_at(128), r);
        c.magic_tail.store(u64_at(136), r);
        c
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn armed() -> Cells {
        let c = Cells::zeroed();
        c.initialize(Reason::Boot, 10, 20, 99);
        c.rearm(30, 0xa7);
        c
    }

    /// Tripped, or without its magic.
    fn tripped(c: &Cells) -> bool {
        !c.snapshot().armed
    }

    #[test]
    fn a_page_without_magic_counts_as_tripped() {
        let c = Cells::zeroed();
        assert!(tripped(&c));
        assert_eq!(c.reason(), Some(Reason::PageLost));
        let s = c.snapshot();
        assert!(!s.armed);
        assert!(!s.magic_ok);
    }

    #[test]
    fn first_reason_wins_until_rearm() {
        let c = armed();
        assert!(!tripped(&c));
        assert!(c.trip(Reason::Udp, 100, 1000));
        assert!(!c.trip(Reason::Naoctl, 200, 2000));
        let s = c.snapshot();
        assert_eq!(s.reason, Some(Reason::Udp));
        assert_eq!(s.tripped_at_ns, 100);
        assert_eq!(s.tripped_at_unix_ns, 1000);
        c.rearm(30, 0xa7);
        assert!(!tripped(&c));
        assert_eq!(c.snapshot().tripped_at_ns, TRIP_TIME_PENDING);
        assert_eq!(c.snapshot().armed_at_unix_ns, 30);
        assert!(c.trip(Reason::Naoctl, 300, 3000));
        assert_eq!(c.reason(), Some(Reason::Naoctl));
    }

    #[test]
    fn heartbeat_stores_cycle_plus_one_so_cycle_zero_is_a_beat() {
        let c = armed();
        assert_eq!(c.snapshot().last_cycle, None);
        assert_eq!(c.snapshot().last_beat_ns, None);
        c.write_heartbeat(0, 5, false);
        let s = c.snapshot();
        assert_eq!(s.last_cycle, Some(0));
        assert_eq!(s.last_beat_ns, Some(5));
        assert_eq!(s.all_off_confirmed_cycle, None);
        c.write_heartbeat(1, 6, true);
        assert_eq!(c.snapshot().all_off_confirmed_cycle, Some(1));
        c.write_heartbeat(2, 7, false);
        let s = c.snapshot();
        assert_eq!(
            (s.last_cycle, s.all_off_confirmed_cycle),
            (Some(2), Some(1))
        );
    }

    #[test]
    fn a_restarted_runtime_is_not_judged_by_its_predecessors_beat() {
        let c = armed();
        c.register_driver(42, 1000, 0xd7);
        c.write_heartbeat(9, 9, true);
        // The same runtime again (e.g. after a repair): its beat stays.
        c.register_driver(42, 1000, 0xd7);
        assert_eq!(c.snapshot().last_cycle, Some(9));
        // A new runtime: no beat until it writes its own.
        c.register_driver(43, 1000, 0xd7);
        let s = c.snapshot();
        assert_eq!(s.driver_pid, Some(43));
        assert_eq!(
            (s.last_cycle, s.last_beat_ns, s.all_off_confirmed_cycle),
            (None, None, None)
        );
    }

    #[test]
    fn clear_heartbeat_keeps_driver_pid_and_clear_driver_drops_it() {
        let c = armed();
        c.register_driver(42, 1000, 0xd7);
        c.write_heartbeat(9, 9, true);
        c.clear_heartbeat();
        let s = c.snapshot();
        assert_eq!(s.driver_pid, Some(42));
        assert_eq!(
            (s.last_cycle, s.last_beat_ns, s.all_off_confirmed_cycle),
            (None, None, None)
        );
        c.write_heartbeat(3, 3, false);
        assert!(c.clear_driver_if(42));
        let s = c.snapshot();
        assert_eq!(s.driver_pid, None);
        assert_eq!(s.last_cycle, None);
    }

    #[test]
    fn clear_driver_if_keeps_a_runtime_that_registered_in_between() {
        let c = armed();
        c.register_driver(42, 1000, 0xd7);
        c.write_heartbeat(9, 9, true);
        c.register_driver(43, 1000, 0xd7); // a restarted runtime registers and beats
        c.write_heartbeat(1, 10, true);
        assert!(!c.clear_driver_if(42));
        let s = c.snapshot();
        assert_eq!(s.driver_pid, Some(43));
        assert_eq!(s.last_cycle, Some(1), "nothing changed");
        assert!(c.clear_driver_if(43));
        let s = c.snapshot();
        assert_eq!((s.driver_pid, s.last_cycle), (None, None));
    }

    #[test]
    fn guard_and_flags_are_published() {
        let c = armed();
        c.set_guard(77, 7, true);
        c.set_safety_flags(0b101);
        let s = c.snapshot();
        assert_eq!(
            (s.guard_pid, s.guard_holding, s.safety_flags),
            (Some(77), true, 0b101)
        );
        c.set_guard(0, 0, false);
        assert_eq!(c.snapshot().guard_pid, None);
    }

    #[test]
    fn impossible_values_boundaries_of_the_future_tolerances() {
        let now = 10_000_000_000;
        let unix = 1_800_000_000_000_000_000;
        let c = armed();
        c.write_heartbeat(1, now + FUTURE_TOLERANCE_NS, true);
        assert_eq!(impossible(&c.snapshot(), now), None, "at the tolerance");
        c.write_heartbeat(2, now + FUTURE_TOLERANCE_NS + 1, true);
        assert_eq!(
            impossible(&c.snapshot(), now),
            Some(Damage::FutureTime {
                field: TimeField::Beat
            })
        );
        // The wall clock is display only: a re-arm or a trip stamped hours
        // ahead (a clock stepped back since) is no damage.
        let c = armed();
        c.rearm(unix + 2 * 3_600_000_000_000, 0xa7);
        assert_eq!(impossible(&c.snapshot(), now), None);
        c.trip(Reason::Udp, now, unix + 2 * 3_600_000_000_000);
        assert_eq!(impossible(&c.snapshot(), now), None);
        // A trip stamped now, and a trip time pending, are fine.
        let c = armed();
        c.trip(Reason::Udp, now, unix);
        assert_eq!(impossible(&c.snapshot(), now), None);
        let c = armed();
        c.reason.store(Reason::Udp.code(), Ordering::Release);
        assert_eq!(c.snapshot().tripped_at_ns, TRIP_TIME_PENDING);
        assert_eq!(impossible(&c.snapshot(), now), None);
    }

    #[test]
    fn judge_finds_no_damage_on_every_state_whole_operations_leave() {
        let c = Cells::zeroed();
        let clock = || 1_000;
        assert_eq!(c.judge(clock), Some(Damage::NoMagic));
        c.initialize(Reason::Boot, 10, 10, 99);
        assert_eq!(c.judge(clock), None);
        c.rearm(20, 0xa7);
        assert_eq!(c.judge(clock), None);
        c.register_driver(5, 1000, 0xd7);
        c.set_guard(6, 6, true);
        c.set_safety_flags(u32::MAX);
        c.write_heartbeat(3, 30, true);
        assert_eq!(c.judge(clock), None);
        c.trip(Reason::Heat, 40, 40);
        assert_eq!(c.judge(clock), None);
        assert!(c.clear_driver_if(5));
        assert_eq!(c.judge(clock), None);
        c.initialize_after(Reason::PageLost, 50, 50, 7, 5);
        assert_eq!(c.trip_count(), 8);
        assert_eq!(c.judge(clock), None);
    }

    #[test]
    fn an_unknown_reason_code_reads_page_lost_and_tripped() {
        let c = armed();
        c.reason.store(999, Ordering::Release);
        assert!(tripped(&c));
        assert_eq!(c.reason(), Some(Reason::PageLost));
    }

    /// The wake generation exists only from the re-arm and the runtime's
    /// registration that make it: none while tripped, lost or with no
    /// runtime registered; another value after every re-arm and every new
    /// runtime, however the trip count stands; never 0.
    #[test]
    fn the_wake_generation_changes_at_every_re_arm_and_every_start_of_a_runtime() {
        let c = armed();
        assert_eq!(
            c.snapshot().wake_generation(),
            None,
            "no runtime registered"
        );
        c.register_driver(42, 1000, 0xd7);
        let g1 = c.snapshot().wake_generation().unwrap();
        assert_eq!(g1, wake_generation_of(0xa7, 0xd7));
        assert_ne!(g1, 0);
        c.trip(Reason::Naoctl, 40, 40);
        let tripped = c.snapshot();
        assert_eq!(tripped.wake_generation(), None);
        // What a forged view of the tripped page (armed, every other field
        // as read while tripped) would carry is the old epoch's generation.
        let forged = Snapshot {
            armed: true,
            ..tripped
        };
        assert_eq!(forged.wake_generation(), Some(g1));
        c.rearm(50, 0xa8);
        let g2 = c.snapshot().wake_generation().unwrap();
        assert_ne!(g2, g1, "a new armed epoch");
        // Neither the old trip count nor the new one, nor a count-based
        // guess, is the generation.
        for guess in [1, 2, 3, tripped.trip_count, tripped.trip_count + 1] {
            assert_ne!(Some(guess), c.snapshot().wake_generation());
        }
        // A re-arm of an armed page is a re-arm: a new generation too.
        c.rearm(60, 0xa9);
        let g3 = c.snapshot().wake_generation().unwrap();
        assert!(g3 != g2 && g3 != g1);
        // A new runtime (a restart, with or without a trip): a new one.
        c.register_driver(43, 1001, 0xd8);
        let g4 = c.snapshot().wake_generation().unwrap();
        assert!(![g1, g2, g3].contains(&g4));
        // No runtime: none.
        assert!(c.clear_driver_if(43));
        assert_eq!(c.snapshot().driver_nonce, 0);
        assert_eq!(c.snapshot().wake_generation(), None);
        let lost = Cells::zeroed();
        assert_eq!(lost.snapshot().wake_generation(), None);
        // A repair forgets both nonces.
        c.register_driver(43, 1001, 0xd8);
        c.initialize_after(Reason::PageLost, 70, 70, 0, 5);
        let s = c.snapshot();
        assert_eq!((s.arm_nonce, s.driver_nonce), (0, 0));
        // 0 is stored as 1 and a mix of 0 is never 0.
        c.rearm(80, 0);
        assert_eq!(c.snapshot().arm_nonce, 1);
        assert_ne!(wake_generation_of(0, 0), 0);
    }

    #[test]
    fn a_whole_page_has_a_nonce_that_is_never_zero_and_changes_with_a_repair() {
        let c = Cells::zeroed();
        c.initialize(Reason::Boot, 1, 1, 0);
        assert_eq!(c.snapshot().nonce, 1, "0 is stored as 1");
        c.initialize_after(Reason::PageLost, 2, 2, 0, 77);
        assert_eq!(c.snapshot().nonce, 77);
        assert_eq!(c.judge(|| 10), None);
        c.nonce.store(0, Ordering::Release);
        assert_eq!(c.judge(|| 10), Some(Damage::Garbage));
    }

    #[test]
    fn a_restarted_runtime_with_a_reused_pid_is_a_new_identity() {
        let c = armed();
        c.register_driver(42, 1000, 0xd7);
        c.write_heartbeat(9, 9, true);
        c.set_motion(Motion::Awake);
        // The same pid with another start time: another process.
        c.register_driver(42, 2000, 0xd7);
        let s = c.snapshot();
        assert_eq!((s.driver_pid, s.driver_start), (Some(42), 2000));
        assert_eq!(s.last_cycle, None, "not judged by the predecessor's beat");
        assert_eq!(s.motion, Motion::None, "not described by the predecessor");
        assert!(c.clear_driver_if(42));
        let s = c.snapshot();
        assert_eq!((s.driver_pid, s.driver_start), (None, 0));
    }

    #[test]
    fn motion_and_guard_identity_are_published_and_judged() {
        let c = armed();
        assert_eq!(c.snapshot().motion, Motion::None);
        for m in Motion::ALL {
            c.set_motion(m);
            assert_eq!(c.snapshot().motion, m);
            assert_eq!(c.judge(|| 100), None);
        }
        c.motion.store(5, Ordering::Release);
        assert_eq!(c.judge(|| 100), Some(Damage::Garbage));
        c.set_motion(Motion::Awake);
        c.set_guard(7, 4242, true);
        let s = c.snapshot();
        assert_eq!(
            (s.guard_pid, s.guard_start, s.guard_holding),
            (Some(7), 4242, true)
        );
        c.reserved.store(1, Ordering::Release);
        assert_eq!(c.judge(|| 100), Some(Damage::Garbage));
    }
}
