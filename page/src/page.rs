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

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::cells::{Cells, LEN, VERSION};
use crate::time::{now_ns, unix_now_ns};
use crate::{sigbus, Reason, Snapshot};

/// The page's default path on the robot.
pub const ROBOT_PATH: &str = "/run/nao-rs/deathswitch";
/// The environment variable that overrides [`ROBOT_PATH`].
pub const ENV_PATH: &str = "NAO_RS_DEATHSWITCH";

/// `$NAO_RS_DEATHSWITCH` when set (and not empty), else `/run/nao-rs/deathswitch`.
pub fn default_path() -> PathBuf {
    match std::env::var_os(ENV_PATH) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(ROBOT_PATH),
    }
}

/// Why a page could not be opened. `Display` names the path and the fix.
#[derive(Debug)]
pub enum PageError {
    /// The page's directory does not exist.
    MissingDir {
        /// The page path.
        path: PathBuf,
    },
    /// Permission denied opening or creating the page.
    Permission {
        /// The page path.
        path: PathBuf,
    },
    /// The page holds another layout version.
    Version {
        /// The page path.
        path: PathBuf,
        /// The version found in the page.
        found: u32,
    },
    /// Any other I/O error.
    Io {
        /// The page path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::MissingDir { path } => {
                let dir = path.parent().unwrap_or(Path::new("/"));
                write!(
                    f,
                    "cannot create the death switch page {}: the directory {} does not exist. \
                     On the robot systemd-tmpfiles creates /run/nao-rs at boot (owner root:hal, \
                     mode 2770) from the nao-rs tmpfiles.d entry \
                     (/usr/lib/tmpfiles.d/nao-rs.conf: `d /run/nao-rs 2770 root hal -`): install \
                     it and run `systemd-tmpfiles --create`; elsewhere set {ENV_PATH} to a path in \
                     an existing directory",
                    path.display(),
                    dir.display()
                )
            }
            PageError::Permission { path } => write!(
                f,
                "permission denied opening the death switch page {}: the page is shared by group \
                 `hal` with mode 0660 (its directory /run/nao-rs is root:hal mode 2770). Add this \
                 user to group hal (`sudo usermod -aG hal $USER`, then log in again), or fix the \
                 mode (`chgrp hal {0}; chmod 0660 {0}`)",
                path.display()
            ),
            PageError::Version { path, found } => write!(
                f,
                "the death switch page {} has layout version {found}, this nao-rs uses version \
                 {VERSION}: stop the processes of the other nao-rs version and remove the page \
                 (`rm {0}`; a new page starts tripped), or use the matching nao-rs",
                path.display()
            ),
            PageError::Io { path, op, source } => {
                write!(f, "{op} the death switch page {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for PageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PageError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What [`Page::check`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// The path names the mapped file, whole, with its magic.
    Intact,
    /// The file was truncated or lost its magic: made whole, tripped `page-lost`.
    Repaired,
    /// The path was deleted or names another file: now mapped to the page at
    /// the path (created if gone), tripped `page-lost`.
    Replaced,
}

/// What [`Page::open`] found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// An existing, whole page with its magic.
    Existing,
    /// No file: created, tripped `boot`.
    Created,
    /// A short file or one without the magic: made whole, tripped `page-lost`.
    MadeWhole,
}

/// One mapping of one page file, kept until the [`Page`] is dropped.
struct Mapping {
    raw: memmap2::MmapRaw,
    _file: File,
    fd: i32,
    dev: u64,
    ino: u64,
    slot: Option<usize>,
}

impl Mapping {
    fn cells(&self) -> &Cells {
        // SAFETY: the mapping is at least LEN bytes, page aligned (so aligned
        // for Cells), shared, and only ever accessed through atomics; it
        // lives as long as `self`.
        unsafe { &*(self.raw.as_mut_ptr() as *const Cells) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            sigbus::unregister(s);
        }
    }
}

/// The death switch page, mapped shared. `Send + Sync`; every method takes
/// `&self`; share one `Page` between threads with an `Arc`.
pub struct Page {
    path: PathBuf,
    current: AtomicPtr<Mapping>,
    // Boxed: `current` points at a mapping, whose address must not move
    // when the list grows.
    #[allow(clippy::vec_box)]
    all: Mutex<Vec<Box<Mapping>>>,
    opening: Opening,
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

/// How the file was obtained.
#[derive(PartialEq, Eq)]
enum Opened {
    Created,
    Existing,
}

fn io_error(path: &Path, op: &'static str, e: io::Error) -> PageError {
    match e.kind() {
        io::ErrorKind::PermissionDenied => PageError::Permission {
            path: path.to_path_buf(),
        },
        _ => PageError::Io {
            path: path.to_path_buf(),
            op,
            source: e,
        },
    }
}

/// Opens the file at `path`: an existing page without `O_CREAT`, else a new
/// one with `O_CREAT|O_EXCL` and `fchmod` 0660.
fn open_file(path: &Path) -> Result<(File, Opened), PageError> {
    for _ in 0..8 {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => return Ok((f, Opened::Existing)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(path, "opening", e)),
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o660)
            .open(path)
        {
            Ok(f) => {
                f.set_permissions(std::fs::Permissions::from_mode(0o660))
                    .map_err(|e| io_error(path, "setting mode 0660 on", e))?;
                return Ok((f, Opened::Created));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(PageError::MissingDir {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(io_error(path, "creating", e)),
        }
    }
    Err(PageError::Io {
        path: path.to_path_buf(),
        op: "opening",
        source: io::Error::other("the file appeared and vanished 8 times in a row"),
    })
}

/// Opens or creates the file, makes it whole and maps it. `force` trips the
/// page `page-lost` whatever it holds (replacement).
fn map_page(path: &Path, force_lost: bool) -> Result<(Box<Mapping>, Opening), PageError> {
    let (file, opened) = open_file(path)?;
    let meta = file
        .metadata()
        .map_err(|e| io_error(path, "reading the size of", e))?;
    let short = meta.len() < LEN as u64;
    if short {
        file.set_len(LEN as u64)
            .map_err(|e| io_error(path, "extending", e))?;
    }
    // A shared mapping of a file we keep open; it is only accessed through
    // atomics, and truncation by others is handled by the SIGBUS handler
    // registered below.
    let raw = memmap2::MmapOptions::new()
        .len(LEN)
        .map_raw(&file)
        .map_err(|e| io_error(path, "mapping", e))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let slot = sigbus::register(raw.as_mut_ptr() as usize, LEN, fd);
    let m = Box::new(Mapping {
        raw,
        _file: file,
        fd,
        dev: meta.dev(),
        ino: meta.ino(),
        slot,
    });
    let cells = m.cells();
    let mut opening = Opening::Existing;
    if force_lost {
        cells.initialize(Reason::PageLost, now_ns(), unix_now_ns());
        opening = Opening::MadeWhole;
    } else if opened == Opened::Created {
        cells.initialize(Reason::Boot, now_ns(), unix_now_ns());
        opening = Opening::Created;
    } else if short || !cells.magic_present() {
        cells.initialize(Reason::PageLost, now_ns(), unix_now_ns());
        opening = Opening::MadeWhole;
    } else if cells.version() != VERSION {
        return Err(PageError::Version {
            path: path.to_path_buf(),
            found: cells.version(),
        });
    }
    Ok((m, opening))
}

impl Page {
    /// Opens the page at `path` by the opening rules: an existing page
    /// without `O_CREAT`; a new page with mode 0660 whatever the umask
    /// (`O_CREAT|O_EXCL`, then `fchmod`), tripped `boot`; an existing page
    /// without the magic, or shorter than the layout, made whole and tripped
    /// `page-lost`.
    pub fn open(path: &Path) -> Result<Page, PageError> {
        let (m, opening) = map_page(path, false)?;
        let ptr = &*m as *const Mapping as *mut Mapping;
        Ok(Page {
            path: path.to_path_buf(),
            current: AtomicPtr::new(ptr),
            all: Mutex::new(vec![m]),
            opening,
        })
    }

    /// Opens the page at [`default_path`].
    pub fn open_default() -> Result<Page, PageError> {
        Page::open(&default_path())
    }

    fn cells(&self) -> &Cells {
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

    /// What [`Page::open`] found at the path.
    pub fn opening(&self) -> Opening {
        self.opening
    }

    /// The path the page was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Trips with `reason` if armed (compare-and-swap from 0): true when
    /// this call tripped it; the first reason stays until re-arm. Safe from
    /// any thread, process and signal handler (atomics and `clock_gettime`).
    pub fn trip(&self, reason: Reason) -> bool {
        let cells = self.cells();
        // Already tripped: no clock reads (the compare-and-swap would fail).
        if cells.reason_code() != 0 {
            return false;
        }
        cells.trip(reason, now_ns(), unix_now_ns())
    }

    /// Re-arms the switch. For `naoctl rearm` only: re-arming is a person's
    /// decision, and no runtime, guard, API or timeout may call this.
    pub fn rearm(&self) {
        self.cells().rearm(unix_now_ns())
    }

    /// True when tripped or without its magic. Atomic loads only, no syscall.
    pub fn is_tripped(&self) -> bool {
        self.cells().is_tripped()
    }

    /// Armed -> tripped transitions since the page was made whole
    /// ([`Cells::trip_count`]).
    pub fn trip_count(&self) -> u64 {
        self.cells().trip_count()
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

    /// Stores the runtime's process id in `driver_pid`.
    pub fn register_driver(&self, pid: u32) {
        self.cells().register_driver(pid)
    }

    /// Guard hand-over: clears the heartbeat fields, keeps `driver_pid`.
    pub fn clear_heartbeat(&self) {
        self.cells().clear_heartbeat()
    }

    /// Guard release: clears `driver_pid` and the heartbeat.
    pub fn clear_driver(&self) {
        self.cells().clear_driver()
    }

    /// Guard release without a race: clears `driver_pid` (and then the
    /// heartbeat) only while it still is `pid`; false when a restarted
    /// runtime registered in the meantime (its registration is kept).
    pub fn clear_driver_if(&self, pid: u32) -> bool {
        self.cells().clear_driver_if(pid)
    }

    /// Publishes the runtime's [`crate::flags::SafetyFlags`] bits.
    pub fn set_safety_flags(&self, bits: u32) {
        self.cells().set_safety_flags(bits)
    }

    /// The published safety flag bits.
    pub fn safety_flags(&self) -> u32 {
        self.cells().safety_flags()
    }

    /// The guard publishes its process id (0: none) and whether it holds the
    /// chest board.
    pub fn set_guard(&self, pid: u32, holding_board: bool) {
        self.cells().set_guard(pid, holding_board)
    }

    /// One `stat()` of the path against the mapped file, and the magic.
    /// Repairs what it finds: a short file or lost magic is made whole and
    /// tripped `page-lost` ([`Integrity::Repaired`]); a deleted path or one
    /// naming another file trips the old page, maps the page at the path
    /// (created if gone) tripped `page-lost`, and switches every user of this
    /// `Page` to it ([`Integrity::Replaced`]). Never blocks: when another
    /// thread is checking right now it returns `Intact` at once. Allocates
    /// only when replacing.
    pub fn check(&self) -> Integrity {
        let Ok(mut all) = self.all.try_lock() else {
            return Integrity::Intact;
        };
        let m = self.mapping();
        match std::fs::metadata(&self.path) {
            Ok(st) if st.dev() == m.dev && st.ino() == m.ino => {
                if st.len() >= LEN as u64 && m.cells().magic_ok() {
                    return Integrity::Intact;
                }
                self.repair(m);
                Integrity::Repaired
            }
            Ok(_) => self.replace(m, &mut all),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.replace(m, &mut all),
            Err(_) => {
                // The path can't be examined (e.g. a directory lost its
                // search permission): judge the mapped page alone.
                if m.cells().magic_ok() {
                    Integrity::Intact
                } else {
                    self.repair(m);
                    Integrity::Repaired
                }
            }
        }
    }

    fn repair(&self, m: &Mapping) {
        let cells = m.cells();
        // Trip the mapped page at once, then make the file whole.
        cells.force_trip(Reason::PageLost, now_ns(), unix_now_ns());
        // SAFETY: ftruncate on the descriptor we keep open for this mapping.
        unsafe { libc::ftruncate(m.fd, LEN as libc::off_t) };
        cells.initialize(Reason::PageLost, now_ns(), unix_now_ns());
    }

    #[allow(clippy::vec_box)]
    fn replace(&self, old: &Mapping, all: &mut Vec<Box<Mapping>>) -> Integrity {
        old.cells()
            .force_trip(Reason::PageLost, now_ns(), unix_now_ns());
        if let Ok((m, _)) = map_page(&self.path, true) {
            let ptr = &*m as *const Mapping as *mut Mapping;
            all.push(m);
            // Release: the new page, initialized tripped, is visible to every
            // reader that loads this pointer (Acquire in `cells`).
            self.current.store(ptr, Ordering::Release);
        }
        Integrity::Replaced
    }

    /// How many files this `Page` has mapped (1 + replacements).
    pub fn mappings(&self) -> usize {
        match self.all.lock() {
            Ok(v) => v.len(),
            Err(p) => p.into_inner().len(),
        }
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
