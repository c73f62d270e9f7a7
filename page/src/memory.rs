//! [`MemorySwitch`]: the page's own `Cells` on the heap, no file, for
//! tests, replay and the virtual-time world. Every rule is the page's (the
//! `Cells` methods and the repair of [`crate::Page::check`]); only the
//! file is missing, and the clock is the one it was made with (the real
//! clock unless [`MemorySwitch::with_clock`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use nao_kit::clock::{Clock, MonotonicClock};

use crate::cells::Cells;
use crate::page::{fresh_nonce, make_whole_lost, trip_lost};
use crate::switch::{checked, trip_now};
use crate::{Beat, Reason, Snapshot, Switch};

/// A death switch in memory: the page's `Cells` in one heap allocation
/// made at construction (aligned for them; nothing allocates afterwards),
/// with the page's rules: the first reason wins, `trip_count` counts armed
/// -> tripped transitions (a re-arm does not), the heartbeat's order, and
/// a damaged page reads tripped `page-lost` with its count raised, as a
/// repaired page does. Its trips and repairs are stamped on its clock `C`
/// ([`Switch::clock`]). `Send + Sync`; share it with an `Arc`.
pub struct MemorySwitch<C: Clock = MonotonicClock> {
    clock: C,
    cells: Box<Cells>,
    /// [`MemorySwitch::damage`] was called: the next read repairs.
    damaged: AtomicBool,
    /// The runtime registered through [`Switch::register`] (0: none) and
    /// its nonce: stored again after a repair, as the page does.
    driver: AtomicU32,
    driver_start: AtomicU64,
    driver_nonce: AtomicU64,
}

impl MemorySwitch {
    /// A new switch on the real clock as a new page starts: tripped
    /// `boot`, `trip_count` 1.
    pub(crate) fn new() -> MemorySwitch {
        MemorySwitch::with_clock(MonotonicClock)
    }

    /// A new switch on the real clock, re-armed (`trip_count` 1, the boot
    /// trip).
    pub fn armed() -> MemorySwitch {
        let s = MemorySwitch::new();
        s.rearm();
        s
    }
}

impl<C: Clock> MemorySwitch<C> {
    /// A new switch on `clock` (a [`nao_kit::clock::VirtualClock`] in a
    /// virtual-time world) as a new page starts: tripped `boot` at the
    /// clock's now, `trip_count` 1.
    pub fn with_clock(clock: C) -> MemorySwitch<C> {
        let cells = Box::new(Cells::zeroed());
        cells.initialize(Reason::Boot, clock.now_ns(), crate::unix_ns(), 1);
        MemorySwitch {
            clock,
            cells,
            damaged: AtomicBool::new(false),
            driver: AtomicU32::new(0),
            driver_start: AtomicU64::new(0),
            driver_nonce: AtomicU64::new(0),
        }
    }

    /// Re-arms (on a real page only `naoctl rearm` does, a person's act),
    /// with a new random `arm_nonce`, as the page does. Does not change
    /// `trip_count`.
    pub fn rearm(&self) {
        self.cells.rearm(crate::unix_ns(), fresh_nonce())
    }

    /// Re-arms with the given `arm_nonce` (the world's seeded one; never
    /// 0 in a page, so 0 is stored as 1).
    pub fn rearm_with(&self, nonce: u64) {
        self.cells.rearm(crate::unix_ns(), nonce.max(1))
    }

    /// Registers the runtime `pid` with its process start time `start`
    /// (clock ticks since boot) and its `driver_nonce` (the world's
    /// seeded one), as the page's registration does; stored again after
    /// a repair.
    pub fn register_with(&self, pid: u32, start: u64, nonce: u64) {
        let nonce = if pid == 0 { 0 } else { nonce.max(1) };
        self.driver_nonce.store(nonce, Ordering::Release);
        self.driver_start.store(start, Ordering::Release);
        self.driver.store(pid, Ordering::Release);
        self.cells.register_driver(pid, start, nonce)
    }

