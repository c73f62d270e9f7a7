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
//! pid through [`Page::register_driver`], the guard's pid and holding
//! through [`Page::set_guard`]) and stores it again right after every
//! repair or replacement, and whenever a check finds it zeroed by another
//! holder's repair, all inside [`Page::check`].
//!
//! `check` allocates nothing on any path except a successful replacement
//! (one `Box` for the new mapping): the path is kept as a `CString` made at
//! [`Page::open`] and every file operation is a `libc` call on it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cells::{Cells, LEN, VERSION};
use crate::damage::Damage;
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
    /// No file at the path (read-only inspection creates nothing).
    Missing {
        /// The page path.
        path: PathBuf,
    },
    /// The path names something that is not a regular file (a directory,
    /// a fifo, a device, a socket).
    NotAFile {
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
            PageError::Missing { path } => write!(
                f,
                "there is no death switch page at {}: nothing has created it yet. nao-rs, \
                 nao-rs-guard and `naoctl stop` create it (a new page starts tripped); a \
                 missing page counts as tripped",
                path.display()
            ),
            PageError::NotAFile { path } => write!(
                f,
                "the death switch page path {0} names something that is not a regular file (a \
                 directory, fifo, socket or device): every holder counts the page as lost \
                 (tripped page-lost). Remove it (`rm -r {0}`); the next nao-rs, nao-rs-guard \
                 or `naoctl stop` creates a new page (tripped)",
                path.display()
            ),
            PageError::Io { path, op, source } => {
                write!(f, "{op} the death switch page {}: {source}", path.display())?;
                if let Some(e) = source.raw_os_error() {
                    f.write_str(". ")?;
                    f.write_str(&fix(path, e))?;
                }
                Ok(())
            }
        }
    }
}

