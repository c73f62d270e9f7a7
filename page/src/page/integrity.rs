//! The integrity check ([`Page::check`]): what it finds ([`Integrity`],
//! [`Damage`]), the repair of a damaged page, the replacement of a page
//! whose path names another file, and this holder's identity stored again
//! (`docs/page.md`, "Integrity"). The repair's two halves
//! ([`trip_lost`], [`make_whole_lost`]) are [`crate::MemorySwitch`]'s too.

use std::sync::atomic::Ordering;

use super::error::errno;
use super::mapping::{map_page, Make, Mapping};
use super::Page;
use crate::cells::{Cells, LEN};
use crate::damage::Damage;
use crate::{monotonic_ns, unix_ns};
use crate::{sigbus, Reason};

/// What [`Page::check`] found and did. `Repaired` and `Replaced` both mean
/// the page was lost: the holder's frame is all-off `page-lost`.
/// [`Page::damage`] says what exactly was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// The path names the mapped file, whole, with its magic, no impossible
    /// value, and this holder's registration.
    Intact,
    /// The mapped file was damaged (truncated, magic lost, another version,
    /// garbage, an impossible value, another process's pid where this
    /// holder registered its own) or cannot hold the page (full
    /// filesystem): tripped `page-lost` and made whole with this holder's
    /// identity stored again, or, while the file cannot hold the page, read
    /// as zeroed private memory (tripped `page-lost`).
    Repaired,
    /// The path no longer names the mapped file: deleted, another file, or
    /// it cannot be examined or opened (a symlink loop, a directory
    /// replaced by a file, any `stat` error, a full filesystem refusing a
    /// new page). The mapped page is tripped `page-lost`; the page at the
    /// path is mapped (created if gone, tripped `page-lost`, identity
    /// stored again) when it can be, else each check tries again.
    Replaced,
}

impl Page {
    /// One `stat()` of the path against the mapped file, the magic, the
    /// impossible values and this holder's registration. Repairs what it
    /// finds (`docs/page.md`, "Integrity"):
    /// - damage to the mapped file (short, magic lost, another version,
    ///   garbage, an impossible value, `trip_count` gone down, another pid
    ///   where this holder registered its own, or a file that cannot hold
    ///   the page): tripped `page-lost` and made whole
    ///   ([`Integrity::Repaired`]);
    /// - a path that is gone, names another file or cannot be examined or
    ///   opened: the mapped page tripped `page-lost`, the page at the path
    ///   mapped when it can be ([`Integrity::Replaced`]).
    ///
    /// After a repair or replacement this holder's identity is stored again
    /// at once; a registration zeroed by another holder's repair is stored
    /// again without counting as damage. Never blocks: when another thread
    /// is checking right now it returns `Intact` at once. Allocates nothing
    /// except one `Box` when a replacement succeeds.
    pub fn check(&self) -> Integrity {
        let Ok(mut all) = self.all.try_lock() else {
            return Integrity::Intact;
        };
        let m = self.mapping();
        if let Some(errno) = m.detached() {
            return self.repair(m, Damage::Unbacked { errno });
        }
        if let Some(slot) = m.slot {
            sigbus::settle(slot);
        }
        // SAFETY: a zeroed stat is a valid out-buffer; stat only writes it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path made at open, a valid buffer.
        if unsafe { libc::stat(self.cpath.as_ptr(), &mut st) } != 0 {
            let why = match errno() {
                libc::ENOENT => Damage::Replaced,
                errno => Damage::Path { errno },
            };
            return self.replace(m, &mut all, why);
        }
        if st.st_dev as u64 != m.dev || st.st_ino as u64 != m.ino {
            return self.replace(m, &mut all, Damage::Replaced);
        }
        if (st.st_size as u64) < LEN as u64 {
            return self.repair(
                m,
                Damage::Short {
                    len: st.st_size as u64,
                },
            );
        }
        let cells = m.cells();
        if let Some(d) = cells.judge(monotonic_ns) {
            return self.repair(m, d);
        }
        let count = cells.trip_count();
        if count < self.seen.load(Ordering::Acquire) {
            return self.repair(m, Damage::TripCountWentBack);
        }
        self.seen.store(count, Ordering::Release);
        if let Some(d) = self.identity(cells) {
            return self.repair(m, d);
        }
        self.damage.store(0, Ordering::Release);
        Integrity::Intact
    }

    /// This holder's registration against the page: another pid is damage;
    /// a zeroed one (another holder's repair) is stored again.
    fn identity(&self, cells: &Cells) -> Option<Damage> {
        let driver = self.driver.load(Ordering::Acquire);
        if driver != 0 {
            let start = self.driver_start.load(Ordering::Acquire);
            let nonce = self.driver_nonce.load(Ordering::Acquire);
            match cells.driver_pid() {
                0 => cells.register_driver(driver, start, nonce),
                p if p != driver
                    || cells.driver_start() != start
                    || cells.driver_nonce() != nonce =>
                {
                    return Some(Damage::ForeignDriver { pid: p })
                }
                _ => {}
            }
        }
        let guard = self.guard.load(Ordering::Acquire);
        if guard != 0 {
            let (pid, holding) = (guard as u32, guard >> 32 != 0);
            let start = self.guard_start.load(Ordering::Acquire);
            match cells.guard() {
                (0, _) => cells.set_guard(pid, start, holding),
                (p, _) if p != pid || cells.guard_start() != start => {
                    return Some(Damage::ForeignGuard { pid: p })
                }
                (_, h) if h != holding => cells.set_guard(pid, start, holding),
                _ => {}
            }
        }
        None
    }

