//! The page file: opening rules, the shared mapping, integrity checks and
//! replacement.
//!
//! Replacement design: a [`Page`] holds an `AtomicPtr` to its current
//! [`Mapping`]. Every mapping it ever made is owned by a list behind a
//! mutex and is unmapped only when the `Page` is dropped, so a reader that
//! loaded the old pointer keeps a valid mapping. [`Page::check`] switches the
//! pointer (Release) when the path names another inode or is gone; every
//! holder of the same `Page` (an `Arc`) reads the new page from its next
//! access (Acquire).
//!
//! Identity: a `Page` remembers what its holder registered (the runtime's
//! pid through [`Switch::register`], the guard's pid and holding
//! through [`Page::set_guard`]) and stores it again right after every
//! repair or replacement, and whenever a check finds it zeroed by another
//! holder's repair, all inside [`Page::check`].
//!
//! `check` allocates nothing on any path except a successful replacement
//! (one `Box` for the new mapping): the path is kept as a `CString` made at
//! [`Page::open`] and every file operation is a `libc` call on it.
//!
//! What is where: this file holds [`Page`] (opening, the switch's
//! operations, registration, `impl Switch for Page`); `error` why a page
//! cannot be opened and the fix; `mapping` one mapping of one file and the
//! opening rules; `integrity` the check, repair and replacement; `inspect`
//! the read-only inspection.

mod error;
mod inspect;
mod integrity;
mod mapping;
#[cfg(test)]
mod tests;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cells::Cells;
use crate::damage::Damage;
use crate::switch::checked;
use crate::unix_ns;
use crate::{sigbus, Beat, Reason, Snapshot, Switch};
use error::c_path;
use mapping::{map_page, Make, Mapping};
use nao_kit::clock::MonotonicClock;

pub use error::{fix, PageError};
pub use inspect::{inspect, Inspection};
pub use integrity::Integrity;
pub(crate) use integrity::{fresh_nonce, make_whole_lost, trip_lost};

/// The page's default path on the robot.
pub(crate) const ROBOT_PATH: &str = "/run/nao-rs/deathswitch";
/// The environment variable that overrides [`ROBOT_PATH`].
pub(crate) const ENV_PATH: &str = "NAO_RS_DEATHSWITCH";

/// `$NAO_RS_DEATHSWITCH` when set (and not empty), else `/run/nao-rs/deathswitch`.
pub fn default_path() -> PathBuf {
    match std::env::var_os(ENV_PATH) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(ROBOT_PATH),
    }
}

/// What [`Page::open`] found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// An existing, whole page with its magic.
    Existing,
    /// No file: created, tripped `boot`.
    Created,
    /// A short file or one without the magic: made whole, tripped `page-lost`.
    MadeWhole,
}

/// The death switch page, mapped shared. `Send + Sync`; every method takes
/// `&self`; share one `Page` between threads with an `Arc`.
pub struct Page {
    path: PathBuf,
    /// The path for libc calls, made once at open (no allocation in `check`).
    cpath: CString,
    current: AtomicPtr<Mapping>,
    // Boxed: `current` points at a mapping, whose address must not move
    // when the list grows. Capacity for every SIGBUS slot is reserved at
    // open, so a replacement's push does not allocate either.
    #[allow(clippy::vec_box)]
    all: Mutex<Vec<Box<Mapping>>>,
    /// The runtime pid this holder registered (0: none).
    driver: AtomicU32,
    /// That runtime's start time (`driver_start`; 0 unknown).
    driver_start: AtomicU64,
    /// That runtime's random value (`driver_nonce`; 0: none).
    driver_nonce: AtomicU64,
    /// The guard this holder registered: pid | holding << 32 (0: none).
    guard: AtomicU64,
    /// That guard's start time (`guard_start`; 0 unknown).
    guard_start: AtomicU64,
    /// The highest `trip_count` a check read (a repair goes beyond it).
    seen: AtomicU64,
    /// What the last check found ([`Damage::encode`]; 0: nothing).
    damage: AtomicU64,
}

