//! One mapping of one page file ([`Mapping`]) and how a page file is
//! opened, backed, mapped and initialised ([`map_page`]): the opening
//! rules (`docs/page.md`, "Opening rules"), libc calls only.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::error::{errno, Fault};
use super::integrity::{fresh_nonce, make_whole_lost};
use super::Opening;
use crate::cells::{Cells, LEN, MAGIC, VERSION};
use crate::{monotonic_ns, unix_ns};
use crate::{sigbus, Reason};

/// One mapping of one page file, kept until the [`Page`] is dropped.
pub(super) struct Mapping {
    raw: memmap2::MmapRaw,
    fd: OwnedFd,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) slot: Option<usize>,
}

impl Mapping {
    pub(super) fn cells(&self) -> &Cells {
        // SAFETY: the mapping is at least LEN bytes, page aligned (so aligned
        // for Cells), shared (or, once detached, private anonymous memory at
        // the same address), and only ever accessed through atomics; it
        // lives as long as `self`.
        unsafe { &*(self.raw.as_mut_ptr() as *const Cells) }
    }

    pub(super) fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The errno that detached this mapping from its file, if it is.
    pub(super) fn detached(&self) -> Option<i32> {
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

/// How the file was obtained.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Opened {
    Created,
    Existing,
}
/// Flags of every open of the page: no controlling terminal, no blocking
/// on a fifo someone put at the path (it is refused as not a file).
pub(super) const OPEN_FLAGS: libc::c_int = libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

pub(super) fn is_regular(st: &libc::stat) -> bool {
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
pub(super) enum Make {
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
pub(super) fn map_page(
    path: &std::ffi::CStr,
    make: Make,
) -> Result<(Box<Mapping>, Opening), Fault> {
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
    // A page of another layout version is refused before anything touches
    // it, also one shorter than this layout (version 3 had 128 bytes).
    if make == Make::Open && opened != Opened::Created {
        if let Some(v) = other_version(fd.as_raw_fd()) {
            return Err(Fault::Version(v));
        }
    }
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
        make_whole_lost(cells, seen, monotonic_ns());
        Opening::MadeWhole
    };
    let opening = match make {
        Make::Lost { seen } => lost(seen),
        _ if opened == Opened::Created => {
            cells.initialize(Reason::Boot, monotonic_ns(), unix_ns(), fresh_nonce());
            Opening::Created
        }
        _ if short || !cells.magic_present() => lost(0),
        Make::Open if cells.version() != VERSION => return Err(Fault::Version(cells.version())),
        Make::OpenAny if cells.version() != VERSION => lost(0),
        _ => Opening::Existing,
    };
    Ok((m, opening))
}

/// The version word of a file whose head magic is present and whose
/// version is not this layout's (one `pread` of 12 bytes), else `None`.
fn other_version(fd: i32) -> Option<u32> {
    let mut head = [0u8; 12];
    // SAFETY: reads at most 12 bytes into our 12-byte buffer.
    let n = unsafe { libc::pread(fd, head.as_mut_ptr().cast(), head.len(), 0) };
    if n != 12 {
        return None;
    }
    let (magic, version) = head.split_at(8);
    let magic = u64::from_le_bytes(magic.try_into().ok()?);
    let version = u32::from_le_bytes(version.try_into().ok()?);
    (magic == MAGIC && version != VERSION).then_some(version)
}
