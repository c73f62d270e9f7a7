//! Unix socket files with an explicit mode, whatever the umask, and no
//! window in which another user can reach them: the wake socket and the
//! LoLA socket.
//!
//! A socket is bound inside a private directory (mode 0700, made next to
//! the final path, so on the same filesystem), given its mode (0660) and
//! group (`hal` when that group exists) there, and only then renamed to
//! its path with `renameat2(RENAME_NOREPLACE)`. Before that, what is at
//! the path is judged ([`judge`], pure): nothing, or a stale socket file of
//! this user (nobody answers on it), is fine (the stale file is removed);
//! a socket another program answers on, a socket file of another user, or
//! anything that is not a socket is an error that names the path and the
//! fix. A path taken in the meantime makes the rename fail: an error too,
//! never a silent replacement.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The mode of the runtime's sockets: the owner and the group read and
/// write, nobody else.
pub const MODE: u32 = 0o660;
/// The group given to the sockets when it exists (the page's group).
pub const GROUP: &str = "hal";

/// What is at a socket's path before it is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Nothing.
    Nothing,
    /// A socket file owned by `owner`; `answers`: a process accepts or
    /// receives on it.
    Socket {
        /// The file's owner (uid).
        owner: u32,
        /// Someone is bound to it (a connect succeeded).
        answers: bool,
    },
    /// Something that is not a socket (a file, a directory, a link...).
    NotASocket,
}

/// What to do about what is at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The path is free.
    Free,
    /// A stale socket file of this user: remove it, then bind.
    ReplaceStale,
    /// Another program serves the socket.
    Served,
    /// A socket file of another user.
    OtherUser {
        /// Its owner (uid).
        owner: u32,
    },
    /// Not a socket.
    NotASocket,
}

/// The rule (pure): a path is taken over only when it is free or holds a
/// stale socket file of this user (`me`, the effective uid); a socket file
/// of another user is never touched, served or not.
pub fn judge(existing: Existing, me: u32) -> Verdict {
    match existing {
        Existing::Nothing => Verdict::Free,
        Existing::Socket { owner, .. } if owner != me => Verdict::OtherUser { owner },
        Existing::Socket { answers: true, .. } => Verdict::Served,
        Existing::Socket { .. } => Verdict::ReplaceStale,
        Existing::NotASocket => Verdict::NotASocket,
    }
}

/// The kind of socket, for the look at what is at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `SOCK_STREAM` (LoLA).
    Stream,
    /// `SOCK_DGRAM` (the wake).
    Datagram,
}

/// Looks at `path` (never follows a link).
pub fn look(path: &Path, kind: Kind) -> io::Result<Existing> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(e),
    };
    if !md.file_type().is_socket() {
        return Ok(Existing::NotASocket);
    }
    let r = match kind {
        Kind::Stream => std::os::unix::net::UnixStream::connect(path).map(drop),
        Kind::Datagram => std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.connect(path)),
    };
    // Stale only when nobody is bound there (ECONNREFUSED); any other
    // answer (a socket of the other type: EPROTOTYPE, a full backlog:
    // EAGAIN, no permission: EACCES) counts as someone being there.
    let answers = match r {
        Ok(()) => true,
        Err(e) => e.raw_os_error() != Some(libc::ECONNREFUSED),
    };
    Ok(Existing::Socket {
        owner: md.uid(),
        answers,
    })
}

/// The error for a path that is not free, naming the path and the fix.
pub fn held_error(what: &str, path: &Path, v: Verdict, fix: &str) -> io::Error {
    let p = path.display();
    let why = match v {
        Verdict::Served => format!(
            "{what} {p} is held: another program serves it. Stop that program first, or {fix}"
        ),
        Verdict::OtherUser { owner } => format!(
            "{what} {p} is held: a socket file of user {owner} (not this user). Stop the \
             program serving it, or remove the file (`rm {p}`, as that user or root) if it is \
             stale, or {fix}"
        ),
        Verdict::NotASocket => {
            format!("{what} {p} exists and is not a socket. Remove it, or {fix}")
        }
        Verdict::Free | Verdict::ReplaceStale => format!("{what} {p}: free"),
    };
    io::Error::new(io::ErrorKind::AddrInUse, why)
}

/// A private directory next to `path` (mode 0700), removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new(path: &Path) -> io::Result<PrivateDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = parent.join(format!(
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