/// What to do about `errno` at the page path (the fix half of an error).
pub fn fix(path: &Path, errno: i32) -> String {
    let dir = path.parent().unwrap_or(Path::new("/")).display();
    let p = path.display();
    let lost = "until then every running holder counts the page as lost (tripped page-lost)";
    match errno {
        libc::ELOOP => format!(
            "{p} (or a link on its way) is a symbolic link loop: remove the link (`ls -l {p}`, \
             `rm {p}`) so a page can be created; {lost}"
        ),
        libc::ENOTDIR => format!(
            "a directory on the way to {p} is not a directory (replaced by a file?): remove that \
             file and recreate the directory (`ls -ld {dir}`; on the robot `rm {dir}; \
             systemd-tmpfiles --create` makes /run/nao-rs root:hal 2770); {lost}"
        ),
        libc::EISDIR => format!(
            "{p} is a directory: remove it (`rm -r {p}`); the next nao-rs, nao-rs-guard or \
             `naoctl stop` creates a new page (tripped); {lost}"
        ),
        libc::ENOSPC | libc::EDQUOT => format!(
            "the filesystem holding {dir} is full: free space there (`df {dir}`; /run is a small \
             tmpfs); {lost}"
        ),
        libc::EROFS => {
            format!("the filesystem holding {dir} is read-only: remount it read-write; {lost}")
        }
        libc::ENAMETOOLONG => {
            format!("the path is too long: set {ENV_PATH} to a shorter path; {lost}")
        }
        libc::ENOENT => format!(
            "a directory on the way to {p} is missing: recreate it (on the robot \
             `systemd-tmpfiles --create`); {lost}"
        ),
        _ => format!("check the path (`ls -l {p}`, `ls -ld {dir}`); {lost}"),
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
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    slot: Option<usize>,
}

impl Mapping {
    fn cells(&self) -> &Cells {
        // SAFETY: the mapping is at least LEN bytes, page aligned (so aligned
        // for Cells), shared (or, once detached, private anonymous memory at
        // the same address), and only ever accessed through atomics; it
        // lives as long as `self`.
        unsafe { &*(self.raw.as_mut_ptr() as *const Cells) }
    }

    fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The errno that detached this mapping from its file, if it is.
    fn detached(&self) -> Option<i32> {
        self.slot.and_then(sigbus::detached)
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
    /// The path for libc calls, made once at open (no allocation in `check`).
    cpath: CString,
    current: AtomicPtr<Mapping>,
    // Boxed: `current` points at a mapping, whose address must not move
    // when the list grows. Capacity for every SIGBUS slot is reserved at
    // open, so a replacement's push does not allocate either.
    #[allow(clippy::vec_box)]
    all: Mutex<Vec<Box<Mapping>>>,
    opening: Opening,
    /// The runtime pid this holder registered (0: none).
    driver: AtomicU32,
    /// That runtime's start time (`driver_start`; 0 unknown).
    driver_start: AtomicU64,
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

/// How the file was obtained.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Opened {
    Created,
    Existing,
}

/// Why a page file could not be opened, without allocating (converted to
/// a [`PageError`] by `open`, to a [`Damage`] by `check`).
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A system call failed with this errno.
    Sys { op: &'static str, errno: i32 },
    /// Backing the file (`fallocate`/`ftruncate`) failed with this errno.
    Back { errno: i32 },
    /// The directory does not exist.
    MissingDir,
    /// Not a regular file.
    NotAFile,
    /// Another layout version.
    Version(u32),
    /// The file appeared and vanished 8 times in a row.
    Vanished,
}

impl Fault {
    fn damage(self) -> Damage {
        match self {
            Fault::Sys { errno, .. } => Damage::Path { errno },
            Fault::Back { errno } => Damage::Unbacked { errno },
            Fault::MissingDir | Fault::Vanished => Damage::Path {
                errno: libc::ENOENT,
            },
            Fault::NotAFile => Damage::Path { errno: 0 },
            Fault::Version(found) => Damage::OtherVersion { found },
        }
    }

    fn into_error(self, path: &Path) -> PageError {
        let path = path.to_path_buf();
        match self {
            Fault::Sys { errno, .. } if errno == libc::EACCES || errno == libc::EPERM => {
                PageError::Permission { path }
            }
            Fault::Sys { op, errno } => PageError::Io {
                path,
                op,
                source: io::Error::from_raw_os_error(errno),
            },
            Fault::Back { errno } => PageError::Io {
                path,
                op: "extending",
                source: io::Error::from_raw_os_error(errno),
            },
            Fault::MissingDir => PageError::MissingDir { path },
            Fault::NotAFile => PageError::NotAFile { path },
            Fault::Version(found) => PageError::Version { path, found },
            Fault::Vanished => PageError::Io {
                path,
                op: "opening",
                source: io::Error::other("the file appeared and vanished 8 times in a row"),
            },
        }
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn c_path(path: &Path) -> Result<CString, PageError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| PageError::Io {
        path: path.to_path_buf(),
        op: "naming",
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"),
    })
}

/// Flags of every open of the page: no controlling terminal, no blocking
/// on a fifo someone put at the path (it is refused as not a file).
const OPEN_FLAGS: libc::c_int = libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

fn is_regular(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// Opens the file at `path`: an existing page without `O_CREAT`, else a new
/// one with `O_CREAT|O_EXCL` and `fchmod` 0660. libc calls only.
fn open_file(path: &std::ffi::CStr) -> Result<(OwnedFd, Opened), Fault> {
    for _ in 0..8 {
        // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | OPEN_FLAGS) };
        if fd >= 0 {
            // SAFETY: a descriptor we just opened and own.
            return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, Opened::Existing));
        }
        let e = errno();
        if e != libc::ENOENT {
            return Err(Fault::Sys {
                op: "opening",
                errno: e,
            });
        }
        // SAFETY: as above; mode 0660 (then fchmod, whatever the umask).
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | OPEN_FLAGS,
                0o660 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor we just created and own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: fchmod on our own descriptor.
            if unsafe { libc::fchmod(fd.as_raw_fd(), 0o660) } != 0 {
                return Err(Fault::Sys {
                    op: "setting mode 0660 on",
                    errno: errno(),
                });
            }
            return Ok((fd, Opened::Created));
        }
        match errno() {
            libc::EEXIST => continue,
            libc::ENOENT => return Err(Fault::MissingDir),
            e => {
                return Err(Fault::Sys {
                    op: "creating",
                    errno: e,
                })
            }
        }
    }
    Err(Fault::Vanished)
}

