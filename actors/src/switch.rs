//! The death switch as the runtime sees it: one small trait
//! ([`Blackboard`]) over the page, so the cycle runs the same against the
//! real page (`deathswitch::Page`, implemented here) and an in-process
//! stand-in ([`MemoryBoard`], for unit tests).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub use deathswitch::process::Identity;
pub use deathswitch::{Motion, Reason};

/// The page's integrity as one check saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageHealth {
    /// The page file is the one mapped, whole, with its magic.
    Intact,
    /// Truncated, zeroed, overwritten, deleted or replaced.
    Lost,
}

/// What the runtime needs of the death switch page. Every method is safe
/// from any thread, never blocks, never allocates.
pub trait Blackboard: Send + Sync + 'static {
    /// True while the switch is tripped (a page without its magic counts as
    /// tripped).
    fn is_tripped(&self) -> bool;
    /// Trips with `reason`; the first reason wins. Never re-arms.
    fn trip(&self, reason: Reason);
    /// The reason stored, if tripped.
    fn reason(&self) -> Option<Reason>;
    /// Armed -> tripped transitions the page counted (a repaired or
    /// replaced page starts again at 1): the cycle's wake latch treats any
    /// change as a trip, so no trip is missed between two reads.
    fn trip_count(&self) -> u64;
    /// The page's wake generation now: its trip count while armed,
    /// `None` while tripped or lost. Read count, switch, count; a count
    /// that moved in between (a trip on its way) is read again, so an
    /// armed switch is never paired with the count of a trip that came
    /// after it. What [`super::Handle::wake`] sends.
    fn wake_generation(&self) -> Option<u64> {
        for _ in 0..8 {
            let before = self.trip_count();
            let tripped = self.is_tripped();
            if self.trip_count() == before {
                return (!tripped).then_some(before);
            }
        }
        None
    }
    /// One integrity check (one `fstat`/`stat`), once a cycle.
    fn check(&self) -> PageHealth;
    /// The heartbeat after a frame, in this order (`docs/page.md`): the
    /// all-off confirmation (only when `all_off`), then the time, then the cycle.
    fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool);
    /// Registers the runtime's process id (`driver_pid`).
    fn register_driver(&self, pid: u32);
    /// Publishes the safety status bits.
    fn set_safety_flags(&self, flags: u32);
    /// Publishes the runtime's motion state (every frame; one atomic
    /// store, no allocation).
    fn set_motion(&self, motion: Motion);
    /// The guard named in the page (`guard_pid`, `guard_start`), if any:
    /// the runtime's non-real-time side flags it when it is not alive.
    fn guard_identity(&self) -> Option<Identity> {
        None
    }
    /// The page file's path, if the switch is one (the status file goes
    /// next to it).
    fn page_path(&self) -> Option<&std::path::Path> {
        None
    }
    /// The page's clock (monotonic ns) that heartbeats are stamped with.
    fn now_ns(&self) -> u64 {
        nao_kit::monotonic_ns()
    }
}

/// True when process `pid` exists: `kill(pid, 0)` succeeds or fails with
/// EPERM (a process of another user counts as alive).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// An in-process death switch with the page's rules (first reason wins,
/// heartbeat order), for tests of the runtime without a page file.
#[derive(Debug, Default)]
pub struct MemoryBoard {
    reason: AtomicU32,
    lost: AtomicBool,
    /// The all-off confirmation: the last all-off cycle + 1 (0: none).
    pub all_off_cycle: AtomicU64,
    /// The last heartbeat's time.
    pub beat_ns: AtomicU64,
    /// The last heartbeat's cycle + 1 (0: none).
    pub beat_cycle: AtomicU64,
    /// The registered driver pid.
    pub driver_pid: AtomicU32,
    /// The published safety flags.
    pub flags: AtomicU32,
    /// How many heartbeats were written.
    pub beats: AtomicU64,
    /// Armed -> tripped transitions.
    pub trips: AtomicU64,
    /// The published motion state (its code).
    pub motion: AtomicU32,
    /// The guard named (pid, start time; pid 0: none).
    pub guard: std::sync::Mutex<Option<Identity>>,
}