fn cstring(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes())
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

/// Binds a socket at `path` with mode [`MODE`] and group [`GROUP`] (when
/// it exists): `bind` binds at the private path it is given (and, for a
/// stream socket, listens), then the file gets its mode and group and is
/// renamed into place. `what` names the socket in errors, `fix` says what
/// to do about a held path.
pub fn bind_with_mode<S>(
    path: &Path,
    kind: Kind,
    what: &str,
    fix: &str,
    bind: impl FnOnce(&Path) -> io::Result<S>,
) -> io::Result<S> {
    let me = nix::unistd::geteuid().as_raw();
    let named = |e: io::Error, op: &str| {
        io::Error::new(e.kind(), format!("{what} {}: {op}: {e}", path.display()))
    };
    match judge(
        look(path, kind).map_err(|e| named(e, "cannot look at it"))?,
        me,
    ) {
        Verdict::Free => {}
        Verdict::ReplaceStale => match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(e, "a stale socket file cannot be removed")),
        },
        v => return Err(held_error(what, path, v, fix)),
    }
    let dir = PrivateDir::new(path).map_err(|e| {
        named(
            e,
            "cannot make a private directory next to it (is the directory there and writable?)",
        )
    })?;
    let private = dir.0.join("s");
    let sock = bind(&private).map_err(|e| named(e, "bind"))?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(MODE))
        .map_err(|e| named(e, "chmod"))?;
    if let Ok(Some(g)) = nix::unistd::Group::from_name(GROUP) {
        let _ = nix::unistd::chown(&private, None, Some(g.gid));
    }
    match rename_noreplace(&private, path) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            let v = match look(path, kind) {
                Ok(x) => judge(x, me),
                Err(_) => Verdict::NotASocket,
            };
            let v = if matches!(v, Verdict::Free | Verdict::ReplaceStale) {
                Verdict::Served
            } else {
                v
            };
            Err(held_error(what, path, v, fix))
        }
        Err(e) => Err(named(e, "cannot rename the socket into place")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_is_taken_only_when_free_or_a_stale_socket_of_this_user() {
        let me = 1000;
        let rows = [
            (Existing::Nothing, Verdict::Free),
            (
                Existing::Socket {
                    owner: me,
                    answers: false,
                },
                Verdict::ReplaceStale,
            ),
            (
                Existing::Socket {
                    owner: me,
                    answers: true,
                },
                Verdict::Served,
            ),
            (
                Existing::Socket {
                    owner: 0,
                    answers: true,
                },
                Verdict::OtherUser { owner: 0 },
            ),
            (
                Existing::Socket {
                    owner: 0,
                    answers: false,
                },
                Verdict::OtherUser { owner: 0 },
            ),
            (Existing::NotASocket, Verdict::NotASocket),
        ];
        for (i, (e, v)) in rows.into_iter().enumerate() {
            assert_eq!(judge(e, me), v, "row {i}: {e:?}");
        }
    }

    #[test]
    fn sockets_get_mode_0660_under_umask_000_and_a_held_path_is_an_error() {
        let dir = std::env::temp_dir().join(format!("nao-rs-sockfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        // SAFETY: umask only sets the process's file mode mask.
        let old = unsafe { libc::umask(0) };
        let l = bind_with_mode(
            &path,
            Kind::Stream,
            "test socket",
            "use another path",
            |p| std::os::unix::net::UnixListener::bind(p),
        );
        let d = bind_with_mode(
            &path,
            Kind::Datagram,
            "test socket",
            "use another path",
            |p| std::os::unix::net::UnixDatagram::bind(p),
        );
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let l = l.unwrap();
        let mode = std::fs::symlink_metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o660, "{mode:o}");
        let e = d.unwrap_err();
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(e.to_string().contains("another program serves it"), "{e}");
        // Nothing left in the directory but the socket.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        drop(l);
        // A stale socket file of this user is replaced.
        let l = bind_with_mode(&path, Kind::Stream, "test socket", "x", |p| {
            std::os::unix::net::UnixListener::bind(p)
        });
        assert!(l.is_ok(), "{l:?}");
        drop(l);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"x").unwrap();
        let e = bind_with_mode(&path, Kind::Stream, "test socket", "x", |p| {
            std::os::unix::net::UnixListener::bind(p)
        })
        .unwrap_err();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