// SAFETY: the mappings are shared memory accessed only through atomics; the
// list is behind a mutex and the current pointer is atomic.
unsafe impl Send for Page {}
// SAFETY: as above.
unsafe impl Sync for Page {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Page>();
};

/// Encodes a registered guard (pid 0: none).
fn guard_word(pid: u32, holding: bool) -> u64 {
    if pid == 0 {
        0
    } else {
        u64::from(pid) | u64::from(holding) << 32
    }
}

impl Page {
    /// Opens the page at `path` by the opening rules: an existing page
    /// without `O_CREAT`; a new page with mode 0660 whatever the umask
    /// (`O_CREAT|O_EXCL`, then `fchmod`), tripped `boot`; an existing page
    /// without the magic, or shorter than the layout, made whole and tripped
    /// `page-lost`. The file's bytes are allocated (`fallocate`): on a full
    /// filesystem this fails with the fix rather than faulting later.
    ///
    /// # Errors
    ///
    /// [`PageError`], its `Display` naming the path and the fix: the
    /// directory is missing ([`PageError::MissingDir`]), permission denied
    /// ([`PageError::Permission`]), the path names no regular file
    /// ([`PageError::NotAFile`]), a page of another layout version
    /// ([`PageError::Version`]), any other errno, a full filesystem among
    /// them ([`PageError::Io`]).
    pub fn open(path: &Path) -> Result<Page, PageError> {
        Page::opened(path, Make::Open).map(|(page, _)| page)
    }

    /// [`Page::open`] for a stop (`naoctl stop`): a page of another layout
    /// version is made whole and tripped `page-lost` too, so any file at
    /// the path becomes a tripped page (a stop must land).
    ///
    /// # Errors
    ///
    /// As [`Page::open`], but never [`PageError::Version`].
    pub fn open_to_trip(path: &Path) -> Result<Page, PageError> {
        Page::opened(path, Make::OpenAny).map(|(page, _)| page)
    }

    /// The page at `path` by the rules of `make`, and what the opening
    /// found there.
    fn opened(path: &Path, make: Make) -> Result<(Page, Opening), PageError> {
        let cpath = c_path(path)?;
        let (m, opening) = map_page(&cpath, make).map_err(|f| f.into_error(path))?;
        let ptr = &*m as *const Mapping as *mut Mapping;
        let seen = m.cells().trip_count();
        let mut all = Vec::with_capacity(sigbus::SLOTS + 1);
        all.push(m);
        let page = Page {
            path: path.to_path_buf(),
            cpath,
            current: AtomicPtr::new(ptr),
            all: Mutex::new(all),
            driver: AtomicU32::new(0),
            driver_start: AtomicU64::new(0),
            driver_nonce: AtomicU64::new(0),
            guard: AtomicU64::new(0),
            guard_start: AtomicU64::new(0),
            seen: AtomicU64::new(seen),
            damage: AtomicU64::new(0),
        };
        Ok((page, opening))
    }

    pub(crate) fn cells(&self) -> &Cells {
        // Acquire: pairs with the Release store in `check`'s replacement.
        let m = self.current.load(Ordering::Acquire);
        // SAFETY: `current` always points into a Box owned by `self.all`,
        // never freed before `self` is dropped.
        unsafe { (*m).cells() }
    }

