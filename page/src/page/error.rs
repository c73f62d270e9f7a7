//! Why a page could not be opened ([`PageError`], its `Display` naming the
//! path and the fix, [`fix`]) and the allocation-free fault the file
//! operations return ([`Fault`]: a [`PageError`] for `open`, a [`Damage`]
//! for `check`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::ENV_PATH;
use crate::cells::VERSION;
use crate::damage::Damage;

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

/// Why a page file could not be opened, without allocating (converted to
/// a [`PageError`] by `open`, to a [`Damage`] by `check`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Fault {
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
    pub(super) fn damage(self) -> Damage {
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

    pub(super) fn into_error(self, path: &Path) -> PageError {
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

pub(super) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub(super) fn c_path(path: &Path) -> Result<CString, PageError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| PageError::Io {
        path: path.to_path_buf(),
        op: "naming",
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"),
    })
}