    /// The guard's heartbeat while it holds the board ([`crate::Page`]'s
    /// `write_heartbeat`).
    pub fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool) {
        self.cells.write_heartbeat(cycle, t_ns, all_off)
    }

    /// The guard's hand-over: clears the heartbeat, keeps `driver_pid`.
    pub fn clear_heartbeat(&self) {
        self.cells.clear_heartbeat()
    }

    /// The guard's release: clears `driver_pid` only while it still is
    /// `pid` ([`crate::Page`]'s `clear_driver_if`).
    pub fn clear_driver_if(&self, pid: u32) -> bool {
        let _ = self
            .driver
            .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        self.cells.clear_driver_if(pid)
    }

    /// The guard publishes itself and whether it holds the board.
    pub fn set_guard(&self, pid: u32, start: u64, holding_board: bool) {
        self.cells.set_guard(pid, start, holding_board)
    }

    /// The integrity check a holder beside the cycle makes (the guard's
    /// poll): true when the page was damaged and is now repaired. The
    /// runtime's registration is not this holder's: a changed
    /// `driver_pid` is no damage to it.
    pub fn check_page(&self) -> bool {
        self.check_as(false)
    }

    /// Another local process (a member of group `hal`) writes a runtime's
    /// identity into the page (`driver_pid`, `driver_start`), as any
    /// writer of the page file can. The registered runtime's next read
    /// finds another pid where it registered its own: damage, repaired.
    pub fn forge_driver(&self, pid: u32, start: u64) {
        let nonce = self.cells.driver_nonce();
        self.cells.register_driver(pid, start, nonce)
    }

    /// Damages the page: the next [`Switch::read`] finds it lost, makes it
    /// whole tripped `page-lost` with `trip_count` raised beyond every
    /// count read before (the repair of [`crate::Page::check`]), and reads
    /// tripped `page-lost` even if a re-arm came in between.
    pub fn damage(&self) {
        // Release: pairs with the AcqRel swap in `check`.
        self.damaged.store(true, Ordering::Release);
    }

    /// Every field now, without a check (a read of the page by another
    /// process: `naoctl status`, the guard).
    pub fn snapshot(&self) -> Snapshot {
        self.cells.snapshot()
    }

    /// The integrity check: true when the page was damaged, after
    /// repairing it as [`crate::Page::check`] does (trip `page-lost`, make
    /// whole beyond the count it held).
    fn check(&self) -> bool {
        self.check_as(true)
    }

    /// The check of the runtime's read (`driver`: another pid where the
    /// registered runtime stored its own is damage too, as
    /// [`crate::Page::check`] finds it) or of another holder's.
    fn check_as(&self, driver: bool) -> bool {
        let registered = self.driver.load(Ordering::Acquire);
        let forged = driver && registered != 0 && self.cells.driver_pid() != registered;
        // AcqRel: one read repairs each damage.
        if !self.damaged.swap(false, Ordering::AcqRel) && !forged {
            return false;
        }
        let now = self.clock.now_ns();
        trip_lost(&self.cells, now);
        make_whole_lost(&self.cells, self.cells.trip_count(), now);
        let driver = self.driver.load(Ordering::Acquire);
        if driver != 0 {
            let nonce = self.driver_nonce.load(Ordering::Acquire);
            let start = self.driver_start.load(Ordering::Acquire);
            self.cells.register_driver(driver, start, nonce);
        }
        true
    }
}

impl Default for MemorySwitch {
    fn default() -> MemorySwitch {
        MemorySwitch::new()
    }
}

impl<C: Clock> Switch for MemorySwitch<C> {
    fn read(&self) -> Snapshot {
        let lost = self.check();
        checked(lost, self.cells.snapshot())
    }

    fn trip(&self, reason: Reason) -> bool {
        trip_now(&self.cells, reason, &self.clock)
    }

    fn beat(&self, beat: &Beat) {
        self.cells.beat(beat)
    }

    /// Stores `pid` as the runtime's, its start time unknown (0): no
    /// process is looked up; a new random `driver_nonce` as the page does
    /// (none for pid 0). Stored again after a repair, as the page does.
    fn register(&self, pid: u32) {
        let nonce = if pid == 0 { 0 } else { fresh_nonce() };
        self.driver_nonce.store(nonce, Ordering::Release);
        self.driver_start.store(0, Ordering::Release);
        self.driver.store(pid, Ordering::Release);
        self.cells.register_driver(pid, 0, nonce)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn peek(&self) -> Snapshot {
        self.cells.snapshot()
    }
}

impl<C: Clock> std::fmt::Debug for MemorySwitch<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySwitch")
            .field("snapshot", &self.snapshot())
            .field("damaged", &self.damaged.load(Ordering::Acquire))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Motion;

    fn beat(cycle: u64, all_off: bool, motion: Motion) -> Beat {
        Beat {
            cycle,
            t_ns: 1_000 + cycle,
            all_off,
            motion,
            safety_flags: cycle as u32,
        }
    }

    #[test]
    fn a_new_memory_switch_starts_tripped_boot_and_armed_is_rearmed() {
        let s = MemorySwitch::new();
        let r = s.read();
        assert_eq!(
            (r.armed, r.reason, r.trip_count),
            (false, Some(Reason::Boot), 1)
        );
        let a = MemorySwitch::armed();
        let r = a.read();
        assert_eq!((r.armed, r.reason, r.trip_count), (true, None, 1));
        assert_eq!(r.wake_generation(), None, "no runtime registered");
        a.register(42);
        assert!(a.read().wake_generation().is_some());
    }

    #[test]
    fn a_peek_leaves_the_integrity_check_to_the_cycles_read() {
        let s = MemorySwitch::armed();
        s.damage();
        assert!(s.peek().armed, "a peek does not check the page");
        let r = s.read();
        assert!(!r.armed, "the cycle's read finds the damage");
        assert_eq!(r.reason, Some(Reason::PageLost));
        assert!(!s.peek().armed, "and every reader sees the repair");
    }