    fn mapping(&self) -> &Mapping {
        // SAFETY: as in `cells`.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The path the page was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Trips with `reason` if armed (compare-and-swap from 0): true when
    /// this call tripped it; the first reason stays until re-arm. Safe from
    /// any thread, process and signal handler (atomics and `clock_gettime`).
    pub fn trip(&self, reason: Reason) -> bool {
        crate::switch::trip_now(self.cells(), reason, &MonotonicClock)
    }

    /// Re-arms the switch with a new random `arm_nonce` (so the wake
    /// generation is new: `Snapshot::wake_generation`). For `naoctl rearm`
    /// only: re-arming is a person's decision, and no runtime, guard, API
    /// or timeout may call this.
    pub fn rearm(&self) {
        self.cells().rearm(unix_ns(), fresh_nonce())
    }

    /// The reason (page-lost for a page without its magic), `None` while armed.
    pub fn reason(&self) -> Option<Reason> {
        self.cells().reason()
    }

    /// Every field; the heartbeat loaded cycle, then time, then confirmation.
    pub fn snapshot(&self) -> Snapshot {
        self.cells().snapshot()
    }

    /// The heartbeat after a frame: confirmation (only if `all_off`), then
    /// time, then cycle, Release stores.
    pub fn write_heartbeat(&self, cycle: u64, t_ns: u64, all_off: bool) {
        self.cells().write_heartbeat(cycle, t_ns, all_off)
    }

    /// Guard hand-over: clears the heartbeat fields, keeps `driver_pid`.
    pub fn clear_heartbeat(&self) {
        self.cells().clear_heartbeat()
    }

    /// Guard release without a race: clears `driver_pid` (and then the
    /// heartbeat) only while it still is `pid`; false when a restarted
    /// runtime registered in the meantime (its registration is kept). A
    /// registration of `pid` by this holder is forgotten too.
    pub fn clear_driver_if(&self, pid: u32) -> bool {
        let _ = self
            .driver
            .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        self.cells().clear_driver_if(pid)
    }

    /// The guard publishes its process id (0: none, which clears this
    /// holder's guard registration) and whether it holds the chest board.
    /// Remembered: [`Page::check`] stores it again after any repair or
    /// replacement, and counts another pid in `guard_pid` as damage.
    ///
    /// The guard's start time is looked up when the pid is new to this
    /// holder (not on every call: the guard publishes on every change of
    /// `holding_board`).
    pub fn set_guard(&self, pid: u32, holding_board: bool) {
        let before = self.guard.load(Ordering::Acquire) as u32;
        let start = if pid == 0 {
            0
        } else if before == pid {
            self.guard_start.load(Ordering::Acquire)
        } else {
            crate::process::start_time(pid).unwrap_or(0)
        };
        self.guard_start.store(start, Ordering::Release);
        self.guard
            .store(guard_word(pid, holding_board), Ordering::Release);
        self.cells().set_guard(pid, start, holding_board)
    }

    /// What the last [`Page::check`] that found the page lost found (`None`
    /// after a check that found it intact). For logs and `naoctl`.
    pub fn damage(&self) -> Option<Damage> {
        Damage::decode(self.damage.load(Ordering::Acquire))
    }
}

/// The switch over the page file.
impl Switch for Page {
    /// [`Page::check`], then [`Page::snapshot`]; `Repaired` and `Replaced`
    /// read tripped `page-lost` whatever a racing re-arm left.
    fn read(&self) -> Snapshot {
        let lost = self.check() != Integrity::Intact;
        checked(lost, self.snapshot())
    }

    fn trip(&self, reason: Reason) -> bool {
        Page::trip(self, reason)
    }

    fn beat(&self, beat: &Beat) {
        self.cells().beat(beat)
    }

    /// Stores the runtime's identity (`driver_pid` and its start time,
    /// looked up once here: [`crate::process::start_time`]) and remembers
    /// it: [`Page::check`] stores it again after any repair or replacement,
    /// and counts another identity in the page as damage. `0` clears the
    /// registration (nothing is stored again). Every registration stores a
    /// new random `driver_nonce`: every start of a runtime has its own wake
    /// generation.
    fn register(&self, pid: u32) {
        let start = crate::process::start_time(pid).unwrap_or(0);
        let nonce = if pid == 0 { 0 } else { fresh_nonce() };
        self.driver_start.store(start, Ordering::Release);
        self.driver_nonce.store(nonce, Ordering::Release);
        self.driver.store(pid, Ordering::Release);
        self.cells().register_driver(pid, start, nonce)
    }

    fn path(&self) -> Option<&Path> {
        Some(Page::path(self))
    }

    /// [`Page::snapshot`].
    fn peek(&self) -> Snapshot {
        self.snapshot()
    }
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("path", &self.path)
            .field("snapshot", &self.snapshot())
            .finish()
    }
}