    /// Stores this holder's registration (after a repair or replacement).
    fn restore_identity(&self, cells: &Cells) {
        let driver = self.driver.load(Ordering::Acquire);
        if driver != 0 {
            cells.register_driver(
                driver,
                self.driver_start.load(Ordering::Acquire),
                self.driver_nonce.load(Ordering::Acquire),
            );
        }
        let guard = self.guard.load(Ordering::Acquire);
        if guard != 0 {
            cells.set_guard(
                guard as u32,
                self.guard_start.load(Ordering::Acquire),
                guard >> 32 != 0,
            );
        }
    }

    fn repair(&self, m: &Mapping, found: Damage) -> Integrity {
        self.damage.store(found.encode(), Ordering::Release);
        let cells = m.cells();
        let detached = m.detached();
        if detached.is_none() {
            // Trip the mapped page at once, then make the file whole.
            trip_lost(cells, monotonic_ns());
        }
        match sigbus::back(m.fd()) {
            Ok(()) => {
                if let (Some(slot), Some(_)) = (m.slot, detached) {
                    if !sigbus::reattach(slot) {
                        return Integrity::Repaired;
                    }
                }
                make_whole_lost(cells, self.seen.load(Ordering::Acquire), monotonic_ns());
                self.restore_identity(cells);
                self.seen.store(cells.trip_count(), Ordering::Release);
            }
            Err(errno) => {
                // The file cannot hold the page (a full filesystem): read
                // zeroed private memory (tripped page-lost) until it can.
                self.damage
                    .store(Damage::Unbacked { errno }.encode(), Ordering::Release);
                // (The handler may have detached it meanwhile, on the
                // force_trip above.)
                if let (Some(slot), None) = (m.slot, m.detached()) {
                    sigbus::detach(slot, errno);
                }
            }
        }
        Integrity::Repaired
    }

    #[allow(clippy::vec_box)]
    fn replace(&self, old: &Mapping, all: &mut Vec<Box<Mapping>>, why: Damage) -> Integrity {
        // The mapped page is lost to this holder: trip it (first reason
        // kept; a page without magic reads page-lost anyway).
        old.cells()
            .trip(Reason::PageLost, monotonic_ns(), unix_ns());
        let seen = self.seen.load(Ordering::Acquire);
        match map_page(&self.cpath, Make::Lost { seen }) {
            Ok((m, _)) => {
                self.restore_identity(m.cells());
                self.seen.store(m.cells().trip_count(), Ordering::Release);
                let ptr = &*m as *const Mapping as *mut Mapping;
                all.push(m);
                // Release: the new page, initialized tripped, is visible to
                // every reader that loads this pointer (Acquire in `cells`).
                self.current.store(ptr, Ordering::Release);
                self.damage.store(why.encode(), Ordering::Release);
            }
            Err(f) => self.damage.store(f.damage().encode(), Ordering::Release),
        }
        Integrity::Replaced
    }
}

/// The first half of a repair: trips the page `page-lost` whatever it
/// stored (damage: the stored reason is not trusted), at once.
pub(crate) fn trip_lost(cells: &Cells, now_ns: u64) {
    cells.force_trip(Reason::PageLost, now_ns, unix_ns());
}

/// The second half of a repair (and the opening of a page found without
/// its magic): makes the page whole, tripped `page-lost`, with a new nonce
/// and a `trip_count` beyond both its own and [`repaired_count_floor`] of
/// `seen` (the highest count the repairing holder read), stamped `now_ns`
/// (the switch's clock). One `getrandom`, one wall clock read, no
/// allocation.
pub(crate) fn make_whole_lost(cells: &Cells, seen: u64, now_ns: u64) {
    cells.initialize_after(
        Reason::PageLost,
        now_ns,
        unix_ns(),
        repaired_count_floor(seen, now_ns),
        fresh_nonce(),
    );
}

/// The count a repaired page goes beyond: the highest count the repairer
/// read, and the monotonic clock (`now_ns`) in microseconds. A page whose count was
/// destroyed (zeroed, truncated) cannot say what any holder last read, and
/// a repairer that read nothing (`naoctl`) would otherwise make it 1 again,
/// the very count a running runtime may hold: repaired and re-armed within
/// one of its cycles, the page would look unchanged to it. CLOCK_MONOTONIC
/// is one clock for every process and only a floor here (no two clocks are
/// compared); it grows far faster than trips, so a repaired count is one
/// no holder has read, and counts keep growing.
fn repaired_count_floor(seen: u64, now_ns: u64) -> u64 {
    seen.max(now_ns / 1_000)
}

/// A new random value for the page (its `nonce` when made whole, a
/// re-arm's `arm_nonce`, a runtime's `driver_nonce`): 8 random bytes from
/// the kernel (`getrandom`, non-blocking), else the clocks, the pid and a
/// stack address mixed (a boot so early that the kernel has no entropy yet
/// still gets a value that differs between calls, though not one a local
/// process could not guess). Never 0. One syscall, no allocation.
pub(crate) fn fresh_nonce() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid, writable 8-byte buffer; getrandom only writes it.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    let v = if n == 8 {
        u64::from_le_bytes(b)
    } else {
        crate::cells::mix64(
            monotonic_ns()
                ^ unix_ns().rotate_left(17)
                ^ u64::from(std::process::id()) << 40
                ^ (b.as_ptr() as u64).rotate_left(29),
        )
    };
    v.max(1)
}
