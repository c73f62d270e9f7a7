//! Read-only inspection ([`inspect`]): the page at a path read with one
//! `pread`, judged as [`Page::check`](super::Page::check) judges it, nothing
//! changed (`naoctl status`; `docs/page.md`, "Read-only inspection").

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::error::{c_path, errno, Fault, PageError};
use super::mapping::{is_regular, OPEN_FLAGS};
use crate::cells::{Cells, LEN};
use crate::damage::Damage;
use crate::monotonic_ns;
use crate::Snapshot;

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
/// creation, no repair. A file that is not a sound page is `Ok` with its
/// [`Damage`].
///
/// # Errors
///
/// No file ([`PageError::Missing`], or [`PageError::MissingDir`] when its
/// directory is missing too), not a regular file ([`PageError::NotAFile`]),
/// permission ([`PageError::Permission`]), any other errno
/// ([`PageError::Io`], named, with the fix).
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
        cells.judge(monotonic_ns)
    };
    Ok(Inspection {
        snapshot: cells.snapshot(),
        damage,
        len,
    })
}
