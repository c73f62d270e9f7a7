//! Unix socket files with an exact mode, whatever the umask, and no window
//! in which another user can reach them: a socket is bound inside a
//! private directory (mode 0700, made next to the final path, so on the
//! same filesystem), given its mode and group there, and only then renamed
//! to its path. The one implementation of that bind: the UDP stop's
//! hand-over file ([`crate::stop::udp`], which replaces what is at the
//! path) and the runtime's wake and LoLA sockets (`actors/src/socket_file.rs`,
//! which judges what is at the path first and never replaces).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What the rename into place does with a file already at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Fails with `EEXIST` (`renameat2(RENAME_NOREPLACE)`): a path taken
    /// in the meantime is never silently replaced.
    Never,
    /// Replaces it in one step (`rename`): for a file whose holder is
    /// known to be gone or wrong.
    Always,
}

/// The step of [`bind_private`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindStep {
    /// Making the private directory next to the path.
    PrivateDir,
    /// The caller's bind at the private path.
    Bind,
    /// Setting the file's mode.
    Mode,
    /// Renaming the file into place (`EEXIST` with [`Replace::Never`]: the
    /// path is taken).
    Rename,
}

impl BindStep {
    /// The step in words, for an error message.
    pub fn what(self) -> &'static str {
        match self {
            BindStep::PrivateDir => {
                "cannot make a private directory next to it (is the directory there and writable?)"
            }
            BindStep::Bind => "bind",
            BindStep::Mode => "chmod",
            BindStep::Rename => "cannot rename the socket into place",
        }
    }
}

/// A private directory next to `path` (mode 0700), removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new(path: &Path) -> io::Result<PrivateDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = parent(path).join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            // Relaxed: a unique number, nothing else.
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let d = PrivateDir(dir);
        // The umask can only take bits away; 0700 exactly.
        std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o700))?;
        Ok(d)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The directory `path` is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The group of the directory `path` is in, if it can be read.
pub(crate) fn directory_group(path: &Path) -> Option<u32> {
    std::fs::metadata(parent(path)).ok().map(|m| m.gid())
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// `rename(from, to)` that fails with `EEXIST` when `to` exists.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let (f, t) = (cstring(from)?, cstring(to)?);
    // SAFETY: two NUL-terminated paths; renameat2 only reads them.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds a socket file at `path` with exactly `mode` and, when given, the
/// group `gid` (best effort: a group this user is not in is left as it
/// is): `bind` binds at the private path it is given (and, for a stream
/// socket, listens), then the file gets its mode and group and is renamed
/// into place as `replace` says. Returns the socket and the file's
/// `(st_dev, st_ino)`, by which its holder tells later whether the file at
/// the path is still its own.
///
/// # Errors
///
/// The step that failed and its error; the private directory is removed
/// either way.
pub fn bind_private<S>(
    path: &Path,
    mode: u32,
    gid: Option<u32>,
    replace: Replace,
    bind: impl FnOnce(&Path) -> io::Result<S>,
) -> Result<(S, (u64, u64)), (BindStep, io::Error)> {
    let dir = PrivateDir::new(path).map_err(|e| (BindStep::PrivateDir, e))?;
    let private = dir.0.join("s");
    let sock = bind(&private).map_err(|e| (BindStep::Bind, e))?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(mode))
        .map_err(|e| (BindStep::Mode, e))?;
    if let Some(g) = gid {
        let _ = std::os::unix::fs::chown(&private, None, Some(g));
    }
    let m = std::fs::symlink_metadata(&private).map_err(|e| (BindStep::Mode, e))?;
    match replace {
        Replace::Never => rename_noreplace(&private, path),
        Replace::Always => std::fs::rename(&private, path),
    }
    .map_err(|e| (BindStep::Rename, e))?;
    Ok((sock, (m.dev(), m.ino())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_socket_file_gets_its_mode_under_umask_000_and_never_replaces_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listen = |p: &Path| UnixListener::bind(p);
        // SAFETY: umask only sets the process's file mode mask.
        let old = unsafe { libc::umask(0) };
        let first = bind_private(&path, 0o660, None, Replace::Never, listen);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let (_first, id) = first.unwrap();
        let md = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o660, "{:o}", md.mode());
        assert_eq!((md.dev(), md.ino()), id);
        let (step, e) = bind_private(&path, 0o660, None, Replace::Never, listen).unwrap_err();
        assert_eq!(step, BindStep::Rename);
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        let (_second, id2) = bind_private(
            &path,
            0o660,
            directory_group(&path),
            Replace::Always,
            listen,
        )
        .unwrap();
        assert_ne!(id, id2, "replaced");
        // Nothing left in the directory but the socket.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