    #[test]
    fn memory_switch_on_a_virtual_clock_stamps_trips_and_repairs_on_it() {
        let clock = nao_kit::clock::VirtualClock::new(5_000_000);
        let s = MemorySwitch::with_clock(clock.clone());
        assert_eq!(s.read().tripped_at_ns, 5_000_000, "the boot trip");
        s.rearm();
        clock.advance_ns(7);
        assert_eq!(s.now_ns(), 5_000_007);
        assert!(s.trip(Reason::Udp));
        assert_eq!(s.read().tripped_at_ns, 5_000_007);
        clock.advance_ns(1_000);
        s.damage();
        let r = s.read();
        assert_eq!(
            (r.reason, r.tripped_at_ns),
            (Some(Reason::PageLost), 5_001_007)
        );
        assert!(r.trip_count > 2, "beyond every count read: {r:?}");
    }

    #[test]
    fn memory_switch_first_reason_wins() {
        let s = MemorySwitch::armed();
        assert!(s.trip(Reason::Udp));
        assert!(!s.trip(Reason::Naoctl));
        let r = s.read();
        assert!(!r.armed);
        assert_eq!(r.reason, Some(Reason::Udp));
        assert_eq!(r.reason_code, Reason::Udp.code());
        assert_ne!(r.tripped_at_ns, crate::TRIP_TIME_PENDING);
    }

    #[test]
    fn memory_switch_counts_trips_and_a_rearm_does_not_count() {
        let s = MemorySwitch::armed();
        assert_eq!(s.read().trip_count, 1);
        s.trip(Reason::Udp);
        s.trip(Reason::Api);
        assert_eq!(s.read().trip_count, 2, "one armed -> tripped transition");
        s.rearm();
        s.rearm();
        let r = s.read();
        assert_eq!((r.armed, r.trip_count), (true, 2), "re-arms do not count");
        s.trip(Reason::Api);
        assert_eq!(s.read().trip_count, 3);
    }

    #[test]
    fn memory_switch_damage_reads_page_lost_with_the_count_raised() {
        let s = MemorySwitch::armed();
        s.register(42);
        s.beat(&beat(5, true, Motion::Awake));
        let before = s.read();
        let g = before.wake_generation().unwrap();
        s.damage();
        // A re-arm racing the repair: the read still says page-lost.
        s.rearm();
        let r = s.read();
        assert!(!r.armed);
        assert_eq!(r.reason, Some(Reason::PageLost));
        assert!(r.trip_count > before.trip_count, "{r:?}");
        assert!(r.magic_ok, "made whole");
        assert_eq!(r.last_cycle, None, "a whole page has no beat");
        assert_eq!(r.motion, Motion::None);
        // One repair per damage: the next read finds the page as it is.
        let again = s.read();
        assert_eq!(again, s.snapshot());
        assert_eq!(again.trip_count, r.trip_count);
        s.rearm();
        let armed = s.read();
        assert!(armed.armed);
        let g2 = armed.wake_generation().unwrap();
        assert_ne!(g2, g, "a new generation after the repair and the re-arm");
    }

    #[test]
    fn memory_switch_damage_while_armed_rearms_nothing() {
        let s = MemorySwitch::armed();
        s.damage();
        let r = s.read();
        assert_eq!((r.armed, r.reason), (false, Some(Reason::PageLost)));
        assert_eq!(s.snapshot().reason, Some(Reason::PageLost), "stays tripped");
    }

    #[test]
    fn memory_switch_beat_stores_motion_and_flags_then_the_heartbeat_in_order() {
        let s = MemorySwitch::armed();
        assert_eq!(s.read().last_cycle, None);
        s.beat(&beat(0, false, Motion::LimpWaitingForWake));
        let r = s.read();
        assert_eq!((r.last_cycle, r.last_beat_ns), (Some(0), Some(1_000)));
        assert_eq!(
            r.all_off_confirmed_cycle, None,
            "confirmation only when all-off"
        );
        assert_eq!((r.motion, r.safety_flags), (Motion::LimpWaitingForWake, 0));
        s.beat(&beat(1, true, Motion::Awake));
        s.beat(&beat(2, false, Motion::Awake));
        let r = s.read();
        assert_eq!(
            (r.last_cycle, r.all_off_confirmed_cycle, r.last_beat_ns),
            (Some(2), Some(1), Some(1_002))
        );
        assert_eq!((r.motion, r.safety_flags), (Motion::Awake, 2));
    }

    #[test]
    fn memory_switch_register_and_guard_are_stored() {
        let s = MemorySwitch::armed();
        s.register(42);
        s.cells.set_guard(7, 99, true);
        let r = s.read();
        assert_eq!((r.driver_pid, r.driver_start), (Some(42), 0));
        assert_eq!(
            (r.guard_pid, r.guard_start, r.guard_holding),
            (Some(7), 99, true)
        );
        assert_eq!(s.path(), None);
    }
}