/// How `map_page` initialises what it maps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Make {
    /// The opening rules; another layout version is refused.
    Open,
    /// The opening rules, but another layout version is made whole too
    /// (`naoctl stop`: a stop must land).
    OpenAny,
    /// Trip the page `page-lost` whatever it holds (replacement), its
    /// `trip_count` beyond `seen`.
    Lost { seen: u64 },
}

/// Opens or creates the file, backs it (allocated, at least `LEN` bytes),
/// maps it and initialises it by `make`. Allocates only the returned `Box`.
fn map_page(path: &std::ffi::CStr, make: Make) -> Result<(Box<Mapping>, Opening), Fault> {
    let (fd, opened) = open_file(path)?;
    // SAFETY: a zeroed stat is a valid out-buffer; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Fault::Sys {
            op: "reading the size of",
            errno: errno(),
        });
    }
    if !is_regular(&st) {
        return Err(Fault::NotAFile);
    }
    let short = (st.st_size as u64) < LEN as u64;
    // Allocate the page's bytes now: a full filesystem fails here, cleanly,
    // rather than with SIGBUS at the first access.
    sigbus::back(fd.as_raw_fd()).map_err(|errno| Fault::Back { errno })?;
    // A shared mapping of a file we keep open; it is only accessed through
    // atomics, and truncation by others is handled by the SIGBUS handler
    // registered below.
    let raw = memmap2::MmapOptions::new()
        .len(LEN)
        .map_raw(fd.as_raw_fd())
        .map_err(|e| Fault::Sys {
            op: "mapping",
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        })?;
    let slot = sigbus::register(raw.as_mut_ptr() as usize, LEN, fd.as_raw_fd());
    let m = Box::new(Mapping {
        raw,
        fd,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        slot,
    });
    let cells = m.cells();
    let lost = |seen: u64| {
        make_whole_lost(cells, seen);
        Opening::MadeWhole
    };
    let opening = match make {
        Make::Lost { seen } => lost(seen),
        _ if opened == Opened::Created => {
            cells.initialize(Reason::Boot, now_ns(), unix_now_ns(), fresh_nonce());
            Opening::Created
        }
        _ if short || !cells.magic_present() => lost(0),
        Make::Open if cells.version() != VERSION => return Err(Fault::Version(cells.version())),
        Make::OpenAny if cells.version() != VERSION => lost(0),
        _ => Opening::Existing,
    };
    Ok((m, opening))
}

/// The first half of a repair: trips the page `page-lost` whatever it
/// stored (damage: the stored reason is not trusted), at once.
pub(crate) fn trip_lost(cells: &Cells) {
    cells.force_trip(Reason::PageLost, now_ns(), unix_now_ns());
}

/// The second half of a repair (and the opening of a page found without
/// its magic): makes the page whole, tripped `page-lost`, with a new nonce
/// and a `trip_count` beyond both its own and [`repaired_count_floor`] of
/// `seen` (the highest count the repairing holder read). One `getrandom`,
/// two clock reads, no allocation.
pub(crate) fn make_whole_lost(cells: &Cells, seen: u64) {
    cells.initialize_after(
        Reason::PageLost,
        now_ns(),
        unix_now_ns(),
        repaired_count_floor(seen),
        fresh_nonce(),
    );
}

/// The count a repaired page goes beyond: the highest count the repairer
/// read, and the monotonic clock in microseconds. A page whose count was
/// destroyed (zeroed, truncated) cannot say what any holder last read, and
/// a repairer that read nothing (`naoctl`) would otherwise make it 1 again,
/// the very count a running runtime may hold: repaired and re-armed within
/// one of its cycles, the page would look unchanged to it. CLOCK_MONOTONIC
/// is one clock for every process and only a floor here (no two clocks are
/// compared); it grows far faster than trips, so a repaired count is one
/// no holder has read, and counts keep growing.
fn repaired_count_floor(seen: u64) -> u64 {
    seen.max(now_ns() / 1_000)
}