impl MemoryBoard {
    /// An armed switch.
    pub fn armed() -> Self {
        Self::default()
    }

    /// Re-arms (what only `naoctl rearm` does on a real page).
    pub fn rearm(&self) {
        self.reason.store(0, Ordering::SeqCst);
    }

    /// The motion state published last.
    pub fn motion(&self) -> Motion {
        Motion::from_code(self.motion.load(Ordering::SeqCst)).unwrap_or(Motion::None)
    }

    /// Makes the next checks report the page as lost.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }
}

impl Blackboard for MemoryBoard {
    fn is_tripped(&self) -> bool {
        self.reason.load(Ordering::SeqCst) != 0
    }
    fn trip(&self, reason: Reason) {
        if self
            .reason
            .compare_exchange(0, reason.code(), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.trips.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn reason(&self) -> Option<Reason> {
        Reason::from_code(self.reason.load(Ordering::SeqCst))
    }
    fn trip_count(&self) -> u64 {
        self.trips.load(Ordering::SeqCst)
    }
    fn check(&self) -> PageHealth {
        if self.lost.load(Ordering::SeqCst) {
            PageHealth::Lost
        } else {
            PageHealth::Intact
        }
    }
    fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool) {
        // Release stores in the heartbeat's order: confirmation, time, cycle.
        if all_off {
            self.all_off_cycle.store(cycle + 1, Ordering::Release);
        }
        self.beat_ns.store(t_ns, Ordering::Release);
        self.beat_cycle.store(cycle + 1, Ordering::Release);
        self.beats.fetch_add(1, Ordering::Relaxed);
    }
    fn register_driver(&self, pid: u32) {
        self.driver_pid.store(pid, Ordering::SeqCst);
    }
    fn set_safety_flags(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }
    fn set_motion(&self, motion: Motion) {
        self.motion.store(motion.code(), Ordering::SeqCst);
    }
    fn guard_identity(&self) -> Option<Identity> {
        *self.guard.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Blackboard for deathswitch::Page {
    fn is_tripped(&self) -> bool {
        deathswitch::Page::is_tripped(self)
    }
    fn trip(&self, reason: Reason) {
        let _ = deathswitch::Page::trip(self, reason);
    }
    fn reason(&self) -> Option<Reason> {
        deathswitch::Page::reason(self)
    }
    fn trip_count(&self) -> u64 {
        deathswitch::Page::trip_count(self)
    }
    fn check(&self) -> PageHealth {
        match deathswitch::Page::check(self) {
            deathswitch::Integrity::Intact => PageHealth::Intact,
            deathswitch::Integrity::Repaired | deathswitch::Integrity::Replaced => PageHealth::Lost,
        }
    }
    fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool) {
        deathswitch::Page::write_heartbeat(self, cycle, t_ns, all_off)
    }
    fn register_driver(&self, pid: u32) {
        deathswitch::Page::register_driver(self, pid)
    }
    fn set_safety_flags(&self, flags: u32) {
        deathswitch::Page::set_safety_flags(self, flags)
    }
    fn set_motion(&self, motion: Motion) {
        deathswitch::Page::set_motion(self, motion)
    }
    fn guard_identity(&self) -> Option<Identity> {
        let s = self.snapshot();
        s.guard_pid.map(|pid| Identity {
            pid,
            start: s.guard_start,
        })
    }
    fn page_path(&self) -> Option<&std::path::Path> {
        Some(deathswitch::Page::path(self))
    }
    fn now_ns(&self) -> u64 {
        deathswitch::now_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins() {
        let b = MemoryBoard::armed();
        b.trip(Reason::Udp);
        b.trip(Reason::Api);
        assert_eq!(b.reason(), Some(Reason::Udp));
        assert_eq!(b.trip_count(), 1, "one armed -> tripped transition");
        b.rearm();
        b.trip(Reason::Api);
        assert_eq!(b.trip_count(), 2);
    }

    #[test]
    fn own_process_is_alive_and_pid_zero_is_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }
}
