//! What one cycle needs of the death switch ([`Switch`]) and the rules every
//! switch shares (written once here and in `Cells`). Its two switches: the
//! page file ([`crate::Page`], `impl Switch for Page` beside it) and the
//! in-memory switch for tests and replay ([`crate::MemorySwitch`]).
//!
//! The order of one cycle (`docs/page.md`, "The switch a cycle uses"):
//! [`Switch::read`] once before the frame (the integrity check, then every
//! field), [`Switch::beat`] once after it (motion and safety flags, then
//! the heartbeat), so a reader that sees cycle N's beat sees N's motion.

#[cfg(not(loom))]
use crate::cells::Cells;
use crate::{Motion, Reason, Snapshot};
use nao_kit::clock::{Clock, MonotonicClock};

/// What one cycle needs of the death switch.
pub trait Switch: Send + Sync {
    /// One read a cycle: the integrity check (Page: `check()`), then every
    /// field (`snapshot()`). A page found damaged reads as tripped
    /// `page-lost` (armed false, reason Some(PageLost)) even if a re-arm
    /// raced the repair.
    fn read(&self) -> Snapshot;
    /// Trips with `reason` (first reason wins); true when this call tripped it.
    fn trip(&self, reason: Reason) -> bool;
    /// After a frame: motion and safety flags, then the heartbeat in its
    /// fixed order (confirmation only when all_off, time, cycle).
    fn beat(&self, beat: &Beat);
    /// Registers the runtime's process (pid; start time looked up by the impl).
    fn register(&self, pid: u32);
    /// The switch's clock: its trips and repairs are stamped on it, and
    /// the runtime that cycles it keeps time on it (its ticker, so the
    /// heartbeat's time, its UDP listener's timers): the times in a
    /// switch are one clock's. Provided: the real clock
    /// ([`MonotonicClock`]), the only clock of the page file (every
    /// process judges its times with `CLOCK_MONOTONIC`);
    /// [`crate::MemorySwitch`] has the clock it was made with. A
    /// `dyn Switch` is a [`Clock`] (this one).
    fn clock(&self) -> &dyn Clock {
        &MonotonicClock
    }
    /// Now on [`Switch::clock`], monotonic ns. Provided.
    fn now_ns(&self) -> u64 {
        self.clock().now_ns()
    }
    /// The page file's path, if the switch is one. Provided: None.
    fn path(&self) -> Option<&std::path::Path> {
        None
    }
    /// Every field now, without the integrity check: for readers beside
    /// the cycle (a wake's generation, status displays), so the cycle's
    /// once-a-cycle check is never skipped because another thread holds
    /// it. Provided: [`Switch::read`].
    fn peek(&self) -> Snapshot {
        self.read()
    }
}

/// A switch's clock ([`Switch::clock`]) as a clock: `Arc<dyn Switch>`
/// is a [`Clock`] too (the kit's `Arc` impl), so a runtime keeps time on
/// the clock of the switch it cycles.
impl Clock for dyn Switch {
    fn now_ns(&self) -> u64 {
        self.clock().now_ns()
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        self.clock().sleep_until_ns(deadline_ns)
    }
    fn wait_readable_until_ns(&self, deadline_ns: u64, fd: std::os::fd::BorrowedFd<'_>) -> bool {
        self.clock().wait_readable_until_ns(deadline_ns, fd)
    }
}

/// What one cycle's [`Switch::beat`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// The cycle whose frame was sent.
    pub cycle: u64,
    /// When (monotonic ns: the step's cycle start, as the cycle actor
    /// read it from its clock, `StepInput::now_ns`).
    pub t_ns: u64,
    /// The frame was all-off (no joint stiff): the guard's confirmation.
    pub all_off: bool,
    /// The motion state the frame left.
    pub motion: Motion,
    /// The runtime's [`crate::flags::SafetyFlags`] bits.
    pub safety_flags: u32,
}

/// The read rule of every switch: `snapshot` was taken after a check that
/// found the page lost (`lost`); if it reads armed anyway (a re-arm landed
/// between the repair and the snapshot), it is read tripped `page-lost`.
/// A lost page never reads armed in the cycle that found it lost.
#[cfg(not(loom))]
pub(crate) fn checked(lost: bool, mut snapshot: Snapshot) -> Snapshot {
    if lost && snapshot.armed {
        snapshot.armed = false;
        snapshot.reason = Some(Reason::PageLost);
        snapshot.reason_code = Reason::PageLost.code();
    }
    snapshot
}

/// The trip of every switch: a tripped page is left alone without a clock
/// read (the compare-and-swap would fail anyway); else [`Cells::trip`]
/// stamped now on `clock` (the switch's).
#[cfg(not(loom))]
pub(crate) fn trip_now<C: Clock + ?Sized>(cells: &Cells, reason: Reason, clock: &C) -> bool {
    if cells.reason_code() != 0 {
        return false;
    }
    cells.trip(reason, clock.now_ns(), crate::unix_ns())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lost_page_that_reads_armed_reads_tripped_page_lost() {
        let armed = Snapshot {
            armed: true,
            magic_ok: true,
            ..Snapshot::default()
        };
        let s = checked(true, armed);
        assert!(!s.armed);
        assert_eq!(s.reason, Some(Reason::PageLost));
        assert_eq!(s.wake_generation(), None);
        assert_eq!(checked(false, armed), armed, "an intact page reads as is");
        let tripped = Snapshot {
            reason: Some(Reason::Naoctl),
            reason_code: Reason::Naoctl.code(),
            ..Snapshot::default()
        };
        assert_eq!(checked(true, tripped), tripped, "a trip keeps its reason");
    }
}