/// A new page's nonce: 8 random bytes from the kernel (`getrandom`,
/// non-blocking), else the clocks and the pid mixed (a boot so early that
/// the kernel has no entropy yet still gets a value that differs between
/// pages). Never 0. One syscall, no allocation.
fn fresh_nonce() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid, writable 8-byte buffer; getrandom only writes it.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    let v = if n == 8 {
        u64::from_le_bytes(b)
    } else {
        // splitmix64 of the clocks and the pid.
        let mut z = now_ns() ^ unix_now_ns().rotate_left(17) ^ u64::from(std::process::id()) << 40;
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    v.max(1)
}

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
    pub fn open(path: &Path) -> Result<Page, PageError> {
        Page::open_with(path, Make::Open)
    }

    /// [`Page::open`] for a stop (`naoctl stop`): a page of another layout
    /// version is made whole and tripped `page-lost` too, so any file at
    /// the path becomes a tripped page (a stop must land).
    pub fn open_to_trip(path: &Path) -> Result<Page, PageError> {
        Page::open_with(path, Make::OpenAny)
    }

    fn open_with(path: &Path, make: Make) -> Result<Page, PageError> {
        let cpath = c_path(path)?;
        let (m, opening) = map_page(&cpath, make).map_err(|f| f.into_error(path))?;
        let ptr = &*m as *const Mapping as *mut Mapping;
        let seen = m.cells().trip_count();
        let mut all = Vec::with_capacity(sigbus::SLOTS + 1);
        all.push(m);
        Ok(Page {
            path: path.to_path_buf(),
            cpath,
            current: AtomicPtr::new(ptr),
            all: Mutex::new(all),
            opening,
            driver: AtomicU32::new(0),
            driver_start: AtomicU64::new(0),
            guard: AtomicU64::new(0),
            guard_start: AtomicU64::new(0),
            seen: AtomicU64::new(seen),
            damage: AtomicU64::new(0),
        })
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
        crate::switch::trip_now(self.cells(), reason)
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

    /// Stores the runtime's identity (`driver_pid` and its start time,
    /// looked up once here: [`crate::process::start_time`]) and remembers
    /// it: [`Page::check`] stores it again after any repair or replacement,
    /// and counts another identity in the page as damage. `0` clears the
    /// registration (nothing is stored again).
    pub fn register_driver(&self, pid: u32) {
        let start = crate::process::start_time(pid).unwrap_or(0);
        self.driver_start.store(start, Ordering::Release);
        self.driver.store(pid, Ordering::Release);
        self.cells().register_driver(pid, start)
    }

    /// The runtime publishes its motion state (every frame; one store).
    pub fn set_motion(&self, motion: crate::Motion) {
        self.cells().set_motion(motion)
    }

    /// The runtime pid this holder registered ([`Page::register_driver`]).
    pub fn registered_driver(&self) -> Option<u32> {
        match self.driver.load(Ordering::Acquire) {
            0 => None,
            p => Some(p),
        }
    }

    /// Guard hand-over: clears the heartbeat fields, keeps `driver_pid`.
    pub fn clear_heartbeat(&self) {
        self.cells().clear_heartbeat()
    }

    /// Guard release: clears `driver_pid` and the heartbeat (and this
    /// holder's own driver registration, if any).
    pub fn clear_driver(&self) {
        self.driver.store(0, Ordering::Release);
        self.cells().clear_driver()
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

    /// Publishes the runtime's [`crate::flags::SafetyFlags`] bits.
    pub fn set_safety_flags(&self, bits: u32) {
        self.cells().set_safety_flags(bits)
    }

    /// The published safety flag bits.
    pub fn safety_flags(&self) -> u32 {
        self.cells().safety_flags()
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
        if let Some(d) = cells.judge(now_ns) {
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
            match cells.driver_pid() {
                0 => cells.register_driver(driver, start),
                p if p != driver || cells.driver_start() != start => {
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
            cells.register_driver(driver, self.driver_start.load(Ordering::Acquire));
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
            trip_lost(cells);
        }
        match sigbus::back(m.fd()) {
            Ok(()) => {
                if let (Some(slot), Some(_)) = (m.slot, detached) {
                    if !sigbus::reattach(slot) {
                        return Integrity::Repaired;
                    }
                }
                make_whole_lost(cells, self.seen.load(Ordering::Acquire));
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
        old.cells().trip(Reason::PageLost, now_ns(), unix_now_ns());
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

    /// How many files this `Page` has mapped (1 + replacements).
    pub fn mappings(&self) -> usize {
        match self.all.lock() {
            Ok(v) => v.len(),
            Err(p) => p.into_inner().len(),
        }
    }
}

/// What [`inspect`] read at a page path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    /// Every field as read (a short file reads zeros beyond its end; a page
    /// without its magic reads tripped `page-lost`).
    pub snapshot: Snapshot,
    /// What is wrong with it (`None`: a sound page). Any damage counts as
    /// tripped `page-lost` for every holder.
    pub damage: Option<Damage>,
    /// The file's length in bytes.
    pub len: u64,
}

/// Reads the page at `path` without changing anything (`naoctl status`):
/// `O_RDONLY` (`O_NOATIME` where permitted), one `pread`, no mapping, no
/// creation, no repair. Errors: no file ([`PageError::Missing`], or
/// [`PageError::MissingDir`]), not a regular file, permission, any other
/// errno (named, with the fix). A file that is not a sound page is `Ok`
/// with its [`Damage`].
pub fn inspect(path: &Path) -> Result<Inspection, PageError> {
    let cpath = c_path(path)?;
    let flags = libc::O_RDONLY | OPEN_FLAGS;
    // SAFETY: a NUL-terminated path; open returns a descriptor or -1.
    let mut fd = unsafe { libc::open(cpath.as_ptr(), flags | libc::O_NOATIME) };
    if fd < 0 && errno() == libc::EPERM {
        // SAFETY: as above (O_NOATIME is for the owner only).
        fd = unsafe { libc::open(cpath.as_ptr(), flags) };
    }
    if fd < 0 {
        let e = errno();
        let dir = path.parent().unwrap_or(Path::new("/"));
        return Err(match e {
            libc::ENOENT if dir.as_os_str().is_empty() || dir.is_dir() => PageError::Missing {
                path: path.to_path_buf(),
            },
            libc::ENOENT => PageError::MissingDir {
                path: path.to_path_buf(),
            },
            libc::EISDIR => PageError::NotAFile {
                path: path.to_path_buf(),
            },
            e => Fault::Sys {
                op: "opening",
                errno: e,
            }
            .into_error(path),
        });
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed stat is a valid out-buffer; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Fault::Sys {
            op: "reading the size of",
            errno: errno(),
        }
        .into_error(path));
    }
    if !is_regular(&st) {
        return Err(PageError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = [0u8; LEN];
    let mut got = 0usize;
    while got < LEN {
        // SAFETY: reads into the unfilled tail of our buffer.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                bytes[got..].as_mut_ptr().cast(),
                LEN - got,
                got as libc::off_t,
            )
        };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ if errno() == libc::EINTR => {}
            _ => {
                return Err(Fault::Sys {
                    op: "reading",
                    errno: errno(),
                }
                .into_error(path))
            }
        }
    }
    let len = st.st_size as u64;
    let cells = Cells::from_bytes(&bytes);
    let damage = if got < LEN {
        Some(Damage::Short { len })
    } else {
        cells.judge(now_ns)
    };
    Ok(Inspection {
        snapshot: cells.snapshot(),
        damage,
        len,
    })
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("path", &self.path)
            .field("snapshot", &self.snapshot())
            .finish()
    }
}
