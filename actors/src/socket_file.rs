//! Unix socket files with an explicit mode, whatever the umask, and no
//! window in which another user can reach them: the wake socket and the
//! LoLA socket.
//!
//! A socket is bound inside a private directory (mode 0700, made next to
//! the final path, so on the same filesystem), given its mode (0660) and
//! group (`hal` when that group exists) there, and only then renamed to
//! its path with `renameat2(RENAME_NOREPLACE)`: the one such bind,
//! `deathswitch::socket_file::bind_private` (the UDP stop's hand-over file
//! uses it too). Before that, what is at
//! the path is judged ([`judge`], pure): nothing, or a stale socket file of
//! this user (nobody answers on it), is fine (the stale file is removed);
//! a socket another program answers on, a socket file of another user, or
//! anything that is not a socket is an error that names the path and the
//! fix. A path taken in the meantime makes the rename fail: an error too,
//! never a silent replacement.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use deathswitch::socket_file::{bind_private, BindStep, Replace};

/// The mode of the runtime's sockets: the owner and the group read and
/// write, nobody else.
pub(crate) const MODE: u32 = 0o660;
/// The group given to the sockets when it exists (the page's group).
pub(crate) const GROUP: &str = "hal";

/// What is at a socket's path before it is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
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

/// Whether this process may claim the socket path, and how (the ruling on
/// what is at it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathClaim {
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
pub(crate) fn judge(existing: Existing, me: u32) -> PathClaim {
    match existing {
        Existing::Nothing => PathClaim::Free,
        Existing::Socket { owner, .. } if owner != me => PathClaim::OtherUser { owner },
        Existing::Socket { answers: true, .. } => PathClaim::Served,
        Existing::Socket { .. } => PathClaim::ReplaceStale,
        Existing::NotASocket => PathClaim::NotASocket,
    }
}

/// The kind of socket, for the look at what is at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `SOCK_STREAM` (LoLA).
    Stream,
    /// `SOCK_DGRAM` (the wake).
    Datagram,
}

/// Looks at `path` (never follows a link).
pub(crate) fn look(path: &Path, kind: Kind) -> io::Result<Existing> {
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
pub(crate) fn held_error(what: &str, path: &Path, v: PathClaim, fix: &str) -> io::Error {
    let p = path.display();
    let why = match v {
        PathClaim::Served => format!(
            "{what} {p} is held: another program serves it. Stop that program first, or {fix}"
        ),
        PathClaim::OtherUser { owner } => format!(
            "{what} {p} is held: a socket file of user {owner} (not this user). Stop the \
             program serving it, or remove the file (`rm {p}`, as that user or root) if it is \
             stale, or {fix}"
        ),
        PathClaim::NotASocket => {
            format!("{what} {p} exists and is not a socket. Remove it, or {fix}")
        }
        PathClaim::Free | PathClaim::ReplaceStale => format!("{what} {p}: free"),
    };
    io::Error::new(io::ErrorKind::AddrInUse, why)
}

/// Binds a socket at `path` with mode [`MODE`] and group [`GROUP`] (when
/// it exists), after judging what is at the path ([`judge`]): `bind` binds
/// at the private path it is given (and, for a stream socket, listens),
/// then the file gets its mode and group and is renamed into place without
/// replacing anything (`deathswitch::socket_file::bind_private`). `what`
/// names the socket in errors, `fix` says what to do about a held path.
pub(crate) fn bind_with_mode<S>(
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
        PathClaim::Free => {}
        PathClaim::ReplaceStale => match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(e, "a stale socket file cannot be removed")),
        },
        v => return Err(held_error(what, path, v, fix)),
    }
    let gid = nix::unistd::Group::from_name(GROUP)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw());
    match bind_private(path, MODE, gid, Replace::Never, bind) {
        Ok((sock, _)) => Ok(sock),
        Err((BindStep::Rename, e)) if e.raw_os_error() == Some(libc::EEXIST) => {
            let v = match look(path, kind) {
                Ok(x) => judge(x, me),
                Err(_) => PathClaim::NotASocket,
            };
            let v = if matches!(v, PathClaim::Free | PathClaim::ReplaceStale) {
                PathClaim::Served
            } else {
                v
            };
            Err(held_error(what, path, v, fix))
        }
        Err((step, e)) => Err(named(e, step.what())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_is_taken_only_when_free_or_a_stale_socket_of_this_user() {
        let me = 1000;
        let rows = [
            (Existing::Nothing, PathClaim::Free),
            (
                Existing::Socket {
                    owner: me,
                    answers: false,
                },
                PathClaim::ReplaceStale,
            ),
            (
                Existing::Socket {
                    owner: me,
                    answers: true,
                },
                PathClaim::Served,
            ),
            (
                Existing::Socket {
                    owner: 0,
                    answers: true,
                },
                PathClaim::OtherUser { owner: 0 },
            ),
            (
                Existing::Socket {
                    owner: 0,
                    answers: false,
                },
                PathClaim::OtherUser { owner: 0 },
            ),
            (Existing::NotASocket, PathClaim::NotASocket),
        ];
        for (i, (e, v)) in rows.into_iter().enumerate() {
            assert_eq!(judge(e, me), v, "row {i}: {e:?}");
        }
    }

    /// A stream socket bound at `path` with its mode.
    fn stream(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
        bind_with_mode(path, Kind::Stream, "test socket", "x", |p| {
            std::os::unix::net::UnixListener::bind(p)
        })
    }

    #[test]
    fn sockets_get_mode_0660_under_umask_000_and_a_held_path_is_an_error() {
        let dir = std::env::temp_dir().join(format!("nao-rs-sockfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        // SAFETY: umask only sets the process's file mode mask.
        let old = unsafe { libc::umask(0) };
        let l = stream(&path);
        let d = bind_with_mode(&path, Kind::Datagram, "test socket", "x", |p| {
            std::os::unix::net::UnixDatagram::bind(p)
        });
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
        let l = stream(&path);
        assert!(l.is_ok(), "{l:?}");
        drop(l);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"x").unwrap();
        let e = stream(&path).unwrap_err();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
